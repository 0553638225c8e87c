/* pong_adapter.c: the adapter (shim/inject/w3h.h) for the unmodified pong.exe, a game
 * that exports nothing: written as a user would, from the game's source (open) and the
 * tools' output, with no help from the game.
 *
 * The state: the game keeps its match in one static struct (pong.c's `pong`). Its
 * offset in the stripped pong.exe is found by nm on an unstripped build of the same
 * source (games/symbol_offsets.sh writes build/win64/pong.addresses.toml; the recipe's
 * addresses_file), the layout is the source's, and both are checked at attach.
 *
 * The clock: the game runs a frame when the C library's clock() has moved on 16 ms
 * since the last. The hook's virtual clock covers clock() (Wine's msvcrt reads ntdll's
 * NtQuerySystemTime, which the hook patches in every module) and the recipe's step_ms
 * is the game's frame, 16 ms: each step moves clock() on by exactly one frame period,
 * so one step is one frame whatever wall time passes. The adapter patches nothing.
 *
 * The step: the hook's step point is PeekMessageA, which the busy loop calls once or
 * more a loop. The hook makes a step at a call that finds the queue drained after a
 * new frame, the frame counter in the state (w3a_frame); w3a_ready says the same for
 * a hook that steps at every call. Without w3a_frame the hook would take a clock read
 * for a frame's evidence; the counter is exact. The frame runs right after the step, before the
 * game reads the keys posted in it: an answer's keys move the paddle in the frame
 * after the next (one frame of latency, the same at every step).
 *
 * The answer: head 0 is 0 none, 1 up, 2 down (an answer out of range is taken modulo
 * 3: the check policy's answers). It becomes the arrow keys a player would hold:
 * WM_KEYUP of the key let go, WM_KEYDOWN of the new one (host->key).
 *
 * One match a process: at game over the row is DONE, and after its answer the adapter
 * logs the game time and the wall time since attach (wall time: KUSER_SHARED_DATA's
 * interrupt time, a clock no hook reaches) and calls host->finish: the game exits 0 and
 * the supervisor starts the next one.
 *
 * Environment: PONG_TRACE, a folder: each step appends "step frame paddle score0
 * score1 hash action reward flags" to PONG_TRACE/pong-lane<L>.trace (the determinism test
 * compares them). PONG_REPEAT, 1..16 (default 1): frames an answer holds its key, a step
 * every that many frames (the match's last frame is always a step): a learner decides at
 * a quarter of the rate with 4 and sees a point's cause within fewer decisions. The
 * reward of a step is every point of the frames since the last. PONG_HIT_REWARD, a number
 * (default 0): added to a step's reward when your paddle sent the ball back since the
 * last step (its vx turned from left to right: only your paddle does that). A learner
 * paid for points alone meets a reward only when a point ends, and a new policy rarely
 * returns a ball; the last reward of a match is still its last point's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "inject/w3a_kit.h"
#include "inject/w3h.h"

#define PA_FRAME_MS 16 /* pong.c's PONG_FRAME_MS */
#define PA_W 640
#define PA_H 480

/* pong.c's struct pong_state, field for field. */
typedef struct pa_state {
    int frame, over, points, score[2];
    int ball_x, ball_y, ball_vx, ball_vy;
    int pad_y[2], up, down, serve_wait;
} pa_state;

static struct {
    const w3h_host *host;
    const volatile pa_state *g;
    HWND wnd;
    uint64_t wall0, game0; /* interrupt time (100 ns) and game time (ms) at attach */
    int posted, last_frame, score[2];
    uint32_t step, held;
    int repeat;        /* PONG_REPEAT */
    float hit_reward;  /* PONG_HIT_REWARD */
    int ball_vx;       /* at the last step */
    FILE *trace;
} pa;

