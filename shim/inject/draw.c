/* draw.c: drawing off (W3H_DRAW=0: the calls named in W3H_DRAW_CALLS succeed at once and
 * draw nothing) and the draw calls that can be the step point (a present, a blit made
 * once a frame). The game still builds every frame, so its state does not change. */
#include "hook.h"
#include "w3s_table.h"

#include <stdio.h>
#include <string.h>

static BOOL(WINAPI *r_SwapBuffers)(HDC);
static BOOL(WINAPI *r_wglSwapBuffers)(HDC);
static BOOL(WINAPI *r_BitBlt)(HDC, int, int, int, int, HDC, int, int, DWORD);
static BOOL(WINAPI *r_StretchBlt)(HDC, int, int, int, int, HDC, int, int, int, int, DWORD);
static int(WINAPI *r_StretchDIBits)(HDC, int, int, int, int, int, int, int, int, const void *, const BITMAPINFO *, UINT, DWORD);
static int(WINAPI *r_SetDIBitsToDevice)(HDC, int, int, DWORD, DWORD, int, int, UINT, UINT, const void *, const BITMAPINFO *, UINT);
static BOOL(WINAPI *r_PatBlt)(HDC, int, int, int, int, DWORD);
static int(WINAPI *r_FillRect)(HDC, const RECT *, HBRUSH);
static BOOL(WINAPI *r_Rectangle)(HDC, int, int, int, int);
static BOOL(WINAPI *r_Ellipse)(HDC, int, int, int, int);

static int g_draw_off[16]; /* per draw function below: 1 when it is a no-op */
enum { D_SwapBuffers, D_wglSwapBuffers, D_BitBlt, D_StretchBlt, D_StretchDIBits, D_SetDIBitsToDevice, D_PatBlt,
       D_FillRect, D_Rectangle, D_Ellipse, D_N };
static const char *const DRAW_NAMES[D_N] = {"SwapBuffers", "wglSwapBuffers", "BitBlt", "StretchBlt", "StretchDIBits",
                                            "SetDIBitsToDevice", "PatBlt", "FillRect", "Rectangle", "Ellipse"};

/* A frame's step, when name is the step point and this is the step thread. */
static void step_at(const char *name)
{
    if (hk_claim_step_thread(name))
        hk_step();
}

static BOOL WINAPI h_SwapBuffers(HDC dc)
{
    step_at("SwapBuffers");
    return g_draw_off[D_SwapBuffers] ? TRUE : r_SwapBuffers(dc);
}

static BOOL WINAPI h_wglSwapBuffers(HDC dc)
{
    step_at("wglSwapBuffers");
    if (g_draw_off[D_wglSwapBuffers] || !r_wglSwapBuffers)
        return TRUE;
    return r_wglSwapBuffers(dc);
}

static BOOL WINAPI h_BitBlt(HDC d, int x, int y, int w, int h, HDC s, int sx, int sy, DWORD rop)
{
    step_at("BitBlt");
    return g_draw_off[D_BitBlt] ? TRUE : r_BitBlt(d, x, y, w, h, s, sx, sy, rop);
}

static BOOL WINAPI h_StretchBlt(HDC d, int x, int y, int w, int h, HDC s, int sx, int sy, int sw, int sh, DWORD rop)
{
    return g_draw_off[D_StretchBlt] ? TRUE : r_StretchBlt(d, x, y, w, h, s, sx, sy, sw, sh, rop);
}

static int WINAPI h_StretchDIBits(HDC d, int x, int y, int w, int h, int sx, int sy, int sw, int sh, const void *bits,
                                  const BITMAPINFO *bi, UINT use, DWORD rop)
{
    step_at("StretchDIBits");
    return g_draw_off[D_StretchDIBits] ? (sh < 0 ? -sh : sh) : r_StretchDIBits(d, x, y, w, h, sx, sy, sw, sh, bits, bi, use, rop);
}

static int WINAPI h_SetDIBitsToDevice(HDC d, int x, int y, DWORD w, DWORD h, int sx, int sy, UINT start, UINT lines,
                                      const void *bits, const BITMAPINFO *bi, UINT use)
{
    return g_draw_off[D_SetDIBitsToDevice] ? (int)lines : r_SetDIBitsToDevice(d, x, y, w, h, sx, sy, start, lines, bits, bi, use);
}

static BOOL WINAPI h_PatBlt(HDC d, int x, int y, int w, int h, DWORD rop)
{
    return g_draw_off[D_PatBlt] ? TRUE : r_PatBlt(d, x, y, w, h, rop);
}

static int WINAPI h_FillRect(HDC d, const RECT *r, HBRUSH b) { return g_draw_off[D_FillRect] ? 1 : r_FillRect(d, r, b); }
static BOOL WINAPI h_Rectangle(HDC d, int a, int b, int c, int e) { return g_draw_off[D_Rectangle] ? TRUE : r_Rectangle(d, a, b, c, e); }
static BOOL WINAPI h_Ellipse(HDC d, int a, int b, int c, int e) { return g_draw_off[D_Ellipse] ? TRUE : r_Ellipse(d, a, b, c, e); }

#define FN(name, kind) {#name, (void *)h_##name, (void **)&r_##name, kind, 0}
hk_fn hk_draw_fns[] = {
    FN(SwapBuffers, HK_STEP | HK_DRAW), FN(wglSwapBuffers, HK_STEP | HK_DRAW), FN(BitBlt, HK_STEP | HK_DRAW),
    FN(StretchBlt, HK_DRAW), FN(StretchDIBits, HK_STEP | HK_DRAW), FN(SetDIBitsToDevice, HK_DRAW),
    FN(PatBlt, HK_DRAW), FN(FillRect, HK_DRAW), FN(Rectangle, HK_DRAW), FN(Ellipse, HK_DRAW),
};
#undef FN
const int hk_n_draw_fns = sizeof(hk_draw_fns) / sizeof(hk_draw_fns[0]);

void hk_draw_off(const char *list)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
        int k = 0;
        while (k < D_N && strcmp(DRAW_NAMES[k], tok))
            k++;
        if (k == D_N) {
            char known[256] = "";
            for (int j = 0; j < D_N; j++)
                strcat(strcat(known, j ? ", " : ""), DRAW_NAMES[j]);
            hk_fatal(W3S_EXIT_INJECT, "W3H_DRAW_CALLS names %s, which is not a draw call the hook knows (%s)", tok, known);
        }
        g_draw_off[k] = 1;
        hk_find_fn(tok)->on = 1;
    }
}

void hk_draw_init(void)
{
    /* The real functions are the hook's own imports: its import table is never patched. */
    r_SwapBuffers = SwapBuffers;
    r_BitBlt = BitBlt;
    r_StretchBlt = StretchBlt;
    r_StretchDIBits = StretchDIBits;
    r_SetDIBitsToDevice = SetDIBitsToDevice;
    r_PatBlt = PatBlt;
    r_FillRect = FillRect;
    r_Rectangle = Rectangle;
    r_Ellipse = Ellipse;
    HMODULE gl = GetModuleHandleA("opengl32.dll");
    r_wglSwapBuffers = gl ? (BOOL(WINAPI *)(HDC))(void *)GetProcAddress(gl, "wglSwapBuffers") : NULL;
}
