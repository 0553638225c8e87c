/* draw.c: drawing off (W3H_DRAW=0: the calls named in W3H_DRAW_CALLS succeed at once and
 * draw nothing) and the draw calls that can be the step point (a present, a blit made
 * once a frame). The game still builds every frame, so its state does not change. */
#include "hook.h"
#include "w3s_table.h"

#include <stdio.h>
#include <stdlib.h>
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

static BOOL WINAPI h_SwapBuffers(HDC dc)
{
    hk_step_at("SwapBuffers");
    return g_draw_off[D_SwapBuffers] ? TRUE : r_SwapBuffers(dc);
}

static BOOL WINAPI h_wglSwapBuffers(HDC dc)
{
    hk_step_at("wglSwapBuffers");
    if (g_draw_off[D_wglSwapBuffers] || !r_wglSwapBuffers)
        return TRUE;
    return r_wglSwapBuffers(dc);
}

static BOOL WINAPI h_BitBlt(HDC d, int x, int y, int w, int h, HDC s, int sx, int sy, DWORD rop)
{
    hk_step_at("BitBlt");
    return g_draw_off[D_BitBlt] ? TRUE : r_BitBlt(d, x, y, w, h, s, sx, sy, rop);
}

static BOOL WINAPI h_StretchBlt(HDC d, int x, int y, int w, int h, HDC s, int sx, int sy, int sw, int sh, DWORD rop)
{
    return g_draw_off[D_StretchBlt] ? TRUE : r_StretchBlt(d, x, y, w, h, s, sx, sy, sw, sh, rop);
}

static int WINAPI h_StretchDIBits(HDC d, int x, int y, int w, int h, int sx, int sy, int sw, int sh, const void *bits,
                                  const BITMAPINFO *bi, UINT use, DWORD rop)
{
    hk_step_at("StretchDIBits");
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

/* ---- draw calls the hook does not know: "Name@ARGBYTES[=RET]" ---- */

#define HK_EXTRA_MAX 32
hk_fn hk_extra_fns[HK_EXTRA_MAX];
int hk_n_extra_fns;
static char g_extra_names[HK_EXTRA_MAX][64];
static BYTE *g_stubs; /* one 16-byte stub per extra call */

/* A stub that returns ret and, on i386, pops argbytes of stdcall arguments: the calls
 * are the game's imports, WINAPI (stdcall) on i386, where the callee pops them; on
 * x86-64 the caller does, and argbytes only has to be given (a recipe works for both). */
static void *make_stub(int k, uint32_t ret, unsigned argbytes)
{
    if (!g_stubs) {
        g_stubs = VirtualAlloc(NULL, HK_EXTRA_MAX * 16, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
        if (!g_stubs)
            hk_fatal(W3S_EXIT_INJECT, "draw calls off: VirtualAlloc failed (Windows error %lu)", (unsigned long)GetLastError());
    }
    BYTE *p = g_stubs + 16 * k;
    p[0] = 0xB8; /* mov eax, imm32 (on x86-64 it zero-extends into rax) */
    memcpy(p + 1, &ret, 4);
#ifdef _WIN64
    (void)argbytes;
    p[5] = 0xC3; /* ret */
#else
    p[5] = 0xC2; /* ret imm16 */
    p[6] = (BYTE)(argbytes & 0xff);
    p[7] = (BYTE)(argbytes >> 8);
#endif
    return p;
}

/* One "Name@ARGBYTES[=RET]" entry made a no-op; a fatal error naming what is wrong. */
static void extra_off(const char *tok)
{
    const char *at = strchr(tok, '@');
    char name[64];
    if (!at) {
        char known[256] = "";
        for (int j = 0; j < D_N; j++)
            strcat(strcat(known, j ? ", " : ""), DRAW_NAMES[j]);
        hk_fatal(W3S_EXIT_INJECT, "W3H_DRAW_CALLS names %s, which is not a draw call the hook knows (%s): to turn off "
                 "another call, give the bytes of its arguments as i386 stdcall pops them, %s@N (docs/hooking.md)",
                 tok, known, tok);
    }
    char *end;
    unsigned long bytes = strtoul(at + 1, &end, 10);
    long ret = 1;
    int bad = end == at + 1 || bytes > 256 || bytes % 4 || (*end && *end != '=');
    if (!bad && *end == '=') {
        ret = strtol(end + 1, &end, 0);
        bad = *end != 0;
    }
    if (bad || at == tok || (size_t)(at - tok) >= sizeof(name))
        hk_fatal(W3S_EXIT_INJECT, "W3H_DRAW_CALLS names %s: expected Name@ARGBYTES or Name@ARGBYTES=RETURN, ARGBYTES a "
                 "multiple of 4 up to 256 (e.g. TextOutA@20)", tok);
    snprintf(name, sizeof(name), "%.*s", (int)(at - tok), tok);
    if (hk_find_fn(name))
        hk_fatal(W3S_EXIT_INJECT, "W3H_DRAW_CALLS names %s: %s is a call the hook hooks itself; name it without @", tok, name);
    if (hk_n_extra_fns == HK_EXTRA_MAX)
        hk_fatal(W3S_EXIT_INJECT, "W3H_DRAW_CALLS names more than %d calls the hook does not know", HK_EXTRA_MAX);
    int k = hk_n_extra_fns++;
    memcpy(g_extra_names[k], name, sizeof(name));
    hk_extra_fns[k] = (hk_fn){g_extra_names[k], make_stub(k, (uint32_t)ret, (unsigned)bytes), NULL, HK_DRAW, 1};
}

void hk_draw_off(const char *list, const hk_off_fn *methods, int n_methods)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
        int k = 0;
        while (k < D_N && strcmp(DRAW_NAMES[k], tok))
            k++;
        if (k == D_N) {
            int m = 0;
            while (m < n_methods && !methods[m](tok)) /* a graphics API's method by name, else Name@ARGBYTES */
                m++;
            if (m == n_methods)
                extra_off(tok);
            continue;
        }
        g_draw_off[k] = 1;
        hk_find_fn(tok)->on = 1;
    }
    if (g_stubs) {
        DWORD old;
        if (!VirtualProtect(g_stubs, HK_EXTRA_MAX * 16, PAGE_EXECUTE_READ, &old))
            hk_fatal(W3S_EXIT_INJECT, "draw calls off: VirtualProtect failed (Windows error %lu)", (unsigned long)GetLastError());
        FlushInstructionCache(GetCurrentProcess(), g_stubs, HK_EXTRA_MAX * 16);
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
