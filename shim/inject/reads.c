/* reads.c: the clock's reads (kernel32's, winmm's and ntdll's) and ntdll's sleeps and
 * waits, in game time (clock.c keeps the clock itself, kernel32's sleeps and waits).
 *
 * ntdll's entry points matter for the modules that import them rather than kernel32's:
 * Wine's msvcrt and ucrtbase read NtQuerySystemTime for clock() (a game paced by clock()
 * ran at 1.0x real time while only kernel32's reads were hooked). The hook itself never
 * calls these replacements: kernelbase and ntdll are not patched (patch.c).
 *
 * NT timeouts are LARGE_INTEGER pointers: NULL waits forever, a negative value is
 * relative (100 ns units), a positive one an absolute system time (here: game system
 * time), zero does not wait. */
#include "hook.h"

#include <mmsystem.h>

#define STATUS_SUCCESS_ 0L
#define STATUS_USER_APC_ 0xC0L
#define STATUS_ACCESS_VIOLATION_ ((LONG)0xC0000005L)

static BOOL(WINAPI *r_QueryPerformanceCounter)(LARGE_INTEGER *);
static BOOL(WINAPI *r_QueryPerformanceFrequency)(LARGE_INTEGER *);
static DWORD(WINAPI *r_GetTickCount)(void);
static ULONGLONG(WINAPI *r_GetTickCount64)(void);
static DWORD(WINAPI *r_timeGetTime)(void);
static void(WINAPI *r_GetSystemTimeAsFileTime)(FILETIME *);
static void(WINAPI *r_GetSystemTimePreciseAsFileTime)(FILETIME *);
static void(WINAPI *r_GetSystemTime)(SYSTEMTIME *);
static void(WINAPI *r_GetLocalTime)(SYSTEMTIME *);
static BOOL(WINAPI *r_QueryUnbiasedInterruptTime)(ULONGLONG *);
static LONG(NTAPI *r_NtQuerySystemTime)(LARGE_INTEGER *);
static LONGLONG(NTAPI *r_RtlGetSystemTimePrecise)(void);
static LONG(NTAPI *r_NtQueryPerformanceCounter)(LARGE_INTEGER *, LARGE_INTEGER *);
static BOOLEAN(NTAPI *r_RtlQueryPerformanceCounter)(LARGE_INTEGER *);
static BOOLEAN(NTAPI *r_RtlQueryPerformanceFrequency)(LARGE_INTEGER *);
static ULONG(NTAPI *r_NtGetTickCount)(void);
static LONG(NTAPI *r_NtDelayExecution)(BOOLEAN, const LARGE_INTEGER *);
static LONG(NTAPI *r_NtWaitForSingleObject)(HANDLE, BOOLEAN, const LARGE_INTEGER *);
static LONG(NTAPI *r_NtWaitForMultipleObjects)(ULONG, const HANDLE *, int, BOOLEAN, const LARGE_INTEGER *);

/* ---- kernel32's and winmm's reads ---- */

static BOOL WINAPI h_QueryPerformanceCounter(LARGE_INTEGER *c)
{
    if (!c)
        return FALSE;
    c->QuadPart = (LONGLONG)(hk_clock_counter());
    return TRUE;
}

static BOOL WINAPI h_QueryPerformanceFrequency(LARGE_INTEGER *f)
{
    if (!f)
        return FALSE;
    f->QuadPart = 10000000; /* 100 ns a count, as Windows reports on most machines */
    return TRUE;
}

static ULONGLONG WINAPI h_GetTickCount64(void) { return hk_clock_tick_ms(); }
static DWORD WINAPI h_GetTickCount(void) { return (DWORD)h_GetTickCount64(); }
static DWORD WINAPI h_timeGetTime(void) { return (DWORD)h_GetTickCount64(); }

static void WINAPI h_GetSystemTimeAsFileTime(FILETIME *ft)
{
    uint64_t t = hk_clock_systime();
    ft->dwLowDateTime = (DWORD)t;
    ft->dwHighDateTime = (DWORD)(t >> 32);
}

