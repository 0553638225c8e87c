/* gl_game.c: an OpenGL game that knows nothing of w3async, for the injection tests
 * (tests/test_inject_graphics.py): a window, a WGL context (Wine's over Xvfb and Mesa's
 * llvmpipe), and a frame loop paced at 60 simulation ticks a second by timeGetTime and
 * Sleep(1) under timeBeginPeriod(1), which clears (glClear, an import), draws a
 * triangle with glDrawRangeElements (OpenGL 1.2: only wglGetProcAddress gives it, as it
 * gives every function past 1.1 to a real game) and swaps (SwapBuffers). The
 * simulation (its hash) depends only on its ticks and on the orders the adapter gives
 * (probe_order), never on what was drawn.
 *
 *   gl_game.exe [--ticks N] [--readback]
 *
 * --ticks N    exit 0 after N simulation ticks, printing "gl: ticks N hash H passes P"
 * --readback   after the first frame's draw, read the pixel at the window's centre back:
 *              "gl: pixel 0xAARRGGBB" (the triangle's red 0xffff0000 when it was drawn, the
 *              clear colour 0xff336699 when not)
 * It exports probe_state and probe_order, the probe adapter's (tests/inject/probe_adapter.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <GL/gl.h>
#include <GL/glext.h>
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

static uint64_t g_hash = 1469598103934665603ull; /* FNV-1a over the simulation */

static void tick(void)
{
    uint64_t v = (uint64_t)probe_state.last_order * 31u + (uint64_t)probe_state.frames;
    for (int i = 0; i < 8; i++) {
        g_hash ^= (v >> (8 * i)) & 0xff;
        g_hash *= 1099511628211ull;
    }
    probe_state.frames++;
}

int main(int argc, char **argv)
{
    long long ticks = -1;
    int readback = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ticks") && i + 1 < argc)
            ticks = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--readback"))
            readback = 1;
    }
    WNDCLASSA wc = {0};
    wc.lpfnWndProc = DefWindowProcA;
    wc.hInstance = GetModuleHandleA(NULL);
    wc.lpszClassName = "gl_game";
    RegisterClassA(&wc);
    HWND win = CreateWindowA("gl_game", "gl_game", WS_POPUP, 0, 0, 128, 128, NULL, NULL, wc.hInstance, NULL);
    ShowWindow(win, SW_SHOW);
    HDC dc = GetDC(win);
    PIXELFORMATDESCRIPTOR pfd = {sizeof(pfd), 1, PFD_DRAW_TO_WINDOW | PFD_SUPPORT_OPENGL | PFD_DOUBLEBUFFER,
                                 PFD_TYPE_RGBA, 32};
    int pf = ChoosePixelFormat(dc, &pfd);
    HGLRC rc = pf && SetPixelFormat(dc, pf, &pfd) ? wglCreateContext(dc) : NULL;
    if (!rc || !wglMakeCurrent(dc, rc)) {
        MessageBoxA(win, "No OpenGL context could be made.", "gl_game", MB_OK | MB_ICONERROR);
        return 3;
    }
    PFNGLDRAWRANGEELEMENTSPROC draw = (PFNGLDRAWRANGEELEMENTSPROC)(void *)wglGetProcAddress("glDrawRangeElements");
    if (!draw) {
        MessageBoxA(win, "OpenGL 1.2 is required (glDrawRangeElements).", "gl_game", MB_OK | MB_ICONERROR);
        return 3;
    }
    printf("gl: context made, %s\n", (const char *)glGetString(GL_RENDERER));
    fflush(stdout);
    static const GLfloat tri[] = {-0.8f, -0.8f, 0.8f, -0.8f, 0.0f, 0.8f};
    static const GLushort idx[] = {0, 1, 2};
    glViewport(0, 0, 128, 128);
    glEnableClientState(GL_VERTEX_ARRAY);
    glVertexPointer(2, GL_FLOAT, 0, tri);
    glColor3f(1.0f, 0.0f, 0.0f);
    glClearColor(0.2f, 0.4f, 0.6f, 1.0f);
    timeBeginPeriod(1);
    DWORD last = timeGetTime();
    for (;;) {
        MSG msg;
        while (PeekMessageA(&msg, NULL, 0, 0, PM_REMOVE)) {
            TranslateMessage(&msg);
            DispatchMessageA(&msg);
        }
        DWORD now = timeGetTime();
        while (now - last >= 16) { /* 60 ticks a second of the game's clock */
            tick();
            last += 16;
            if (ticks >= 0 && probe_state.frames >= ticks) {
                printf("gl: ticks %lld hash %016llx passes %lld\n", probe_state.frames, (unsigned long long)g_hash,
                       probe_state.passes);
                fflush(stdout);
                return 0;
            }
        }
        glClear(GL_COLOR_BUFFER_BIT);
        draw(GL_TRIANGLES, 0, 2, 3, GL_UNSIGNED_SHORT, idx);
        if (readback && probe_state.passes == 0) {
            GLubyte px[4] = {0};
            glReadPixels(64, 64, 1, 1, GL_RGBA, GL_UNSIGNED_BYTE, px);
            printf("gl: pixel 0x%02x%02x%02x%02x\n", 0xff, px[0], px[1], px[2]);
            fflush(stdout);
        }
        SwapBuffers(dc);
        probe_state.passes++;
        Sleep(1);
    }
}
