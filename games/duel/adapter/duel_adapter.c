/* duel_adapter.c: the adapter (shim/inject/w3h.h) that drives the unmodified real-time
 * duel (standalone/duel_rt.exe) through its modding API (standalone/duel_rt.h), so that
 * the injected game posts the rows the linked duel's agent mode posts and records the
 * same replays.
 *
 * One lane per process, one row per agent side of W3D_SIDES (which must name the game's
 * human sides as agents and its AI sides as they are). The linked duel's step k is
 * "post step k's rows, answer, apply the orders, run step_turns turns"; here it is
 * "at Sleep: post, answer, queue the orders (duel_order); the clock advances step_ms;
 * the game's next frame runs step_turns turns, applying them at its command turn".
 * Both give the same state when step_ms is exactly step_turns turns of the game's
 * clock (checked at attach) and every frame is a step (checked every step).
 *
 * Environment, as the linked duel's agent mode reads it (duel_game.c, du_config):
 * W3D_SIDES, W3D_REWARD, W3D_RECORD_DIR, W3D_RECORD_SHARE, W3D_RECORD_STATES. The
 * game's own setup (--seed, --lane, --map, --step-turns, --time-limit) is what plays;
 * W3D_SEED, W3D_MAP, W3D_STEP_TURNS or W3D_TIME_LIMIT, when set, must agree with it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../duel_game.h"
#include "../standalone/duel_rt.h"
#include "inject/w3h.h"
#include "w3s.h"

static const du_orders du_ad_keep = {0, DU_CMD_KEEP, 0, -1};

static struct {
    const w3h_host *host;
    duel_world *w;
    duel_order_fn order;
    duel_rematch_fn rematch;
    du_cfg cfg;
    int agents[2], n_agents;
    du_view view[2];
    /* the episode being posted: its reward bookkeeping, discards and replay */
    uint64_t episode;
    int started, ended;
    int32_t last_step;      /* lane.step at the last post */
    int32_t prev[2][4];     /* du_side_reward's bookkeeping */
    int32_t seen_disc[2];   /* the game's discarded[] at the last post */
    uint32_t decode_disc[2]; /* parts du_decode refused since the last post */
    du_rec rec;
    int recording;
    uint64_t finished; /* episodes ended in this process (W3D_EPISODES) */
} du_ad;

static const char *du_ad_side_name(const du_ctl *c, int game, char *buf, int n)
{
    if (c->kind == DU_CTL_AGENT)
        return game ? "human" : "agent";
    return du_ctl_name(c, buf, n);
}

/* 0, or -1 with err naming the W3D_* variable that disagrees with the game's setup. */
static int du_ad_check_setup(const duel_world *w, const du_cfg *c, char *err, size_t errlen)
{
    char a[32], b[32], g0[32], g1[32];
    for (int s = 0; s < 2; s++)
        if (c->ctl[s].kind != w->ctl[s].kind || (c->ctl[s].kind == DU_CTL_AI && c->ctl[s].level != w->ctl[s].level)) {
            snprintf(err, errlen,
                     "duel adapter: W3D_SIDES=%s,%s but the game plays %s,%s (duel_rt --sides; agent is human there)",
                     du_ad_side_name(&c->ctl[0], 0, a, sizeof(a)), du_ad_side_name(&c->ctl[1], 0, b, sizeof(b)),
                     du_ad_side_name(&w->ctl[0], 1, g0, sizeof(g0)), du_ad_side_name(&w->ctl[1], 1, g1, sizeof(g1)));
            return -1;
        }
    const char *seed = getenv("W3D_SEED"), *map = getenv("W3D_MAP"), *st = getenv("W3D_STEP_TURNS"),
               *tl = getenv("W3D_TIME_LIMIT");
    const char *bad = seed && *seed && c->seed != w->seed                   ? "W3D_SEED"
                      : map && *map && c->map != w->map                     ? "W3D_MAP"
                      : st && *st && c->step_turns != (long)w->step_turns   ? "W3D_STEP_TURNS"
                      : tl && *tl && c->time_limit != (long)w->time_limit   ? "W3D_TIME_LIMIT"
                                                                            : NULL;
    if (bad) {
        snprintf(err, errlen, "duel adapter: %s=%s but the game plays seed %ld, map %s, %d turns a step, time limit %d "
                              "(set them on duel_rt's command line)",
                 bad, getenv(bad), w->seed, w->map < 0 ? "rotate" : du_map_name(w->map), w->step_turns,
                 w->time_limit);
        return -1;
    }
    return 0;
}

