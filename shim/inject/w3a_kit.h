/* w3a_kit.h: small helpers most adapters write by hand (docs/hooking.md "The adapter API"),
 * header-only so that an adapter stays one DLL with no other link. Optional: an adapter
 * needs only w3h.h. */
#ifndef W3A_KIT_H
#define W3A_KIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

#include "w3h.h"

/* Wall time in 100 ns units that no hook covers: KUSER_SHARED_DATA's InterruptTime (a
 * KSYSTEM_TIME at 0x7ffe0008), a read of memory, not a call, so the virtual clock does not
 * move it. High1 and High2 agree when the read was not torn. For an adapter's own log of
 * game time against wall time. */
static inline uint64_t w3a_kit_wall_100ns(void)
{
    volatile ULONG *k = (volatile ULONG *)0x7ffe0008;
    for (;;) {
        ULONG hi = k[1], lo = k[0];
        if (hi == k[2])
            return ((uint64_t)hi << 32) | lo;
    }
}

/* FNV-1a over a copy of the game's state: a row's state_hash, the same for the same state. */
static inline uint64_t w3a_kit_hash(const void *state, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const unsigned char *p = (const unsigned char *)state;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* 0 when the recipe's step_ms is the game's own period (a frame, a tick), so that one step is
 * one of them; else -1 with the fix in err. `game` names the adapter, `period` the unit. */
static inline int w3a_kit_check_step_ms(const w3h_host *host, unsigned want_ms, const char *game,
                                        const char *period, char *err, size_t errlen)
{
    if (host->step_ms == want_ms)
        return 0;
    snprintf(err, errlen, "%s adapter: step_ms = %u; %s's %s is %u ms: set step_ms = %u so that a step is one %s",
             game, host->step_ms, game, period, want_ms, want_ms, period);
    return -1;
}

/* 0 when the host is ABI 4 or later and the run's rows have room for what this adapter
 * writes (at least e_max entities of f_ent features, g_glob globals, n_heads heads of
 * head_max choices), else -1 with both shapes and the fix in err. An adapter then clears
 * each row (w3s_obs_clear) and fills what it has; a larger row stays zero past it. */
static inline int w3a_kit_check_room(const w3h_host *host, const char *game, uint32_t e_max, uint32_t f_ent,
                                     uint32_t g_glob, uint32_t n_heads, uint32_t head_max, char *err, size_t errlen)
{
    if (host->abi < 4) {
        snprintf(err, errlen, "%s adapter: the hook's ABI is %u; rows shaped by the spec need ABI 4 (rebuild w3hook.dll)",
                 game, host->abi);
        return -1;
    }
    const w3s_layout *L = host->layout;
    if (L->e_max >= e_max && (!e_max || L->f_ent >= f_ent) && L->g_glob >= g_glob && L->n_heads >= n_heads &&
        L->head_max >= head_max)
        return 0;
    snprintf(err, errlen, "%s adapter: the run's rows are %u entities x %u features, %u globals, %u heads of up to %u; "
             "this adapter writes %u x %u, %u globals, %u head(s) of %u: the recipe's [spec] (entities, features, "
             "globals, head_sizes) must be the game's spec", game, L->e_max, L->f_ent, L->g_glob, L->n_heads,
             L->head_max, e_max, f_ent, g_glob, n_heads, head_max);
    return -1;
}

/* Masks every head of row r past the first n_used to its choice 0 alone: the heads a
 * larger row has that the adapter does not use. */
static inline void w3a_kit_unused_heads(const w3s_layout *L, w3s_row *r, uint32_t n_used)
{
    for (uint32_t h = n_used; h < L->n_heads; h++)
        w3s_mask(L, r, h)[0] = 1;
}

/* The number in the environment variable `name` (the group's env), or dflt when it is unset
 * or empty: 0, or -1 when it is set to something that is not a number (the adapter says
 * which values it takes). */
static inline int w3a_kit_env_number(const char *name, double dflt, double *out)
{
    const char *s = getenv(name);
    char *end = NULL;
    *out = s && *s ? strtod(s, &end) : dflt;
    return s && *s && (end == s || *end) ? -1 : 0;
}

/* The per-lane trace file `<folder of env var>\<game>-lane<row0>.trace`, opened for append,
 * when that environment variable (the group's env) names a folder; *out stays NULL when it is
 * unset. 0, or -1 with the path in err when the file cannot be opened. */
static inline int w3a_kit_open_trace(const w3h_host *host, const char *env, const char *game, FILE **out,
                                     char *err, size_t errlen)
{
    *out = NULL;
    const char *dir = getenv(env);
    if (!dir || !*dir)
        return 0;
    char path[MAX_PATH];
    snprintf(path, sizeof(path), "%s\\%s-lane%u.trace", dir, game, host->row0);
    if (!(*out = fopen(path, "a"))) {
        snprintf(err, errlen, "%s adapter: %s: cannot open %s", game, env, path);
        return -1;
    }
    return 0;
}

#endif
