/* snake_adapter.c: the adapter (shim/inject/w3h.h) for the unmodified snake.exe, a
 * GetMessage game ticked by a WM_TIMER that exports nothing, written as a user would
 * from the game's source and the tools' output. It reads the game's state, taps its
 * keys and ends its episodes; the hook alone paces it, keeps its focus and its seed.
 *
 * The state: the game's one static struct (snake.c's `snake`), at the offset nm finds
 * in an unstripped build of the same source (build/win64/snake.addresses.toml, the
 * recipe's addresses_file), checked at attach.
 *
 * The tick and the step: the game moves when a WM_TIMER of its 100 ms timer arrives and
 * waits in GetMessage between. The recipe's step point is GetMessageA with step_ms =
 * 100: the hook keeps the game's SetTimer timer in game time and steps while the queue
 * is empty, and each step's 100 ms makes the timer fire once, after the keys the step
 * posted. So a step is one tick. w3a_ready says a step only when the game moved on
 * since the last post (a new game, a tick, a tick of its game-over).
 *
 * Focus: the game pauses when its window loses the focus. The recipe's desktop = "own"
 * puts each game on a desktop of its own, where no other window takes it; a pause is
 * then a fault the adapter reports (host->fail), not one it hides.
 *
 * The seed: every new game seeds rand() from time(). The recipe's epoch_s fixes the
 * virtual clock's start, so time() reads the same at the same steps of every run: the
 * same answers give the same games.
 *
 * At every episode end the adapter logs the steps, the game time and the wall time
 * since attach (wall time: KUSER_SHARED_DATA's interrupt time, which no hook reaches).
 *
 * The answer: head 0 is 0 none, 1 up, 2 down, 3 left, 4 right (taken modulo 5): that
 * arrow key tapped (WM_KEYDOWN then WM_KEYUP, host->key). A death is the episode's
 * DONE row (reward -1; +1 a food); after its answer the adapter presses N.
 *
 * SNAKE_HUNGER, ticks (default 0: none): a game whose snake has eaten nothing for that
 * many ticks is cut, its row TRUNCATED (no death, no result), and the adapter presses N:
 * a policy that learned to circle safely would otherwise play one game for ever.
 *
 * SNAKE_TRACE, a folder: each step appends "step games ticks next_dir dir score hash
 * action reward flags"
 * to SNAKE_TRACE/snake-lane<L>.trace. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "inject/w3a_kit.h"
#include "inject/w3h.h"

#define SA_COLS 20
#define SA_ROWS 15
#define SA_MAX (SA_COLS * SA_ROWS)
#define SA_TICK_MS 100 /* snake.c's SNAKE_TICK_MS */

/* snake.c's struct snake_state, field for field. */
typedef struct sa_state {
    int games, ticks, score, dead, paused, dir, next_dir, food_x, food_y, len, head;
    int x[SA_MAX], y[SA_MAX];
} sa_state;

static struct {
    const w3h_host *host;
    const volatile sa_state *g;
    HWND wnd;
    uint64_t steps, wall0, game0; /* steps made; interrupt time (100 ns), game time (ms) at attach */
    int posted;
    int last_games, last_ticks, last_dead, last_score;
    int hunger, fed_tick; /* SNAKE_HUNGER; the tick of the last food (or of the game's start) */
    uint32_t step;
    FILE *trace;
} sa;

static void sa_tap(uint32_t vk)
{
    int rc = sa.host->key(sa.wnd, vk, 1);
    if (!rc)
        rc = sa.host->key(sa.wnd, vk, 0);
    if (rc)
        sa.host->fail("snake adapter: cannot post a key to the game's window (Windows error %d)", rc);
}

W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen)
{
    memset((void *)&sa, 0, sizeof(sa));
    sa.host = host;
    if (host->abi < 2) {
        snprintf(err, errlen, "snake adapter: needs the hook's ABI 2 (windows, keys, imports), the hook has %u",
                 host->abi);
        return -1;
    }
    if (host->nrows != 1) {
        snprintf(err, errlen, "snake adapter: %u rows; snake is one player a process: set lanes = 1, sides = 1",
                 host->nrows);
        return -1;
    }
    sa_state *g = host->find_address("state");
    if (!g) {
        snprintf(err, errlen, "snake adapter: the recipe names no address \"state\" (addresses_file = "
                              "\"build/win64/snake.addresses.toml\", written by make build)");
        return -1;
    }
    if (!host->check_address(g, sizeof(*g), 0)) {
        snprintf(err, errlen, "snake adapter: the state address %p is not readable memory", (void *)g);
        return -1;
    }
    if (g->games < 1 || g->len < 3 || g->len > SA_MAX || g->head < 0 || g->head >= SA_MAX || g->dir < 0 || g->dir > 3) {
        snprintf(err, errlen, "snake adapter: the memory at the state address is not snake's game (games %d, length "
                              "%d, direction %d): an addresses file of another build of snake.exe?",
                 g->games, g->len, g->dir);
        return -1;
    }
    sa.g = g;
    if (!(sa.wnd = host->find_window("SnakeWindow"))) {
        snprintf(err, errlen, "snake adapter: the game has no window of class SnakeWindow");
        return -1;
    }
    if (w3a_kit_check_room(host, "snake", 2, 3, 11, 1, 5, err, errlen)) /* the food, the head; games/snake/spec.toml */
        return -1;
    if (w3a_kit_check_step_ms(host, SA_TICK_MS, "snake", "tick", err, errlen))
        return -1;
    double hunger;
    if (w3a_kit_env_number("SNAKE_HUNGER", 0, &hunger) || !(hunger >= 0 && hunger <= 1e9) || hunger != (int)hunger) {
        snprintf(err, errlen, "snake adapter: SNAKE_HUNGER=\"%s\" must be a whole number of ticks (0: none)",
                 getenv("SNAKE_HUNGER"));
        return -1;
    }
    sa.hunger = (int)hunger;
    sa.wall0 = w3a_kit_wall_100ns();
    sa.game0 = host->game_time_ms();
    return w3a_kit_open_trace(host, "SNAKE_TRACE", "snake", &sa.trace, err, errlen);
}

