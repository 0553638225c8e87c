/* timers.c: the timers a game arms, in game time (docs/hooking.md, "The virtual clock").
 *
 * Multimedia timers (timeSetEvent), waitable timers (SetWaitableTimer(Ex)) and timer
 * queue timers (CreateTimerQueueTimer) become entries here with a due time in game time.
 * Every step, after the clock advances and before the threads parked on the clock wake,
 * hk_timers_fire fires the due ones in order of due time (then of arming), a periodic
 * timer as often as its period fits in the step. All of it on the step thread, inside
 * the step: a callback runs there, not on a timer thread of its own, so the same orders
 * give the same game (a real timer thread races the game's threads). A callback must
 * therefore not wait for the step thread (it is the step thread).
 *
 * A waitable timer keeps its real object: it is disarmed, and armed with an absolute
 * due time in the past when game time reaches its due time, so that Windows' own
 * manual/auto reset and waits on it behave as ever. Wine's server signals such a timer
 * before it answers any later request, so a waiter woken by the step finds it signalled.
 * Its completion routine is queued as an APC to the thread that armed it, as Windows
 * does. Before the first step the clock does not move, so no timer fires.
 */
#include "hook.h"

#include <mmsystem.h>

enum { T_MM = 1, T_WAITABLE, T_QUEUE };

typedef struct hk_timer {
    int kind;
    uint64_t due, period; /* game time, 100 ns units; period 0: once */
    uint64_t seq;         /* arming order: ties of due time fire in it */
    int armed;
    UINT id;      /* T_MM: the id the game holds */
    UINT flags;   /* T_MM: TIME_CALLBACK_*; T_QUEUE: WT_* */
    void *cb;     /* the callback (T_MM with TIME_CALLBACK_EVENT_*: the event) */
    void *arg;
    HANDLE obj;   /* T_WAITABLE: the game's timer; T_QUEUE: the queue (NULL: the default) */
    HANDLE apc_thread; /* T_WAITABLE with a completion routine: the thread that armed it */
} hk_timer;

typedef struct apc_call {
    PTIMERAPCROUTINE fn;
    void *arg;
    uint64_t when;
} apc_call;

static SRWLOCK g_lock = SRWLOCK_INIT; /* never held while a callback runs */
static hk_timer *g_timers[1024];
static int g_n;
static uint64_t g_seq;
static UINT g_next_id = 1;
static DWORD g_firing_tid;

static BOOL(WINAPI *r_SetWaitableTimer)(HANDLE, const LARGE_INTEGER *, LONG, PTIMERAPCROUTINE, LPVOID, BOOL);
static BOOL(WINAPI *r_CancelWaitableTimer)(HANDLE);
static BOOL(WINAPI *r_DeleteTimerQueueEx)(HANDLE, HANDLE);
static BOOL(WINAPI *r_DeleteTimerQueue)(HANDLE);

int hk_timers_firing(void) { return g_firing_tid && g_firing_tid == GetCurrentThreadId(); }

/* Adds t (armed at game time + due_ms); NULL when the table is full. Under g_lock. */
static hk_timer *add(hk_timer t)
{
    if (g_n == (int)(sizeof(g_timers) / sizeof(g_timers[0])))
        return NULL;
    hk_timer *p = HeapAlloc(GetProcessHeap(), 0, sizeof(*p));
    if (!p)
        return NULL;
    *p = t;
    g_timers[g_n++] = p;
    return p;
}

static void drop(int i)
{
    if (g_timers[i]->apc_thread)
        CloseHandle(g_timers[i]->apc_thread);
    HeapFree(GetProcessHeap(), 0, g_timers[i]);
    g_timers[i] = g_timers[--g_n];
}

static int find(int kind, UINT id, const void *handle)
{
    for (int i = 0; i < g_n; i++)
        if (g_timers[i]->kind == kind && (kind == T_MM ? g_timers[i]->id == id
                                          : kind == T_WAITABLE ? g_timers[i]->obj == handle : g_timers[i] == handle))
            return i;
    return -1;
}

