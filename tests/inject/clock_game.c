/* clock_game.c: a Windows program that reads every time source a game can reach, once a
 * frame, and prints them: for tests/shim/test_inject_clock.py, which runs it injected and
 * checks that each one advances exactly with the steps. It knows nothing of w3async; it
 * exports probe_state and probe_order so that the probe's adapter drives it.
 *
 *   clock_game.exe [--dll PATH] [--dll-at N]
 *
 * Each frame (its step point: one Sleep(1); the CRT's _sleep(1) before it calls the same
 * Sleep from msvcrt, which is no step) prints one line "frame K name value ...":
 *   qpc, freq       QueryPerformanceCounter, QueryPerformanceFrequency (kernel32)
 *   tick, tick64    GetTickCount, GetTickCount64;  tgt: timeGetTime (winmm)
 *   ft, ftp         GetSystemTimeAsFileTime, GetSystemTimePreciseAsFileTime (100 ns)
 *   time, clock, ftime   the CRT's time() (s), clock() (ms), _ftime (ms)
 *   ntst, ntqpc, rtlqpc, nttick, rtlprec   ntdll's NtQuerySystemTime,
 *                   NtQueryPerformanceCounter, RtlQueryPerformanceCounter (100 ns),
 *                   NtGetTickCount (ms), RtlGetSystemTimePrecise (looked up at run time)
 *   mono, real      clock_gettime(CLOCK_MONOTONIC / CLOCK_REALTIME) in ns (winpthreads,
 *                   what libstdc++'s steady_clock and system_clock call)
 *   mm, ev, wt, q, once   how often each timer fired: a 100 ms periodic timeSetEvent
 *                   callback, a 150 ms one setting an event (TIME_CALLBACK_EVENT_SET,
 *                   counted by a zero wait each frame), a 200 ms periodic auto-reset
 *                   waitable timer (counted the same way), a 250 ms timer queue timer,
 *                   and a 300 ms one-shot timeSetEvent
 *   ntsleep         a thread's NtDelayExecution(100 ms) loops; wtwait: a thread's
 *                   infinite waits on a 100 ms periodic waitable timer
 *   dll             the DLL loaded at frame --dll-at (default 3): its own GetTickCount64
 *                   and QueryPerformanceCounter (100 ns), -1 before it is loaded
 *   real_us         wall time since start by KUSER_SHARED_DATA's interrupt time, which no
 *                   hook can cover: the ratio of game time to wall time
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timeb.h>
#include <time.h>
#include <windows.h>
#include <winternl.h>
#include <mmsystem.h>

typedef struct probe_state_t {
    volatile long long passes, frames, orders, last_order, background, waited;
} probe_state_t;

__declspec(dllexport) probe_state_t probe_state;
__declspec(dllexport) void probe_order(long long v)
{
    probe_state.orders++;
    probe_state.last_order = v;
}

NTSTATUS NTAPI NtQuerySystemTime(LARGE_INTEGER *);
NTSTATUS NTAPI NtQueryPerformanceCounter(LARGE_INTEGER *, LARGE_INTEGER *);
NTSTATUS NTAPI NtDelayExecution(BOOLEAN, LARGE_INTEGER *);
BOOLEAN NTAPI RtlQueryPerformanceCounter(LARGE_INTEGER *);
ULONG NTAPI NtGetTickCount(void);

static volatile LONG g_mm, g_q, g_once = -1, g_ntsleep, g_wtwait, g_frame;

static void CALLBACK mm_cb(UINT id, UINT msg, DWORD_PTR user, DWORD_PTR a, DWORD_PTR b)
{
    (void)id, (void)msg, (void)user, (void)a, (void)b;
    InterlockedIncrement(&g_mm);
}

static void CALLBACK once_cb(UINT id, UINT msg, DWORD_PTR user, DWORD_PTR a, DWORD_PTR b)
{
    (void)id, (void)msg, (void)user, (void)a, (void)b;
    g_once = g_frame;
}

static void CALLBACK q_cb(PVOID arg, BOOLEAN fired)
{
    (void)arg, (void)fired;
    InterlockedIncrement(&g_q);
}

static DWORD WINAPI nt_sleeper(void *arg)
{
    (void)arg;
    LARGE_INTEGER t = {.QuadPart = -100 * 10000LL};
    for (;;) {
        NtDelayExecution(FALSE, &t);
        InterlockedIncrement(&g_ntsleep);
    }
    return 0;
}

static DWORD WINAPI timer_waiter(void *timer)
{
    for (;;)
        if (WaitForSingleObject(timer, INFINITE) == WAIT_OBJECT_0)
            InterlockedIncrement(&g_wtwait);
    return 0;
}

/* KUSER_SHARED_DATA's InterruptTime (a KSYSTEM_TIME at 0x7ffe0008): High1 and High2
 * agree when the read was not torn. 100 ns units. */
static ULONGLONG interrupt_time(void)
{
    volatile ULONG *k = (volatile ULONG *)0x7ffe0008;
    for (;;) {
        ULONG hi = k[1], lo = k[0];
        if (hi == k[2])
            return ((ULONGLONG)hi << 32) | lo;
    }
}

