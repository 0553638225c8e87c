/* duel_game.c: a lane with its caches, controllers and recorder; the W3D_* config. */
#include "duel_game.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "w3s.h"

#ifdef _WIN32
#include <direct.h>
#include <windows.h>
#define du_mkdir(p) _mkdir(p)
#else
#include <sys/stat.h>
#define du_mkdir(p) mkdir((p), 0755)
#endif

double du_cpu_s(void)
{
#ifdef _WIN32
    FILETIME c, e, k, u;
    GetProcessTimes(GetCurrentProcess(), &c, &e, &k, &u);
    return ((double)(((uint64_t)u.dwHighDateTime << 32) | u.dwLowDateTime) +
            (double)(((uint64_t)k.dwHighDateTime << 32) | k.dwLowDateTime)) * 1e-7;
#else
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
#endif
}

double du_wall_s(void)
{
#ifdef _WIN32
    LARGE_INTEGER f, t;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&t);
    return (double)t.QuadPart / (double)f.QuadPart;
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
#endif
}

/* mkdir -p; 0, or -1 with errno from the first mkdir that failed for another reason
 * than the folder being there. */
int du_mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/' || *p == '\\') {
            char keep = *p;
            *p = 0;
            if (du_mkdir(buf) != 0 && errno != EEXIST && errno != EACCES)
                return -1;
            *p = keep;
        }
    return du_mkdir(buf) != 0 && errno != EEXIST ? -1 : 0;
}

/* W3D_DRAW_REWARD: each side's reward for a draw (default 0; below -1 a draw costs more
 * than a loss, so that a side gains by engaging even when it loses), set by du_config. A file
 * static, not a du_cfg field, so that du_side_reward's callers (the adapter too) need
 * no change. */
static float du_draw_reward = 0.0f;
/* W3D_TIME_LIMIT_WIN: the size of a win's (and a loss's) reward when the time limit's
 * tie-break decided it (default 1, as a decisive one; 0.25..1): below 1, destroying the
 * base is worth more than chipping it and waiting (docs/duel.md). Static, as above. */
static float du_time_limit_win = 1.0f;

/* A reward setting in lo..hi from the environment (unset: dflt); -1 with err naming it. */
static int du_env_reward(const char *name, float dflt, double lo, double hi, float *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !*v)
        return 0;
    char *end;
    double d = strtod(v, &end);
    if (*end || !(d >= lo && d <= hi)) {
        snprintf(err, errlen, "duel: %s=%s: must be a number in %g..%g", name, v, lo, hi);
        return -1;
    }
    *out = (float)d;
    return 0;
}

int du_config(du_cfg *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    const char *sides = getenv("W3D_SIDES");
    if (du_parse_sides(sides && *sides ? sides : "agent,ai:normal", c->ctl, err, errlen))
        return -1;
    const char *map = getenv("W3D_MAP");
    c->map = (!map || !*map || !strcmp(map, "rotate")) ? -1 : du_map_parse(map);
    if (map && *map && strcmp(map, "rotate") && c->map < 0) {
        snprintf(err, errlen, "duel: W3D_MAP=%s: must be open, choke, camps or rotate", map);
        return -1;
    }
    const char *reward = getenv("W3D_REWARD");
    static const char *const modes[] = {"win", "shaped", "attack"}; /* DU_REWARD_WIN, _SHAPED, _ATTACK */
    c->reward_mode = DU_REWARD_WIN;
    if (reward && *reward) {
        c->reward_mode = -1;
        for (int m = 0; m < 3; m++)
            if (!strcmp(reward, modes[m]))
                c->reward_mode = m;
        if (c->reward_mode < 0) {
            snprintf(err, errlen, "duel: W3D_REWARD=%s: must be win, shaped or attack", reward);
            return -1;
        }
    }
    if (w3s_env_int("W3S_SEED", 1, &c->seed, err, errlen) ||
        w3s_env_int("W3D_SEED", c->seed, &c->seed, err, errlen) || w3s_env_int("W3D_EPISODES", 0, &c->episodes, err, errlen) ||
        w3s_env_int("W3D_STEP_TURNS", 20, &c->step_turns, err, errlen) ||
        w3s_env_int("W3D_TIME_LIMIT", 12000, &c->time_limit, err, errlen) ||
        w3s_env_int("W3D_CUTS", 0, &c->cuts, err, errlen) ||
        w3s_env_int("W3D_BREAK_STEP", 200, &c->break_step, err, errlen) ||
        w3s_env_int("W3D_RECORD_STATES", 0, &c->record_states, err, errlen))
        return -1;
    if (c->step_turns < 1 || c->step_turns > 1000 || c->time_limit < 1 || c->cuts < 0 || c->cuts > 255) {
        snprintf(err, errlen, "duel: W3D_STEP_TURNS must be 1..1000, W3D_TIME_LIMIT >= 1, W3D_CUTS 0..255 "
                              "(got %ld, %ld, %ld)", c->step_turns, c->time_limit, c->cuts);
        return -1;
    }
    c->record_dir = getenv("W3D_RECORD_DIR");
    if (c->record_dir && !*c->record_dir)
        c->record_dir = NULL;
    if (c->record_dir && du_mkdirs(c->record_dir))
        fprintf(stderr, "duel: mkdir(%s) failed: %s (replays will not be written)\n", c->record_dir, strerror(errno));
    const char *share = getenv("W3D_RECORD_SHARE");
    c->record_share = share && *share ? strtod(share, NULL) : 1.0;
    if (du_env_reward("W3D_DRAW_REWARD", 0.0f, -2.0, 1.0, &du_draw_reward, err, errlen) ||
        du_env_reward("W3D_TIME_LIMIT_WIN", 1.0f, 0.25, 1.0, &du_time_limit_win, err, errlen))
        return -1;
    return 0;
}