W3A_EXPORT int w3a_ready(void)
{
    const volatile sa_state *g = sa.g;
    if (g->paused) /* the focus lost: on a shared desktop another game's window took it */
        sa.host->fail("snake adapter: the game paused (its window lost the focus): set desktop = \"own\"");
    return !sa.posted || g->games != sa.last_games || g->ticks != sa.last_ticks || g->dead != sa.last_dead;
}

W3A_EXPORT void w3a_observe(w3s_row *row, uint32_t i)
{
    static sa_state s;
    memcpy(&s, (const void *)sa.g, sizeof(s));
    int first = !sa.posted || s.games != sa.last_games;
    if (first)
        sa.step = 0, sa.last_score = 0, sa.fed_tick = s.ticks;
    if (s.score != sa.last_score)
        sa.fed_tick = s.ticks;
    row->lane = sa.host->row0 + i;
    row->side = 0;
    row->episode = (uint64_t)s.games;
    row->flags = (first ? W3S_FLAG_FIRST : 0) | (s.dead ? W3S_FLAG_DONE : 0);
    if (!s.dead && sa.hunger && s.ticks - sa.fed_tick >= sa.hunger)
        row->flags |= W3S_FLAG_TRUNCATED;
    row->step = sa.step++;
    row->reward = first ? 0.0f : (float)(s.score - sa.last_score) - (s.dead ? 1.0f : 0.0f);
    row->discarded = 0;
    row->state_hash = w3a_kit_hash(&s, sizeof(s));
    const w3s_layout *L = sa.host->layout;
    w3s_obs_clear(L, row);
    float *gl = w3s_glob(L, row);
    int hx = s.x[s.head], hy = s.y[s.head];
    gl[0] = hx / (float)SA_COLS, gl[1] = hy / (float)SA_ROWS;
    gl[2 + s.dir] = 1.0f; /* 2..5: the direction, one-hot */
    gl[6] = s.food_x / (float)SA_COLS, gl[7] = s.food_y / (float)SA_ROWS;
    gl[8] = s.len / (float)SA_MAX, gl[9] = (float)(s.food_x - hx) / SA_COLS;
    gl[10] = (float)(s.food_y - hy) / SA_ROWS;
    /* Entities: the food (type 1), the head (2), the body from the neck on (3), as many
     * as the row holds: x, y, and for the body its place along it. */
    uint32_t n = 0;
    int16_t *type = w3s_ent_type(L, row);
    float *f = w3s_ent(L, row, n);
    type[n] = 1, f[0] = s.food_x / (float)SA_COLS, f[1] = s.food_y / (float)SA_ROWS, n++;
    for (int k = 0; k < s.len && n < L->e_max; k++, n++) {
        int c = (s.head - k + SA_MAX) % SA_MAX;
        f = w3s_ent(L, row, n);
        type[n] = k ? 3 : 2;
        f[0] = s.x[c] / (float)SA_COLS, f[1] = s.y[c] / (float)SA_ROWS;
        f[2] = k / (float)SA_MAX;
    }
    row->n_ent = n;
    uint8_t *arrows = w3s_mask(L, row, 0);
    for (int c = 0; c < 5; c++)
        arrows[c] = 1;
    w3a_kit_unused_heads(L, row, 1);
    row->row_magic = W3S_ROW_MAGIC;
    sa.posted = 1;
    sa.last_games = s.games, sa.last_ticks = s.ticks, sa.last_dead = s.dead, sa.last_score = s.score;
    if (sa.trace)
        fprintf(sa.trace, "%u %d %d %d %d %d %016llx ", row->step, s.games, s.ticks, s.next_dir, s.dir, s.score,
                (unsigned long long)row->state_hash);
}

W3A_EXPORT void w3a_act(const w3s_row *row, uint32_t i)
{
    (void)i;
    static const uint32_t VK[] = {0, VK_UP, VK_DOWN, VK_LEFT, VK_RIGHT};
    int32_t a = row->action[0] % 5;
    if (a < 0)
        a = -a;
    if (row->flags & W3S_FLAG_TRUNCATED)
        sa_tap('N'); /* cut: the next game at once */
    else if (a && !(row->flags & W3S_FLAG_DONE))
        sa_tap(VK[a]);
    sa.steps++;
    if (sa.trace) {
        fprintf(sa.trace, "%d %g %u\n", (int)a, row->reward, row->flags);
        fflush(sa.trace);
    }
}

W3A_EXPORT void w3a_episode_end(uint32_t i)
{
    (void)i;
    uint64_t game = sa.host->game_time_ms() - sa.game0, wall = (w3a_kit_wall_100ns() - sa.wall0) / 10000;
    sa.host->log("snake: games %d steps %llu game_ms %llu wall_ms %llu", sa.g->games, (unsigned long long)sa.steps,
                 (unsigned long long)game, (unsigned long long)wall);
    sa_tap('N'); /* the next game at once, not after the game-over pause */
}

W3A_EXPORT void w3a_detach(void)
{
    if (sa.trace)
        fclose(sa.trace);
}
