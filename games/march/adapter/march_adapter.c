/* march_adapter.c: the adapter (shim/inject/w3h.h) for the unmodified march.exe, a game
 * shaped like Warcraft III's loop (games/march/march.c) that exports nothing. It uses
 * the host API alone: the state at the address nm finds (build/win64/march.addresses.toml,
 * the recipe's addresses_file), the window by its class, the keys tapped (the game reads
 * them through DirectInput 8, which the hook answers from them) and the pointer moved
 * (the game reads GetCursorPos). No method table is touched here: the recipe names the
 * step point IDirect3DDevice9::Present and turns the drawing off by name.
 *
 * A step is a turn (step_ms = the game's 50 ms turn: the game's pacing thread wakes the
 * main thread once per 50 ms of game time, and the main thread presents once a turn).
 * The answer: head 0 is 0 the pointer to the goal, 1 the left arrow tapped, 2 the right
 * one (taken modulo 3). The reward: units home this turn. A march (300 turns) is the
 * episode; the game goes on to the next in the same process.
 *
 * At every episode end the adapter logs the turn, the game time and the wall time since
 * attach (wall time: KUSER_SHARED_DATA's interrupt time, which no hook reaches). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <windows.h>

#include "inject/w3a_kit.h"
#include "inject/w3h.h"

#define MA_TURN_MS 50 /* march.c's MARCH_TURN_MS */
#define MA_TURNS 300
#define MA_UNITS 8
#define MA_W 320
#define MA_H 240

/* march.c's struct march_state, field for field. */
typedef struct ma_state {
    int turn, marches, over, score, rally_x, rally_y, goal_x, goal_y;
    int unit_x[MA_UNITS], unit_y[MA_UNITS];
    volatile LONG sound, timer, queue;
    uint64_t hash;
} ma_state;

static struct {
    const w3h_host *host;
    const volatile ma_state *g;
    HWND wnd;
    uint64_t wall0, game0;
    int posted, last_turn, last_marches, score;
    uint32_t step;
} ma;

W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen)
{
    memset((void *)&ma, 0, sizeof(ma));
    ma.host = host;
    if (host->abi < 3) {
        snprintf(err, errlen, "march adapter: needs the hook's ABI 3 (tap), the hook has %u", host->abi);
        return -1;
    }
    if (host->nrows != 1) {
        snprintf(err, errlen, "march adapter: %u rows; march is one player a process: set lanes = 1, sides = 1",
                 host->nrows);
        return -1;
    }
    const ma_state *g = host->find_address("state");
    if (!g || !host->check_address(g, sizeof(*g), 0)) {
        snprintf(err, errlen, "march adapter: %s (addresses_file = \"build/win64/march.addresses.toml\", written by "
                              "make build)", g ? "the state address is not readable memory" :
                                                 "the recipe names no address \"state\"");
        return -1;
    }
    if (g->turn < 0 || g->turn > MA_TURNS || g->goal_x < 0 || g->goal_x > MA_W || g->goal_y < 0 || g->goal_y > MA_H) {
        snprintf(err, errlen, "march adapter: the memory at the state address is not march's (turn %d, goal %d,%d): "
                              "an addresses file of another build of march.exe?", g->turn, g->goal_x, g->goal_y);
        return -1;
    }
    ma.g = g;
    if (!(ma.wnd = host->find_window("MarchWindow"))) {
        snprintf(err, errlen, "march adapter: the game has no window of class MarchWindow");
        return -1;
    }
    if (w3a_kit_check_room(host, "march", 3, 2, 6, 1, 3, err, errlen))
        return -1;
    if (w3a_kit_check_step_ms(host, MA_TURN_MS, "march", "turn", err, errlen))
        return -1;
    ma.wall0 = w3a_kit_wall_100ns();
    ma.game0 = host->game_time_ms();
    return 0;
}

/* A step at each new turn (the first Present is one too). */
W3A_EXPORT int w3a_ready(void) { return !ma.posted || ma.g->turn != ma.last_turn || ma.g->marches != ma.last_marches; }

W3A_EXPORT void w3a_observe(w3s_row *row, uint32_t i)
{
    ma_state s;
    memcpy(&s, (const void *)ma.g, sizeof(s));
    int fresh = s.marches != ma.last_marches;
    row->lane = ma.host->row0 + i;
    row->side = 0;
    row->episode = (uint64_t)s.marches;
    row->flags = (!ma.posted || (fresh && s.turn <= 1)) ? W3S_FLAG_FIRST : 0;
    if (s.over)
        row->flags |= W3S_FLAG_DONE;
    row->step = ma.step++;
    row->reward = ma.posted && !fresh ? (float)(s.score - ma.score) : 0.0f;
    row->discarded = 0;
    row->state_hash = w3a_kit_hash(&s, offsetof(ma_state, sound));
    const w3s_layout *L = ma.host->layout;
    w3s_obs_clear(L, row);
    float *gl = w3s_glob(L, row);
    gl[0] = s.rally_x / (float)MA_W, gl[1] = s.rally_y / (float)MA_H;
    gl[2] = s.goal_x / (float)MA_W, gl[3] = s.goal_y / (float)MA_H;
    gl[4] = s.turn / (float)MA_TURNS, gl[5] = s.score / (float)MA_UNITS;
    /* Entities: the rally point (type 1), the goal (2), the units' centre (3): x, y. */
    float cx = 0, cy = 0;
    for (int k = 0; k < MA_UNITS; k++)
        cx += s.unit_x[k], cy += s.unit_y[k];
    row->n_ent = 3;
    int16_t *type = w3s_ent_type(L, row);
    float *e0 = w3s_ent(L, row, 0), *e1 = w3s_ent(L, row, 1), *e2 = w3s_ent(L, row, 2);
    type[0] = 1, e0[0] = gl[0], e0[1] = gl[1];
    type[1] = 2, e1[0] = gl[2], e1[1] = gl[3];
    type[2] = 3, e2[0] = cx / MA_UNITS / MA_W, e2[1] = cy / MA_UNITS / MA_H;
    uint8_t *orders = w3s_mask(L, row, 0);
    orders[0] = orders[1] = orders[2] = 1;
    w3a_kit_unused_heads(L, row, 1);
    row->row_magic = W3S_ROW_MAGIC;
    ma.posted = 1;
    ma.last_turn = s.turn, ma.last_marches = s.marches, ma.score = s.score;
}

W3A_EXPORT void w3a_act(const w3s_row *row, uint32_t i)
{
    (void)i;
    int32_t a = row->action[0] % 3;
    a = a < 0 ? -a : a;
    int rc = a == 1 ? ma.host->tap(ma.wnd, VK_LEFT) : a == 2 ? ma.host->tap(ma.wnd, VK_RIGHT)
                                                           : ma.host->mouse(ma.wnd, ma.g->goal_x, ma.g->goal_y, 0);
    if (rc)
        ma.host->fail("march adapter: cannot give the game its input (Windows error %d)", rc);
}

W3A_EXPORT void w3a_episode_end(uint32_t i)
{
    (void)i;
    uint64_t game = ma.host->game_time_ms() - ma.game0, wall = (w3a_kit_wall_100ns() - ma.wall0) / 10000;
    ma.host->log("march: turns %d game_ms %llu wall_ms %llu", (ma.g->marches + 1) * MA_TURNS,
                 (unsigned long long)game, (unsigned long long)wall);
}