W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen)
{
    memset(&du_ad, 0, sizeof(du_ad));
    du_ad.host = host;
    if (host->abi != W3H_ABI) {
        snprintf(err, errlen, "duel adapter: built for hook ABI %u, the hook has %u", W3H_ABI, host->abi);
        return -1;
    }
    const w3s_layout *L = host->layout;
    if (L->e_max != W3S_E_MAX || L->f_ent != W3S_F_ENT || L->g_glob != W3S_G_GLOB || L->n_heads != W3S_N_HEADS ||
        L->head_max != W3S_HEAD_MAX) {
        snprintf(err, errlen, "duel adapter: the run's rows are %u entities x %u features, %u globals, %u heads of %u; "
                 "the duel writes the default row (game = \"duel\")", L->e_max, L->f_ent, L->g_glob, L->n_heads,
                 L->head_max);
        return -1;
    }
    static const char *const names[] = {"duel_state", "duel_order", "duel_rematch"};
    void *fn[3];
    for (int k = 0; k < 3; k++)
        if (!(fn[k] = host->find_export(NULL, names[k]))) {
            snprintf(err, errlen, "duel adapter: the game exports no %s (is it duel_rt.exe?)", names[k]);
            return -1;
        }
    duel_state_fn state = (duel_state_fn)fn[0];
    du_ad.order = (duel_order_fn)fn[1];
    du_ad.rematch = (duel_rematch_fn)fn[2];
    duel_world *w = du_ad.w = state();
    if (!w || w->version != DUEL_RT_VERSION || w->size != sizeof(duel_world)) {
        snprintf(err, errlen, "duel adapter: duel_state() gave version %u, size %u; this adapter reads version %u, "
                              "size %u (rebuild it against the game's duel_rt.h)",
                 w ? w->version : 0, w ? w->size : 0, DUEL_RT_VERSION, (unsigned)sizeof(duel_world));
        return -1;
    }
    if (du_config(&du_ad.cfg, err, errlen) || du_ad_check_setup(w, &du_ad.cfg, err, errlen))
        return -1;
    for (int s = 0; s < 2; s++)
        if (w->ctl[s].kind == DU_CTL_AGENT)
            du_ad.agents[du_ad.n_agents++] = s;
    if (!du_ad.n_agents || host->nrows != (uint32_t)du_ad.n_agents) {
        snprintf(err, errlen, "duel adapter: %u rows, but the game is one lane with %d agent side(s): set the recipe's "
                              "lanes to 1", host->nrows, du_ad.n_agents);
        return -1;
    }
    /* The hook's step must be exactly step_turns turns of the game's clock, in whole
     * ticks: step_ms * speed == step_turns * 1000, and step_ms * freq / 1000 whole. */
    if ((int64_t)host->step_ms * w->speed != (int64_t)w->step_turns * 1000 ||
        ((int64_t)host->step_ms * w->qpc_freq) % 1000) {
        snprintf(err, errlen, "duel adapter: a step of %u ms is not %d turns at %d turns/s on a %lld Hz clock "
                              "(give the hook step_ms = %d * 1000 / %d)",
                 host->step_ms, w->step_turns, w->speed, (long long)w->qpc_freq, w->step_turns, w->speed);
        return -1;
    }
    host->log("lane %llu, seed %ld, map %s, %d turns a step at %d turns/s, %d agent side(s)",
              (unsigned long long)w->lane_no, w->seed, w->map < 0 ? "rotate" : du_map_name(w->map), w->step_turns,
              w->speed, du_ad.n_agents);
    return 0;
}

