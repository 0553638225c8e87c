/* d3d8.c: Direct3D 8's methods by name ("IDirect3DDevice8::Present"), as com.c does
 * Direct3D 9's (a file of its own: d3d8.h and d3d9.h cannot be in one unit). The hook
 * patches Direct3DCreate8 (an import, or GetProcAddress); the first IDirect3D8 it
 * returns gets its CreateDevice pointed at the hook's, and the first device that makes
 * gets its Present, Clear, BeginScene, EndScene and Draw* methods: its class's table,
 * so every later device of the game too. With drawing off, a named method returns
 * D3D_OK at once; Present can be the step point. */
#include "hook.h"
#include "w3s_table.h"

#include <d3d8.h>
#include <stddef.h>
#include <string.h>

#define SLOT(vtbl, method) ((int)(offsetof(vtbl, method) / sizeof(void *)))

static IDirect3D8 *(WINAPI *r_Direct3DCreate8)(UINT);
static HRESULT(WINAPI *r_CreateDevice)(IDirect3D8 *, UINT, D3DDEVTYPE, HWND, DWORD, D3DPRESENT_PARAMETERS *,
                                       IDirect3DDevice8 **);
static HRESULT(WINAPI *r_Present)(IDirect3DDevice8 *, const RECT *, const RECT *, HWND, const RGNDATA *);
static HRESULT(WINAPI *r_Clear)(IDirect3DDevice8 *, DWORD, const D3DRECT *, DWORD, D3DCOLOR, float, DWORD);
static HRESULT(WINAPI *r_BeginScene)(IDirect3DDevice8 *);
static HRESULT(WINAPI *r_EndScene)(IDirect3DDevice8 *);
static HRESULT(WINAPI *r_DrawPrimitive)(IDirect3DDevice8 *, D3DPRIMITIVETYPE, UINT, UINT);
static HRESULT(WINAPI *r_DrawIndexedPrimitive)(IDirect3DDevice8 *, D3DPRIMITIVETYPE, UINT, UINT, UINT, UINT);
static HRESULT(WINAPI *r_DrawPrimitiveUP)(IDirect3DDevice8 *, D3DPRIMITIVETYPE, UINT, const void *, UINT);
static HRESULT(WINAPI *r_DrawIndexedPrimitiveUP)(IDirect3DDevice8 *, D3DPRIMITIVETYPE, UINT, UINT, UINT, const void *,
                                                D3DFORMAT, const void *, UINT);

enum { C_Present, C_Clear, C_BeginScene, C_EndScene, C_DrawPrimitive, C_DrawIndexedPrimitive, C_DrawPrimitiveUP,
       C_DrawIndexedPrimitiveUP, C_N };
static const char *const NAMES[C_N] = {
    "IDirect3DDevice8::Present",         "IDirect3DDevice8::Clear",           "IDirect3DDevice8::BeginScene",
    "IDirect3DDevice8::EndScene",        "IDirect3DDevice8::DrawPrimitive",   "IDirect3DDevice8::DrawIndexedPrimitive",
    "IDirect3DDevice8::DrawPrimitiveUP", "IDirect3DDevice8::DrawIndexedPrimitiveUP"};
static int g_off[C_N]; /* per method above: 1 when it is a no-op */

static HRESULT WINAPI h_Present(IDirect3DDevice8 *d, const RECT *s, const RECT *t, HWND w, const RGNDATA *r)
{
    hk_step_at(NAMES[C_Present]);
    return g_off[C_Present] ? D3D_OK : r_Present(d, s, t, w, r);
}

static HRESULT WINAPI h_Clear(IDirect3DDevice8 *d, DWORD n, const D3DRECT *r, DWORD f, D3DCOLOR c, float z, DWORD s)
{
    return g_off[C_Clear] ? D3D_OK : r_Clear(d, n, r, f, c, z, s);
}

static HRESULT WINAPI h_BeginScene(IDirect3DDevice8 *d) { return g_off[C_BeginScene] ? D3D_OK : r_BeginScene(d); }
static HRESULT WINAPI h_EndScene(IDirect3DDevice8 *d) { return g_off[C_EndScene] ? D3D_OK : r_EndScene(d); }

static HRESULT WINAPI h_DrawPrimitive(IDirect3DDevice8 *d, D3DPRIMITIVETYPE t, UINT start, UINT n)
{
    return g_off[C_DrawPrimitive] ? D3D_OK : r_DrawPrimitive(d, t, start, n);
}

