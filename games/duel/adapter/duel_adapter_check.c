/* duel_adapter_check.c: proves the injected duel equal to the linked one, step by step,
 * without the launcher and the hook.
 *
 *   duel_adapter_check REF_DIR FREQ STEP_MS SEED -- [duel_rt arguments]
 *
 * The standalone's own source (standalone/duel_rt.c) runs on a virtual clock of FREQ Hz
 * (duel_check_clock.h). Its Sleep is the step point and does what the hook does there:
 * w3a_attach the first time, w3a_observe every row, answer, w3a_act, w3a_episode_end for
 * each DONE row, then the clock advances STEP_MS. Beside it, a du_game plays the linked
 * duel's agent mode (duel_main.c) from the same setup and gets the same answers. Every
 * row the adapter fills must equal the reference's, field by field and byte by byte
 * (hash, observation, masks, reward, discarded, flags). The answers are random legal
 * choices from the masks (seeded by SEED), and now and then a masked-out training order
 * so that discards are counted on both sides. Replays: the adapter writes W3D_RECORD_DIR,
 * the reference REF_DIR; the test compares the files.
 *
 * Exit 0 when every row matched, 1 at the first difference (named on stderr), 70 when
 * the adapter failed, 2 for bad arguments. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "../duel_game.h"
#include "../standalone/duel_rt.h"
#include "inject/w3h.h"
#include "w3s_table.h"

int duel_rt_main(int argc, char **argv);
W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen);
W3A_EXPORT void w3a_observe(w3s_row *row, uint32_t i);
W3A_EXPORT void w3a_act(const w3s_row *row, uint32_t i);
W3A_EXPORT void w3a_episode_end(uint32_t i);
W3A_EXPORT void w3a_detach(void);

static struct {
    int64_t freq;
    uint32_t step_ms;
    uint64_t ms; /* the virtual clock */
    w3h_host host;
    int attached;
    uint64_t rng;
    const char *ref_dir;
    du_cfg cfg;
    du_game ref;
    int agents[2], n_agents;
    long steps, discards;
} ck;

/* A row of the duel's (default) shape: the fixed part, then its observation. */
typedef struct {
    w3s_row head;
    w3s_obs_default obs;
} ck_row;
typedef char ck_check_obs_offset[(offsetof(ck_row, obs) == W3S_OBS_OFFSET) ? 1 : -1];
static ck_row ck_rows[2], ck_ref_rows[2];

BOOL du_check_qpc(LARGE_INTEGER *t)
{
    t->QuadPart = (LONGLONG)(ck.ms * (uint64_t)ck.freq / 1000);
    return TRUE;
}

BOOL du_check_qpf(LARGE_INTEGER *f)
{
    f->QuadPart = ck.freq;
    return TRUE;
}

static void *ck_find_export(const char *module, const char *name)
{
    if (module)
        return NULL;
    if (!strcmp(name, "duel_state"))
        return (void *)duel_state;
    if (!strcmp(name, "duel_order"))
        return (void *)duel_order;
    if (!strcmp(name, "duel_rematch"))
        return (void *)duel_rematch;
    return NULL;
}

static void *ck_find_address(const char *name)
{
    (void)name;
    return NULL;
}

static void ck_vlog(const char *fmt, va_list ap)
{
    fputs("adapter: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

static void ck_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ck_vlog(fmt, ap);
    va_end(ap);
}

static void ck_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ck_vlog(fmt, ap);
    va_end(ap);
    exit(W3S_EXIT_ADAPTER);
}

static uint64_t ck_game_time_ms(void) { return ck.ms; }
/* The check never sets W3D_EPISODES: an adapter that finishes is wrong here. */
static void ck_finish(void) { ck_fail("the adapter called finish (W3D_EPISODES is not set in the check)"); }

/* The reference: the linked duel's lane for the game's setup, as du_agent_main starts it. */
static void ck_ref_start(void)
{
    const duel_world *w = duel_state();
    char err[512];
    if (du_config(&ck.cfg, err, sizeof(err))) {
        fprintf(stderr, "check: %s\n", err);
        exit(2);
    }
    ck.cfg.seed = w->seed;
    ck.cfg.map = w->map;
    ck.cfg.step_turns = w->step_turns;
    ck.cfg.time_limit = w->time_limit;
    ck.cfg.record_dir = ck.ref_dir;
    for (int s = 0; s < 2; s++)
        if (ck.cfg.ctl[s].kind == DU_CTL_AGENT)
            ck.agents[ck.n_agents++] = s;
    ck.ref.global_lane = w->lane_no;
    du_cache_init(&ck.ref.cache, (uint32_t)ck.cfg.cuts, (int32_t)ck.cfg.break_step);
    du_game_start(&ck.ref, &ck.cfg, ck.ref.global_lane);
}

static void ck_differ(int i, const char *field)
{
    fprintf(stderr, "check: step %ld, row %d (episode %llu, step %u): %s differs from the linked duel's\n", ck.steps, i,
            (unsigned long long)ck_ref_rows[i].head.episode, ck_ref_rows[i].head.step, field);
    exit(1);
}

