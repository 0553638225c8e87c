/* duel_main.c: the duel program. Modes:
 *
 *   duel                          agent mode under the w3async supervisor (w3s shim)
 *   duel --selfplay A,B [opts]    play controllers against each other, print a summary
 *   duel --record FILE --sides A,B [opts]   play one game and write its replay
 *   duel --play-replay FILE --dump OUT [--steps N]   play a replay back and write the
 *                                 state after every step (the replay format, with states)
 *   duel --bench --sides A,B --lanes L --steps N   time the simulation alone
 *
 * Options for the standalone modes: --games N, --map open|choke|camps|rotate, --seed S,
 * --states (record the full state), --max-steps N. The environment (W3D_*, see
 * duel_config) applies to every mode; options override it.
 *
 * Agent mode environment, besides the shim's (w3s.h):
 *   W3D_SIDES="agent,ai:easy"  the two sides of every lane: agent, ai:easy|normal|hard,
 *                              random, script, idle; W3S_NROWS / (agent sides) lanes
 *   W3D_MAP=open|choke|camps|rotate (default rotate: by episode)
 *   W3D_SEED=N                 base seed (default: the supervisor's W3S_SEED, new at
 *                              every spawn, else 1); a lane's game seed mixes it with the
 *                              global lane number (from W3S_ROW0) and the lane's episode.
 *                              Set it for fixed evaluation games.
 *   W3D_REWARD=win|shaped|attack  win/loss (+1/-1, 0 for a draw) only, or plus damage and kills
 *                              dealt less taken, or plus those dealt only
 *   W3D_EPISODES=N             exit 0 after N finished episodes, all lanes together
 *   W3D_STEP_TURNS=N           turns (25 ms of game time each) per step, default 20
 *   W3D_TIME_LIMIT=N           turns per game, default 12000 (5 minutes)
 *   W3D_CUTS=bits              1 A* memo, 2 visibility memo, 4 bucket grid; 128 test-only break
 *   W3D_BREAK_STEP=N           the step the break bit changes (default 200)
 *   W3D_RECORD_DIR=path        write replays there (a share of the episodes)
 *   W3D_RECORD_SHARE=x         share of episodes recorded, 0..1 (default 1 when a dir is set)
 *   W3D_RECORD_STATES=0|1      with the full state per step (default 0)
 *   W3D_TRACE=1                (--selfplay, --record) a line every 10 steps and one per
 *                              game: armies, gold, base hp, AI mode; for tuning the AI
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duel_game.h"
#include "w3s.h"

static int du_agent_main(void)
{
    char err[512];
    du_cfg cfg;
    if (du_config(&cfg, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return W3S_EXIT_ATTACH;
    }
    int agents[2], n_agents = 0;
    for (int s = 0; s < 2; s++)
        if (cfg.ctl[s].kind == DU_CTL_AGENT)
            agents[n_agents++] = s;
    if (!n_agents) {
        fprintf(stderr, "duel: W3D_SIDES has no agent side: nothing to post (use --selfplay for AI games)\n");
        return W3S_EXIT_ATTACH;
    }
    w3s_conn *conn = NULL;
    int rc = w3s_attach(&conn, err, sizeof(err));
    if (!rc && w3s_check_shape(conn, W3S_E_MAX, W3S_F_ENT, W3S_G_GLOB, W3S_N_HEADS, W3S_HEAD_MAX, err, sizeof(err)))
        rc = W3S_EXIT_LAYOUT; /* the duel writes the default row */
    if (rc) {
        fprintf(stderr, "%s\n", err);
        w3s_detach(conn);
        return rc;
    }
    uint32_t nrows = w3s_nrows(conn);
    if (nrows == 0 || nrows % (uint32_t)n_agents) {
        fprintf(stderr, "duel: W3S_NROWS=%u is not a multiple of the %d agent side(s) per lane of W3D_SIDES\n", nrows,
                n_agents);
        w3s_detach(conn);
        return W3S_EXIT_ATTACH;
    }
    long row0 = 0;
    w3s_env_int("W3S_ROW0", 0, &row0, err, sizeof(err));
    uint32_t n_lanes = nrows / (uint32_t)n_agents;
    du_game *games = calloc(n_lanes, sizeof(du_game));
    if (!games) {
        fprintf(stderr, "duel: out of memory for %u lanes\n", n_lanes);
        w3s_detach(conn);
        return W3S_EXIT_ATTACH;
    }
    for (uint32_t i = 0; i < n_lanes; i++) {
        du_game *g = &games[i];
        g->global_lane = (uint64_t)row0 / (uint64_t)n_agents + i;
        du_cache_init(&g->cache, (uint32_t)cfg.cuts, (int32_t)cfg.break_step);
        du_game_start(g, &cfg, g->global_lane);
    }
    uint64_t steps = 0, finished = 0;
    for (;;) {
        for (uint32_t i = 0; i < n_lanes; i++) {
            du_game *g = &games[i];
            for (int a = 0; a < n_agents; a++) {
                int s = agents[a];
                w3s_row *r = w3s_row_at(conn, i * (uint32_t)n_agents + (uint32_t)a);
                du_fill_row(r, &g->lane, &g->cache, s, i, g->episode, du_reward(g, s, (int)cfg.reward_mode),
                            (uint32_t)g->discarded[s], &g->view[s]);
                g->discarded[s] = 0;
            }
        }
        int w = w3s_exchange(conn, err, sizeof(err));
        if (w) { /* 1: asked to stop; -1: the doorbell failed or the supervisor left */
            if (w < 0)
                fprintf(stderr, "%s\n", err);
            rc = w > 0 ? W3S_EXIT_OK : W3S_EXIT_LOST;
            break;
        }
        steps++;
        for (uint32_t i = 0; i < n_lanes; i++) {
            du_game *g = &games[i];
            if (g->lane.winner >= 0) {
                /* the DONE row was answered: reload in place with the next seed */
                du_game_finish(g);
                finished++;
                g->episode++;
                du_game_start(g, &cfg, g->global_lane);
                continue;
            }
            du_orders o[2] = {{0, 0, 0, -1}, {0, 0, 0, -1}};
            for (int a = 0; a < n_agents; a++) {
                int s = agents[a];
                w3s_row *r = w3s_row_at(conn, i * (uint32_t)n_agents + (uint32_t)a);
                g->discarded[s] += du_decode(&g->lane, &g->cache, s, r->action, &g->view[s], &o[s]);
            }
            du_game_step(g, o);
        }
        if (cfg.episodes > 0 && finished >= (uint64_t)cfg.episodes) {
            rc = W3S_EXIT_OK;
            break;
        }
    }
    fprintf(stderr, "duel: %llu steps, %llu episodes, %u lanes, exit %d\n", (unsigned long long)steps,
            (unsigned long long)finished, n_lanes, rc);
    for (uint32_t i = 0; i < n_lanes; i++) {
        if (games[i].recording)
            du_rec_abort(&games[i].rec); /* an unfinished episode: its .part file stays */
        du_cache_free(&games[i].cache);
    }
    free(games);
    w3s_detach(conn);
    return rc;
}

