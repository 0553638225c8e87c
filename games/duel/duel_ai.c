/* duel_ai.c: the sides that are not agents. Every controller gives orders of the same
 * form as an agent's answer (du_orders), so a replay records them all alike.
 *
 * The built-in AI sees what its side sees (enemy units through du_visible) and knows
 * the map (bases, camps). Every level trains every step from its mix (spending its
 * income); levels differ in what they think about, not in cheats:
 *   easy    commands its army every 2nd step; a 50/30/20 melee/ranged/heavy mix;
 *           attacks with 10 units, sends the rest home to gather the next wave when
 *           fewer than 4 are left; never retreats from a fight; no base defence.
 *   normal  commands every step; a 40/40/20 mix; attacks with 14 units; retreats when
 *           its army near the fight is worth less than 60% of the enemy's there;
 *           pulls the army home when enemies come near its base.
 *   hard    as normal, plus: 65% of its units counter the enemy type it has seen
 *           most of; attacks with 20 units, regroups under 6; retreats at 70%;
 *           its archers focus fire on the weakest enemy within 5 cells of the army.
 * Taking camps for their bounty (the camps flag) measured worse for every level, so no
 * level does it by default: camps are there for a learning agent to find.
 * random picks a legal choice per head uniformly; script trains melee and attack-moves
 * to the enemy base; idle does nothing. */
#include <stdio.h>
#include <string.h>

#include "duel.h"

typedef struct du_ai_level {
    int think_every, attack_at, retreat_pct, focus, counter, camps, defend, regroup, early;
    int mix[3]; /* percent melee, ranged, heavy */
} du_ai_level;

static const du_ai_level du_levels[3] = {
    /* think attack retreat% focus counter camps defend regroup early mix */
    {2, 10, 0, 0, 0, 0, 0, 4, 0, {50, 30, 20}},
    {1, 14, 60, 0, 0, 0, 1, 4, 0, {40, 40, 20}},
    {1, 20, 70, 1, 1, 0, 1, 6, 0, {35, 40, 25}},
};
static const char *du_level_names[3] = {"easy", "normal", "hard"};

int du_ctl_parse(const char *s, du_ctl *out)
{
    memset(out, 0, sizeof(*out));
    if (!strcmp(s, "agent"))
        out->kind = DU_CTL_AGENT;
    else if (!strcmp(s, "random"))
        out->kind = DU_CTL_RANDOM;
    else if (!strcmp(s, "script"))
        out->kind = DU_CTL_SCRIPT;
    else if (!strcmp(s, "idle"))
        out->kind = DU_CTL_IDLE;
    else if (!strncmp(s, "ai:", 3)) {
        out->kind = DU_CTL_AI;
        out->level = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(s + 3, du_level_names[i]))
                out->level = i;
        if (out->level < 0)
            return -1;
    } else
        return -1;
    return 0;
}

const char *du_ctl_name(const du_ctl *c, char *buf, int n)
{
    static const char *kinds[] = {"agent", "ai", "random", "script", "idle"};
    if (c->kind == DU_CTL_AI)
        snprintf(buf, (size_t)n, "ai:%s", du_level_names[c->level]);
    else
        snprintf(buf, (size_t)n, "%s", kinds[c->kind]);
    return buf;
}

void du_ctl_reset(du_ctl *c, uint64_t seed)
{
    c->rng = seed ^ 0xA5A5A5A55A5A5A5AULL;
    c->mode = 0;
    c->mode_steps = 0;
}

static int du_region_of(const du_map *m, int cell)
{
    int x = cell % DU_MAP_MAX, y = cell / DU_MAP_MAX;
    return (y * DU_REGIONS / m->h) * DU_REGIONS + (x * DU_REGIONS / m->w);
}

static int64_t du_cd2(int32_t ax, int32_t ay, int32_t bx, int32_t by)
{
    int64_t dx = ax - bx, dy = ay - by;
    return dx * dx + dy * dy;
}

