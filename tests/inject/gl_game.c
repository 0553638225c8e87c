/* gl_game.c: an OpenGL game that knows nothing of w3async, for the injection tests
 * (tests/shim/test_inject_graphics.py): a window, a WGL context (Wine's over Xvfb and Mesa's
 * llvmpipe), and a frame loop paced at 60 simulation ticks a second by timeGetTime and
 * Sleep(1) under timeBeginPeriod(1), which clears (glClear, an import), draws a
 * triangle with glDrawRangeElements (OpenGL 1.2: only wglGetProcAddress gives it, as it
 * gives every function past 1.1 to a real game) and swaps (SwapBuffers). The
 * simulation (its hash) depends only on its ticks and on the orders the adapter gives
 * (probe_order), never on what was drawn.
 * --readback (paced_game.h) reads the pixel at the window's centre after the first
 * frame's draw: the triangle's red 0xffff0000 when it was drawn, the clear colour
 * 0xff336699 when not.
 */
#include "paced_game.h"
#include <GL/gl.h>
#include <GL/glext.h>

int main(int argc, char **argv)
{
    paced run = paced_start("gl", argc, argv);
    HWND win = paced_window("gl_game", WS_POPUP, 128, 128);
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
    for (;;) {
        paced_frame(&run);
        glClear(GL_COLOR_BUFFER_BIT);
        draw(GL_TRIANGLES, 0, 2, 3, GL_UNSIGNED_SHORT, idx);
        if (paced_reads_back(&run)) {
            GLubyte px[4] = {0};
            glReadPixels(64, 64, 1, 1, GL_RGBA, GL_UNSIGNED_BYTE, px);
            paced_pixel(&run, px[0], px[1], px[2]);
        }
        SwapBuffers(dc);
        paced_end();
    }
}
