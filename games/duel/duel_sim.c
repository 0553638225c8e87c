/* duel_sim.c: the rules. A turn has two phases so that its result never depends on
 * which unit comes first in a way a cache could change:
 *   A (decide): every unit checks its focus and target and picks a new target, reading
 *     positions that nobody changes during this phase;
 *   B (act): in id order, each unit attacks (damage is only queued) or moves;
 * then queued damage lands at once (so neither side strikes first), the dead leave,
 * bounties and kills are paid, the bases train and the sides earn their income. */
#include <stdlib.h>
#include <string.h>

#include "duel.h"

/*                  hp   dmg  range     sight speed cd  cost build supply bounty */
const struct du_stats du_stats[DU_N_TYPES] = {
    [DU_BASE] = {3000, 20, 6 * DU_FP, 9, 0, 20, 0, 0, 0, 0},
    [DU_MELEE] = {160, 14, 320, 6, 26, 24, 60, 60, 1, 0},
    [DU_RANGED] = {90, 11, 4 * DU_FP, 7, 23, 32, 70, 70, 1, 0},
    [DU_HEAVY] = {380, 30, 384, 6, 18, 40, 150, 140, 2, 0},
    [DU_CREEP] = {200, 10, 320, 4, 20, 30, 0, 0, 0, 40},
    [DU_BOSS] = {600, 25, 384, 5, 18, 36, 0, 0, 0, 150},
};

/* Damage in percent, attacker type x defender type: melee catches ranged, ranged
 * shoots heavy, heavy crushes melee. */
static const int32_t du_counter[DU_N_TYPES][DU_N_TYPES] = {
    [DU_BASE] = {100, 100, 100, 100, 100, 100},
    [DU_MELEE] = {100, 100, 175, 60, 100, 100},
    [DU_RANGED] = {100, 60, 100, 175, 100, 100},
    [DU_HEAVY] = {100, 175, 60, 100, 100, 100},
    [DU_CREEP] = {100, 100, 100, 100, 100, 100},
    [DU_BOSS] = {100, 100, 100, 100, 100, 100},
};

#define DU_START_GOLD 150
#define DU_AGGRO (3 * DU_FP)  /* creeps wake within this distance of themselves */
#define DU_LEASH (6 * DU_FP)  /* and give up beyond this distance from home */
#define DU_REPATH 10          /* turns between path searches in a chase */

static const char *du_type_names[DU_N_TYPES] = {"base", "melee", "ranged", "heavy", "creep", "boss"};
const char *du_type_name(int32_t t) { return (t >= 0 && t < DU_N_TYPES) ? du_type_names[t] : "?"; }

static int32_t du_isqrt(int64_t v)
{
    if (v <= 0)
        return 0;
    int64_t r = 0, bit = (int64_t)1 << 40;
    while (bit > v)
        bit >>= 2;
    while (bit) {
        if (v >= r + bit) {
            v -= r + bit;
            r = (r >> 1) + bit;
        } else
            r >>= 1;
        bit >>= 2;
    }
    return (int32_t)r;
}

static int64_t du_d2(const du_unit *a, const du_unit *b)
{
    int64_t dx = a->x - b->x, dy = a->y - b->y;
    return dx * dx + dy * dy;
}

static int32_t du_center(int cell_coord) { return cell_coord * DU_FP + DU_FP / 2; }

int du_cell_of(const du_unit *u, const du_map *m)
{
    (void)m;
    return (u->y / DU_FP) * DU_MAP_MAX + (u->x / DU_FP);
}