static long long ft64(FILETIME f) { return (long long)(((ULONGLONG)f.dwHighDateTime << 32) | f.dwLowDateTime); }

static long long ns_of(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *dll_path = NULL;
    long dll_at = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dll") && i + 1 < argc)
            dll_path = argv[++i];
        else if (!strcmp(argv[i], "--dll-at") && i + 1 < argc)
            dll_at = atol(argv[++i]);
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    ULONGLONG real0 = interrupt_time();
    LONGLONG(NTAPI * rtl_precise)(void) =
        (LONGLONG(NTAPI *)(void))(void *)GetProcAddress(GetModuleHandleA("ntdll.dll"), "RtlGetSystemTimePrecise");
    void(WINAPI * ftp_fn)(FILETIME *) =
        (void(WINAPI *)(FILETIME *))(void *)GetProcAddress(GetModuleHandleA("kernel32.dll"), "GetSystemTimePreciseAsFileTime");

    timeSetEvent(100, 1, mm_cb, 0, TIME_PERIODIC);
    HANDLE ev = CreateEventW(NULL, FALSE, FALSE, NULL);
    timeSetEvent(150, 1, (LPTIMECALLBACK)ev, 0, TIME_PERIODIC | TIME_CALLBACK_EVENT_SET);
    timeSetEvent(300, 1, once_cb, 0, TIME_ONESHOT);
    HANDLE wt = CreateWaitableTimerW(NULL, FALSE, NULL), wt2 = CreateWaitableTimerW(NULL, FALSE, NULL);
    LARGE_INTEGER due = {.QuadPart = -200 * 10000LL}, due2 = {.QuadPart = -100 * 10000LL};
    SetWaitableTimer(wt, &due, 200, NULL, NULL, FALSE);
    SetWaitableTimer(wt2, &due2, 100, NULL, NULL, FALSE);
    HANDLE qt;
    CreateTimerQueueTimer(&qt, NULL, q_cb, NULL, 250, 250, 0);
    CreateThread(NULL, 0, nt_sleeper, NULL, 0, NULL);
    CreateThread(NULL, 0, timer_waiter, wt2, 0, NULL);

    long long (*dll_read)(long long *) = NULL;
    long ev_n = 0, wt_n = 0;
    for (long frame = 0;; frame++) {
        g_frame = frame;
        if (dll_path && frame == dll_at) {
            HMODULE m = LoadLibraryA(dll_path);
            if (!m) {
                printf("clock_game: cannot load %s (Windows error %lu)\n", dll_path, GetLastError());
                return 3;
            }
            dll_read = (long long (*)(long long *))(void *)GetProcAddress(m, "clock_dll_read");
        }
        LARGE_INTEGER qpc, freq, ntst, ntqpc, rtlqpc;
        QueryPerformanceCounter(&qpc);
        QueryPerformanceFrequency(&freq);
        FILETIME ft, ftp;
        GetSystemTimeAsFileTime(&ft);
        ftp_fn(&ftp);
        struct timeb tb;
        ftime(&tb);
        NtQuerySystemTime(&ntst);
        NtQueryPerformanceCounter(&ntqpc, NULL);
        RtlQueryPerformanceCounter(&rtlqpc);
        if (WaitForSingleObject(ev, 0) == WAIT_OBJECT_0)
            ev_n++;
        if (WaitForSingleObject(wt, 0) == WAIT_OBJECT_0)
            wt_n++;
        long long dll[2] = {-1, -1};
        if (dll_read)
            dll_read(dll);
        printf("frame %ld qpc %lld freq %lld tick %lu tick64 %llu tgt %lu ft %lld ftp %lld time %lld clock %ld "
               "ftime %lld ntst %lld ntqpc %lld rtlqpc %lld nttick %lu rtlprec %lld mono %lld real %lld "
               "mm %ld ev %ld wt %ld q %ld once %ld ntsleep %ld wtwait %ld dll %lld %lld real_us %llu\n",
               frame, (long long)qpc.QuadPart, (long long)freq.QuadPart, GetTickCount(), GetTickCount64(),
               timeGetTime(), ft64(ft), ft64(ftp), (long long)time(NULL), (long)clock(),
               (long long)tb.time * 1000 + tb.millitm, (long long)ntst.QuadPart, (long long)ntqpc.QuadPart,
               (long long)rtlqpc.QuadPart, NtGetTickCount(), rtl_precise ? rtl_precise() : -1LL,
               ns_of(CLOCK_MONOTONIC), ns_of(CLOCK_REALTIME), g_mm, ev_n, wt_n, g_q, g_once, g_ntsleep, g_wtwait,
               dll[0], dll[1], (interrupt_time() - real0) / 10);
        probe_state.passes++;
        probe_state.frames = frame;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        _sleep(1); /* msvcrt's own import of Sleep: the step point's name, not the .exe's call: no step */
#pragma GCC diagnostic pop
        Sleep(1);  /* the frame's step point */
    }
}
