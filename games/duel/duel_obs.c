/* duel_obs.c: what an agent side sees, as a w3s row (the entity list, the masks and
 * the answer back to orders are in duel_masks.c, which has no shim in it).
 *
 * Entity 0 is always the side's own base (a zeroed base entity once it is gone), and
 * pointing head 3 at it means "no new focus": the base is never a legal focus target,
 * so the choice is free. Then the side's army by id, then the enemy units it can see,
 * then the neutral units it can see. Masks allow exactly what du_apply_orders accepts
 * (stricter in one place: an empty group is masked even when nothing would use it). */
#include <string.h>

#include "duel.h"
#include "w3s_table.h"

/* the row holds as many entities as a view */
typedef char du_check_view_max[(DU_VIEW_MAX == W3S_E_MAX) ? 1 : -1];

void du_observe(const du_lane *l, du_cache *c, int s, struct w3s_row *r, du_view *v)
{
    w3s_obs_default *row = w3s_default_obs(r); /* the duel's rows have the default shape */
    du_masks(l, c, s, row->mask, v);
    const du_map *m = l->map;
    const du_side *sd = &l->side[s];
    float *g = row->glob;
    memset(g, 0, sizeof(row->glob));
    int own_base = du_find(l, v->ent_id[0]);
    int cnt[2][DU_N_TYPES] = {{0}}, n_neutral = 0, focus_ids[DU_MAX_UNITS], n_focus = 0;
    float enemy_value = 0, enemy_base = 0, enemy_base_seen = 0;
    for (int e = 1; e < v->n_ent; e++) {
        const du_unit *u = &l->units[du_find(l, v->ent_id[e])];
        if (u->owner == DU_NEUTRAL)
            n_neutral++;
        else
            cnt[u->owner == s ? 0 : 1][u->type]++;
        if (u->owner == 1 - s && u->type == DU_BASE) {
            enemy_base = (float)u->hp / (float)du_stats[DU_BASE].hp;
            enemy_base_seen = 1;
        } else if (u->owner == 1 - s)
            enemy_value += (float)du_stats[u->type].cost * (float)u->hp / (float)du_stats[u->type].hp;
        if (u->owner == s && u->focus >= 0 && n_focus < DU_MAX_UNITS)
            focus_ids[n_focus++] = u->focus;
    }
    g[0] = (float)sd->gold / 500.0f;
    g[1] = (float)sd->supply / DU_SUPPLY_CAP;
    g[2] = (float)l->turn / (float)l->setup.time_limit_turns;
    g[3] = own_base >= 0 ? (float)l->units[own_base].hp / (float)du_stats[DU_BASE].hp : 0.0f;
    g[4] = enemy_base;
    g[5] = enemy_base_seen;
    g[6] = (float)sd->train_type / 3.0f;
    g[7] = (float)sd->train_left / 140.0f;
    for (int t = DU_MELEE; t <= DU_HEAVY; t++) {
        g[8 + t - DU_MELEE] = (float)cnt[0][t] / 10.0f;
        g[11 + t - DU_MELEE] = (float)cnt[1][t] / 10.0f;
    }
    g[14] = (float)n_neutral / 10.0f;
    g[15] = (float)du_army_value(l, s) / 1000.0f;
    g[16] = enemy_value / 1000.0f;
    g[17 + l->setup.map] = 1.0f;
    g[20] = (float)s;
    g[21] = (float)l->setup.step_turns / 20.0f;
    g[22] = (float)sd->dmg_dealt / 1000.0f;
    g[23] = (float)sd->dmg_taken / 1000.0f;
    g[24] = (float)sd->kill_value / 1000.0f;
    g[25] = (float)sd->loss_value / 1000.0f;
    for (int t = DU_MELEE; t <= DU_HEAVY; t++)
        g[26 + t - DU_MELEE] = row->mask[0][t];
    g[29] = (float)v->n_ent / (float)W3S_E_MAX;
    g[30] = (float)(m->base_cell[s] % DU_MAP_MAX) / (float)m->w;
    g[31] = (float)(m->base_cell[s] / DU_MAP_MAX) / (float)m->h;

    const float fw = (float)(m->w * DU_FP), fh = (float)(m->h * DU_FP);
    int32_t bx[2], by[2];
    for (int k = 0; k < 2; k++) {
        bx[k] = (m->base_cell[k] % DU_MAP_MAX) * DU_FP + DU_FP / 2;
        by[k] = (m->base_cell[k] / DU_MAP_MAX) * DU_FP + DU_FP / 2;
    }
    r->n_ent = (uint32_t)v->n_ent;
    for (int e = 0; e < v->n_ent; e++) {
        float *f = row->ent[e];
        memset(f, 0, sizeof(row->ent[e]));
        int i = du_find(l, v->ent_id[e]);
        if (i < 0) {
            row->ent_type[e] = DU_BASE; /* the lost base's stand-in */
            f[0] = 1.0f;
            continue;
        }
        const du_unit *u = &l->units[i];
        row->ent_type[e] = (int16_t)u->type;
        f[u->owner == s ? 0 : u->owner == DU_NEUTRAL ? 2 : 1] = 1.0f;
        f[3] = (float)u->x / fw;
        f[4] = (float)u->y / fh;
        f[5] = (float)u->hp / (float)du_stats[u->type].hp;
        f[6] = (float)u->hp / 1000.0f;
        f[7] = (float)u->cooldown / 40.0f;
        f[8 + (u->order & 3)] = 1.0f; /* idle, move, hold, retreat */
        f[12] = u->target >= 0;
        for (int k = 0; k < n_focus; k++)
            if (focus_ids[k] == u->id) {
                f[13] = 1.0f;
                break;
            }
        float dx0 = (float)(u->x - bx[s]), dy0 = (float)(u->y - by[s]);
        float dx1 = (float)(u->x - bx[1 - s]), dy1 = (float)(u->y - by[1 - s]);
        f[14] = (dx0 < 0 ? -dx0 : dx0) / fw + (dy0 < 0 ? -dy0 : dy0) / fh;
        f[15] = (dx1 < 0 ? -dx1 : dx1) / fw + (dy1 < 0 ? -dy1 : dy1) / fh;
    }
    /* the rest of the table's rows stay zero: the gather pads with zeros anyway, but a
     * stale entity past n_ent must never look real */
    if (v->n_ent < W3S_E_MAX) {
        memset(row->ent[v->n_ent], 0, sizeof(row->ent[0]) * (size_t)(W3S_E_MAX - v->n_ent));
        memset(row->ent_type + v->n_ent, 0, sizeof(row->ent_type[0]) * (size_t)(W3S_E_MAX - v->n_ent));
    }
}
