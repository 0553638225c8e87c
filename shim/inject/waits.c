/* waits.c: the game's sleeps and timed waits, measured in game time (docs/hooking.md,
 * "The virtual clock").
 *
 * Who waits how, once the first step has happened:
 * - the step thread (the game's main thread, or with W3H_STEP_THREAD=first the first
 *   thread to call the step point): its own sleeps and timed
 *   waits cannot be waited out in game time (only it advances the clock), so they
 *   return at once, timed out, unless the call is the step point itself: then it
 *   makes steps until its timeout is covered (at least one);
 * - every other thread: a Sleep parks on the clock's condition variable until game time
 *   reaches its end; a timed wait on handles parks on its handles and an event of its
 *   thread's own that every step sets (clock.c), until the handles are signalled or
 *   game time reaches its timeout. What cannot take one more handle (a wait for all, 63
 *   handles, a condition variable, an alertable sleep) polls every park_slice_ms of
 *   wall time instead.
 * Before the first step (the game's start-up) sleeps and timed waits that are not the
 * step point run in wall time: the game's clock reads its start until then.
 *
 * Each call has two variants: h_ (may be the step point) and p_ ("plain": never a step,
 * put in the modules whose calls are not the game's frame; hk_wait_plain, patch.c).
 */
#include "hook.h"

#include <string.h>

#define HK_WAIT_TICK 0xFFFF0001u

static __thread HANDLE t_wake; /* this thread's, made at its first parked wait, kept */

/* The real functions (hk_waits_init). */
static void(WINAPI *r_Sleep)(DWORD);
static DWORD(WINAPI *r_SleepEx)(DWORD, BOOL);
static DWORD(WINAPI *r_WaitForSingleObject)(HANDLE, DWORD);
static DWORD(WINAPI *r_WaitForSingleObjectEx)(HANDLE, DWORD, BOOL);
static DWORD(WINAPI *r_WaitForMultipleObjects)(DWORD, const HANDLE *, BOOL, DWORD);
static DWORD(WINAPI *r_WaitForMultipleObjectsEx)(DWORD, const HANDLE *, BOOL, DWORD, BOOL);
static DWORD(WINAPI *r_MsgWaitForMultipleObjects)(DWORD, const HANDLE *, BOOL, DWORD, DWORD);
static DWORD(WINAPI *r_MsgWaitForMultipleObjectsEx)(DWORD, const HANDLE *, DWORD, DWORD, DWORD);
static BOOL(WINAPI *r_SleepConditionVariableCS)(CONDITION_VARIABLE *, CRITICAL_SECTION *, DWORD);
static BOOL(WINAPI *r_SleepConditionVariableSRW)(CONDITION_VARIABLE *, SRWLOCK *, DWORD, ULONG);

void hk_waits_init(void)
{
    /* The real functions are the hook's own imports: its import table is never patched. */
    r_Sleep = Sleep;
    r_SleepEx = SleepEx;
    r_WaitForSingleObject = WaitForSingleObject;
    r_WaitForSingleObjectEx = WaitForSingleObjectEx;
    r_WaitForMultipleObjects = WaitForMultipleObjects;
    r_WaitForMultipleObjectsEx = WaitForMultipleObjectsEx;
    r_MsgWaitForMultipleObjects = MsgWaitForMultipleObjects;
    r_MsgWaitForMultipleObjectsEx = MsgWaitForMultipleObjectsEx;
    r_SleepConditionVariableCS = SleepConditionVariableCS;
    r_SleepConditionVariableSRW = SleepConditionVariableSRW;
}

/* Steps until game time has advanced by at least ms (at least one step). */
static void steps_for(DWORD ms)
{
    uint64_t end = hk_clock_now() + (uint64_t)ms * HK_TICKS_PER_MS;
    do
        hk_step();
    while (hk_clock_now() < end);
}

/* Where a thread's next sleep or timed wait starts: at the game time its last one ended
 * when that one ended by its timeout (one begun before the first step, in wall time: its
 * start plus its timeout, or the clock's now if sooner), else now. A thread runs in no game time between
 * two waits, as an event of a discrete simulation does; counted from now, a pacing
 * thread (a 50 ms wait, then an event to the main thread, then the wait again) that ran
 * after the main thread's next step began its wait a step late, and the main thread,
 * waiting for the event, never made that step (a game shaped like Warcraft III's loop
 * stopped after ~200-500 turns); and a thread's 10 ms waits ended once a 50 ms step, not
 * five times. */