int du_rec_start(du_rec *rec, const du_cfg *c, const du_setup *setup, uint64_t global_lane, uint64_t episode)
{
    if (!c->record_dir)
        return 0;
    uint64_t x = setup->seed;
    double u = (double)(du_rng_next(&x) >> 11) * (1.0 / 9007199254740992.0);
    if (!(u < c->record_share)) /* a NaN share records nothing, as before */
        return 0;
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/duel-l%llu-e%llu-%016llx.w3dr", c->record_dir, (unsigned long long)global_lane,
             (unsigned long long)episode, (unsigned long long)setup->seed);
    du_rec_header h = {*setup, (uint32_t)(c->record_states ? 1 : 0), (uint32_t)global_lane, (uint32_t)episode,
                       {du_ctl_code(&c->ctl[0]), du_ctl_code(&c->ctl[1])}, (uint32_t)c->reward_mode};
    if (du_rec_open(rec, path, &h, err, sizeof(err))) {
        fprintf(stderr, "%s (not recording this episode)\n", err);
        return 0;
    }
    return 1;
}

void du_game_start(du_game *g, const du_cfg *c, uint64_t seed_base_lane)
{
    du_setup setup;
    du_lane_start(&g->lane, &g->cache, g->ctl, c, seed_base_lane, g->episode, &setup);
    for (int s = 0; s < 2; s++) {
        g->discarded[s] = 0;
        memset(g->prev[s], 0, sizeof(g->prev[s]));
    }
    g->recording = du_rec_start(&g->rec, c, &setup, g->global_lane, g->episode);
}

void du_game_finish(du_game *g)
{
    char err[512];
    if (g->recording && du_rec_close(&g->rec, &g->lane, err, sizeof(err)))
        fprintf(stderr, "%s\n", err);
    g->recording = 0;
}

void du_game_step(du_game *g, du_orders o[2])
{
    du_command(&g->lane, &g->cache, g->ctl, o, g->discarded);
    int32_t step = g->lane.step;
    du_step(&g->lane, &g->cache);
    if (g->recording && du_rec_step(&g->rec, &g->lane, step, o, du_hash(&g->lane))) {
        fprintf(stderr, "duel: writing %s failed, recording stopped\n", g->rec.tmp);
        du_rec_abort(&g->rec);
        g->recording = 0;
    }
}

float du_side_reward(const du_lane *l, int32_t prev[4], int s, int mode)
{
    float r = 0.0f;
    if (l->winner >= 0 && l->winner < 2)
        r = (l->winner == s ? 1.0f : -1.0f) * (l->end_reason == 2 ? du_time_limit_win : 1.0f);
    else if (l->winner == 2)
        r = du_draw_reward;
    const du_side *sd = &l->side[s];
    if (mode == DU_REWARD_SHAPED) {
        r += 0.0005f * (float)((sd->dmg_dealt - prev[0]) - (sd->dmg_taken - prev[1]));
        r += 0.001f * (float)((sd->kill_value - prev[2]) - (sd->loss_value - prev[3]));
    } else if (mode == DU_REWARD_ATTACK) {
        /* what a side does, not what it suffers: a side that waits earns nothing, so an
         * attack that fails still beats waiting (docs/training.md) */
        r += 0.0005f * (float)(sd->dmg_dealt - prev[0]);
        r += 0.001f * (float)(sd->kill_value - prev[2]);
    }
    prev[0] = l->side[s].dmg_dealt;
    prev[1] = l->side[s].dmg_taken;
    prev[2] = l->side[s].kill_value;
    prev[3] = l->side[s].loss_value;
    return r;
}

float du_reward(du_game *g, int s, int mode) { return du_side_reward(&g->lane, g->prev[s], s, mode); }

void du_fill_row(struct w3s_row *r, const du_lane *l, du_cache *c, int s, uint32_t lane_index, uint64_t episode,
                 float reward, uint32_t discarded, du_view *v)
{
    r->lane = lane_index;
    r->side = (uint32_t)s;
    r->episode = episode;
    r->step = (uint32_t)l->step;
    r->flags = (l->step == 0 ? W3S_FLAG_FIRST : 0) | (l->winner >= 0 ? W3S_FLAG_DONE : 0) |
               (l->winner >= 0 && l->end_reason == 2 ? W3S_FLAG_TIME_LIMIT : 0); /* the tie-break decided it */
    r->reward = reward;
    r->discarded = discarded;
    r->state_hash = du_hash(l);
    du_observe(l, c, s, r, v);
}