static void WINAPI h_GetSystemTime(SYSTEMTIME *st)
{
    FILETIME ft;
    h_GetSystemTimeAsFileTime(&ft);
    FileTimeToSystemTime(&ft, st);
}

static void WINAPI h_GetLocalTime(SYSTEMTIME *st)
{
    FILETIME ft, local;
    h_GetSystemTimeAsFileTime(&ft);
    FileTimeToLocalFileTime(&ft, &local);
    FileTimeToSystemTime(&local, st);
}

static BOOL WINAPI h_QueryUnbiasedInterruptTime(ULONGLONG *t)
{
    if (!t)
        return FALSE;
    *t = hk_clock_counter();
    return TRUE;
}

/* ---- ntdll's ---- */

static LONG NTAPI h_NtQuerySystemTime(LARGE_INTEGER *t)
{
    if (!t)
        return STATUS_ACCESS_VIOLATION_;
    t->QuadPart = (LONGLONG)hk_clock_systime();
    return STATUS_SUCCESS_;
}

static LONGLONG NTAPI h_RtlGetSystemTimePrecise(void) { return (LONGLONG)hk_clock_systime(); }

static LONG NTAPI h_NtQueryPerformanceCounter(LARGE_INTEGER *c, LARGE_INTEGER *f)
{
    if (!c)
        return STATUS_ACCESS_VIOLATION_;
    c->QuadPart = (LONGLONG)hk_clock_counter();
    if (f)
        f->QuadPart = 10000000; /* 100 ns a count, as the hooked QueryPerformanceFrequency */
    return STATUS_SUCCESS_;
}

static BOOLEAN NTAPI h_RtlQueryPerformanceCounter(LARGE_INTEGER *c)
{
    c->QuadPart = (LONGLONG)hk_clock_counter();
    return TRUE;
}

static BOOLEAN NTAPI h_RtlQueryPerformanceFrequency(LARGE_INTEGER *f)
{
    f->QuadPart = 10000000;
    return TRUE;
}

static ULONG NTAPI h_NtGetTickCount(void) { return (ULONG)hk_clock_tick_ms(); }

/* An NT timeout as a kernel32 one in ms, rounded up (a wait never ends early); 0 for
 * an absolute time already past. Never INFINITE: the caller handles NULL. */
static DWORD timeout_ms(const LARGE_INTEGER *t)
{
    uint64_t ticks;
    if (t->QuadPart < 0) {
        ticks = (uint64_t)(-t->QuadPart);
    } else {
        uint64_t now = hk_clock_systime();
        ticks = (uint64_t)t->QuadPart > now ? (uint64_t)t->QuadPart - now : 0;
    }
    uint64_t ms = (ticks + HK_TICKS_PER_MS - 1) / HK_TICKS_PER_MS;
    return ms >= INFINITE ? INFINITE - 1 : (DWORD)ms;
}

static LONG NTAPI h_NtDelayExecution(BOOLEAN alertable, const LARGE_INTEGER *t)
{
    DWORD ms;
    if (!t || (ms = timeout_ms(t)) == 0) /* forever, or a yield: nothing to measure */
        return r_NtDelayExecution(alertable, t);
    return hk_game_sleep(ms, alertable) == WAIT_IO_COMPLETION ? STATUS_USER_APC_ : STATUS_SUCCESS_;
}

/* A game-time wait's result as an NTSTATUS: WAIT_OBJECT_0 + i, WAIT_ABANDONED_0 + i,
 * WAIT_IO_COMPLETION and WAIT_TIMEOUT are the NT codes already; a failure is asked again
 * of the real call without a wait, for its own status. */
