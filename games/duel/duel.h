/* duel.h: a deterministic two-player micro-RTS, the reference game of w3async.
 *
 * One lane is one whole game: two sides, each with a base that trains melee, ranged
 * and heavy units (rock-paper-scissors counters), a passive income, neutral camps
 * worth a bounty, A* pathing on a grid with obstacles, sight and fog of war, and a
 * time limit with a tie-break. All game state is integer (positions in 1/256 of a
 * cell), the RNG is per lane and lives in the state, so the same setup and orders give
 * the same game natively and under Wine. docs/duel.md describes the rules.
 *
 * Symbols: du_ everywhere. The state (du_lane) is what the hash covers; caches (the
 * "cuts", du_cache) live beside it and never change what the state becomes.
 */
#ifndef DUEL_H
#define DUEL_H

#include <stdint.h>

#define DU_FP 256          /* fixed point: 1 cell = 256 units */
#define DU_MAP_MAX 48      /* cells per side, at most */
#define DU_CELLS (DU_MAP_MAX * DU_MAP_MAX)
#define DU_MAX_UNITS 128   /* per lane, bases and creeps included */
#define DU_PATH_MAX 96     /* cells of a path kept; a longer path is searched again at its end */
#define DU_SUPPLY_CAP 30
#define DU_REGIONS 6       /* attack-move targets: a DU_REGIONS x DU_REGIONS grid of map regions */
#define DU_N_REGIONS (DU_REGIONS * DU_REGIONS)

/* Unit types: also the observation's entity type ids. */
enum { DU_BASE = 0, DU_MELEE, DU_RANGED, DU_HEAVY, DU_CREEP, DU_BOSS, DU_N_TYPES };
/* Owners: side 0, side 1, neutral. */
enum { DU_NEUTRAL = 2 };
/* Unit orders. */
enum { DU_IDLE = 0, DU_MOVE, DU_HOLD, DU_RETREAT };
/* Maps. */
enum { DU_MAP_OPEN = 0, DU_MAP_CHOKE, DU_MAP_CAMPS, DU_N_MAPS };

/* Action heads (the agent's and the built-in AI's orders have the same form). */
#define DU_H0 4                     /* train: 0 nothing, 1 melee, 2 ranged, 3 heavy */
#define DU_CMD_KEEP 0               /* head 1: keep the group's orders */
#define DU_CMD_HOLD 1               /* stop and fight in range only */
#define DU_CMD_RETREAT 2            /* walk home, ignoring enemies */
#define DU_CMD_MOVE0 3              /* 3+k: attack-move to region k */
#define DU_H1 (DU_CMD_MOVE0 + DU_N_REGIONS)
#define DU_H2 4                     /* group: 0 whole army, 1 melee, 2 ranged, 3 heavy */

/* Cut bits (W3D_CUTS): faster code paths that leave the simulation identical, and
 * one test-only bit that changes it on purpose. */
#define DU_CUT_ASTAR_MEMO 1u /* remember A* paths per (start, goal): obstacles never change */
#define DU_CUT_VIS_MEMO 2u   /* a unit's visibility to a team remembered until the state changes */
#define DU_CUT_BUCKETS 4u    /* nearest-enemy search over a bucket grid instead of every unit */
#define DU_CUT_SAFE_MASK 7u
#define DU_CUT_BREAK 128u    /* test only: side 0's first army unit loses 1 hp at W3D_BREAK_STEP */

typedef struct du_unit {
    int32_t id, type, owner, order;
    int32_t x, y; /* position, DU_FP units */
    int32_t hp, cooldown;
    int32_t target; /* unit id being fought, -1 */
    int32_t focus;  /* unit id the side ordered to fight, -1 */
    int32_t dest;   /* cell the order walks to, -1 */
    int32_t home;   /* creeps: their camp's cell; units: unused (-1) */
    int32_t last_hit_by; /* unit id of the last attacker, -1 */
    int32_t repath;      /* turns until a chase searches its path again */
    int32_t path_len, path_pos;
    int16_t path[DU_PATH_MAX];
    /* per-turn scratch, not hashed and reset every turn */
    int32_t pending_dmg;
} du_unit;

typedef struct du_side {
    int32_t gold;
    int32_t train_type, train_left; /* 0 when the base is not training */
    int32_t supply;
    int32_t dmg_dealt, dmg_taken, kill_value, loss_value; /* for shaped rewards and tie-breaks */
} du_side;

typedef struct du_setup {
    int32_t map;
    uint64_t seed;
    int32_t step_turns;       /* turns per step */
    int32_t time_limit_turns; /* the game ends here: tie-break */
} du_setup;

typedef struct du_map {
    int32_t w, h;
    uint8_t block[DU_CELLS]; /* 1: obstacle */
    int32_t base_cell[2];
    int32_t region_cell[DU_N_REGIONS]; /* a passable cell per region, -1 when none */
    int32_t n_camps;
    int32_t camp_cell[8];
} du_map;

typedef struct du_lane {
    du_setup setup;
    const du_map *map;
    uint64_t rng;
    int32_t turn, step;
    int32_t next_id;
    int32_t n_units;
    du_unit units[DU_MAX_UNITS]; /* sorted by id */
    du_side side[2];
    int32_t winner;     /* -1 while playing; 0/1; 2 for a draw */
    int32_t end_reason; /* 0 playing, 1 base destroyed, 2 time limit */
} du_lane;