static void du_ai(du_ctl *c, const du_lane *l, du_cache *cache, int s, du_orders *o)
{
    const du_ai_level *lv = &du_levels[c->level];
    const du_map *m = l->map;
    c->mode_steps++;
    int think = l->step % lv->think_every == 0;
    /* what the side knows */
    int n = 0, seen[DU_N_TYPES] = {0};
    int64_t cx = 0, cy = 0;
    for (int i = 0; i < l->n_units; i++) {
        const du_unit *u = &l->units[i];
        if (u->owner == s && u->type != DU_BASE) {
            n++;
            cx += u->x;
            cy += u->y;
        } else if (u->owner == 1 - s && du_visible(l, cache, s, u))
            seen[u->type]++;
    }
    int32_t bx = (m->base_cell[s] % DU_MAP_MAX) * DU_FP + DU_FP / 2, by = (m->base_cell[s] / DU_MAP_MAX) * DU_FP + DU_FP / 2;
    if (n) {
        cx /= n;
        cy /= n;
    }
    const int64_t near = (int64_t)8 * DU_FP * 8 * DU_FP;
    int own_near = 0, enemy_near = 0, threat = 0, focus = -1, focus_hp = 1 << 30;
    for (int i = 0; i < l->n_units; i++) {
        const du_unit *u = &l->units[i];
        int value = du_stats[u->type].cost * u->hp / du_stats[u->type].hp;
        if (u->owner == s && u->type != DU_BASE && du_cd2(u->x, u->y, (int32_t)cx, (int32_t)cy) <= near)
            own_near += value;
        if (u->owner != 1 - s || u->type == DU_BASE || !du_visible(l, cache, s, u))
            continue;
        if (n && du_cd2(u->x, u->y, (int32_t)cx, (int32_t)cy) <= near) {
            enemy_near += value;
            if (u->hp < focus_hp && du_cd2(u->x, u->y, (int32_t)cx, (int32_t)cy) <= (int64_t)25 * DU_FP * DU_FP) {
                focus_hp = u->hp;
                focus = u->id;
            }
        }
        if (du_cd2(u->x, u->y, bx, by) <= near)
            threat++;
    }
    /* training */
    if (l->side[s].train_left == 0) {
        int t = 0, most = 0;
        if (lv->counter)
            for (int k = DU_MELEE; k <= DU_HEAVY; k++)
                if (seen[k] > most) {
                    most = seen[k];
                    t = k == DU_MELEE ? DU_HEAVY : k == DU_RANGED ? DU_MELEE : DU_RANGED;
                }
        if (!t || du_rng_next(&c->rng) % 100 < 35) {
            int r = (int)(du_rng_next(&c->rng) % 100);
            t = r < lv->mix[0] ? DU_MELEE : r < lv->mix[0] + lv->mix[1] ? DU_RANGED : DU_HEAVY;
        }
        if (du_can_train(l, s, t))
            o->train = t;
    }
    if (!n || !think)
        return;
    int enemy_region = du_region_of(m, m->base_cell[1 - s]);
    int home_region = du_region_of(m, m->base_cell[s]);
    if (lv->defend && threat && c->mode != 1) {
        o->cmd = DU_CMD_MOVE0 + home_region;
        c->mode = 0;
    } else if (c->mode == 0) {
        int strong = lv->early && own_near > 0 && n >= 6 && du_army_value(l, s) > 2 * (enemy_near + 200);
        if (n >= lv->attack_at || strong) {
            c->mode = 1;
            c->mode_steps = 0;
            o->cmd = DU_CMD_MOVE0 + enemy_region;
        } else if (lv->camps && n >= 5 && c->mode_steps % 12 == 0) {
            /* a camp that still has creeps, nearest to home */
            int best = -1;
            int64_t bestd = INT64_MAX;
            for (int k = 0; k < m->n_camps; k++) {
                int cc = m->camp_cell[k], alive = 0;
                for (int i = 0; i < l->n_units; i++)
                    alive += l->units[i].owner == DU_NEUTRAL && l->units[i].home == cc;
                int64_t d = du_cd2(cc % DU_MAP_MAX, cc / DU_MAP_MAX, bx / DU_FP, by / DU_FP);
                if (alive && d < bestd) {
                    bestd = d;
                    best = cc;
                }
            }
            if (best >= 0)
                o->cmd = DU_CMD_MOVE0 + du_region_of(m, best);
        }
    } else if (c->mode == 1) {
        if (n < lv->regroup) {
            /* the wave is spent: gather the next one at home */
            c->mode = 2;
            c->mode_steps = 0;
            o->cmd = DU_CMD_RETREAT;
        } else if (lv->retreat_pct && enemy_near > 0 && own_near * 100 < lv->retreat_pct * enemy_near) {
            c->mode = 2;
            c->mode_steps = 0;
            o->cmd = DU_CMD_RETREAT;
        } else if (c->mode_steps % 8 == 0)
            o->cmd = DU_CMD_MOVE0 + enemy_region; /* bring the new units along */
    } else if (c->mode == 2 && c->mode_steps > 8) {
        c->mode = 0;
        c->mode_steps = 1;
        o->cmd = DU_CMD_HOLD;
    }
    if (lv->focus && focus >= 0 && c->mode != 2 && o->cmd == DU_CMD_KEEP &&
        (lv->focus == 2 || du_army_count(l, s, DU_RANGED) > 0)) {
        /* the archers finish the weakest enemy in reach; the rest fight as they will */
        o->group = lv->focus == 2 ? 0 : DU_RANGED;
        o->focus = focus;
    }
}

void du_ctl_orders(du_ctl *c, const du_lane *l, du_cache *cache, int s, du_orders *o)
{
    o->train = o->cmd = o->group = 0;
    o->focus = -1;
    switch (c->kind) {
    case DU_CTL_AI:
        du_ai(c, l, cache, s, o);
        break;
    case DU_CTL_RANDOM: {
        uint8_t mask[4][192];
        du_view v;
        int32_t a[4];
        du_masks(l, cache, s, mask, &v);
        du_random_action(mask, &c->rng, a);
        du_decode(l, cache, s, a, &v, o);
        break;
    }
    case DU_CTL_SCRIPT:
        if (du_can_train(l, s, DU_MELEE))
            o->train = DU_MELEE;
        if (l->step % 10 == 0 && du_army_count(l, s, 0))
            o->cmd = DU_CMD_MOVE0 + du_region_of(l->map, l->map->base_cell[1 - s]);
        break;
    default:
        break;
    }
}
