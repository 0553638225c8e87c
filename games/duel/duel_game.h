/* duel_game.h: a lane with everything around it (its caches, both sides' controllers,
 * its recorder) and the W3D_* configuration: what agent mode and the standalone modes
 * of duel_main.c share. */
#ifndef DUEL_GAME_H
#define DUEL_GAME_H

#include <stddef.h>

#include "duel.h"
#include "duel_replay.h"

typedef struct du_cfg {
    du_ctl ctl[2];
    int map; /* -1: rotate */
    long seed, reward_shaped, episodes, step_turns, time_limit, cuts, break_step, record_states;
    const char *record_dir;
    double record_share;
} du_cfg;

/* One game lane: the state, its caches, both controllers, its recorder. */
typedef struct du_game {
    du_lane lane;
    du_cache cache;
    du_ctl ctl[2];
    du_view view[2];
    du_rec rec;
    int recording;
    uint64_t episode, global_lane;
    int32_t discarded[2];
    int32_t prev[2][4]; /* reward bookkeeping: dealt, taken, kills, losses at the last post */
} du_game;

/* The W3D_* environment (docs/duel.md); 0, or -1 with err naming the variable. */
int du_config(du_cfg *c, char *err, size_t errlen);
/* "A,B" into two controllers; 0, or -1 with err. */
int du_parse_sides(const char *s, du_ctl ctl[2], char *err, size_t errlen);
/* A game's seed from the base seed, the global lane number and the lane's episode. */
uint64_t du_game_seed(long base, uint64_t lane, uint64_t episode);
void du_make_setup(const du_cfg *c, uint64_t seed, uint64_t episode, du_setup *s);
uint32_t du_ctl_code(const du_ctl *c);
/* Starts g's next game (g->episode, g->global_lane set by the caller): resets the lane
 * and the controllers, opens a recorder when this episode is drawn for recording. */
void du_game_start(du_game *g, const du_cfg *c, uint64_t seed_base_lane);
/* Closes the recording of a finished game (the replay gets its end record). */
void du_game_finish(du_game *g);
/* One step: orders of the non-agent sides, both sides' orders applied (side 0 first),
 * the turns, the replay record. o holds the agents' orders on entry. */
void du_game_step(du_game *g, du_orders o[2]);
/* Side s's reward for the row about to be posted (win/loss, plus shaping). */
float du_reward(du_game *g, int s, int shaped);
/* mkdir -p; 0, or -1 with errno. */
int du_mkdirs(const char *path);
double du_cpu_s(void);
double du_wall_s(void);

#endif