static HRESULT WINAPI h_DrawIndexedPrimitive(IDirect3DDevice8 *d, D3DPRIMITIVETYPE t, UINT lo, UINT nv, UINT start,
                                             UINT n)
{
    return g_off[C_DrawIndexedPrimitive] ? D3D_OK : r_DrawIndexedPrimitive(d, t, lo, nv, start, n);
}

static HRESULT WINAPI h_DrawPrimitiveUP(IDirect3DDevice8 *d, D3DPRIMITIVETYPE t, UINT n, const void *v, UINT stride)
{
    return g_off[C_DrawPrimitiveUP] ? D3D_OK : r_DrawPrimitiveUP(d, t, n, v, stride);
}

static HRESULT WINAPI h_DrawIndexedPrimitiveUP(IDirect3DDevice8 *d, D3DPRIMITIVETYPE t, UINT lo, UINT nv, UINT n,
                                               const void *idx, D3DFORMAT f, const void *v, UINT stride)
{
    return g_off[C_DrawIndexedPrimitiveUP] ? D3D_OK : r_DrawIndexedPrimitiveUP(d, t, lo, nv, n, idx, f, v, stride);
}

static void patch_device(IDirect3DDevice8 *d)
{
#define M(method) hk_patch_class(d, SLOT(IDirect3DDevice8Vtbl, method), (void *)h_##method, (void **)&r_##method, \
                                 NAMES[C_##method])
    M(Present);
    M(Clear);
    M(BeginScene);
    M(EndScene);
    M(DrawPrimitive);
    M(DrawIndexedPrimitive);
    M(DrawPrimitiveUP);
    M(DrawIndexedPrimitiveUP);
#undef M
}

static HRESULT WINAPI h_CreateDevice(IDirect3D8 *d3d, UINT a, D3DDEVTYPE t, HWND w, DWORD f, D3DPRESENT_PARAMETERS *p,
                                     IDirect3DDevice8 **out)
{
    HRESULT hr = r_CreateDevice(d3d, a, t, w, f, p, out);
    if (SUCCEEDED(hr) && out && *out)
        patch_device(*out);
    return hr;
}

static IDirect3D8 *WINAPI h_Direct3DCreate8(UINT sdk)
{
    if (!r_Direct3DCreate8)
        r_Direct3DCreate8 = hk_graphics_export("d3d8.dll", "Direct3DCreate8");
    IDirect3D8 *d3d = r_Direct3DCreate8(sdk);
    if (d3d)
        hk_patch_class(d3d, SLOT(IDirect3D8Vtbl, CreateDevice), (void *)h_CreateDevice, (void **)&r_CreateDevice,
                       "IDirect3D8::CreateDevice");
    return d3d;
}

/* The creator is an import (HK_LOADER: always patched); the methods are named for the
 * step point and draw_calls, and reached through it. */
hk_fn hk_d3d8_fns[] = {
    {"Direct3DCreate8", (void *)h_Direct3DCreate8, (void **)&r_Direct3DCreate8, HK_LOADER, 0},
    {"IDirect3DDevice8::Present", (void *)h_Present, (void **)&r_Present, HK_STEP | HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice8::Clear", (void *)h_Clear, (void **)&r_Clear, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice8::BeginScene", (void *)h_BeginScene, (void **)&r_BeginScene, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice8::EndScene", (void *)h_EndScene, (void **)&r_EndScene, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice8::DrawPrimitive", (void *)h_DrawPrimitive, (void **)&r_DrawPrimitive, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice8::DrawIndexedPrimitive", (void *)h_DrawIndexedPrimitive, (void **)&r_DrawIndexedPrimitive,
     HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice8::DrawPrimitiveUP", (void *)h_DrawPrimitiveUP, (void **)&r_DrawPrimitiveUP, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice8::DrawIndexedPrimitiveUP", (void *)h_DrawIndexedPrimitiveUP, (void **)&r_DrawIndexedPrimitiveUP,
     HK_DRAW | HK_METHOD, 0},
};
const int hk_n_d3d8_fns = sizeof(hk_d3d8_fns) / sizeof(hk_d3d8_fns[0]);

int hk_d3d8_off(const char *name)
{
    return hk_off_by_name(NAMES, g_off, C_N, name);
}