/* One side's orders for a step: the four heads, the focus as a unit id (-1 none). */
typedef struct du_orders {
    int32_t train, cmd, group, focus;
} du_orders;

/* Caches for the cuts: per lane, never hashed. */
typedef struct du_cache {
    uint32_t cuts;
    int32_t break_step;
    /* A* memo: direct-mapped on (start, goal) */
    struct du_memo *memo;
    /* bumped whenever positions or the unit list change: what the memos are valid for */
    uint32_t epoch;
    uint32_t vis_epoch[2][DU_MAX_UNITS];
    uint8_t vis_val[2][DU_MAX_UNITS];
    /* bucket grid: unit indices per 4x4-cell bucket, valid for bucket_epoch */
    uint32_t bucket_epoch;
    int16_t bucket_head[(DU_MAP_MAX / 4) * (DU_MAP_MAX / 4)];
    int16_t bucket_next[DU_MAX_UNITS];
} du_cache;

/* duel_map.c */
const du_map *du_map_get(int32_t map);
const char *du_map_name(int32_t map);
int du_map_parse(const char *s); /* -1 when unknown */
/* A* from cell s to cell g on m; writes at most DU_PATH_MAX cells (s excluded, g
 * included) into path and returns their number, 0 when s == g or no path. */
int du_astar(const du_map *m, int s, int g, int16_t *path, du_cache *cache);
void du_cache_init(du_cache *c, uint32_t cuts, int32_t break_step);
void du_cache_free(du_cache *c);

/* duel_sim.c */
extern const struct du_stats {
    int32_t hp, dmg, range, sight, speed, cooldown, cost, build, supply, bounty;
} du_stats[DU_N_TYPES];
const char *du_type_name(int32_t t);
void du_lane_reset(du_lane *l, du_cache *c, const du_setup *setup);
/* Applies side s's orders; returns how many parts were discarded (invalid). */
int du_apply_orders(du_lane *l, du_cache *c, int s, const du_orders *o);
/* Runs setup.step_turns turns (fewer when the game ends), then du_step_close. */
void du_step(du_lane *l, du_cache *c);
/* One turn of a step. A game that runs its turns one at a time (the real-time
 * standalone) calls du_step_close after a step's last turn or the turn that ended the
 * game, so that its state equals du_step's. */
void du_turn(du_lane *l, du_cache *c);
/* A step's end: the test-only break (DU_CUT_BREAK), then step + 1. */
void du_step_close(du_lane *l, du_cache *c);
uint64_t du_hash(const du_lane *l);
int du_find(const du_lane *l, int32_t id); /* index of unit id, -1 */
int du_visible(const du_lane *l, du_cache *c, int team, const du_unit *u);
int du_cell_of(const du_unit *u, const du_map *m);
int du_army_count(const du_lane *l, int s, int type); /* type 0: every army unit */
int du_can_train(const du_lane *l, int s, int type);
int du_army_value(const du_lane *l, int s);
static inline uint64_t du_rng_next(uint64_t *x)
{
    /* splitmix64: one 64-bit word of state, the same on every platform */
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* duel_ai.c: controllers give a side's orders from the lane's state. */
enum { DU_CTL_AGENT = 0, DU_CTL_AI, DU_CTL_RANDOM, DU_CTL_SCRIPT, DU_CTL_IDLE };
typedef struct du_ctl {
    int32_t kind, level; /* level: 0 easy, 1 normal, 2 hard */
    uint64_t rng;        /* the controller's own RNG: not game state */
    int32_t mode, mode_steps; /* AI memory: 0 build, 1 attack, 2 retreat */
} du_ctl;
int du_ctl_parse(const char *s, du_ctl *out); /* "agent", "ai:easy|normal|hard", "random", "script", "idle" */
const char *du_ctl_name(const du_ctl *c, char *buf, int n);
void du_ctl_reset(du_ctl *c, uint64_t seed);
void du_ctl_orders(du_ctl *c, const du_lane *l, du_cache *cache, int s, du_orders *o);

/* duel_masks.c (the entity list, masks, answers) and duel_obs.c (the row): the agent's side. */
struct w3s_row;
#define DU_VIEW_MAX 160 /* entities a side sees at most: a row's W3S_E_MAX */
typedef struct du_view {
    int32_t n_ent;
    int32_t ent_id[DU_VIEW_MAX]; /* unit id per entity index */
} du_view;
/* The entity list and the masks for side s (what du_apply_orders will accept). */
void du_masks(const du_lane *l, du_cache *c, int s, uint8_t mask[4][192], du_view *v);
/* Fills row's observation and masks for side s; remembers the entity list in v. */
void du_observe(const du_lane *l, du_cache *c, int s, struct w3s_row *row, du_view *v);
/* Turns a row's answer into orders; counts the heads it had to discard. */
int du_decode(const du_lane *l, du_cache *c, int s, const int32_t action[4], const du_view *v, du_orders *o);
/* Random legal choice per head from masks. */
void du_random_action(const uint8_t mask[4][192], uint64_t *rng, int32_t action[4]);

#endif