static void arm(hk_timer *t, uint64_t due, uint64_t period)
{
    t->due = due;
    t->period = period;
    t->seq = ++g_seq;
    t->armed = 1;
}

static void CALLBACK run_apc(ULONG_PTR p)
{
    apc_call *c = (apc_call *)p;
    c->fn(c->arg, (DWORD)c->when, (DWORD)(c->when >> 32));
    HeapFree(GetProcessHeap(), 0, c);
}

/* One firing of a copy of a timer, outside the lock. */
static void fire(const hk_timer *t)
{
    if (t->kind == T_MM) {
        if (t->flags & TIME_CALLBACK_EVENT_SET)
            SetEvent(t->cb);
        else if (t->flags & TIME_CALLBACK_EVENT_PULSE)
            PulseEvent(t->cb);
        else
            ((LPTIMECALLBACK)t->cb)(t->id, 0, (DWORD_PTR)t->arg, 0, 0);
    } else if (t->kind == T_QUEUE) {
        ((WAITORTIMERCALLBACK)t->cb)(t->arg, TRUE);
    } else {
        /* An absolute due time in the past: signalled now, reset as the game's timer is. */
        LARGE_INTEGER past = {.QuadPart = 1};
        r_SetWaitableTimer(t->obj, &past, 0, NULL, NULL, FALSE);
        apc_call *c = t->cb ? HeapAlloc(GetProcessHeap(), 0, sizeof(*c)) : NULL;
        if (c) {
            *c = (apc_call){(PTIMERAPCROUTINE)t->cb, t->arg, hk_clock_systime()};
            if (!QueueUserAPC(run_apc, t->apc_thread, (ULONG_PTR)c))
                HeapFree(GetProcessHeap(), 0, c); /* the thread is gone: Windows drops it too */
        }
    }
}

void hk_timers_fire(void)
{
    uint64_t now = hk_clock_now();
    g_firing_tid = GetCurrentThreadId();
    for (;;) {
        AcquireSRWLockExclusive(&g_lock);
        int best = -1;
        for (int i = 0; i < g_n; i++) {
            hk_timer *t = g_timers[i];
            if (t->armed && t->due <= now &&
                (best < 0 || t->due < g_timers[best]->due || (t->due == g_timers[best]->due && t->seq < g_timers[best]->seq)))
                best = i;
        }
        if (best < 0) {
            ReleaseSRWLockExclusive(&g_lock);
            break;
        }
        hk_timer copy = *g_timers[best];
        if (copy.period)
            g_timers[best]->due += copy.period;
        else if (copy.kind == T_MM)
            drop(best); /* a one-shot multimedia timer's id is free after it fired */
        else
            g_timers[best]->armed = 0;
        ReleaseSRWLockExclusive(&g_lock);
        fire(&copy);
    }
    g_firing_tid = 0;
}

/* ---- multimedia timers ---- */

static MMRESULT WINAPI h_timeSetEvent(UINT delay, UINT resolution, LPTIMECALLBACK cb, DWORD_PTR user, UINT flags)
{
    (void)resolution;
    if (delay < 1 || !cb) /* winmm's own limits */
        return 0;
    AcquireSRWLockExclusive(&g_lock);
    hk_timer *t = add((hk_timer){.kind = T_MM, .id = g_next_id++, .flags = flags, .cb = (void *)cb, .arg = (void *)user});
    if (t)
        arm(t, hk_clock_now() + delay * HK_TICKS_PER_MS, (flags & TIME_PERIODIC) ? delay * HK_TICKS_PER_MS : 0);
    ReleaseSRWLockExclusive(&g_lock);
    return t ? t->id : 0;
}

static MMRESULT WINAPI h_timeKillEvent(UINT id)
{
    AcquireSRWLockExclusive(&g_lock);
    int i = find(T_MM, id, NULL);
    if (i >= 0)
        drop(i);
    ReleaseSRWLockExclusive(&g_lock);
    return i >= 0 ? TIMERR_NOERROR : MMSYSERR_INVALPARAM;
}

/* ---- waitable timers ---- */