/* ---- standalone modes ---- */

typedef struct du_args {
    const char *sides, *map, *record, *replay, *dump, *record_dir;
    long games, seed, max_steps, lanes, steps, states;
    int mode; /* 1 selfplay, 2 record, 3 play-replay, 4 bench */
} du_args;

static int du_usage(void)
{
    fprintf(stderr, "usage: duel                                (agent mode, under w3async)\n"
                    "       duel --selfplay A,B [--games N] [--map M] [--seed S] [--record-dir D]\n"
                    "       duel --record FILE --sides A,B [--map M] [--seed S] [--states] [--max-steps N]\n"
                    "       duel --play-replay FILE --dump OUT [--steps N]\n"
                    "       duel --bench --sides A,B [--lanes L] [--steps N] [--map M]\n"
                    "controllers: ai:easy ai:normal ai:hard random script idle\n");
    return 2;
}

/* Plays one game to its end (or max_steps); 0, or -1 when a replay could not be written. */
static int du_play_game(du_game *g, long max_steps)
{
    while (g->lane.winner < 0 && (max_steps <= 0 || g->lane.step < max_steps)) {
        du_orders o[2] = {{0, 0, 0, -1}, {0, 0, 0, -1}};
        du_game_step(g, o);
        if (getenv("W3D_TRACE") && g->lane.step % 10 == 0) {
            const du_lane *l = &g->lane;
            printf("step %d", l->step);
            for (int s = 0; s < 2; s++) {
                int hp = 0, n = 0;
                long cx = 0, cy = 0;
                for (int i = 0; i < l->n_units; i++) {
                    const du_unit *u = &l->units[i];
                    if (u->owner == s && u->type == DU_BASE)
                        hp = u->hp;
                    else if (u->owner == s)
                        n++, cx += u->x / DU_FP, cy += u->y / DU_FP;
                }
                printf(" | s%d gold %d base %d army %d/%d/%d at %ld,%ld kills %d loss %d mode %d", s, l->side[s].gold, hp,
                       du_army_count(l, s, 1), du_army_count(l, s, 2), du_army_count(l, s, 3), n ? cx / n : -1,
                       n ? cy / n : -1, l->side[s].kill_value, l->side[s].loss_value, g->ctl[s].mode);
            }
            printf("\n");
        }
    }
    return 0;
}

