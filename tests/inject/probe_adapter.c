/* probe_adapter.c: the adapter of probe_game.exe, for the injection tests. Rows as the
 * null game fills them in check mode: every answer is recomputed (w3s_check_answer),
 * so a lost, stale or misrouted answer ends the game. Each answer's head 0 goes to the
 * game through its own order function.
 *
 * W3P_EPISODE_STEPS=N  steps per episode (default 50)
 * W3P_DLLMAIN=hang|false  DllMain hangs, or returns FALSE (LoadLibrary fails)
 * Built with -DPROBE_NO_OBSERVE it lacks w3a_observe (the launcher refuses it).
 * W3P_FAULT=where      misbehave, for the fault tests: attach-export (look up an export
 *                      the game does not have), attach-address (a recipe address that is
 *                      not there), crash-observe, crash-act (an access violation), hang-act
 *                      (loop forever), fail-act (host->fail), from step W3P_FAULT_STEP (3)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "w3h.h"

#include <windows.h>

BOOL WINAPI DllMain(HINSTANCE self, DWORD reason, LPVOID reserved)
{
    (void)self, (void)reserved;
    const char *m = getenv("W3P_DLLMAIN");
    if (reason == DLL_PROCESS_ATTACH && m && !strcmp(m, "hang"))
        for (;;)
            Sleep(1000);
    return !(reason == DLL_PROCESS_ATTACH && m && !strcmp(m, "false"));
}

typedef struct probe_state_t {
    volatile long long passes, frames, orders, last_order, background;
} probe_state_t;

static const w3h_host *H;
static probe_state_t *state;
static void (*order)(long long);
static long episode_steps = 50, fault_step = 3;
static const char *fault = "";
static uint64_t episode, steps;
static uint32_t step;

static long env_long(const char *k, long d)
{
    const char *s = getenv(k);
    return s && *s ? atol(s) : d;
}

W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen)
{
    H = host;
    episode_steps = env_long("W3P_EPISODE_STEPS", 50);
    fault_step = env_long("W3P_FAULT_STEP", 3);
    fault = getenv("W3P_FAULT") ? getenv("W3P_FAULT") : "";
    state = host->find_export(NULL, "probe_state");
    order = (void (*)(long long))host->find_export(NULL, "probe_order");
    const char *need = !strcmp(fault, "attach-export") ? "probe_missing" : NULL;
    if (!state || !order || (need && !host->find_export(NULL, need))) {
        snprintf(err, errlen, "the game exports no %s", !state ? "probe_state" : !order ? "probe_order" : need);
        return 1;
    }
    if (!strcmp(fault, "attach-address") && !host->find_address("probe_missing")) {
        snprintf(err, errlen, "address probe_missing (W3H_ADDR_probe_missing) is not in the game");
        return 1;
    }
    if (host->find_address("probe_state") && host->find_address("probe_state") != (void *)state) {
        snprintf(err, errlen, "address probe_state resolves to %p, the export is at %p",
                 host->find_address("probe_state"), (void *)state);
        return 1;
    }
    return 0;
}

static volatile int *volatile bad; /* a null pointer the compiler cannot see through */

static int faulty(const char *where) { return !strcmp(fault, where) && steps >= (uint64_t)fault_step; }

#ifndef PROBE_NO_OBSERVE
W3A_EXPORT void w3a_observe(w3s_row *r, uint32_t i)
{
    if (faulty("crash-observe"))
        *bad = 1;
    r->lane = i;
    r->side = 0;
    r->episode = episode;
    r->step = step;
    r->flags = (step == 0 ? W3S_FLAG_FIRST : 0) | (step + 1 >= (uint32_t)episode_steps ? W3S_FLAG_DONE : 0);
    r->reward = (r->flags & W3S_FLAG_DONE) ? 1.0f : 0.0f;
    const w3s_layout *L = H->layout;
    w3s_obs_clear(L, r);
    r->n_ent = L->e_max ? 1 : 0;
    r->discarded = 0;
    r->state_hash = (uint64_t)state->frames;
    float *glob = w3s_glob(L, r);
    for (uint32_t g = 0; g < L->g_glob; g++)
        glob[g] = (float)((step + g) % 5) * 0.25f;
    if (L->e_max)
        w3s_ent_type(L, r)[0] = 1;
    for (uint32_t h = 0; h < L->n_heads; h++) {
        uint32_t n = h == 3 ? 1 : 16;
        memset(w3s_mask(L, r, h), 1, n < L->head_max ? n : L->head_max);
    }
}

#endif

W3A_EXPORT void w3a_act(const w3s_row *r, uint32_t i)
{
    (void)i;
    if (faulty("crash-act"))
        *bad = 1;
    if (faulty("hang-act"))
        for (;;)
            ;
    if (faulty("fail-act"))
        H->fail("fault injected at step %llu", (unsigned long long)steps);
    if (getenv("W3P_CHECK") && atoi(getenv("W3P_CHECK")))
        for (uint32_t h = 0; h < H->layout->n_heads; h++)
            if (r->action[h] != w3s_check_answer(r->obs_seq, r->lane, r->side, h))
                H->fail("row %u head %u: answer %d, expected %d (obs_seq %llu)", i, h, r->action[h],
                        w3s_check_answer(r->obs_seq, r->lane, r->side, h), (unsigned long long)r->obs_seq);
    order(r->action[0]);
    steps++;
    step = (r->flags & W3S_FLAG_DONE) ? step : step + 1;
}

W3A_EXPORT void w3a_episode_end(uint32_t i)
{
    (void)i;
    episode++;
    step = 0;
}
