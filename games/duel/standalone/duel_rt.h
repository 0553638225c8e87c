/* duel_rt.h: the real-time duel's modding API. duel_rt.exe exports these by name from
 * the .exe itself, for a mod, a trainer or an adapter loaded into its process to read
 * the game and play it the way a player's input would.
 *
 *   duel_state    the world (setup, state, caches, the orders applied last)
 *   duel_order    a side's orders for the next command turn (a human's input)
 *   duel_rematch  the next game at the next frame, without the 3 s end screen
 *
 * Call them on the game's thread (between its frames): the game does not lock. */
#ifndef DUEL_RT_H
#define DUEL_RT_H

#include <stdint.h>

#include "../duel.h"

#ifdef DUEL_RT_GAME
#define DUEL_RT_API __declspec(dllexport)
#else
#define DUEL_RT_API
#endif

#define DUEL_RT_VERSION 1u

typedef struct duel_world {
    uint32_t version; /* DUEL_RT_VERSION */
    uint32_t size;    /* sizeof(duel_world): a reader built against another header refuses it */
    /* the setup, from the command line */
    long seed;          /* --seed: a game's seed is du_game_seed(seed, lane_no, episode) */
    uint64_t lane_no;   /* --lane */
    int32_t map;        /* --map; -1: rotate by episode */
    int32_t step_turns; /* --step-turns: orders take effect at turns that are multiples of it */
    int32_t time_limit; /* --time-limit, turns */
    int32_t speed;      /* --speed, turns per second of the game's clock */
    int64_t qpc_freq;   /* QueryPerformanceFrequency as the game saw it */
    du_ctl ctl[2];      /* the sides; a human side is DU_CTL_AGENT */
    /* the game */
    uint64_t episode;      /* games started before this one */
    du_lane lane;          /* the state (turn, step, units, winner) */
    du_cache cache;        /* its caches (no cuts in the standalone) */
    du_orders applied[2];  /* both sides' orders at the last command turn */
    int32_t discarded[2];  /* order parts the game refused, since the program started */
    int32_t over;          /* 1 from the game's end until the next game starts */
    uint64_t games_done;   /* games played to their end */
} duel_world;

typedef duel_world *(*duel_state_fn)(void);
typedef int (*duel_order_fn)(int side, const du_orders *o);
typedef void (*duel_rematch_fn)(void);

/* The world; never NULL, valid until the process exits. */
DUEL_RT_API duel_world *duel_state(void);
/* Queues side's orders for the next command turn (the last call before it wins); a side
 * given none keeps its orders. 0, or -1 for a side that is not human (the AI gives its
 * own) or out of range. */
DUEL_RT_API int duel_order(int side, const du_orders *o);
/* Starts the next game (episode + 1) at the next frame, whether this one ended or not. */
DUEL_RT_API void duel_rematch(void);

#endif
