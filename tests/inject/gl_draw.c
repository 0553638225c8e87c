/* gl_draw.c: a Windows program that draws one triangle with OpenGL (WGL, Wine's x11
 * driver over Xvfb and Mesa's llvmpipe), prints its renderer and exits: what a game's
 * first frame does to Mesa's shader cache (tests/runtime/test_sandbox.py). It knows nothing of
 * w3async: under the supervisor its start fails (it never posts), after it has drawn. */
#include <stdio.h>
#include <windows.h>
#include <GL/gl.h>

int main(void)
{
    WNDCLASSA wc = {0};
    wc.lpfnWndProc = DefWindowProcA;
    wc.hInstance = GetModuleHandleA(NULL);
    wc.lpszClassName = "gl_draw";
    RegisterClassA(&wc);
    HWND w = CreateWindowA("gl_draw", "gl_draw", WS_OVERLAPPEDWINDOW, 0, 0, 64, 64, NULL, NULL, wc.hInstance, NULL);
    HDC dc = w ? GetDC(w) : NULL;
    PIXELFORMATDESCRIPTOR pfd = {sizeof(pfd), 1, PFD_DRAW_TO_WINDOW | PFD_SUPPORT_OPENGL | PFD_DOUBLEBUFFER,
                                 PFD_TYPE_RGBA, 32};
    int pf = dc ? ChoosePixelFormat(dc, &pfd) : 0;
    HGLRC rc = pf && SetPixelFormat(dc, pf, &pfd) ? wglCreateContext(dc) : NULL;
    if (!rc || !wglMakeCurrent(dc, rc)) {
        printf("gl_draw: no OpenGL context (window %p, pixel format %d)\n", (void *)w, pf);
        return 1;
    }
    printf("gl_draw: renderer %s\n", (const char *)glGetString(GL_RENDERER));
    glClearColor(0.1f, 0.2f, 0.3f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    glBegin(GL_TRIANGLES);
    glColor3f(1, 0, 0);
    glVertex2f(-0.5f, -0.5f);
    glColor3f(0, 1, 0);
    glVertex2f(0.5f, -0.5f);
    glColor3f(0, 0, 1);
    glVertex2f(0, 0.5f);
    glEnd();
    glFinish();
    SwapBuffers(dc);
    printf("gl_draw: drawn\n");
    fflush(stdout);
    return 0;
}
