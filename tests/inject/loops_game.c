/* loops_game.c: a small windowed Windows program that knows nothing of w3async, for the
 * step-point tests (tests/shim/test_inject_loops.py). It runs one of the frame loops games
 * are written with:
 *
 *   loops_game.exe [--loop peek|getmsg|sleep] [--window] [--timer MS] [--frame-ms MS]
 *                  [--pause-inactive] [--print N] [--seconds S]
 *
 * --loop peek    (default) a busy loop: PeekMessageA until the queue is drained, then
 *                QueryPerformanceCounter; a frame each time frame-ms has passed
 * --loop getmsg  GetMessageA/DispatchMessageA; a frame at each WM_TIMER (--timer MS)
 * --loop sleep   a frame, then Sleep(frame-ms)
 * --window       create a window (WS_OVERLAPPEDWINDOW, shown), or exit 3 naming the error
 * --timer MS     SetTimer(window or thread, MS)
 * --pause-inactive  when the window loses activation (WM_ACTIVATEAPP FALSE), wait in
 *                WaitMessage until it is active again: no frame runs meanwhile (what many
 *                games do when their window loses focus)
 * --print N      print the first N frames: frame number, the clock (QPC ticks, GetTickCount
 *                ms), the PeekMessage calls and WM_TIMERs so far
 * --seconds S    exit 0 after S seconds of its own clock (default: never)
 * Focus events (WM_ACTIVATEAPP, WM_KILLFOCUS) are printed as they come.
 *
 * Like a game's modding interface it exports its state (probe_state, the layout
 * probe_adapter.c reads), an order function (probe_order), a callback pointer called at
 * every frame (probe_on_frame: an adapter's own hook) and loops_frame, a function of its
 * own called at every frame (a step point by address).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

typedef struct probe_state_t {
    volatile long long passes, frames, orders, last_order, background, waited;
} probe_state_t;

__declspec(dllexport) probe_state_t probe_state;
__declspec(dllexport) void (*volatile probe_on_frame)(long long frame);

__declspec(dllexport) void probe_order(long long v)
{
    probe_state.orders++;
    probe_state.last_order = v;
}

static volatile long long g_seen;

__declspec(dllexport) __attribute__((noinline)) void loops_frame(long long frame)
{
    g_seen = frame;
    __asm__ volatile("" ::: "memory");
}

static long long g_print, g_peeks, g_timers, g_seconds = -1;
static int g_pause, g_active = 1;
static LARGE_INTEGER g_freq, g_qpc0;
static DWORD g_tick0;

static void frame(void)
{
    LARGE_INTEGER now;
    QueryPerformanceCounter(&now);
    DWORD tick = GetTickCount();
    long long k = probe_state.frames++;
    probe_state.passes++;
    loops_frame(k);
    if (probe_on_frame)
        probe_on_frame(k);
    if (k < g_print) {
        printf("frame %lld qpc %lld tick %lu peeks %lld timers %lld\n", k, (long long)(now.QuadPart - g_qpc0.QuadPart),
               (unsigned long)(tick - g_tick0), g_peeks, g_timers);
        fflush(stdout);
    }
    if (g_seconds >= 0 && now.QuadPart - g_qpc0.QuadPart >= g_seconds * g_freq.QuadPart) {
        printf("loops: %lld frames, %lld orders\n", probe_state.frames, probe_state.orders);
        fflush(stdout);
        ExitProcess(0);
    }
}

static LRESULT CALLBACK wndproc(HWND w, UINT m, WPARAM wp, LPARAM lp)
{
    switch (m) {
    case WM_ACTIVATEAPP:
        printf("loops: WM_ACTIVATEAPP %d at frame %lld\n", (int)wp, probe_state.frames);
        fflush(stdout);
        g_active = wp != 0;
        return 0;
    case WM_KILLFOCUS:
        printf("loops: WM_KILLFOCUS at frame %lld\n", probe_state.frames);
        fflush(stdout);
        return 0;
    case WM_DESTROY:
        PostQuitMessage(0);
        return 0;
    }
    return DefWindowProcA(w, m, wp, lp);
}

int main(int argc, char **argv)
{
    const char *loop = "peek";
    int window = 0;
    long long timer_ms = 0, frame_ms = 50;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--loop") && i + 1 < argc)
            loop = argv[++i];
        else if (!strcmp(argv[i], "--window"))
            window = 1;
        else if (!strcmp(argv[i], "--pause-inactive"))
            g_pause = 1;
        else if (!strcmp(argv[i], "--timer") && i + 1 < argc)
            timer_ms = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--frame-ms") && i + 1 < argc)
            frame_ms = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--print") && i + 1 < argc)
            g_print = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            g_seconds = atoll(argv[++i]);
        else {
            fprintf(stderr, "loops_game: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    QueryPerformanceFrequency(&g_freq);
    QueryPerformanceCounter(&g_qpc0);
    g_tick0 = GetTickCount();
    printf("loops: frequency %lld\n", (long long)g_freq.QuadPart);
    fflush(stdout);
    HWND hwnd = NULL;
    if (window) {
        WNDCLASSA wc = {.lpfnWndProc = wndproc, .hInstance = GetModuleHandleA(NULL), .lpszClassName = "loops_game"};
        RegisterClassA(&wc);
        hwnd = CreateWindowExA(0, "loops_game", "loops", WS_OVERLAPPEDWINDOW, 0, 0, 320, 240, NULL, NULL,
                               wc.hInstance, NULL);
        if (!hwnd) {
            printf("loops: CreateWindow failed (Windows error %lu)\n", (unsigned long)GetLastError());
            fflush(stdout);
            return 3;
        }
        ShowWindow(hwnd, SW_SHOW);
        UpdateWindow(hwnd);
        char desk[128] = "?";
        GetUserObjectInformationA(GetThreadDesktop(GetCurrentThreadId()), UOI_NAME, desk, sizeof(desk), NULL);
        printf("loops: window created on desktop %s, foreground %s\n", desk, GetForegroundWindow() == hwnd ? "yes" : "no");
        fflush(stdout);
    }
    if (timer_ms)
        SetTimer(hwnd, 1, (UINT)timer_ms, NULL);
    long long period = g_freq.QuadPart * frame_ms / 1000;
    LARGE_INTEGER last = g_qpc0, now;
    MSG msg;
    if (!strcmp(loop, "getmsg")) {
        for (;;) {
            BOOL r = GetMessageA(&msg, NULL, 0, 0);
            if (r <= 0)
                break;
            if (msg.message == WM_TIMER) {
                g_timers++;
                frame();
            }
            DispatchMessageA(&msg);
        }
        return 0;
    }
    if (!strcmp(loop, "sleep")) {
        for (;;) {
            while (PeekMessageA(&msg, NULL, 0, 0, PM_REMOVE))
                DispatchMessageA(&msg);
            frame();
            Sleep((DWORD)frame_ms);
        }
    }
    for (;;) {
        for (;;) {
            g_peeks++;
            if (!PeekMessageA(&msg, NULL, 0, 0, PM_REMOVE))
                break;
            if (msg.message == WM_QUIT)
                return 0;
            if (msg.message == WM_TIMER)
                g_timers++;
            DispatchMessageA(&msg);
        }
        if (g_pause && !g_active) {
            WaitMessage(); /* paused until a message (activation) comes */
            continue;
        }
        QueryPerformanceCounter(&now);
        if (now.QuadPart - last.QuadPart >= period) {
            last.QuadPart += period;
            frame();
        }
    }
}
