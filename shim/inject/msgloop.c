/* msgloop.c: the window message calls a game's frame loop makes, as step points, and
 * SetTimer's timers in game time (docs/hooking.md, "Finding the step point").
 *
 * - PeekMessageA/W (a busy loop): a call is a step only when it finds no message (the
 *   queue is drained) and a frame ran since the last step. A frame's evidence: the
 *   adapter's w3a_frame counter changed, or, without that export, the step thread read
 *   the clock (QueryPerformanceCounter, GetTickCount, ...). A busy loop calls PeekMessage
 *   tens of thousands of times a second (measured on a third-party game: ~48,000 calls a
 *   second for ~62 frames); a step at every call advanced game time step_ms each, ready
 *   or not. With w3a_frame, a drained call after a clock read but no new frame lets game
 *   time pass (step_ms, nothing posted): the game waits for its next frame's time.
 * - GetMessageA/W (a loop driven by WM_TIMER or other messages): while the step thread's
 *   queue is empty, steps: each advances the clock and fires the due game-time timers,
 *   until a message is there to return.
 * - SetTimer, KillTimer, SetCoalescableTimer (with the virtual clock): game-time timers
 *   kept here. At every step (whatever the step point) each due timer fires once: its
 *   TIMERPROC called (on the thread that set it) or WM_TIMER posted to its window or
 *   thread; Windows' own timers would fire in wall time, at the timer's wall rate
 *   whatever step_ms says.
 */
#include "hook.h"

#include <string.h>

static BOOL(WINAPI *r_PeekMessageA)(MSG *, HWND, UINT, UINT, UINT);
static BOOL(WINAPI *r_PeekMessageW)(MSG *, HWND, UINT, UINT, UINT);
static BOOL(WINAPI *r_GetMessageA)(MSG *, HWND, UINT, UINT);
static BOOL(WINAPI *r_GetMessageW)(MSG *, HWND, UINT, UINT);
static UINT_PTR(WINAPI *r_SetTimer)(HWND, UINT_PTR, UINT, TIMERPROC);
static BOOL(WINAPI *r_KillTimer)(HWND, UINT_PTR);
static UINT_PTR(WINAPI *r_SetCoalescableTimer)(HWND, UINT_PTR, UINT, TIMERPROC, ULONG);

/* ---- the evidence of a frame (PeekMessage as the step point) ---- */

static int g_peek_steps;            /* a PeekMessage step has happened */
static uint64_t g_last_frame;       /* w3a_frame at the last step */

/* A drained PeekMessage on the step thread: a step when a frame ran since the last. */
static void step_if_frame(void)
{
    uint64_t frame;
    if (!g_peek_steps) { /* the first attaches the adapter: always a step */
        g_peek_steps = 1;
        hk_clock_take_read();
        hk_step();
        if (hk_adapter_frame(&frame))
            g_last_frame = frame;
        return;
    }
    if (hk_adapter_frame(&frame)) {
        if (frame != g_last_frame) {
            g_last_frame = frame;
            hk_clock_take_read();
            hk_step();
        } else if (hk_clock_take_read()) {
            hk_advance();
        }
        return;
    }
    if (hk_clock_take_read() || !hk_config.clock) { /* no virtual clock: no reads to see, every drained call */
        hk_step();
    }
}

static BOOL WINAPI h_PeekMessageA(MSG *m, HWND w, UINT lo, UINT hi, UINT rm)
{
    BOOL r = r_PeekMessageA(m, w, lo, hi, rm);
    if (!r && hk_claim_step_thread("PeekMessageA"))
        step_if_frame();
    return r;
}

static BOOL WINAPI h_PeekMessageW(MSG *m, HWND w, UINT lo, UINT hi, UINT rm)
{
    BOOL r = r_PeekMessageW(m, w, lo, hi, rm);
    if (!r && hk_claim_step_thread("PeekMessageW"))
        step_if_frame();
    return r;
}

/* GetMessage on the step thread: steps while the queue is empty. -1 for a window that
 * is not one, as GetMessage says (a PeekMessage on it would find nothing forever). */
static BOOL get_message(int wide, MSG *m, HWND w, UINT lo, UINT hi)
{
    if (w && w != (HWND)-1 && !IsWindow(w)) {
        SetLastError(ERROR_INVALID_WINDOW_HANDLE);
        return -1;
    }
    for (;;) {
        if (wide ? r_PeekMessageW(m, w, lo, hi, PM_REMOVE) : r_PeekMessageA(m, w, lo, hi, PM_REMOVE))
            return m->message != WM_QUIT;
        hk_step();
    }
}

static BOOL WINAPI h_GetMessageA(MSG *m, HWND w, UINT lo, UINT hi)
{
    return hk_claim_step_thread("GetMessageA") ? get_message(0, m, w, lo, hi) : r_GetMessageA(m, w, lo, hi);
}

static BOOL WINAPI h_GetMessageW(MSG *m, HWND w, UINT lo, UINT hi)
{
    return hk_claim_step_thread("GetMessageW") ? get_message(1, m, w, lo, hi) : r_GetMessageW(m, w, lo, hi);
}

/* ---- game-time timers ---- */

#define HK_MAX_TIMERS 256
#define HK_TIMER_MIN_MS 10 /* USER_TIMER_MINIMUM: Windows raises shorter periods to it */

typedef struct hk_timer {
    HWND hwnd;        /* NULL: a thread timer, WM_TIMER posted to tid */
    UINT_PTR id;
    TIMERPROC proc;   /* NULL: WM_TIMER posted */
    DWORD tid;        /* the thread that set it */
    uint64_t period;  /* game time, 100 ns units */
    uint64_t due;
    int used;
} hk_timer;

