/* duel_setup.h: a game's setup and its command turn, with no shim in it: what the
 * linked duel (duel_game.c) and the real-time standalone (standalone/duel_rt.c) share,
 * so that both play the same game from the same seed, sides and orders. */
#ifndef DUEL_SETUP_H
#define DUEL_SETUP_H

#include <stddef.h>

#include "duel.h"

/* W3D_REWARD: the outcome only; plus damage and kills dealt less taken; plus dealt only */
enum { DU_REWARD_WIN, DU_REWARD_SHAPED, DU_REWARD_ATTACK };

typedef struct du_cfg {
    du_ctl ctl[2];
    int map; /* -1: rotate */
    long seed, reward_mode, episodes, step_turns, time_limit, cuts, break_step, record_states;
    const char *record_dir;
    double record_share;
} du_cfg;

/* "A,B" into two controllers; 0, or -1 with err. */
int du_parse_sides(const char *s, du_ctl ctl[2], char *err, size_t errlen);
/* A game's seed from the base seed, the global lane number and the lane's episode. */
uint64_t du_game_seed(long base, uint64_t lane, uint64_t episode);
void du_make_setup(const du_cfg *c, uint64_t seed, uint64_t episode, du_setup *s);
uint32_t du_ctl_code(const du_ctl *c);
/* Starts a lane's game: the seed of (c->seed, global_lane, episode), the setup, the lane
 * reset, both controllers reset from c->ctl. Fills *setup; returns the game's seed. */
uint64_t du_lane_start(du_lane *l, du_cache *cache, du_ctl ctl[2], const du_cfg *c, uint64_t global_lane,
                       uint64_t episode, du_setup *setup);
/* A step's command turn: the orders of every side that is not an agent (AI, random,
 * script, idle) into o, then both sides' orders applied, side 0 first. o holds the
 * agents' orders on entry and every side's on return; discarded[s] grows by the parts
 * of side s's orders the game refused. */
void du_command(du_lane *l, du_cache *cache, du_ctl ctl[2], du_orders o[2], int32_t discarded[2]);

#endif