static int du_selfplay(du_cfg *cfg, const du_args *a)
{
    char n0[32], n1[32];
    int wins[2] = {0, 0}, draws = 0, timeouts = 0;
    long total_steps = 0;
    du_game *g = calloc(1, sizeof(du_game));
    du_cache_init(&g->cache, (uint32_t)cfg->cuts, (int32_t)cfg->break_step);
    du_ctl base[2] = {cfg->ctl[0], cfg->ctl[1]};
    double c0 = du_cpu_s(), w0 = du_wall_s();
    for (long k = 0; k < a->games; k++) {
        /* A plays side k % 2: both sides of every map, so side bias cancels */
        int a_side = (int)(k % 2);
        cfg->ctl[a_side] = base[0];
        cfg->ctl[1 - a_side] = base[1];
        g->episode = (uint64_t)k;
        g->global_lane = 0;
        du_game_start(g, cfg, 0);
        du_play_game(g, a->max_steps);
        du_game_finish(g);
        total_steps += g->lane.step;
        timeouts += g->lane.end_reason != 1;
        if (getenv("W3D_TRACE"))
            printf("game %ld map %s a_side %d winner %d reason %d steps %d\n", k, du_map_name(g->lane.setup.map), a_side,
                   g->lane.winner, g->lane.end_reason, g->lane.step);
        if (g->lane.winner == 2 || g->lane.winner < 0)
            draws++;
        else
            wins[g->lane.winner == a_side ? 0 : 1]++;
    }
    double cpu = du_cpu_s() - c0, wall = du_wall_s() - w0;
    printf("{\"a\": \"%s\", \"b\": \"%s\", \"games\": %ld, \"wins_a\": %d, \"wins_b\": %d, \"draws\": %d, "
           "\"time_limit\": %d, \"mean_steps\": %.1f, \"cpu_ms_per_step\": %.4f, \"steps_per_s\": %.0f}\n",
           du_ctl_name(&base[0], n0, sizeof(n0)), du_ctl_name(&base[1], n1, sizeof(n1)), a->games, wins[0], wins[1],
           draws, timeouts, a->games ? (double)total_steps / (double)a->games : 0.0,
           total_steps ? cpu * 1e3 / (double)total_steps : 0.0, wall > 0 ? (double)total_steps / wall : 0.0);
    du_cache_free(&g->cache);
    free(g);
    return 0;
}

