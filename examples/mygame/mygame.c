/* mygame.c: the template of a game of your own (docs/games.md, "The kit"). A race of 20
 * cells against a bot that walks one a step: each step you walk (+1), run (+2, for 2 of
 * your 6 breaths) or rest (+0, a breath back). First home wins (+1), else loses (-1);
 * home together is a draw (0). Every lane of the process is one race, one agent side.
 *   cc -O2 -I"$W3ASYNC/shim" -o mygame mygame.c "$W3ASYNC/shim/w3s.c"
 *   x86_64-w64-mingw32-gcc -O2 -static -I"$W3ASYNC/shim" -o mygame.exe mygame.c "$W3ASYNC/shim/w3s.c" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "w3s.h"

#define TRACK 20
#define BREATH 6

typedef struct { int me, bot, breath, step; uint64_t episode; } race;

int main(void)
{
    char err[256];
    w3s_conn *c;
    int rc = w3s_attach(&c, err, sizeof err);
    /* this game's rows: no entities, 3 globals, one head of 3 choices (mygame.toml's [spec]) */
    if (!rc && w3s_check_shape(c, 0, 0, 3, 1, 3, err, sizeof err)) rc = W3S_EXIT_LAYOUT;
    if (rc) { fprintf(stderr, "mygame: %s\n", err); return rc; }
    const w3s_layout *L = w3s_layout_of(c);
    uint32_t n = w3s_nrows(c);
    race *rs = calloc(n, sizeof *rs);
    for (uint32_t i = 0; i < n; i++) rs[i].breath = BREATH;
    for (;;) {
        for (uint32_t i = 0; i < n; i++) {  /* fill every row: the race after the last answer */
            w3s_row *r = w3s_row_at(c, i);
            race *g = &rs[i];
            int won = g->me >= TRACK, lost = g->bot >= TRACK;
            r->lane = i, r->side = 0, r->episode = g->episode, r->step = g->step, r->n_ent = 0, r->discarded = 0;
            r->flags = (g->step ? 0 : W3S_FLAG_FIRST) | (won || lost ? W3S_FLAG_DONE : 0);
            r->reward = won && !lost ? 1.0f : lost && !won ? -1.0f : 0.0f;
            r->state_hash = (uint64_t)g->me << 32 | (uint64_t)g->bot << 16 | (uint64_t)g->breath;
            float *glob = w3s_glob(L, r);
            glob[0] = g->me / (float)TRACK, glob[1] = g->bot / (float)TRACK, glob[2] = g->breath / (float)BREATH;
            memset(w3s_mask(L, r, 0), 1, 3);  /* head 0: walk, run, rest */
        }
        rc = w3s_exchange(c, err, sizeof err);  /* post all, ring, wait for every answer */
        if (rc) { w3s_detach(c); if (rc < 0) fprintf(stderr, "mygame: %s\n", err); return rc < 0 ? W3S_EXIT_LOST : 0; }
        for (uint32_t i = 0; i < n; i++) {
            race *g = &rs[i];
            if (g->me >= TRACK || g->bot >= TRACK) { *g = (race){0, 0, BREATH, 0, g->episode + 1}; continue; }
            int a = w3s_row_at(c, i)->action[0];
            int run = a == 1 && g->breath >= 2;
            g->me += run ? 2 : a == 2 ? 0 : 1;
            g->breath += run ? -2 : a == 2 && g->breath < BREATH ? 1 : 0;
            g->bot += 1, g->step += 1;
        }
    }
}
