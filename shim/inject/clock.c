/* clock.c: the virtual clock (docs/hooking.md, "The virtual clock").
 *
 * Game time advances only at steps, by step_ms each, never with the wall clock: the
 * game's counters and system time read game time (reads.c), and its sleeps and timed
 * waits are measured in it (waits.c). So a real-time game runs as fast as the harness
 * answers, and the same seed and orders give the same game.
 *
 * This file keeps game time, its origins, which thread makes the steps, and the threads
 * parked until a step: a condition variable for the sleeps, and a list of events the
 * timed waits on handles add one each to (one event a thread: no polling, where ~2,550
 * wineserver round trips a second a game were measured in a Warcraft III harness under
 * Wine). It calls no other part but base.c: the step (step.c) moves the clock, fires the
 * timers game time made due (timers.c), then wakes the parked threads.
 */
#include "hook.h"

#include <string.h>

static volatile LONG64 g_ticks; /* 100 ns units of game time since attach */
static uint64_t g_qpc0;         /* the real counter at attach, in 100 ns units */
static uint64_t g_tick0_ms;     /* GetTickCount64 at attach */
static uint64_t g_ft0;          /* system time at attach, FILETIME units (100 ns) */
static volatile LONG g_step_tid;
static volatile LONG g_stepped; /* 0 until the first step */
static SRWLOCK g_park_lock = SRWLOCK_INIT;
static CONDITION_VARIABLE g_park_cv = CONDITION_VARIABLE_INIT;
/* Timed waits on handles park on an event of their thread's own beside their handles,
 * listed here while parked: every step sets each listed event. (One semaphore released
 * once per parked wait, before: a thread whose short waits timed out at every step took
 * a second count when it parked again, and the thread whose count it took missed the
 * step; a pacing thread that missed its step left the game waiting for good.) */
static hk_listener *g_parked; /* under g_park_lock */
static volatile LONG64 g_park_wakes, g_polls; /* what the waits cost: hk_clock_stats */

#define HK_FT_1970 116444736000000000ULL /* FILETIME (100 ns since 1601) of 1970-01-01 */
#define HK_FIXED_UPTIME_MS 3600000ULL    /* the counters' origin under a fixed epoch: an hour */

void hk_clock_init(void)
{
    if (hk_config.epoch_s >= 0) {
        /* A fixed epoch: every origin is a constant, so a game that seeds from time(),
         * GetTickCount or QueryPerformanceCounter reads the same values at the same steps
         * in every run. The counters start as on a machine up for HK_FIXED_UPTIME_MS: not
         * 0, which some games take for "never" or divide by. */
        g_ft0 = (uint64_t)hk_config.epoch_s * 10000000ULL + HK_FT_1970;
        g_tick0_ms = HK_FIXED_UPTIME_MS;
        g_qpc0 = HK_FIXED_UPTIME_MS * HK_TICKS_PER_MS;
        return;
    }
    LARGE_INTEGER c, f;
    QueryPerformanceCounter(&c);
    QueryPerformanceFrequency(&f);
    g_qpc0 = (uint64_t)((long double)c.QuadPart * 1e7L / (long double)f.QuadPart);
    g_tick0_ms = GetTickCount64();
    FILETIME ft;
    GetSystemTimeAsFileTime(&ft);
    g_ft0 = ((uint64_t)ft.dwHighDateTime << 32) | ft.dwLowDateTime;
}

uint64_t hk_clock_now(void)
{
    return (uint64_t)InterlockedCompareExchange64(&g_ticks, 0, 0);
}

int hk_clock_stepped(void) { return g_stepped != 0; }

void hk_clock_advance(uint32_t ms)
{
    AcquireSRWLockExclusive(&g_park_lock);
    g_stepped = 1;
    InterlockedExchangeAdd64(&g_ticks, (LONG64)(ms * HK_TICKS_PER_MS));
    ReleaseSRWLockExclusive(&g_park_lock);
}

void hk_clock_wake(void)
{
    WakeAllConditionVariable(&g_park_cv);
    AcquireSRWLockShared(&g_park_lock);
    for (hk_listener *p = g_parked; p; p = p->next)
        SetEvent(p->wake);
    ReleaseSRWLockShared(&g_park_lock);
}

void hk_clock_listen(hk_listener *p)
{
    AcquireSRWLockExclusive(&g_park_lock);
    p->next = g_parked;
    g_parked = p;
    ReleaseSRWLockExclusive(&g_park_lock);
}

void hk_clock_unlisten(hk_listener *p)
{
    AcquireSRWLockExclusive(&g_park_lock);
    hk_listener **at = &g_parked;
    while (*at && *at != p)
        at = &(*at)->next;
    if (*at)
        *at = p->next;
    ReleaseSRWLockExclusive(&g_park_lock);
}

void hk_clock_park(uint64_t end, DWORD wall_ms)
{
    ULONGLONG wall_end = GetTickCount64() /* the hook's own import: wall time */ + wall_ms;
    AcquireSRWLockExclusive(&g_park_lock);
    while (hk_clock_now() < end) {
        DWORD slice = INFINITE;
        if (!g_stepped) {
            ULONGLONG now = GetTickCount64();
            if (now >= wall_end)
                break;
            slice = (DWORD)(wall_end - now);
        }
        SleepConditionVariableSRW(&g_park_cv, &g_park_lock, slice, 0);
    }
    ReleaseSRWLockExclusive(&g_park_lock);
}

void hk_clock_count_wake(int parked)
{
    InterlockedIncrement64(parked ? &g_park_wakes : &g_polls);
}

void hk_clock_stats(uint64_t *park_wakes, uint64_t *polls)
{
    *park_wakes = (uint64_t)g_park_wakes;
    *polls = (uint64_t)g_polls;
}

void hk_set_step_thread(DWORD tid)
{
    g_step_tid = (LONG)tid;
}

int hk_is_step_thread(void)
{
    return (DWORD)g_step_tid == GetCurrentThreadId();
}

int hk_take_step_thread(void)
{
    LONG me = (LONG)GetCurrentThreadId();
    InterlockedCompareExchange(&g_step_tid, me, 0); /* W3H_STEP_THREAD=first: the first caller */
    return g_step_tid == me;
}

/* The step thread read the clock since hk_clock_take_read last looked: the evidence that
 * a busy PeekMessage loop ran its frame check (msgloop.c). */
static volatile LONG g_step_read;

static uint64_t read_now(void)
{
    if (hk_is_step_thread())
        g_step_read = 1;
    return hk_clock_now();
}

int hk_clock_take_read(void) { return InterlockedExchange(&g_step_read, 0) != 0; }
uint64_t hk_clock_counter(void) { return g_qpc0 + read_now(); }
uint64_t hk_clock_systime(void) { return g_ft0 + read_now(); }
uint64_t hk_clock_tick_ms(void) { return g_tick0_ms + read_now() / HK_TICKS_PER_MS; }