static int du_record_one(du_cfg *cfg, const du_args *a)
{
    char err[512];
    du_game *g = calloc(1, sizeof(du_game));
    du_cache_init(&g->cache, (uint32_t)cfg->cuts, (int32_t)cfg->break_step);
    du_setup setup;
    uint64_t seed = du_game_seed(cfg->seed, 0, 0);
    du_make_setup(cfg, seed, 0, &setup);
    du_lane_reset(&g->lane, &g->cache, &setup);
    for (int s = 0; s < 2; s++) {
        g->ctl[s] = cfg->ctl[s];
        du_ctl_reset(&g->ctl[s], seed + (uint64_t)s);
    }
    du_rec_header h = {setup, (uint32_t)(a->states ? 1 : 0), 0, 0,
                       {du_ctl_code(&cfg->ctl[0]), du_ctl_code(&cfg->ctl[1])}, (uint32_t)cfg->reward_mode};
    if (du_rec_open(&g->rec, a->record, &h, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    g->recording = 1;
    du_play_game(g, a->max_steps);
    if (du_rec_close(&g->rec, &g->lane, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("recorded %s: %d steps, winner %d, hash %016llx\n", a->record, g->lane.step, g->lane.winner,
           (unsigned long long)du_hash(&g->lane));
    du_cache_free(&g->cache);
    free(g);
    return 0;
}

/* Plays a replay's orders back and writes the state after every step to the dump. */
static int du_play_replay(du_cfg *cfg, const du_args *a)
{
    char err[512];
    du_play p;
    if (du_play_open(&p, a->replay, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        du_play_close(&p);
        return 3;
    }
    du_game *g = calloc(1, sizeof(du_game));
    du_cache_init(&g->cache, (uint32_t)cfg->cuts, (int32_t)cfg->break_step);
    du_lane_reset(&g->lane, &g->cache, &p.h.setup);
    du_rec_header h = p.h;
    h.flags = 1;
    if (du_rec_open(&g->rec, a->dump, &h, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("replay %s: map %s, seed %016llx, cuts %ld\n", a->replay, du_map_name(p.h.setup.map),
           (unsigned long long)p.h.setup.seed, cfg->cuts);
    fflush(stdout);
    int rc = 0;
    int32_t step;
    du_orders o[2];
    for (;;) {
        if (a->steps > 0 && g->lane.step >= a->steps)
            break;
        int n = du_play_next(&p, &step, o, err, sizeof(err));
        if (n < 0) {
            fprintf(stderr, "%s\n", err);
            rc = 3;
            break;
        }
        if (n == 0)
            break;
        for (int s = 0; s < 2; s++)
            du_apply_orders(&g->lane, &g->cache, s, &o[s]);
        du_step(&g->lane, &g->cache);
        du_rec_step(&g->rec, &g->lane, step, o, du_hash(&g->lane));
        if (g->lane.step % 50 == 0) {
            printf("progress %d %016llx\n", g->lane.step, (unsigned long long)du_hash(&g->lane));
            fflush(stdout);
        }
    }
    du_play_close(&p);
    if (du_rec_close(&g->rec, &g->lane, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        rc = rc ? rc : 1;
    }
    printf("done %d %016llx\n", g->lane.step, (unsigned long long)du_hash(&g->lane));
    du_cache_free(&g->cache);
    free(g);
    return rc;
}

/* The simulation alone: L lanes stepped N times (reloading as they end). */
static int du_bench(du_cfg *cfg, const du_args *a)
{
    long lanes = a->lanes > 0 ? a->lanes : 1, steps = a->steps > 0 ? a->steps : 1000;
    du_game *games = calloc((size_t)lanes, sizeof(du_game));
    for (long i = 0; i < lanes; i++) {
        games[i].global_lane = (uint64_t)i;
        du_cache_init(&games[i].cache, (uint32_t)cfg->cuts, (int32_t)cfg->break_step);
        du_game_start(&games[i], cfg, (uint64_t)i);
    }
    double c0 = du_cpu_s(), w0 = du_wall_s();
    long done = 0, eps = 0;
    for (long k = 0; k < steps; k++)
        for (long i = 0; i < lanes; i++) {
            du_game *g = &games[i];
            if (g->lane.winner >= 0) {
                g->episode++;
                eps++;
                du_game_start(g, cfg, (uint64_t)i);
            }
            du_orders o[2] = {{0, 0, 0, -1}, {0, 0, 0, -1}};
            du_game_step(g, o);
            done++;
        }
    double cpu = du_cpu_s() - c0, wall = du_wall_s() - w0;
    printf("{\"lanes\": %ld, \"lane_steps\": %ld, \"episodes\": %ld, \"cpu_ms_per_step\": %.4f, "
           "\"steps_per_s\": %.0f, \"cuts\": %ld}\n",
           lanes, done, eps, cpu * 1e3 / (double)done, (double)done / wall, cfg->cuts);
    for (long i = 0; i < lanes; i++)
        du_cache_free(&games[i].cache);
    free(games);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 1)
        return du_agent_main();
    du_args a = {0};
    a.games = 100;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--states"))
            a.states = 1;
        else if (!strcmp(k, "--bench"))
            a.mode = 4;
        else if (!v)
            return du_usage();
        else {
            i++;
            if (!strcmp(k, "--selfplay")) {
                a.mode = 1;
                a.sides = v;
            } else if (!strcmp(k, "--record")) {
                a.mode = 2;
                a.record = v;
            } else if (!strcmp(k, "--play-replay")) {
                a.mode = 3;
                a.replay = v;
            } else if (!strcmp(k, "--sides"))
                a.sides = v;
            else if (!strcmp(k, "--dump"))
                a.dump = v;
            else if (!strcmp(k, "--map"))
                a.map = v;
            else if (!strcmp(k, "--record-dir"))
                a.record_dir = v;
            else if (!strcmp(k, "--games"))
                a.games = strtol(v, NULL, 10);
            else if (!strcmp(k, "--seed"))
                a.seed = strtol(v, NULL, 10), a.seed = a.seed ? a.seed : 1;
            else if (!strcmp(k, "--max-steps"))
                a.max_steps = strtol(v, NULL, 10);
            else if (!strcmp(k, "--lanes"))
                a.lanes = strtol(v, NULL, 10);
            else if (!strcmp(k, "--steps"))
                a.steps = strtol(v, NULL, 10);
            else
                return du_usage();
        }
    }
    char err[512];
    du_cfg cfg;
    if (du_config(&cfg, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (a.sides && du_parse_sides(a.sides, cfg.ctl, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (a.map) {
        cfg.map = strcmp(a.map, "rotate") ? du_map_parse(a.map) : -1;
        if (cfg.map < 0 && strcmp(a.map, "rotate")) {
            fprintf(stderr, "duel: --map %s: must be open, choke, camps or rotate\n", a.map);
            return 2;
        }
    }
    if (a.seed)
        cfg.seed = a.seed;
    if (a.record_dir) {
        cfg.record_dir = a.record_dir;
        if (du_mkdirs(a.record_dir))
            fprintf(stderr, "duel: mkdir(%s) failed: %s\n", a.record_dir, strerror(errno));
    }
    for (int s = 0; s < 2 && a.mode != 3; s++)
        if (cfg.ctl[s].kind == DU_CTL_AGENT) {
            fprintf(stderr, "duel: standalone modes need two non-agent sides (got agent on side %d)\n", s);
            return 2;
        }
    switch (a.mode) {
    case 1:
        return du_selfplay(&cfg, &a);
    case 2:
        return du_record_one(&cfg, &a);
    case 3:
        if (!a.dump)
            return du_usage();
        return du_play_replay(&cfg, &a);
    case 4:
        return du_bench(&cfg, &a);
    default:
        return du_usage();
    }
}