static hk_timer g_timers[HK_MAX_TIMERS];
static SRWLOCK g_timer_lock = SRWLOCK_INIT;
static UINT_PTR g_next_id = 0x7ff0; /* thread timers' ids, as Windows makes them up */

static UINT_PTR set_timer(HWND hwnd, UINT_PTR id, UINT ms, TIMERPROC proc)
{
    if (hwnd && !IsWindow(hwnd)) {
        SetLastError(ERROR_INVALID_WINDOW_HANDLE);
        return 0;
    }
    if (ms < HK_TIMER_MIN_MS)
        ms = HK_TIMER_MIN_MS;
    AcquireSRWLockExclusive(&g_timer_lock);
    hk_timer *t = NULL, *free_slot = NULL;
    for (int i = 0; i < HK_MAX_TIMERS; i++) {
        hk_timer *x = &g_timers[i];
        if (x->used && x->hwnd == hwnd && x->id == id && (hwnd || id))
            t = x; /* the same window's (or thread's) id again: reset */
        else if (!x->used && !free_slot)
            free_slot = x;
    }
    if (!t)
        t = free_slot;
    if (!t) {
        ReleaseSRWLockExclusive(&g_timer_lock);
        hk_log("SetTimer: more than %d game-time timers at once; refused", HK_MAX_TIMERS);
        SetLastError(ERROR_NOT_ENOUGH_MEMORY);
        return 0;
    }
    if (!hwnd && !(t->used && t->id == id))
        id = g_next_id++;
    *t = (hk_timer){hwnd, id, proc, GetCurrentThreadId(), ms * HK_TICKS_PER_MS, 0, 1};
    t->due = hk_clock_now() + t->period;
    ReleaseSRWLockExclusive(&g_timer_lock);
    return hwnd ? (id ? id : 1) : id;
}

static UINT_PTR WINAPI h_SetTimer(HWND hwnd, UINT_PTR id, UINT ms, TIMERPROC proc)
{
    return set_timer(hwnd, id, ms, proc);
}

static UINT_PTR WINAPI h_SetCoalescableTimer(HWND hwnd, UINT_PTR id, UINT ms, TIMERPROC proc, ULONG tolerance)
{
    (void)tolerance; /* game time is exact: nothing to coalesce */
    return set_timer(hwnd, id, ms, proc);
}

static BOOL WINAPI h_KillTimer(HWND hwnd, UINT_PTR id)
{
    BOOL found = FALSE;
    AcquireSRWLockExclusive(&g_timer_lock);
    for (int i = 0; i < HK_MAX_TIMERS; i++)
        if (g_timers[i].used && g_timers[i].hwnd == hwnd && g_timers[i].id == id)
            g_timers[i].used = 0, found = TRUE;
    ReleaseSRWLockExclusive(&g_timer_lock);
    if (!found) /* not one of ours: one Windows keeps (set before the hook, or by a DLL) */
        return r_KillTimer(hwnd, id);
    return found;
}

void hk_msg_timers_fire(void)
{
    uint64_t now = hk_clock_now();
    DWORD me = GetCurrentThreadId();
    hk_timer due[HK_MAX_TIMERS];
    int n = 0;
    AcquireSRWLockExclusive(&g_timer_lock);
    for (int i = 0; i < HK_MAX_TIMERS; i++) {
        hk_timer *t = &g_timers[i];
        if (!t->used || t->due > now)
            continue;
        while (t->due <= now) /* periods missed fire once, as WM_TIMER does */
            t->due += t->period;
        due[n++] = *t;
    }
    ReleaseSRWLockExclusive(&g_timer_lock);
    DWORD ms = (DWORD)(now / HK_TICKS_PER_MS);
    for (int i = 0; i < n; i++) {
        hk_timer *t = &due[i];
        if (t->proc && t->tid == me)
            t->proc(t->hwnd, WM_TIMER, t->id, ms);
        else if (t->hwnd)
            PostMessageW(t->hwnd, WM_TIMER, t->id, (LPARAM)t->proc);
        else
            PostThreadMessageW(t->tid, WM_TIMER, t->id, (LPARAM)t->proc);
    }
}

#define FN(name, kind) {#name, (void *)h_##name, (void **)&r_##name, kind, 0}
hk_fn hk_msg_fns[] = {
    FN(PeekMessageA, HK_STEP),
    FN(PeekMessageW, HK_STEP),
    FN(GetMessageA, HK_STEP),
    FN(GetMessageW, HK_STEP),
    FN(SetTimer, HK_CLOCK),
    FN(KillTimer, HK_CLOCK),
    FN(SetCoalescableTimer, HK_CLOCK),
};
#undef FN
const int hk_n_msg_fns = sizeof(hk_msg_fns) / sizeof(hk_msg_fns[0]);

void hk_msg_init(void)
{
    r_PeekMessageA = PeekMessageA;
    r_PeekMessageW = PeekMessageW;
    r_GetMessageA = GetMessageA;
    r_GetMessageW = GetMessageW;
    r_SetTimer = SetTimer;
    r_KillTimer = KillTimer;
    /* Not in every user32 (Windows 8 on): looked up, never imported. */
    r_SetCoalescableTimer = (UINT_PTR(WINAPI *)(HWND, UINT_PTR, UINT, TIMERPROC, ULONG))(void *)GetProcAddress(
        GetModuleHandleA("user32.dll"), "SetCoalescableTimer");
}