/* A due time as Windows takes it (negative: relative 100 ns; positive: absolute system
 * time) in game time. */
static uint64_t due_of(const LARGE_INTEGER *due)
{
    uint64_t now = hk_clock_now();
    if (due->QuadPart < 0)
        return now + (uint64_t)(-due->QuadPart);
    uint64_t sys = hk_clock_systime();
    return (uint64_t)due->QuadPart > sys ? now + ((uint64_t)due->QuadPart - sys) : now;
}

static BOOL WINAPI h_SetWaitableTimer(HANDLE h, const LARGE_INTEGER *due, LONG period, PTIMERAPCROUTINE fn, LPVOID arg,
                                      BOOL resume)
{
    (void)resume;
    if (!due || period < 0) {
        SetLastError(ERROR_INVALID_PARAMETER);
        return FALSE;
    }
    if (!r_CancelWaitableTimer(h)) /* not a timer: Windows' own error */
        return FALSE;
    HANDLE thread = NULL;
    if (fn && !DuplicateHandle(GetCurrentProcess(), GetCurrentThread(), GetCurrentProcess(), &thread, 0, FALSE,
                               DUPLICATE_SAME_ACCESS))
        return FALSE;
    AcquireSRWLockExclusive(&g_lock);
    int i = find(T_WAITABLE, 0, h);
    if (i >= 0)
        drop(i);
    hk_timer *t = add((hk_timer){.kind = T_WAITABLE, .obj = h, .cb = (void *)fn, .arg = arg, .apc_thread = thread});
    if (t)
        arm(t, due_of(due), (uint64_t)period * HK_TICKS_PER_MS);
    ReleaseSRWLockExclusive(&g_lock);
    if (!t) {
        if (thread)
            CloseHandle(thread);
        SetLastError(ERROR_NOT_ENOUGH_MEMORY);
        return FALSE;
    }
    return TRUE;
}

static BOOL WINAPI h_SetWaitableTimerEx(HANDLE h, const LARGE_INTEGER *due, LONG period, PTIMERAPCROUTINE fn,
                                        LPVOID arg, PREASON_CONTEXT reason, ULONG tolerable)
{
    (void)reason, (void)tolerable;
    return h_SetWaitableTimer(h, due, period, fn, arg, FALSE);
}

static BOOL WINAPI h_CancelWaitableTimer(HANDLE h)
{
    AcquireSRWLockExclusive(&g_lock);
    int i = find(T_WAITABLE, 0, h);
    if (i >= 0)
        drop(i);
    ReleaseSRWLockExclusive(&g_lock);
    return r_CancelWaitableTimer(h);
}

/* ---- timer queue timers: the handle the game holds is the entry ---- */

static BOOL WINAPI h_CreateTimerQueueTimer(PHANDLE out, HANDLE queue, WAITORTIMERCALLBACK cb, PVOID arg, DWORD due,
                                           DWORD period, ULONG flags)
{
    if (!out || !cb) {
        SetLastError(ERROR_INVALID_PARAMETER);
        return FALSE;
    }
    if (flags & WT_EXECUTEONLYONCE)
        period = 0;
    AcquireSRWLockExclusive(&g_lock);
    hk_timer *t = add((hk_timer){.kind = T_QUEUE, .obj = queue, .flags = flags, .cb = (void *)cb, .arg = arg});
    if (t)
        arm(t, hk_clock_now() + due * HK_TICKS_PER_MS, period * HK_TICKS_PER_MS);
    ReleaseSRWLockExclusive(&g_lock);
    if (!t) {
        SetLastError(ERROR_NOT_ENOUGH_MEMORY);
        return FALSE;
    }
    *out = (HANDLE)t;
    return TRUE;
}

static BOOL WINAPI h_ChangeTimerQueueTimer(HANDLE queue, HANDLE timer, ULONG due, ULONG period)
{
    (void)queue;
    AcquireSRWLockExclusive(&g_lock);
    int i = find(T_QUEUE, 0, timer);
    if (i >= 0)
        arm(g_timers[i], hk_clock_now() + due * HK_TICKS_PER_MS,
            (g_timers[i]->flags & WT_EXECUTEONLYONCE) ? 0 : period * HK_TICKS_PER_MS);
    ReleaseSRWLockExclusive(&g_lock);
    if (i < 0)
        SetLastError(ERROR_INVALID_HANDLE);
    return i >= 0;
}