W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen)
{
    memset((void *)&pa, 0, sizeof(pa));
    pa.host = host;
    if (host->abi < 2) {
        snprintf(err, errlen, "pong adapter: needs the hook's ABI 2 (windows, keys, imports), the hook has %u", host->abi);
        return -1;
    }
    if (host->nrows != 1) {
        snprintf(err, errlen, "pong adapter: %u rows; pong is one player a process: set lanes = 1, sides = 1",
                 host->nrows);
        return -1;
    }
    pa_state *g = host->find_address("state");
    if (!g) {
        snprintf(err, errlen, "pong adapter: the recipe names no address \"state\" (addresses_file = "
                              "\"build/win64/pong.addresses.toml\", written by make build)");
        return -1;
    }
    if (!host->check_address(g, sizeof(*g), 0)) {
        snprintf(err, errlen, "pong adapter: the state address %p is not readable memory (an addresses file of "
                              "another build of pong.exe?)", (void *)g);
        return -1;
    }
    if (g->points < 1 || g->points > 99 || g->pad_y[0] < 0 || g->pad_y[0] > PA_H || g->score[0] > g->points ||
        g->score[1] > g->points || g->score[0] < 0 || g->score[1] < 0) {
        snprintf(err, errlen, "pong adapter: the memory at the state address is not pong's match (points %d, scores "
                              "%d-%d, paddle %d): an addresses file of another build of pong.exe?",
                 g->points, g->score[0], g->score[1], g->pad_y[0]);
        return -1;
    }
    pa.g = g;
    if (!(pa.wnd = host->find_window("PongWindow"))) {
        snprintf(err, errlen, "pong adapter: the game has no window of class PongWindow");
        return -1;
    }
    if (w3a_kit_check_room(host, "pong", 3, 2, 11, 1, 3, err, errlen)) /* games/pong/spec.toml's shape */
        return -1;
    if (w3a_kit_check_step_ms(host, PA_FRAME_MS, "pong", "frame", err, errlen))
        return -1;
    double rep, hit;
    if (w3a_kit_env_number("PONG_REPEAT", 1, &rep) || !(rep >= 1 && rep <= 16) || rep != (int)rep) {
        snprintf(err, errlen, "pong adapter: PONG_REPEAT=\"%s\" must be a whole number of frames, 1..16",
                 getenv("PONG_REPEAT"));
        return -1;
    }
    if (w3a_kit_env_number("PONG_HIT_REWARD", 0, &hit) || !(hit >= -10 && hit <= 10)) {
        snprintf(err, errlen, "pong adapter: PONG_HIT_REWARD=\"%s\" must be a number, -10..10",
                 getenv("PONG_HIT_REWARD"));
        return -1;
    }
    pa.repeat = (int)rep, pa.hit_reward = (float)hit;
    pa.wall0 = w3a_kit_wall_100ns();
    pa.game0 = host->game_time_ms();
    return w3a_kit_open_trace(host, "PONG_TRACE", "pong", &pa.trace, err, errlen);
}

/* A step at the first step point call of every PONG_REPEAT-th frame and of the match's
 * end; the first call is one too. */
W3A_EXPORT int w3a_ready(void)
{
    int frames = pa.g->frame - pa.last_frame;
    return !pa.posted || frames >= pa.repeat || (frames > 0 && pa.g->over);
}

/* The game's frame counter, for a hook whose PeekMessage step point asks for one (a
 * drained queue is a step only after a new frame). */
W3A_EXPORT uint64_t w3a_frame(void) { return pa.g ? (uint64_t)(uint32_t)pa.g->frame : 0; }

