/* probe_game.c: a tiny real-time Windows program that knows nothing of w3async, for
 * the injection tests (tests/shim/test_injection.py). It runs a 60-frames-a-second loop
 * paced by QueryPerformanceCounter and Sleep(1), draws into a memory bitmap with
 * BitBlt, and prints what its own clock read at every pass of its loop, so a test can
 * check the virtual clock from the game's side.
 *
 *   probe_game.exe [--passes N] [--print N] [--threads N] [--child] [--crash-at N]
 *
 * --passes N  exit 0 after N passes of the loop (default: never)
 * --print N   print the clock at the first N passes (default 0)
 * --threads N start N threads that sleep 5 ms at a time in a loop (a game's background)
 * --waiters N start N threads that wait 5 ms at a time on an event nobody sets
 * --child     start a copy of itself (a helper process), which sleeps forever
 * --crash-at N  an access violation in the game's own code at pass N (0: before its
 *             first draw call, so before the hook's first step)
 * --msgbox-at N  a message box at pass N (0: before the first step), as a game whose
 *             device could not be made shows one, from the main thread, or with
 *             --msgbox-thread from a thread of its own
 * --msgbox-start K  the box of --msgbox-at at the game's K-th start only (0: its first),
 *             its starts counted in starts.txt of the folder PROBE_STARTS names (a game
 *             whose device could not be made once, as on a loaded machine)
 * It exports its state (probe_state) and an order function (probe_order), as a
 * game's modding interface would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

typedef struct probe_state_t {
    volatile long long passes, frames, orders, last_order, background, waited;
} probe_state_t;

__declspec(dllexport) probe_state_t probe_state;

/* Called once a pass of the loop: a step point by export (W3H_STEP_POINT=export:probe_frame). */
static volatile long long probe_frames_called;

__declspec(dllexport) __attribute__((noinline)) void probe_frame(long long pass)
{
    probe_frames_called = pass;
}

__declspec(dllexport) void probe_order(long long v)
{
    probe_state.orders++;
    probe_state.last_order = v;
}

static DWORD WINAPI background(void *arg)
{
    (void)arg;
    for (;;) {
        Sleep(5);
        InterlockedIncrement64(&probe_state.background);
    }
    return 0;
}

static DWORD WINAPI waiter(void *arg)
{
    HANDLE never = arg;
    for (;;)
        if (WaitForSingleObject(never, 5) == WAIT_TIMEOUT)
            InterlockedIncrement64(&probe_state.waited);
    return 0;
}

static DWORD WINAPI show_box(void *arg)
{
    (void)arg;
    MessageBoxW(NULL, L"Direct3D: the device could not be created.\nCheck your display settings.", L"Probe \u2013 error",
                MB_OK | MB_ICONERROR);
    return 0;
}

/* This start's number: starts.txt in the folder PROBE_STARTS names, counted up (0 without it). */
static long long count_start(void)
{
    const char *dir = getenv("PROBE_STARTS");
    char path[MAX_PATH];
    long long n = 0;
    if (!dir || snprintf(path, sizeof(path), "%s\\starts.txt", dir) >= (int)sizeof(path))
        return 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%lld", &n) != 1)
            n = 0;
        fclose(f);
    }
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "%lld\n", n + 1);
        fclose(f);
    }
    return n;
}

int main(int argc, char **argv)
{
    long long passes = -1, print = 0, threads = 0, waiters = 0, crash_at = -1, msgbox_at = -1, msgbox_start = -1;
    int child = 0, msgbox_thread = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--print") && i + 1 < argc)
            print = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--waiters") && i + 1 < argc)
            waiters = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--crash-at") && i + 1 < argc)
            crash_at = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--msgbox-at") && i + 1 < argc)
            msgbox_at = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--msgbox-start") && i + 1 < argc)
            msgbox_start = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--msgbox-thread"))
            msgbox_thread = 1;
        else if (!strcmp(argv[i], "--child"))
            child = 1;
        else if (!strcmp(argv[i], "--sleeper")) {
            for (;;)
                Sleep(1000);
        } else {
            fprintf(stderr, "probe_game: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (msgbox_start >= 0 && count_start() != msgbox_start)
        msgbox_at = -1;
    if (child) {
        char self[MAX_PATH], cmd[MAX_PATH + 32];
        GetModuleFileNameA(NULL, self, sizeof(self));
        snprintf(cmd, sizeof(cmd), "\"%s\" --sleeper", self);
        STARTUPINFOA si = {.cb = sizeof(si)};
        PROCESS_INFORMATION pi;
        if (CreateProcessA(self, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi))
            printf("probe: helper process %lu\n", (unsigned long)pi.dwProcessId);
    }
    for (long long t = 0; t < threads; t++)
        CreateThread(NULL, 0, background, NULL, 0, NULL);
    HANDLE never = CreateEventW(NULL, TRUE, FALSE, NULL);
    for (long long t = 0; t < waiters; t++)
        CreateThread(NULL, 0, waiter, never, 0, NULL);
    LARGE_INTEGER freq, now, last, prev;
    QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&last);
    prev = last;
    DWORD tick_prev = GetTickCount();
    long long frame_ticks = freq.QuadPart / 60;
    HDC screen = CreateCompatibleDC(NULL), back = CreateCompatibleDC(NULL);
    HBITMAP bm = CreateCompatibleBitmap(screen, 320, 240), bm2 = CreateCompatibleBitmap(screen, 320, 240);
    SelectObject(back, bm);
    SelectObject(screen, bm2);
    printf("probe: frequency %lld\n", (long long)freq.QuadPart);
    fflush(stdout);
    for (;;) {
        if (probe_state.passes == crash_at)
            *(volatile int *)NULL = 1; /* the game's own bug, outside the adapter */
        if (probe_state.passes == msgbox_at) {
            HANDLE t = msgbox_thread ? CreateThread(NULL, 0, show_box, NULL, 0, NULL) : NULL;
            if (t)
                WaitForSingleObject(t, INFINITE);
            else
                show_box(NULL);
        }
        QueryPerformanceCounter(&now);
        while (now.QuadPart - last.QuadPart >= frame_ticks) {
            probe_state.frames++;
            last.QuadPart += frame_ticks;
        }
        PatBlt(back, 0, 0, 320, 240, (probe_state.frames & 1) ? WHITENESS : BLACKNESS);
        BitBlt(screen, 0, 0, 320, 240, back, 0, 0, SRCCOPY);
        DWORD tick = GetTickCount();
        if (probe_state.passes < print) {
            printf("pass %lld qpc %lld tick %lu frames %lld background %lld waited %lld\n", probe_state.passes,
                   (long long)(now.QuadPart - prev.QuadPart), (unsigned long)(tick - tick_prev), probe_state.frames,
                   probe_state.background, probe_state.waited);
            fflush(stdout);
        }
        prev = now;
        tick_prev = tick;
        probe_state.passes++;
        probe_frame(probe_state.passes);
        if (passes >= 0 && probe_state.passes >= passes)
            break;
        Sleep(1);
    }
    printf("probe: %lld passes, %lld frames, %lld orders\n", probe_state.passes, probe_state.frames, probe_state.orders);
    return 0;
}