static __thread uint64_t t_woke;
static __thread int t_has_woke;

static uint64_t wait_start(void)
{
    if (!t_has_woke)
        return hk_clock_now();
    t_has_woke = 0;
    return t_woke;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static void woke_at(uint64_t end)
{
    t_woke = end;
    t_has_woke = 1;
}

/* Parks the calling (not step) thread until game time reaches end; an alertable
 * sleep polls instead, so that its APCs still run. Before the first step the sleep also
 * ends after wall_ms of wall time: a thread that began a long sleep at the game's
 * start-up follows game time once the steps begin, rather than sleeping its whole wall
 * time while the steps race ahead. */
static DWORD park_until(uint64_t end, BOOL alertable, DWORD wall_ms)
{
    if (alertable) {
        while (hk_clock_now() < end) {
            DWORD r = r_SleepEx(hk_config.park_slice_ms, TRUE);
            if (r == WAIT_IO_COMPLETION)
                return r;
        }
        return 0;
    }
    hk_clock_park(end, wall_ms);
    return 0;
}

/* A sleep in game time; name: the call, when it may be the step point (NULL: never). */
static DWORD sleep_ex(DWORD ms, BOOL alertable, const char *name)
{
    if (hk_claim_step_thread(name)) {
        steps_for(ms);
        return 0;
    }
    if (ms == 0 || ms == INFINITE)
        return r_SleepEx(ms, alertable);
    if (!hk_clock_stepped() && (alertable || hk_is_step_thread())) /* before the first step: wall time (start-up) */
        return r_SleepEx(ms, alertable);
    if (hk_is_step_thread()) /* the clock is frozen for it: the time has passed at once */
        return r_SleepEx(0, alertable);
    int before = !hk_clock_stepped();
    uint64_t end = (before ? (t_has_woke = 0, hk_clock_now()) : wait_start()) + (uint64_t)ms * HK_TICKS_PER_MS;
    DWORD r = park_until(end, alertable, ms);
    if (r == 0) /* its end, or (begun before the first step, ended in wall time) now if sooner */
        woke_at(before ? min_u64(end, hk_clock_now()) : end);
    return r;
}

static DWORD WINAPI h_SleepEx(DWORD ms, BOOL alertable) { return sleep_ex(ms, alertable, "SleepEx"); }
static void WINAPI h_Sleep(DWORD ms) { sleep_ex(ms, FALSE, "Sleep"); }
static DWORD WINAPI p_SleepEx(DWORD ms, BOOL alertable) { return sleep_ex(ms, alertable, NULL); }
static void WINAPI p_Sleep(DWORD ms) { sleep_ex(ms, FALSE, NULL); }
DWORD hk_game_sleep(DWORD ms, BOOL alertable) { return sleep_ex(ms, alertable, NULL); }

/* A timed wait in game time. wait(ctx, ms, tick) is the real wait with a real timeout;
 * with tick (a parkable wait: it has room for one more handle) it waits on tick too and
 * returns HK_WAIT_TICK when that is what woke it. */
typedef DWORD (*wait_fn)(void *ctx, DWORD ms, HANDLE tick);

static DWORD game_wait(const char *name, DWORD timeout, wait_fn wait, void *ctx, int parkable)
{
    if (timeout == INFINITE && hk_claim_step_thread(name)) {
        /* The frame waits for something game time brings (a timer's event): steps until
         * it is signalled, or the wait would never end. */
        DWORD r;
        while ((r = wait(ctx, 0, NULL)) == WAIT_TIMEOUT)
            hk_step();
        return r;
    }
    if (timeout == INFINITE)
        t_has_woke = 0; /* whatever ends it, the thread is at the game time it ended */
    if (timeout == 0 || timeout == INFINITE)
        return wait(ctx, timeout, NULL);
    if (!hk_clock_stepped() && !(name && hk_is_step_point(name))) { /* before the first step: wall time (start-up) */
        /* Its place in game time, where the thread's next wait starts: its start (the clock
         * stands still until the first step) plus its timeout, or now if sooner. A wait
         * that ended after the first steps began (they take no wall time) thus starts the
         * next no later than its place: counted from now, a pacing thread's came a step
         * late, and the game waited for good after its second step. */
        uint64_t start = hk_clock_now();
        t_has_woke = 0;
        DWORD r = wait(ctx, timeout, NULL);
        if (r == WAIT_TIMEOUT)
            woke_at(min_u64(start + (uint64_t)timeout * HK_TICKS_PER_MS, hk_clock_now()));
        return r;
    }
    DWORD r = wait(ctx, 0, NULL);
    if (r != WAIT_TIMEOUT)
        return r;
    if (hk_claim_step_thread(name)) {
        steps_for(timeout);
        return wait(ctx, 0, NULL);
    }
    if (hk_is_step_thread())
        return WAIT_TIMEOUT;
    uint64_t end = wait_start() + (uint64_t)timeout * HK_TICKS_PER_MS;
    if (parkable && !t_wake)
        t_wake = CreateEventW(NULL, FALSE, FALSE, NULL);
    hk_listener me = {parkable ? t_wake : NULL, NULL};
    if (me.wake)
        hk_clock_listen(&me); /* listed before the clock is read: a step from here on sets its event */
    for (;;) {
        if (hk_clock_now() >= end) {
            r = WAIT_TIMEOUT;
            break;
        }
        /* parked: until its handles or a step; else a poll every park_slice_ms */
        r = me.wake ? wait(ctx, INFINITE, me.wake) : wait(ctx, hk_config.park_slice_ms, NULL);
        hk_clock_count_wake(me.wake != NULL);
        if (r != HK_WAIT_TICK && r != WAIT_TIMEOUT)
            break;
    }
    if (me.wake)
        hk_clock_unlisten(&me);
    if (r == WAIT_TIMEOUT)
        woke_at(end);
    return r;
}

typedef struct wait_args {
    DWORD n;
    const HANDLE *h;
    BOOL all, alertable;
    DWORD wake, flags;
} wait_args;

/* The handles with tick after them; 0 when there is no room. */
static DWORD with_tick(const wait_args *a, HANDLE tick, HANDLE *out)
{
    if (a->n >= MAXIMUM_WAIT_OBJECTS - 1)
        return 0;
    for (DWORD i = 0; i < a->n; i++)
        out[i] = a->h[i];
    out[a->n] = tick;
    return a->n + 1;
}

static DWORD w_multiple(void *p, DWORD ms, HANDLE tick)
{
    wait_args *a = p;
    HANDLE h[MAXIMUM_WAIT_OBJECTS];
    if (!tick)
        return r_WaitForMultipleObjectsEx(a->n, a->h, a->all, ms, a->alertable);
    DWORD n = with_tick(a, tick, h);
    DWORD r = r_WaitForMultipleObjectsEx(n, h, FALSE, ms, a->alertable);
    return r == WAIT_OBJECT_0 + a->n ? HK_WAIT_TICK : r;
}

static DWORD w_msg(void *p, DWORD ms, HANDLE tick)
{
    wait_args *a = p;
    HANDLE h[MAXIMUM_WAIT_OBJECTS];
    if (!tick)
        return r_MsgWaitForMultipleObjectsEx(a->n, a->h, ms, a->wake, a->flags);
    DWORD n = with_tick(a, tick, h);
    DWORD r = r_MsgWaitForMultipleObjectsEx(n, h, ms, a->wake, a->flags);
    if (r == WAIT_OBJECT_0 + a->n)
        return HK_WAIT_TICK;
    return r == WAIT_OBJECT_0 + n ? WAIT_OBJECT_0 + a->n : r; /* input: its index without tick */
}

/* Room for the tick beside the handles, and no wait-for-all (which tick would change). */
static int parkable(const wait_args *a)
{
    return !a->all && !(a->flags & MWMO_WAITALL) && a->n < MAXIMUM_WAIT_OBJECTS - 1;
}

static DWORD WaitForSingleObjectEx_in(HANDLE h, DWORD ms, BOOL alertable, const char *name)
{
    wait_args a = {1, &h, FALSE, alertable, 0, 0};
    return game_wait(name, ms, w_multiple, &a, parkable(&a));
}
static DWORD WINAPI h_WaitForSingleObjectEx(HANDLE h, DWORD ms, BOOL alertable) { return WaitForSingleObjectEx_in(h, ms, alertable, "WaitForSingleObjectEx"); }
static DWORD WINAPI p_WaitForSingleObjectEx(HANDLE h, DWORD ms, BOOL alertable) { return WaitForSingleObjectEx_in(h, ms, alertable, NULL); }

static DWORD WaitForSingleObject_in(HANDLE h, DWORD ms, const char *name)
{
    wait_args a = {1, &h, FALSE, FALSE, 0, 0};
    return game_wait(name, ms, w_multiple, &a, parkable(&a));
}
static DWORD WINAPI h_WaitForSingleObject(HANDLE h, DWORD ms) { return WaitForSingleObject_in(h, ms, "WaitForSingleObject"); }
static DWORD WINAPI p_WaitForSingleObject(HANDLE h, DWORD ms) { return WaitForSingleObject_in(h, ms, NULL); }

static DWORD WaitForMultipleObjectsEx_in(DWORD n, const HANDLE *h, BOOL all, DWORD ms, BOOL alertable, const char *name)
{
    wait_args a = {n, h, all, alertable, 0, 0};
    return game_wait(name, ms, w_multiple, &a, parkable(&a));
}
static DWORD WINAPI h_WaitForMultipleObjectsEx(DWORD n, const HANDLE *h, BOOL all, DWORD ms, BOOL alertable) { return WaitForMultipleObjectsEx_in(n, h, all, ms, alertable, "WaitForMultipleObjectsEx"); }
static DWORD WINAPI p_WaitForMultipleObjectsEx(DWORD n, const HANDLE *h, BOOL all, DWORD ms, BOOL alertable) { return WaitForMultipleObjectsEx_in(n, h, all, ms, alertable, NULL); }

static DWORD WaitForMultipleObjects_in(DWORD n, const HANDLE *h, BOOL all, DWORD ms, const char *name)
{
    wait_args a = {n, h, all, FALSE, 0, 0};
    return game_wait(name, ms, w_multiple, &a, parkable(&a));
}
static DWORD WINAPI h_WaitForMultipleObjects(DWORD n, const HANDLE *h, BOOL all, DWORD ms) { return WaitForMultipleObjects_in(n, h, all, ms, "WaitForMultipleObjects"); }
static DWORD WINAPI p_WaitForMultipleObjects(DWORD n, const HANDLE *h, BOOL all, DWORD ms) { return WaitForMultipleObjects_in(n, h, all, ms, NULL); }

static DWORD MsgWaitForMultipleObjectsEx_in(DWORD n, const HANDLE *h, DWORD ms, DWORD wake, DWORD flags, const char *name)
{
    wait_args a = {n, h, FALSE, FALSE, wake, flags};
    return game_wait(name, ms, w_msg, &a, parkable(&a));
}
static DWORD WINAPI h_MsgWaitForMultipleObjectsEx(DWORD n, const HANDLE *h, DWORD ms, DWORD wake, DWORD flags) { return MsgWaitForMultipleObjectsEx_in(n, h, ms, wake, flags, "MsgWaitForMultipleObjectsEx"); }
static DWORD WINAPI p_MsgWaitForMultipleObjectsEx(DWORD n, const HANDLE *h, DWORD ms, DWORD wake, DWORD flags) { return MsgWaitForMultipleObjectsEx_in(n, h, ms, wake, flags, NULL); }

static DWORD MsgWaitForMultipleObjects_in(DWORD n, const HANDLE *h, BOOL all, DWORD ms, DWORD wake, const char *name)
{
    wait_args a = {n, h, FALSE, FALSE, wake, all ? MWMO_WAITALL : 0};
    return game_wait(name, ms, w_msg, &a, parkable(&a));
}
static DWORD WINAPI h_MsgWaitForMultipleObjects(DWORD n, const HANDLE *h, BOOL all, DWORD ms, DWORD wake) { return MsgWaitForMultipleObjects_in(n, h, all, ms, wake, "MsgWaitForMultipleObjects"); }
static DWORD WINAPI p_MsgWaitForMultipleObjects(DWORD n, const HANDLE *h, BOOL all, DWORD ms, DWORD wake) { return MsgWaitForMultipleObjects_in(n, h, all, ms, wake, NULL); }

typedef struct cv_args {
    CONDITION_VARIABLE *cv;
    void *lock;
    ULONG flags;
} cv_args;

/* A condition variable's timed sleep: the real one returns FALSE with ERROR_TIMEOUT. */
static DWORD w_cv_cs(void *p, DWORD ms, HANDLE tick)
{
    (void)tick; /* a condition variable takes no handle beside it: polled */
    cv_args *a = p;
    return r_SleepConditionVariableCS(a->cv, a->lock, ms) ? 0 : (GetLastError() == ERROR_TIMEOUT ? WAIT_TIMEOUT : WAIT_FAILED);
}

static DWORD w_cv_srw(void *p, DWORD ms, HANDLE tick)
{
    (void)tick;
    cv_args *a = p;
    return r_SleepConditionVariableSRW(a->cv, a->lock, ms, a->flags) ? 0 : (GetLastError() == ERROR_TIMEOUT ? WAIT_TIMEOUT : WAIT_FAILED);
}

static BOOL cv_result(DWORD r)
{
    if (r == 0)
        return TRUE;
    SetLastError(r == WAIT_TIMEOUT ? ERROR_TIMEOUT : GetLastError());
    return FALSE;
}

static BOOL cv_cs(CONDITION_VARIABLE *cv, CRITICAL_SECTION *cs, DWORD ms, const char *name)
{
    cv_args a = {cv, cs, 0};
    return cv_result(game_wait(name, ms, w_cv_cs, &a, 0));
}

static BOOL cv_srw(CONDITION_VARIABLE *cv, SRWLOCK *l, DWORD ms, ULONG flags, const char *name)
{
    cv_args a = {cv, l, flags};
    return cv_result(game_wait(name, ms, w_cv_srw, &a, 0));
}

static BOOL WINAPI h_SleepConditionVariableCS(CONDITION_VARIABLE *cv, CRITICAL_SECTION *cs, DWORD ms)
{
    return cv_cs(cv, cs, ms, "SleepConditionVariableCS");
}
static BOOL WINAPI p_SleepConditionVariableCS(CONDITION_VARIABLE *cv, CRITICAL_SECTION *cs, DWORD ms)
{
    return cv_cs(cv, cs, ms, NULL);
}
static BOOL WINAPI h_SleepConditionVariableSRW(CONDITION_VARIABLE *cv, SRWLOCK *l, DWORD ms, ULONG flags)
{
    return cv_srw(cv, l, ms, flags, "SleepConditionVariableSRW");
}
static BOOL WINAPI p_SleepConditionVariableSRW(CONDITION_VARIABLE *cv, SRWLOCK *l, DWORD ms, ULONG flags)
{
    return cv_srw(cv, l, ms, flags, NULL);
}

DWORD hk_game_wait(DWORD n, const HANDLE *h, BOOL all, DWORD ms, BOOL alertable)
{
    return WaitForMultipleObjectsEx_in(n, h, all, ms, alertable, NULL);
}

#define FN(name) {#name, (void *)h_##name, (void **)&r_##name, HK_WAIT, 0}
hk_fn hk_wait_fns[] = {
    FN(Sleep),
    FN(SleepEx),
    FN(WaitForSingleObject),
    FN(WaitForSingleObjectEx),
    FN(WaitForMultipleObjects),
    FN(WaitForMultipleObjectsEx),
    FN(MsgWaitForMultipleObjects),
    FN(MsgWaitForMultipleObjectsEx),
    FN(SleepConditionVariableCS),
    FN(SleepConditionVariableSRW),
};
#undef FN
const int hk_n_wait_fns = sizeof(hk_wait_fns) / sizeof(hk_wait_fns[0]);

void *hk_wait_plain(const char *name)
{
#define P(n)                                                                                                           \
    if (!strcmp(name, #n))                                                                                             \
        return (void *)p_##n;
    P(Sleep) P(SleepEx) P(WaitForSingleObject) P(WaitForSingleObjectEx) P(WaitForMultipleObjects)
    P(WaitForMultipleObjectsEx) P(MsgWaitForMultipleObjects) P(MsgWaitForMultipleObjectsEx)
    P(SleepConditionVariableCS) P(SleepConditionVariableSRW)
#undef P
    return NULL;
}