static void ck_compare(int i)
{
    const ck_row *a = &ck_rows[i], *b = &ck_ref_rows[i];
#define CK_FIELD(part, f)                                                                                              \
    if (memcmp(&a->part.f, &b->part.f, sizeof(a->part.f)))                                                             \
    ck_differ(i, #f)
    CK_FIELD(head, lane);
    CK_FIELD(head, side);
    CK_FIELD(head, episode);
    CK_FIELD(head, step);
    CK_FIELD(head, flags);
    CK_FIELD(head, state_hash);
    CK_FIELD(head, reward);
    CK_FIELD(head, discarded);
    CK_FIELD(head, n_ent);
    CK_FIELD(obs, glob);
    CK_FIELD(obs, ent);
    CK_FIELD(obs, ent_type);
    CK_FIELD(obs, mask);
#undef CK_FIELD
}

void du_check_sleep(DWORD ms)
{
    (void)ms;
    char err[512];
    if (!ck.attached) {
        if (w3a_attach(&ck.host, err, sizeof(err))) {
            fprintf(stderr, "%s\n", err);
            exit(W3S_EXIT_ADAPTER);
        }
        ck.attached = 1;
        ck_ref_start();
    }
    du_game *g = &ck.ref;
    for (int i = 0; i < ck.n_agents; i++) {
        int s = ck.agents[i];
        w3a_observe(&ck_rows[i].head, (uint32_t)i);
        du_fill_row(&ck_ref_rows[i].head, &g->lane, &g->cache, s, 0, g->episode, du_reward(g, s, (int)ck.cfg.reward_mode),
                    (uint32_t)g->discarded[s], &g->view[s]);
        g->discarded[s] = 0;
        ck_compare(i);
        ck.discards += ck_rows[i].head.discarded;
        int32_t act[4];
        du_random_action(ck_rows[i].obs.mask, &ck.rng, act);
        if (du_rng_next(&ck.rng) % 8 == 0)
            act[0] = 7; /* past head 0: discarded on both sides */
        memcpy(ck_rows[i].head.action, act, sizeof(act));
        memcpy(ck_ref_rows[i].head.action, act, sizeof(act));
    }
    for (int i = 0; i < ck.n_agents; i++)
        w3a_act(&ck_rows[i].head, (uint32_t)i);
    if (g->lane.winner >= 0) { /* du_agent_main: the DONE row was answered */
        du_game_finish(g);
        g->episode++;
        du_game_start(g, &ck.cfg, g->global_lane);
    } else {
        du_orders o[2] = {{0, 0, 0, -1}, {0, 0, 0, -1}};
        for (int i = 0; i < ck.n_agents; i++) {
            int s = ck.agents[i];
            g->discarded[s] += du_decode(&g->lane, &g->cache, s, ck_ref_rows[i].head.action, &g->view[s], &o[s]);
        }
        du_game_step(g, o);
    }
    for (int i = 0; i < ck.n_agents; i++)
        if (ck_rows[i].head.flags & W3S_FLAG_DONE)
            w3a_episode_end((uint32_t)i);
    ck.steps++;
    ck.ms += ck.step_ms;
}

int main(int argc, char **argv)
{
    if (argc < 6 || strcmp(argv[5], "--")) {
        fprintf(stderr, "usage: duel_adapter_check REF_DIR FREQ STEP_MS SEED -- [duel_rt arguments]\n");
        return 2;
    }
    ck.ref_dir = argv[1];
    ck.freq = strtoll(argv[2], NULL, 10);
    ck.step_ms = (uint32_t)strtoul(argv[3], NULL, 10);
    ck.rng = strtoull(argv[4], NULL, 10);
    du_cfg c;
    char err[512];
    if (du_config(&c, err, sizeof(err))) {
        fprintf(stderr, "check: %s\n", err);
        return 2;
    }
    uint32_t nrows = (c.ctl[0].kind == DU_CTL_AGENT) + (c.ctl[1].kind == DU_CTL_AGENT);
    static w3s_layout rows_layout;
    w3s_layout_make(&rows_layout, W3S_E_MAX, W3S_F_ENT, W3S_G_GLOB, W3S_N_HEADS, W3S_HEAD_MAX);
    w3h_host h = {.abi = W3H_ABI, .nrows = nrows, .step_ms = ck.step_ms, .find_export = ck_find_export,
                  .find_address = ck_find_address, .log = ck_log, .fail = ck_fail, .game_time_ms = ck_game_time_ms,
                  .finish = ck_finish, .layout = &rows_layout};
    ck.host = h;
    argv[5] = "duel_rt";
    int rc = duel_rt_main(argc - 5, argv + 5);
    w3a_detach();
    if (ck.ref.recording)
        du_rec_abort(&ck.ref.rec);
    const duel_world *w = duel_state();
    printf("check: %ld steps, %llu games, %ld discards, every row equal to the linked duel's\n", ck.steps,
           (unsigned long long)w->games_done, ck.discards);
    return rc;
}
