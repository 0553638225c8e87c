/* duel_game.h: a lane with everything around it (its caches, both sides' controllers,
 * its recorder) and the W3D_* configuration: what agent mode and the standalone modes
 * of duel_main.c share. */
#ifndef DUEL_GAME_H
#define DUEL_GAME_H

#include <stddef.h>

#include "duel.h"
#include "duel_replay.h"
#include "duel_setup.h"

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
/* Starts g's next game (g->episode, g->global_lane set by the caller): resets the lane
 * and the controllers, opens a recorder when this episode is drawn for recording. */
void du_game_start(du_game *g, const du_cfg *c, uint64_t seed_base_lane);
/* Opens the replay of (global_lane, episode) when W3D_RECORD_DIR is set and the
 * game's seed draws it into W3D_RECORD_SHARE: 1 recording, 0 not (a file that could
 * not be opened is said on stderr). */
int du_rec_start(du_rec *rec, const du_cfg *c, const du_setup *setup, uint64_t global_lane, uint64_t episode);
/* Closes the recording of a finished game (the replay gets its end record). */
void du_game_finish(du_game *g);
/* One step: orders of the non-agent sides, both sides' orders applied (side 0 first),
 * the turns, the replay record. o holds the agents' orders on entry. */
void du_game_step(du_game *g, du_orders o[2]);
/* Side s's reward for the row about to be posted (win/loss, plus shaping since prev by
 * mode, a DU_REWARD_*, which it then updates). du_reward is it for a du_game. */
float du_side_reward(const du_lane *l, int32_t prev[4], int s, int mode);
float du_reward(du_game *g, int s, int mode);
/* Row r as agent mode posts it for side s of a lane: lane index, side, episode, step,
 * flags (FIRST at step 0, DONE once the game has a winner), the reward and discarded
 * count given, the state hash, the observation (its entity list into v). */
struct w3s_row;
void du_fill_row(struct w3s_row *r, const du_lane *l, du_cache *c, int s, uint32_t lane_index, uint64_t episode,
                 float reward, uint32_t discarded, du_view *v);
/* mkdir -p; 0, or -1 with errno. */
int du_mkdirs(const char *path);
double du_cpu_s(void);
double du_wall_s(void);

#endif