W3A_EXPORT void w3a_observe(w3s_row *row, uint32_t i)
{
    pa_state s;
    memcpy(&s, (const void *)pa.g, sizeof(s));
    row->lane = pa.host->row0 + i;
    row->side = 0;
    row->episode = 0;
    row->flags = pa.posted ? 0 : W3S_FLAG_FIRST;
    if (s.over)
        row->flags |= W3S_FLAG_DONE;
    row->step = pa.step++;
    row->reward = pa.posted ? (float)((s.score[0] - pa.score[0]) - (s.score[1] - pa.score[1])) : 0.0f;
    if (pa.posted && pa.ball_vx < 0 && s.ball_vx > 0)
        row->reward += pa.hit_reward; /* your paddle returned the ball */
    row->discarded = 0;
    row->state_hash = w3a_kit_hash(&s, sizeof(s));
    const w3s_layout *L = pa.host->layout;
    w3s_obs_clear(L, row);
    float *gl = w3s_glob(L, row);
    gl[0] = s.ball_x / (float)PA_W, gl[1] = s.ball_y / (float)PA_H;
    gl[2] = s.ball_vx / 14.0f, gl[3] = s.ball_vy / 14.0f;
    gl[4] = s.pad_y[0] / (float)PA_H, gl[5] = s.pad_y[1] / (float)PA_H;
    gl[6] = s.score[0] / (float)s.points, gl[7] = s.score[1] / (float)s.points;
    gl[8] = s.serve_wait / 30.0f, gl[9] = (float)s.up, gl[10] = (float)s.down;
    /* Entities: the ball (type 1), your paddle (2), the computer's (3): x, y. */
    row->n_ent = 3;
    int16_t *type = w3s_ent_type(L, row);
    float *e0 = w3s_ent(L, row, 0), *e1 = w3s_ent(L, row, 1), *e2 = w3s_ent(L, row, 2);
    type[0] = 1, e0[0] = s.ball_x / (float)PA_W, e0[1] = s.ball_y / (float)PA_H;
    type[1] = 2, e1[0] = 20.0f / PA_W, e1[1] = s.pad_y[0] / (float)PA_H;
    type[2] = 3, e2[0] = 610.0f / PA_W, e2[1] = s.pad_y[1] / (float)PA_H;
    uint8_t *keys = w3s_mask(L, row, 0);
    keys[0] = keys[1] = keys[2] = 1;
    w3a_kit_unused_heads(L, row, 1);
    row->row_magic = W3S_ROW_MAGIC;
    pa.posted = 1;
    pa.last_frame = s.frame;
    pa.score[0] = s.score[0], pa.score[1] = s.score[1];
    pa.ball_vx = s.ball_vx;
    if (pa.trace)
        fprintf(pa.trace, "%u %d %d %d %d %016llx ", row->step, s.frame, s.pad_y[0], s.score[0], s.score[1],
                (unsigned long long)row->state_hash);
}

W3A_EXPORT void w3a_act(const w3s_row *row, uint32_t i)
{
    (void)i;
    int32_t a = row->action[0] % 3;
    uint32_t want = a == 1 || a == -1 ? VK_UP : a == 2 || a == -2 ? VK_DOWN : 0;
    if (want != pa.held) {
        int rc = pa.held ? pa.host->key(pa.wnd, pa.held, 0) : 0;
        if (!rc && want)
            rc = pa.host->key(pa.wnd, want, 1);
        if (rc)
            pa.host->fail("pong adapter: cannot post the arrow key to the game's window (Windows error %d)", rc);
        pa.held = want;
    }
    if (pa.trace) {
        fprintf(pa.trace, "%d %g %u\n", (int)(want == VK_UP ? 1 : want == VK_DOWN ? 2 : 0), row->reward, row->flags);
        fflush(pa.trace);
    }
}

W3A_EXPORT void w3a_episode_end(uint32_t i)
{
    (void)i;
    uint64_t game = pa.host->game_time_ms() - pa.game0, wall = (w3a_kit_wall_100ns() - pa.wall0) / 10000;
    pa.host->log("pong: frames %d game_ms %llu wall_ms %llu", pa.g->frame, (unsigned long long)game,
                 (unsigned long long)wall);
    pa.host->finish(); /* one match a process: the supervisor starts the next */
}

W3A_EXPORT void w3a_detach(void)
{
    if (pa.trace)
        fclose(pa.trace);
}