int du_find(const du_lane *l, int32_t id)
{
    int lo = 0, hi = l->n_units - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (l->units[mid].id == id)
            return mid;
        if (l->units[mid].id < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static du_unit *du_spawn(du_lane *l, int type, int owner, int cell, int32_t ox, int32_t oy)
{
    if (l->n_units >= DU_MAX_UNITS)
        return NULL;
    du_unit *u = &l->units[l->n_units++];
    memset(u, 0, sizeof(*u));
    u->id = l->next_id++;
    u->type = type;
    u->owner = owner;
    u->order = DU_IDLE;
    u->x = du_center(cell % DU_MAP_MAX) + ox;
    u->y = du_center(cell / DU_MAP_MAX) + oy;
    u->hp = du_stats[type].hp;
    u->target = u->focus = u->dest = u->last_hit_by = -1;
    u->home = owner == DU_NEUTRAL ? cell : -1;
    return u;
}

void du_lane_reset(du_lane *l, du_cache *c, const du_setup *setup)
{
    if (c)
        c->epoch++; /* every memo of the last game is stale */
    memset(l, 0, sizeof(*l));
    l->setup = *setup;
    l->map = du_map_get(setup->map);
    l->rng = setup->seed;
    l->winner = -1;
    l->next_id = 1;
    for (int s = 0; s < 2; s++) {
        du_spawn(l, DU_BASE, s, l->map->base_cell[s], 0, 0);
        l->side[s].gold = DU_START_GOLD;
    }
    /* camps: 2-3 creeps, and a boss in every camp of the large map; mirrored camps get
     * the same draw so that neither side has the richer one */
    for (int c = 0; c < l->map->n_camps; c += 2) {
        int n = 2 + (int)(du_rng_next(&l->rng) % 2);
        for (int k = 0; k < 2; k++) {
            int cell = l->map->camp_cell[c + k];
            for (int i = 0; i < n; i++)
                du_spawn(l, DU_CREEP, DU_NEUTRAL, cell, (i - 1) * 48, (i % 2) * 48 - 24);
            if (setup->map == DU_MAP_CAMPS)
                du_spawn(l, DU_BOSS, DU_NEUTRAL, cell, 0, 0);
        }
    }
}

/* ---- queries (cut bits 2 and 4 live here) ---- */

static int du_visible_scan(const du_lane *l, int team, const du_unit *u)
{
    for (int i = 0; i < l->n_units; i++) {
        const du_unit *f = &l->units[i];
        if (f->owner != team || f->hp <= 0)
            continue;
        int64_t r = (int64_t)du_stats[f->type].sight * DU_FP;
        if (du_d2(f, u) <= r * r)
            return 1;
    }
    return 0;
}

/* Unit u visible to team: its own, or within the sight of one of the team's living
 * units. Only asked while positions stand still (phase A, between steps). */
int du_visible(const du_lane *l, du_cache *c, int team, const du_unit *u)
{
    if (u->owner == team)
        return 1;
    if (!c || !(c->cuts & DU_CUT_VIS_MEMO))
        return du_visible_scan(l, team, u);
    int i = (int)(u - l->units);
    if (c->vis_epoch[team][i] != c->epoch) {
        c->vis_epoch[team][i] = c->epoch;
        c->vis_val[team][i] = (uint8_t)du_visible_scan(l, team, u);
    }
    return c->vis_val[team][i];
}

static int du_is_enemy(const du_unit *a, const du_unit *b)
{
    if (a->owner == b->owner)
        return 0;
    return 1; /* players fight each other and the neutrals; neutrals fight players */
}

#define DU_BUCKET 4
#define DU_NB (DU_MAP_MAX / DU_BUCKET)

static void du_buckets_build(du_lane *l, du_cache *c)
{
    for (int b = 0; b < DU_NB * DU_NB; b++)
        c->bucket_head[b] = -1;
    /* push in reverse so that each list runs in index order (not needed for the
     * result, which takes the minimum, but it keeps the walk cache-friendly) */
    for (int i = l->n_units - 1; i >= 0; i--) {
        const du_unit *u = &l->units[i];
        int b = (u->y / DU_FP / DU_BUCKET) * DU_NB + (u->x / DU_FP / DU_BUCKET);
        c->bucket_next[i] = c->bucket_head[b];
        c->bucket_head[b] = (int16_t)i;
    }
    c->bucket_epoch = c->epoch;
}

static void du_consider(const du_lane *l, const du_unit *u, int j, int64_t r2, int *best, int64_t *bestd)
{
    const du_unit *v = &l->units[j];
    if (v->hp <= 0 || !du_is_enemy(u, v))
        return;
    int64_t d = du_d2(u, v);
    if (d > r2)
        return;
    if (d < *bestd || (d == *bestd && v->id < l->units[*best].id)) {
        *bestd = d;
        *best = j;
    }
}

/* The nearest living enemy within range r of u (ties: the lowest id), -1 when none. */
static int du_nearest_enemy(du_lane *l, du_cache *c, const du_unit *u, int32_t r)
{
    int best = -1;
    int64_t bestd = INT64_MAX, r2 = (int64_t)r * r;
    if (!c || !(c->cuts & DU_CUT_BUCKETS)) {
        for (int j = 0; j < l->n_units; j++)
            du_consider(l, u, j, r2, &best, &bestd);
        return best;
    }
    if (c->bucket_epoch != c->epoch)
        du_buckets_build(l, c);
    int span = DU_FP * DU_BUCKET;
    int bx0 = (u->x - r) / span, bx1 = (u->x + r) / span, by0 = (u->y - r) / span, by1 = (u->y + r) / span;
    if (u->x - r < 0)
        bx0 = 0;
    if (u->y - r < 0)
        by0 = 0;
    if (bx1 >= DU_NB)
        bx1 = DU_NB - 1;
    if (by1 >= DU_NB)
        by1 = DU_NB - 1;
    for (int by = by0; by <= by1; by++)
        for (int bx = bx0; bx <= bx1; bx++)
            for (int j = c->bucket_head[by * DU_NB + bx]; j >= 0; j = c->bucket_next[j])
                du_consider(l, u, j, r2, &best, &bestd);
    return best;
}

int du_army_count(const du_lane *l, int s, int type)
{
    int n = 0;
    for (int i = 0; i < l->n_units; i++) {
        const du_unit *u = &l->units[i];
        if (u->owner == s && u->type >= DU_MELEE && u->type <= DU_HEAVY && (type == 0 || u->type == type))
            n++;
    }
    return n;
}

int du_army_value(const du_lane *l, int s)
{
    int v = 0;
    for (int i = 0; i < l->n_units; i++) {
        const du_unit *u = &l->units[i];
        if (u->owner == s && u->type >= DU_MELEE && u->type <= DU_HEAVY)
            v += du_stats[u->type].cost * u->hp / du_stats[u->type].hp;
    }
    return v;
}

int du_can_train(const du_lane *l, int s, int type)
{
    const du_side *sd = &l->side[s];
    return type >= DU_MELEE && type <= DU_HEAVY && sd->train_left == 0 && sd->gold >= du_stats[type].cost &&
           sd->supply + du_stats[type].supply <= DU_SUPPLY_CAP;
}

/* ---- orders ---- */

static void du_set_path(du_lane *l, du_cache *c, du_unit *u, int goal)
{
    u->path_len = du_astar(l->map, du_cell_of(u, l->map), goal, u->path, c);
    u->path_pos = 0;
}

static int du_in_group(const du_unit *u, int s, int group)
{
    return u->owner == s && u->type >= DU_MELEE && u->type <= DU_HEAVY && (group == 0 || u->type == group);
}

int du_apply_orders(du_lane *l, du_cache *c, int s, const du_orders *o)
{
    int discarded = 0;
    if (l->winner >= 0)
        return 0;
    if (o->train) {
        if (du_can_train(l, s, o->train)) {
            du_side *sd = &l->side[s];
            sd->gold -= du_stats[o->train].cost;
            sd->supply += du_stats[o->train].supply;
            sd->train_type = o->train;
            sd->train_left = du_stats[o->train].build;
        } else
            discarded++;
    }
    int group = o->group;
    int members = 0;
    if (group < 0 || group >= DU_H2) {
        if (o->cmd || o->focus >= 0)
            discarded++;
        return discarded;
    }
    for (int i = 0; i < l->n_units; i++)
        members += du_in_group(&l->units[i], s, group);
    if (o->cmd) {
        int goal = -1;
        if (o->cmd >= DU_CMD_MOVE0 && o->cmd < DU_H1)
            goal = l->map->region_cell[o->cmd - DU_CMD_MOVE0];
        if (!members || o->cmd < 0 || o->cmd >= DU_H1 || (o->cmd >= DU_CMD_MOVE0 && goal < 0))
            discarded++;
        else
            for (int i = 0; i < l->n_units; i++) {
                du_unit *u = &l->units[i];
                if (!du_in_group(u, s, group))
                    continue;
                u->target = -1;
                if (o->cmd == DU_CMD_HOLD) {
                    u->order = DU_HOLD;
                    u->dest = -1;
                    u->path_len = u->path_pos = 0;
                } else {
                    u->order = o->cmd == DU_CMD_RETREAT ? DU_RETREAT : DU_MOVE;
                    u->dest = o->cmd == DU_CMD_RETREAT ? l->map->base_cell[s] : goal;
                    if (o->cmd == DU_CMD_RETREAT)
                        u->focus = -1;
                    du_set_path(l, c, u, u->dest);
                }
            }
    }
    if (o->focus >= 0) {
        int t = du_find(l, o->focus);
        if (!members || t < 0 || l->units[t].owner == s || !du_visible(l, c, s, &l->units[t]))
            discarded++;
        else
            for (int i = 0; i < l->n_units; i++)
                if (du_in_group(&l->units[i], s, group))
                    l->units[i].focus = o->focus;
    }
    return discarded;
}

/* ---- the turn ---- */

/* Phase A for one unit: drop a dead or lost focus or target, take the focus, or look
 * for the nearest enemy. Reads positions only. */
static void du_decide(du_lane *l, du_cache *c, du_unit *u)
{
    const struct du_stats *st = &du_stats[u->type];
    if (u->focus >= 0) {
        int f = du_find(l, u->focus);
        if (f < 0 || !du_visible(l, c, u->owner, &l->units[f]))
            u->focus = -1;
    }
    if (u->target >= 0) {
        int t = du_find(l, u->target);
        if (t < 0)
            u->target = -1;
        else if (u->owner != DU_NEUTRAL && !du_visible(l, c, u->owner, &l->units[t]))
            u->target = -1;
        else if ((u->order == DU_HOLD || u->type == DU_BASE) &&
                 du_d2(u, &l->units[t]) > (int64_t)st->range * st->range)
            u->target = -1;
    }
    if (u->owner == DU_NEUTRAL && u->order != DU_RETREAT) {
        int64_t hx = du_center(u->home % DU_MAP_MAX) - u->x, hy = du_center(u->home / DU_MAP_MAX) - u->y;
        if (hx * hx + hy * hy > (int64_t)DU_LEASH * DU_LEASH) {
            /* too far from camp: walk back and heal there */
            u->order = DU_RETREAT;
            u->target = u->last_hit_by = -1;
            u->dest = u->home;
            du_set_path(l, c, u, u->home);
            return;
        }
    }
    if (u->focus >= 0) {
        u->target = u->focus;
        return;
    }
    if (u->target >= 0 || u->order == DU_RETREAT)
        return;
    if (u->owner == DU_NEUTRAL && u->last_hit_by >= 0 && du_find(l, u->last_hit_by) >= 0) {
        u->target = u->last_hit_by;
        return;
    }
    if (((l->turn + u->id) & 3) != 0)
        return; /* look around every fourth turn */
    int32_t r = (u->order == DU_HOLD || u->type == DU_BASE) ? st->range
                : u->owner == DU_NEUTRAL                     ? DU_AGGRO
                                                             : st->sight * DU_FP;
    int t = du_nearest_enemy(l, c, u, r);
    if (t >= 0)
        u->target = l->units[t].id;
}

/* Moves u up to its speed toward point (px, py); returns 1 when it got there. */
static int du_move_to(du_unit *u, int32_t px, int32_t py)
{
    int32_t dx = px - u->x, dy = py - u->y, sp = du_stats[u->type].speed;
    int32_t d = du_isqrt((int64_t)dx * dx + (int64_t)dy * dy);
    if (d <= sp) {
        u->x = px;
        u->y = py;
        return 1;
    }
    u->x += (int32_t)((int64_t)dx * sp / d);
    u->y += (int32_t)((int64_t)dy * sp / d);
    return 0;
}

/* Follows u's path one turn; returns 1 when the path is done. */
static int du_follow(du_unit *u)
{
    if (u->path_pos >= u->path_len)
        return 1;
    int c = u->path[u->path_pos];
    if (du_move_to(u, du_center(c % DU_MAP_MAX), du_center(c / DU_MAP_MAX)))
        u->path_pos++;
    return 0;
}

/* Phase B for one unit. */
static void du_act(du_lane *l, du_cache *c, du_unit *u)
{
    const struct du_stats *st = &du_stats[u->type];
    if (u->cooldown > 0)
        u->cooldown--;
    if (u->target >= 0) {
        int ti = du_find(l, u->target);
        du_unit *t = &l->units[ti];
        if (du_d2(u, t) <= (int64_t)st->range * st->range) {
            if (u->cooldown == 0) {
                int32_t dmg = st->dmg * du_counter[u->type][t->type] / 100 + (int32_t)(du_rng_next(&l->rng) % 3);
                t->pending_dmg += dmg;
                t->last_hit_by = u->id;
                u->cooldown = st->cooldown;
                if (u->owner < 2 && t->owner == 1 - u->owner) {
                    l->side[u->owner].dmg_dealt += dmg;
                    l->side[t->owner].dmg_taken += dmg;
                }
            }
            return;
        }
        if (st->speed == 0 || u->order == DU_HOLD)
            return;
        int tc = du_cell_of(t, l->map);
        if (tc == du_cell_of(u, l->map)) {
            du_move_to(u, t->x, t->y);
            return;
        }
        if (u->repath <= 0 || u->path_pos >= u->path_len) {
            du_set_path(l, c, u, tc);
            u->repath = DU_REPATH;
        }
        u->repath--;
        du_follow(u);
        return;
    }
    if (u->order != DU_MOVE && u->order != DU_RETREAT)
        return;
    if (du_follow(u)) {
        if (du_cell_of(u, l->map) == u->dest) {
            if (u->owner == DU_NEUTRAL)
                u->hp = st->hp; /* back at camp */
            u->order = DU_IDLE;
            u->dest = -1;
        } else
            du_set_path(l, c, u, u->dest); /* the kept part of a long path ran out */
        u->repath = 0;
    }
}

static void du_end_game(du_lane *l, int winner, int reason)
{
    l->winner = winner;
    l->end_reason = reason;
}

void du_turn(du_lane *l, du_cache *c)
{
    for (int i = 0; i < l->n_units; i++)
        du_decide(l, c, &l->units[i]);
    /* positions change from here on */
    c->epoch++;
    for (int i = 0; i < l->n_units; i++)
        du_act(l, c, &l->units[i]);
    int base_dead[2] = {0, 0}, n = 0;
    for (int i = 0; i < l->n_units; i++) {
        du_unit *u = &l->units[i];
        u->hp -= u->pending_dmg;
        u->pending_dmg = 0;
        if (u->hp > 0) {
            l->units[n++] = *u;
            continue;
        }
        int k = u->last_hit_by >= 0 ? du_find(l, u->last_hit_by) : -1;
        int killer = k >= 0 ? l->units[k].owner : -1;
        if (u->owner == DU_NEUTRAL) {
            if (killer == 0 || killer == 1)
                l->side[killer].gold += du_stats[u->type].bounty;
        } else if (u->type == DU_BASE)
            base_dead[u->owner] = 1;
        else {
            l->side[u->owner].supply -= du_stats[u->type].supply;
            l->side[u->owner].loss_value += du_stats[u->type].cost;
            if (killer == 1 - u->owner)
                l->side[killer].kill_value += du_stats[u->type].cost;
        }
    }
    l->n_units = n;
    for (int s = 0; s < 2; s++) {
        du_side *sd = &l->side[s];
        sd->gold += 1; /* income: 40 gold a second of game time */
        if (sd->train_left > 0 && --sd->train_left == 0) {
            const du_map *m = l->map;
            int bc = m->base_cell[s];
            /* appear on the base's side that faces the middle */
            int32_t off = (bc % DU_MAP_MAX) < m->w / 2 ? DU_FP / 2 : -DU_FP / 2;
            if (!du_spawn(l, sd->train_type, s, bc, off, 0))
                sd->train_left = 1; /* no room: try again next turn */
            else
                sd->train_type = 0;
        }
    }
    c->epoch++;
    l->turn++;
    if (base_dead[0] || base_dead[1])
        du_end_game(l, base_dead[0] && base_dead[1] ? 2 : base_dead[0] ? 1 : 0, 1);
    else if (l->turn >= l->setup.time_limit_turns) {
        /* tie-break: the healthier base, then the greater kill value, else a draw */
        int hp[2] = {0, 0};
        for (int i = 0; i < l->n_units; i++)
            if (l->units[i].type == DU_BASE)
                hp[l->units[i].owner] = l->units[i].hp;
        int w = 2;
        if (hp[0] != hp[1])
            w = hp[0] > hp[1] ? 0 : 1;
        else if (l->side[0].kill_value != l->side[1].kill_value)
            w = l->side[0].kill_value > l->side[1].kill_value ? 0 : 1;
        du_end_game(l, w, 2);
    }
}

void du_step(du_lane *l, du_cache *c)
{
    for (int t = 0; t < l->setup.step_turns && l->winner < 0; t++)
        du_turn(l, c);
    du_step_close(l, c);
}

void du_step_close(du_lane *l, du_cache *c)
{
    if ((c->cuts & DU_CUT_BREAK) && l->step == c->break_step) {
        /* test only: a divergence the parity tool must find, at this step, in "hp" */
        for (int i = 0; i < l->n_units; i++)
            if (l->units[i].owner == 0) {
                l->units[i].hp -= 1;
                if (l->units[i].type != DU_BASE)
                    break;
            }
        c->epoch++;
    }
    l->step++;
}

static uint64_t du_mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x100000001b3ULL;
    h ^= h >> 29;
    return h;
}

uint64_t du_hash(const du_lane *l)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = du_mix(h, (uint64_t)l->setup.map);
    h = du_mix(h, l->setup.seed);
    h = du_mix(h, l->rng);
    h = du_mix(h, (uint64_t)(uint32_t)l->turn);
    h = du_mix(h, (uint64_t)(uint32_t)l->next_id);
    h = du_mix(h, (uint64_t)(uint32_t)l->winner);
    for (int s = 0; s < 2; s++) {
        const du_side *sd = &l->side[s];
        const int32_t f[] = {sd->gold, sd->train_type, sd->train_left, sd->supply,
                             sd->dmg_dealt, sd->dmg_taken, sd->kill_value, sd->loss_value};
        for (unsigned k = 0; k < sizeof(f) / sizeof(f[0]); k++)
            h = du_mix(h, (uint64_t)(uint32_t)f[k]);
    }
    for (int i = 0; i < l->n_units; i++) {
        const du_unit *u = &l->units[i];
        const int32_t f[] = {u->id, u->type, u->owner, u->order, u->x, u->y, u->hp, u->cooldown, u->target,
                             u->focus, u->dest, u->home, u->last_hit_by, u->repath, u->path_len, u->path_pos};
        for (unsigned k = 0; k < sizeof(f) / sizeof(f[0]); k++)
            h = du_mix(h, (uint64_t)(uint32_t)f[k]);
        for (int p = u->path_pos; p < u->path_len; p++)
            h = du_mix(h, (uint64_t)(uint16_t)u->path[p]);
    }
    return h;
}