static LONG nt_wait(ULONG n, const HANDLE *h, int wait_all, BOOLEAN alertable, const LARGE_INTEGER *t)
{
    static const LARGE_INTEGER zero;
    DWORD ms;
    if (!t || (ms = timeout_ms(t)) == 0 || n == 0 || n > MAXIMUM_WAIT_OBJECTS)
        return r_NtWaitForMultipleObjects(n, h, wait_all ? 0 : 1, alertable, t);
    DWORD r = hk_game_wait(n, h, wait_all, ms, alertable);
    return r == WAIT_FAILED ? r_NtWaitForMultipleObjects(n, h, wait_all ? 0 : 1, alertable, &zero) : (LONG)r;
}

static LONG NTAPI h_NtWaitForSingleObject(HANDLE h, BOOLEAN alertable, const LARGE_INTEGER *t)
{
    if (!t || timeout_ms(t) == 0)
        return r_NtWaitForSingleObject(h, alertable, t);
    return nt_wait(1, &h, 0, alertable, t);
}

/* type: WaitAll (0) or WaitAny (1), NT's WAIT_TYPE. */
static LONG NTAPI h_NtWaitForMultipleObjects(ULONG n, const HANDLE *h, int type, BOOLEAN alertable, const LARGE_INTEGER *t)
{
    return nt_wait(n, h, type == 0, alertable, t);
}

/* HK_CLOCK, not HK_WAIT: the NT waits are never the step point (hk_can_be_step_point). */
#define FN(name, kind) {#name, (void *)h_##name, (void **)&r_##name, kind, 0}
hk_fn hk_read_fns[] = {
    FN(QueryPerformanceCounter, HK_CLOCK),
    FN(QueryPerformanceFrequency, HK_CLOCK),
    FN(GetTickCount, HK_CLOCK),
    FN(GetTickCount64, HK_CLOCK),
    FN(timeGetTime, HK_CLOCK),
    FN(GetSystemTimeAsFileTime, HK_CLOCK),
    {"GetSystemTimePreciseAsFileTime", (void *)h_GetSystemTimeAsFileTime, (void **)&r_GetSystemTimePreciseAsFileTime, HK_CLOCK, 0},
    FN(GetSystemTime, HK_CLOCK),
    FN(GetLocalTime, HK_CLOCK),
    FN(QueryUnbiasedInterruptTime, HK_CLOCK),
    FN(NtQuerySystemTime, HK_CLOCK),
    FN(RtlGetSystemTimePrecise, HK_CLOCK),
    FN(NtQueryPerformanceCounter, HK_CLOCK),
    FN(RtlQueryPerformanceCounter, HK_CLOCK),
    FN(RtlQueryPerformanceFrequency, HK_CLOCK),
    FN(NtGetTickCount, HK_CLOCK),
    FN(NtDelayExecution, HK_CLOCK),
    FN(NtWaitForSingleObject, HK_CLOCK),
    FN(NtWaitForMultipleObjects, HK_CLOCK),
};
#undef FN
const int hk_n_read_fns = sizeof(hk_read_fns) / sizeof(hk_read_fns[0]);

void hk_reads_init(void)
{
    /* kernel32's and winmm's: the hook's own imports (its table is never patched);
     * ntdll's: its exports, which the hook does not import. */
    r_QueryPerformanceCounter = QueryPerformanceCounter;
    r_QueryPerformanceFrequency = QueryPerformanceFrequency;
    r_GetTickCount = GetTickCount;
    r_GetTickCount64 = GetTickCount64;
    r_timeGetTime = timeGetTime;
    r_GetSystemTimeAsFileTime = GetSystemTimeAsFileTime;
    r_GetSystemTimePreciseAsFileTime = GetSystemTimePreciseAsFileTime;
    r_GetSystemTime = GetSystemTime;
    r_GetLocalTime = GetLocalTime;
    r_QueryUnbiasedInterruptTime = QueryUnbiasedInterruptTime;
    HMODULE nt = GetModuleHandleW(L"ntdll.dll");
    for (int i = 0; i < hk_n_read_fns; i++)
        if (!*hk_read_fns[i].real)
            *hk_read_fns[i].real = (void *)GetProcAddress(nt, hk_read_fns[i].name);
}
