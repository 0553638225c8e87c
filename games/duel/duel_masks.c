/* duel_masks.c: an agent side's entity list and masks, and how its answer becomes
 * orders: what agent rows (duel_obs.c) and the random controller (duel_ai.c) share.
 * No shim here: the standalone links it through duel_ai.c. */
#include <string.h>

#include "duel.h"

static void du_view_add(du_view *v, int32_t id)
{
    if (v->n_ent < DU_VIEW_MAX)
        v->ent_id[v->n_ent++] = id;
}

/* Builds the entity list: own base, own army, visible enemies, visible neutrals. */
static void du_view_build(const du_lane *l, du_cache *c, int s, du_view *v)
{
    v->n_ent = 0;
    int base = -1;
    for (int i = 0; i < l->n_units; i++)
        if (l->units[i].owner == s && l->units[i].type == DU_BASE)
            base = l->units[i].id;
    du_view_add(v, base); /* -1: the base is gone, entity 0 is a zeroed stand-in */
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < l->n_units; i++) {
            const du_unit *u = &l->units[i];
            int want = pass == 0 ? (u->owner == s && u->type != DU_BASE)
                       : pass == 1 ? (u->owner == 1 - s)
                                   : (u->owner == DU_NEUTRAL);
            if (want && (pass == 0 || du_visible(l, c, s, u)))
                du_view_add(v, u->id);
        }
}

void du_masks(const du_lane *l, du_cache *c, int s, uint8_t mask[4][192], du_view *v)
{
    du_view_build(l, c, s, v);
    memset(mask, 0, 4 * 192);
    for (int h = 0; h < 4; h++)
        mask[h][0] = 1;
    for (int t = DU_MELEE; t <= DU_HEAVY; t++)
        mask[0][t] = (uint8_t)du_can_train(l, s, t);
    int army = du_army_count(l, s, 0);
    if (!army)
        return; /* no unit to command or to focus */
    mask[1][DU_CMD_HOLD] = mask[1][DU_CMD_RETREAT] = 1;
    for (int k = 0; k < DU_N_REGIONS; k++)
        mask[1][DU_CMD_MOVE0 + k] = l->map->region_cell[k] >= 0;
    for (int t = DU_MELEE; t <= DU_HEAVY; t++)
        mask[2][t] = du_army_count(l, s, t) > 0;
    for (int e = 1; e < v->n_ent; e++) {
        int i = du_find(l, v->ent_id[e]);
        mask[3][e] = i >= 0 && l->units[i].owner != s; /* in the list, so visible */
    }
}

int du_decode(const du_lane *l, du_cache *c, int s, const int32_t action[4], const du_view *v, du_orders *o)
{
    (void)c;
    int discarded = 0;
    o->train = action[0] >= 0 && action[0] < DU_H0 ? action[0] : (discarded++, 0);
    o->cmd = action[1] >= 0 && action[1] < DU_H1 ? action[1] : (discarded++, 0);
    o->group = action[2] >= 0 && action[2] < DU_H2 ? action[2] : (discarded++, 0);
    o->focus = -1;
    if (action[3] > 0) {
        if (action[3] < v->n_ent && v->ent_id[action[3]] >= 0) {
            int i = du_find(l, v->ent_id[action[3]]);
            if (i >= 0 && l->units[i].owner != s)
                o->focus = v->ent_id[action[3]];
            else
                discarded++;
        } else
            discarded++;
    } else if (action[3] < 0)
        discarded++;
    return discarded;
}

void du_random_action(const uint8_t mask[4][192], uint64_t *rng, int32_t action[4])
{
    for (int h = 0; h < 4; h++) {
        int n = 0;
        for (int k = 0; k < 192; k++)
            n += mask[h][k];
        int pick = n ? (int)(du_rng_next(rng) % (uint64_t)n) : 0;
        action[h] = 0;
        for (int k = 0; k < 192; k++)
            if (mask[h][k] && pick-- == 0) {
                action[h] = k;
                break;
            }
    }
}