/* Callbacks run on the step thread: none runs while another thread deletes, so the
 * deletion is complete at once (the completion event, when given, is set). */
static BOOL WINAPI h_DeleteTimerQueueTimer(HANDLE queue, HANDLE timer, HANDLE done)
{
    (void)queue;
    AcquireSRWLockExclusive(&g_lock);
    int i = find(T_QUEUE, 0, timer);
    if (i >= 0)
        drop(i);
    ReleaseSRWLockExclusive(&g_lock);
    if (i < 0) {
        SetLastError(ERROR_INVALID_PARAMETER);
        return FALSE;
    }
    if (done && done != INVALID_HANDLE_VALUE)
        SetEvent(done);
    return TRUE;
}

static void drop_queue(HANDLE queue)
{
    AcquireSRWLockExclusive(&g_lock);
    for (int i = g_n - 1; i >= 0; i--)
        if (g_timers[i]->kind == T_QUEUE && g_timers[i]->obj == queue)
            drop(i);
    ReleaseSRWLockExclusive(&g_lock);
}

static BOOL WINAPI h_DeleteTimerQueueEx(HANDLE queue, HANDLE done)
{
    drop_queue(queue);
    return r_DeleteTimerQueueEx(queue, done);
}

static BOOL WINAPI h_DeleteTimerQueue(HANDLE queue)
{
    drop_queue(queue);
    return r_DeleteTimerQueue(queue);
}

static MMRESULT(WINAPI *r_timeSetEvent)(UINT, UINT, LPTIMECALLBACK, DWORD_PTR, UINT);
static MMRESULT(WINAPI *r_timeKillEvent)(UINT);
static BOOL(WINAPI *r_SetWaitableTimerEx)(HANDLE, const LARGE_INTEGER *, LONG, PTIMERAPCROUTINE, LPVOID,
                                          PREASON_CONTEXT, ULONG);
static BOOL(WINAPI *r_CreateTimerQueueTimer)(PHANDLE, HANDLE, WAITORTIMERCALLBACK, PVOID, DWORD, DWORD, ULONG);
static BOOL(WINAPI *r_ChangeTimerQueueTimer)(HANDLE, HANDLE, ULONG, ULONG);
static BOOL(WINAPI *r_DeleteTimerQueueTimer)(HANDLE, HANDLE, HANDLE);

#define FN(name) {#name, (void *)h_##name, (void **)&r_##name, HK_TIMER, 0}
hk_fn hk_timer_fns[] = {
    FN(timeSetEvent),          FN(timeKillEvent),          FN(SetWaitableTimer),
    FN(SetWaitableTimerEx),    FN(CancelWaitableTimer),    FN(CreateTimerQueueTimer),
    FN(ChangeTimerQueueTimer), FN(DeleteTimerQueueTimer), FN(DeleteTimerQueueEx),
    FN(DeleteTimerQueue),
};
#undef FN
const int hk_n_timer_fns = sizeof(hk_timer_fns) / sizeof(hk_timer_fns[0]);

void hk_timers_init(void)
{
    /* The hook's own imports: its table is never patched. */
    r_timeSetEvent = timeSetEvent;
    r_timeKillEvent = timeKillEvent;
    r_SetWaitableTimer = SetWaitableTimer;
    r_SetWaitableTimerEx = SetWaitableTimerEx;
    r_CancelWaitableTimer = CancelWaitableTimer;
    r_CreateTimerQueueTimer = CreateTimerQueueTimer;
    r_ChangeTimerQueueTimer = ChangeTimerQueueTimer;
    r_DeleteTimerQueueTimer = DeleteTimerQueueTimer;
    r_DeleteTimerQueueEx = DeleteTimerQueueEx;
    r_DeleteTimerQueue = DeleteTimerQueue;
}
