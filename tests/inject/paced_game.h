/* paced_game.h: what the graphics test games share (d3d9_game.c, gl_game.c,
 * d3d11_game.c): the probe adapter's exports (tests/inject/probe_adapter.c), the
 * arguments, and a simulation paced at 60 ticks a second of the game's clock
 * (timeGetTime), whose hash depends only on its ticks and the adapter's orders, never
 * on what was drawn.
 *
 *   game.exe [--ticks N] [--readback]
 *
 * --ticks N    exit 0 after N simulation ticks, printing "TAG: ticks N hash H passes P"
 * --readback   the game reads a pixel back after its first frame's drawing and prints
 *              "TAG: pixel 0xAARRGGBB"
 * A header of a test program, one translation unit each: its functions are static. */
#ifndef PACED_GAME_H
#define PACED_GAME_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <mmsystem.h>

typedef struct probe_state_t {
    volatile long long passes, frames, orders, last_order, background;
} probe_state_t;

__declspec(dllexport) probe_state_t probe_state;

__declspec(dllexport) void probe_order(long long v)
{
    probe_state.orders++;
    probe_state.last_order = v;
}

typedef struct paced {
    const char *tag;
    long long ticks; /* -1: run for good */
    int readback;
    DWORD last;
    uint64_t hash; /* FNV-1a over the simulation */
} paced;

static paced paced_start(const char *tag, int argc, char **argv)
{
    paced p = {tag, -1, 0, 0, 1469598103934665603ull};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ticks") && i + 1 < argc)
            p.ticks = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--readback"))
            p.readback = 1;
    }
    timeBeginPeriod(1);
    p.last = timeGetTime();
    return p;
}

/* A frame's messages, then the ticks the game's clock made due; exits 0 after --ticks. */
static void paced_frame(paced *p)
{
    MSG msg;
    while (PeekMessageA(&msg, NULL, 0, 0, PM_REMOVE)) {
        TranslateMessage(&msg);
        DispatchMessageA(&msg);
    }
    DWORD now = timeGetTime();
    while (now - p->last >= 16) {
        uint64_t v = (uint64_t)probe_state.last_order * 31u + (uint64_t)probe_state.frames;
        for (int i = 0; i < 8; i++) {
            p->hash ^= (v >> (8 * i)) & 0xff;
            p->hash *= 1099511628211ull;
        }
        probe_state.frames++;
        p->last += 16;
        if (p->ticks >= 0 && probe_state.frames >= p->ticks) {
            printf("%s: ticks %lld hash %016llx passes %lld\n", p->tag, probe_state.frames, (unsigned long long)p->hash,
                   probe_state.passes);
            fflush(stdout);
            exit(0);
        }
    }
}

/* Whether this frame reads its pixel back (the first, under --readback). */
static int paced_reads_back(const paced *p) { return p->readback && probe_state.passes == 0; }

static void paced_pixel(const paced *p, unsigned r, unsigned g, unsigned b)
{
    printf("%s: pixel 0xff%02x%02x%02x\n", p->tag, r & 0xff, g & 0xff, b & 0xff);
    fflush(stdout);
}

/* A frame drawn: the pass counted, a millisecond slept (the game's own pacing). */
static void paced_end(void)
{
    probe_state.passes++;
    Sleep(1);
}

static HWND paced_window(const char *cls, DWORD style, int w, int h)
{
    WNDCLASSA wc = {0};
    wc.lpfnWndProc = DefWindowProcA;
    wc.hInstance = GetModuleHandleA(NULL);
    wc.lpszClassName = cls;
    RegisterClassA(&wc);
    HWND win = CreateWindowA(cls, cls, style, 0, 0, w, h, NULL, NULL, wc.hInstance, NULL);
    ShowWindow(win, SW_SHOW);
    return win;
}

#endif