/* A new episode seen at its first post: the bookkeeping of du_game_start. */
static void du_ad_begin(const duel_world *w)
{
    if (du_ad.recording)
        du_rec_abort(&du_ad.rec); /* the last one never reached its DONE row */
    du_ad.episode = w->episode;
    du_ad.started = 1;
    du_ad.ended = 0;
    du_ad.last_step = 0;
    memset(du_ad.prev, 0, sizeof(du_ad.prev));
    for (int s = 0; s < 2; s++) {
        du_ad.seen_disc[s] = w->discarded[s];
        du_ad.decode_disc[s] = 0;
    }
    if (w->lane.step != 0)
        du_ad.host->fail("duel adapter: episode %llu first seen at step %d, not 0", (unsigned long long)w->episode,
                         w->lane.step);
    du_ad.recording = du_rec_start(&du_ad.rec, &du_ad.cfg, &w->lane.setup, w->lane_no, w->episode);
}

/* The step that ran since the last post, recorded as du_game_step records it. */
static void du_ad_stepped(const duel_world *w)
{
    int32_t step = w->lane.step;
    if (step != du_ad.last_step + 1)
        du_ad.host->fail("duel adapter: the game went from step %d to step %d between two step points "
                         "(the hook's clock and the game's turns disagree)", du_ad.last_step, step);
    du_ad.last_step = step;
    if (du_ad.recording && du_rec_step(&du_ad.rec, &w->lane, step - 1, w->applied, du_hash(&w->lane))) {
        du_ad.host->log("writing %s failed, recording stopped", du_ad.rec.tmp);
        du_rec_abort(&du_ad.rec);
        du_ad.recording = 0;
    }
}

W3A_EXPORT void w3a_observe(w3s_row *row, uint32_t i)
{
    duel_world *w = du_ad.w;
    if (i == 0) {
        if (!du_ad.started || w->episode != du_ad.episode)
            du_ad_begin(w);
        else
            du_ad_stepped(w);
    }
    int s = du_ad.agents[i];
    uint32_t disc = (uint32_t)(w->discarded[s] - du_ad.seen_disc[s]) + du_ad.decode_disc[s];
    du_ad.seen_disc[s] = w->discarded[s];
    du_ad.decode_disc[s] = 0;
    du_fill_row(row, &w->lane, &w->cache, s, 0, w->episode,
                du_side_reward(&w->lane, du_ad.prev[s], s, (int)du_ad.cfg.reward_mode), disc, &du_ad.view[s]);
}

W3A_EXPORT void w3a_act(const w3s_row *row, uint32_t i)
{
    duel_world *w = du_ad.w;
    if (w->lane.winner >= 0)
        return; /* the DONE row's answer is ignored, as in the linked duel */
    int s = du_ad.agents[i];
    du_orders o = du_ad_keep;
    du_ad.decode_disc[s] += (uint32_t)du_decode(&w->lane, &w->cache, s, row->action, &du_ad.view[s], &o);
    if (du_ad.order(s, &o))
        du_ad.host->fail("duel adapter: duel_order(%d) refused the orders (is side %d human?)", s, s);
}

W3A_EXPORT void w3a_episode_end(uint32_t i)
{
    (void)i;
    if (du_ad.ended)
        return; /* one call per DONE row: the episode ends once */
    du_ad.ended = 1;
    char err[512];
    if (du_ad.recording && du_rec_close(&du_ad.rec, &du_ad.w->lane, err, sizeof(err)))
        du_ad.host->log("%s", err);
    du_ad.recording = 0;
    if (du_ad.cfg.episodes > 0 && ++du_ad.finished >= (uint64_t)du_ad.cfg.episodes) {
        du_ad.host->finish(); /* W3D_EPISODES: exit 0 after this step, as agent mode does */
        return;
    }
    du_ad.rematch();
}

W3A_EXPORT void w3a_detach(void)
{
    if (du_ad.recording)
        du_rec_abort(&du_ad.rec); /* an unfinished episode: its .part file stays */
    du_ad.recording = 0;
}
