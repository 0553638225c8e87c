/* duel_setup.c: a game's setup and its command turn (duel_setup.h). No shim here:
 * the standalone links it. */
#include "duel_setup.h"

#include <stdio.h>
#include <string.h>

int du_parse_sides(const char *s, du_ctl ctl[2], char *err, size_t errlen)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", s);
    char *comma = strchr(buf, ',');
    if (!comma) {
        snprintf(err, errlen, "duel: sides '%s' must be two controllers, e.g. agent,ai:easy", s);
        return -1;
    }
    *comma = 0;
    if (du_ctl_parse(buf, &ctl[0]) || du_ctl_parse(comma + 1, &ctl[1])) {
        snprintf(err, errlen, "duel: sides '%s': each must be agent, ai:easy, ai:normal, ai:hard, random, script or idle", s);
        return -1;
    }
    return 0;
}

uint64_t du_game_seed(long base, uint64_t lane, uint64_t episode)
{
    uint64_t x = (uint64_t)base ^ (lane * 0xD1B54A32D192ED03ULL) ^ (episode * 0x8CB92BA72F3D8DD7ULL);
    return du_rng_next(&x);
}

void du_make_setup(const du_cfg *c, uint64_t seed, uint64_t episode, du_setup *s)
{
    s->map = c->map >= 0 ? c->map : (int32_t)(episode % DU_N_MAPS);
    s->seed = seed;
    s->step_turns = (int32_t)c->step_turns;
    s->time_limit_turns = (int32_t)c->time_limit;
}

uint32_t du_ctl_code(const du_ctl *c) { return (uint32_t)(c->kind * 16 + c->level); }

uint64_t du_lane_start(du_lane *l, du_cache *cache, du_ctl ctl[2], const du_cfg *c, uint64_t global_lane,
                       uint64_t episode, du_setup *setup)
{
    uint64_t seed = du_game_seed(c->seed, global_lane, episode);
    du_make_setup(c, seed, episode, setup);
    du_lane_reset(l, cache, setup);
    for (int s = 0; s < 2; s++) {
        ctl[s].kind = c->ctl[s].kind;
        ctl[s].level = c->ctl[s].level;
        du_ctl_reset(&ctl[s], seed + (uint64_t)s);
    }
    return seed;
}

void du_command(du_lane *l, du_cache *cache, du_ctl ctl[2], du_orders o[2], int32_t discarded[2])
{
    for (int s = 0; s < 2; s++)
        if (ctl[s].kind != DU_CTL_AGENT)
            du_ctl_orders(&ctl[s], l, cache, s, &o[s]);
    for (int s = 0; s < 2; s++)
        discarded[s] += du_apply_orders(l, cache, s, &o[s]);
}
