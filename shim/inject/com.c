/* com.c: Direct3D 9's methods by name ("IDirect3DDevice9::Present"), which no import
 * table holds: a device's methods are COM calls through its method table. The hook
 * patches Direct3DCreate9 and Direct3DCreate9Ex (imports, or GetProcAddress); at the
 * first IDirect3D9 they return it points that object's CreateDevice (and CreateDeviceEx)
 * at its own, and at the first device those make, the device's Present, PresentEx,
 * Clear, BeginScene, EndScene and Draw* methods. A method table is the class's, shared
 * by every object of it, so one patch holds for every device the game makes after.
 *
 * The methods are then like the hook's draw calls (draw.c): with drawing off, a named
 * one returns D3D_OK at once and draws nothing (the game still builds every frame, so
 * its state does not change); Present and PresentEx can be the step point. Any other
 * COM method: host->patch_method (w3h.h), the same patch. */
#include "hook.h"
#include "w3s_table.h"

#include <d3d9.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* A method's index in its table, from the SDK's declaration (C interface). */
#define SLOT(vtbl, method) ((int)(offsetof(vtbl, method) / sizeof(void *)))

static IDirect3D9 *(WINAPI *r_Direct3DCreate9)(UINT);
static HRESULT(WINAPI *r_Direct3DCreate9Ex)(UINT, IDirect3D9Ex **);
static HRESULT(WINAPI *r_CreateDevice)(IDirect3D9 *, UINT, D3DDEVTYPE, HWND, DWORD, D3DPRESENT_PARAMETERS *,
                                       IDirect3DDevice9 **);
static HRESULT(WINAPI *r_CreateDeviceEx)(IDirect3D9Ex *, UINT, D3DDEVTYPE, HWND, DWORD, D3DPRESENT_PARAMETERS *,
                                         D3DDISPLAYMODEEX *, IDirect3DDevice9Ex **);
static HRESULT(WINAPI *r_Present)(IDirect3DDevice9 *, const RECT *, const RECT *, HWND, const RGNDATA *);
static HRESULT(WINAPI *r_PresentEx)(IDirect3DDevice9Ex *, const RECT *, const RECT *, HWND, const RGNDATA *, DWORD);
static HRESULT(WINAPI *r_Clear)(IDirect3DDevice9 *, DWORD, const D3DRECT *, DWORD, D3DCOLOR, float, DWORD);
static HRESULT(WINAPI *r_BeginScene)(IDirect3DDevice9 *);
static HRESULT(WINAPI *r_EndScene)(IDirect3DDevice9 *);
static HRESULT(WINAPI *r_DrawPrimitive)(IDirect3DDevice9 *, D3DPRIMITIVETYPE, UINT, UINT);
static HRESULT(WINAPI *r_DrawIndexedPrimitive)(IDirect3DDevice9 *, D3DPRIMITIVETYPE, INT, UINT, UINT, UINT, UINT);
static HRESULT(WINAPI *r_DrawPrimitiveUP)(IDirect3DDevice9 *, D3DPRIMITIVETYPE, UINT, const void *, UINT);
static HRESULT(WINAPI *r_DrawIndexedPrimitiveUP)(IDirect3DDevice9 *, D3DPRIMITIVETYPE, UINT, UINT, UINT, const void *,
                                                D3DFORMAT, const void *, UINT);

enum { C_Present, C_PresentEx, C_Clear, C_BeginScene, C_EndScene, C_DrawPrimitive, C_DrawIndexedPrimitive,
       C_DrawPrimitiveUP, C_DrawIndexedPrimitiveUP, C_N };
static int g_off[C_N]; /* per method above: 1 when it is a no-op */

void hk_patch_class(void *object, int index, void *repl, void **real, const char *name)
{
    void *before = hk_patch_method(object, (uint32_t)index, repl);
    if (before && !*real)
        *real = before;
    else if (!before && *(void **)((ULONG_PTR *)*(void ***)object + index) != repl)
        hk_fatal(W3S_EXIT_INJECT, "cannot patch the method %s (VirtualProtect failed)", name);
}

static HRESULT WINAPI h_Present(IDirect3DDevice9 *d, const RECT *s, const RECT *t, HWND w, const RGNDATA *r)
{
    hk_step_at("IDirect3DDevice9::Present");
    return g_off[C_Present] ? D3D_OK : r_Present(d, s, t, w, r);
}

static HRESULT WINAPI h_PresentEx(IDirect3DDevice9Ex *d, const RECT *s, const RECT *t, HWND w, const RGNDATA *r,
                                  DWORD flags)
{
    hk_step_at("IDirect3DDevice9Ex::PresentEx");
    return g_off[C_PresentEx] ? D3D_OK : r_PresentEx(d, s, t, w, r, flags);
}

static HRESULT WINAPI h_Clear(IDirect3DDevice9 *d, DWORD n, const D3DRECT *r, DWORD f, D3DCOLOR c, float z, DWORD s)
{
    return g_off[C_Clear] ? D3D_OK : r_Clear(d, n, r, f, c, z, s);
}

static HRESULT WINAPI h_BeginScene(IDirect3DDevice9 *d) { return g_off[C_BeginScene] ? D3D_OK : r_BeginScene(d); }
static HRESULT WINAPI h_EndScene(IDirect3DDevice9 *d) { return g_off[C_EndScene] ? D3D_OK : r_EndScene(d); }

static HRESULT WINAPI h_DrawPrimitive(IDirect3DDevice9 *d, D3DPRIMITIVETYPE t, UINT start, UINT n)
{
    return g_off[C_DrawPrimitive] ? D3D_OK : r_DrawPrimitive(d, t, start, n);
}

static HRESULT WINAPI h_DrawIndexedPrimitive(IDirect3DDevice9 *d, D3DPRIMITIVETYPE t, INT base, UINT lo, UINT nv,
                                             UINT start, UINT n)
{
    return g_off[C_DrawIndexedPrimitive] ? D3D_OK : r_DrawIndexedPrimitive(d, t, base, lo, nv, start, n);
}

static HRESULT WINAPI h_DrawPrimitiveUP(IDirect3DDevice9 *d, D3DPRIMITIVETYPE t, UINT n, const void *v, UINT stride)
{
    return g_off[C_DrawPrimitiveUP] ? D3D_OK : r_DrawPrimitiveUP(d, t, n, v, stride);
}

static HRESULT WINAPI h_DrawIndexedPrimitiveUP(IDirect3DDevice9 *d, D3DPRIMITIVETYPE t, UINT lo, UINT nv, UINT n,
                                               const void *idx, D3DFORMAT f, const void *v, UINT stride)
{
    return g_off[C_DrawIndexedPrimitiveUP] ? D3D_OK : r_DrawIndexedPrimitiveUP(d, t, lo, nv, n, idx, f, v, stride);
}

/* The device's methods, at the first device (its class's table). */
static void patch_device(IDirect3DDevice9 *d, int ex)
{
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, Present), (void *)h_Present, (void **)&r_Present, "IDirect3DDevice9::Present");
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, Clear), (void *)h_Clear, (void **)&r_Clear, "IDirect3DDevice9::Clear");
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, BeginScene), (void *)h_BeginScene, (void **)&r_BeginScene,
          "IDirect3DDevice9::BeginScene");
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, EndScene), (void *)h_EndScene, (void **)&r_EndScene, "IDirect3DDevice9::EndScene");
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, DrawPrimitive), (void *)h_DrawPrimitive, (void **)&r_DrawPrimitive,
          "IDirect3DDevice9::DrawPrimitive");
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, DrawIndexedPrimitive), (void *)h_DrawIndexedPrimitive,
          (void **)&r_DrawIndexedPrimitive, "IDirect3DDevice9::DrawIndexedPrimitive");
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, DrawPrimitiveUP), (void *)h_DrawPrimitiveUP, (void **)&r_DrawPrimitiveUP,
          "IDirect3DDevice9::DrawPrimitiveUP");
    hk_patch_class(d, SLOT(IDirect3DDevice9Vtbl, DrawIndexedPrimitiveUP), (void *)h_DrawIndexedPrimitiveUP,
          (void **)&r_DrawIndexedPrimitiveUP, "IDirect3DDevice9::DrawIndexedPrimitiveUP");
    if (ex)
        hk_patch_class(d, SLOT(IDirect3DDevice9ExVtbl, PresentEx), (void *)h_PresentEx, (void **)&r_PresentEx,
              "IDirect3DDevice9Ex::PresentEx");
}

static HRESULT WINAPI h_CreateDevice(IDirect3D9 *d3d, UINT a, D3DDEVTYPE t, HWND w, DWORD f, D3DPRESENT_PARAMETERS *p,
                                     IDirect3DDevice9 **out)
{
    HRESULT hr = r_CreateDevice(d3d, a, t, w, f, p, out);
    if (SUCCEEDED(hr) && out && *out)
        patch_device(*out, 0);
    return hr;
}

static HRESULT WINAPI h_CreateDeviceEx(IDirect3D9Ex *d3d, UINT a, D3DDEVTYPE t, HWND w, DWORD f,
                                       D3DPRESENT_PARAMETERS *p, D3DDISPLAYMODEEX *m, IDirect3DDevice9Ex **out)
{
    HRESULT hr = r_CreateDeviceEx(d3d, a, t, w, f, p, m, out);
    if (SUCCEEDED(hr) && out && *out)
        patch_device((IDirect3DDevice9 *)*out, 1);
    return hr;
}

void *hk_graphics_export(const char *dll, const char *name)
{
    HMODULE m = GetModuleHandleA(dll);
    void *f = m ? (void *)GetProcAddress(m, name) : NULL;
    if (!f)
        hk_fatal(W3S_EXIT_INJECT, "the game called %s, which %s does not export here", name, dll);
    return f;
}

static void *d3d9_export(const char *name) { return hk_graphics_export("d3d9.dll", name); }

static IDirect3D9 *WINAPI h_Direct3DCreate9(UINT sdk)
{
    if (!r_Direct3DCreate9)
        r_Direct3DCreate9 = d3d9_export("Direct3DCreate9");
    IDirect3D9 *d3d = r_Direct3DCreate9(sdk);
    if (d3d)
        hk_patch_class(d3d, SLOT(IDirect3D9Vtbl, CreateDevice), (void *)h_CreateDevice, (void **)&r_CreateDevice,
              "IDirect3D9::CreateDevice");
    return d3d;
}

static HRESULT WINAPI h_Direct3DCreate9Ex(UINT sdk, IDirect3D9Ex **out)
{
    if (!r_Direct3DCreate9Ex)
        r_Direct3DCreate9Ex = d3d9_export("Direct3DCreate9Ex");
    HRESULT hr = r_Direct3DCreate9Ex(sdk, out);
    if (SUCCEEDED(hr) && out && *out) {
        hk_patch_class(*out, SLOT(IDirect3D9ExVtbl, CreateDevice), (void *)h_CreateDevice, (void **)&r_CreateDevice,
              "IDirect3D9Ex::CreateDevice");
        hk_patch_class(*out, SLOT(IDirect3D9ExVtbl, CreateDeviceEx), (void *)h_CreateDeviceEx, (void **)&r_CreateDeviceEx,
              "IDirect3D9Ex::CreateDeviceEx");
    }
    return hr;
}

/* The creators are imports (kind HK_LOADER: always patched); the methods are named here
 * for the step point and draw_calls, and reached through the creators. */
hk_fn hk_com_fns[] = {
    {"Direct3DCreate9", (void *)h_Direct3DCreate9, (void **)&r_Direct3DCreate9, HK_LOADER, 0},
    {"Direct3DCreate9Ex", (void *)h_Direct3DCreate9Ex, (void **)&r_Direct3DCreate9Ex, HK_LOADER, 0},
    {"IDirect3DDevice9::Present", (void *)h_Present, (void **)&r_Present, HK_STEP | HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9Ex::PresentEx", (void *)h_PresentEx, (void **)&r_PresentEx, HK_STEP | HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9::Clear", (void *)h_Clear, (void **)&r_Clear, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9::BeginScene", (void *)h_BeginScene, (void **)&r_BeginScene, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9::EndScene", (void *)h_EndScene, (void **)&r_EndScene, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9::DrawPrimitive", (void *)h_DrawPrimitive, (void **)&r_DrawPrimitive, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9::DrawIndexedPrimitive", (void *)h_DrawIndexedPrimitive, (void **)&r_DrawIndexedPrimitive,
     HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9::DrawPrimitiveUP", (void *)h_DrawPrimitiveUP, (void **)&r_DrawPrimitiveUP, HK_DRAW | HK_METHOD, 0},
    {"IDirect3DDevice9::DrawIndexedPrimitiveUP", (void *)h_DrawIndexedPrimitiveUP, (void **)&r_DrawIndexedPrimitiveUP,
     HK_DRAW | HK_METHOD, 0},
};
const int hk_n_com_fns = sizeof(hk_com_fns) / sizeof(hk_com_fns[0]);

int hk_off_by_name(const char *const *names, int *off, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(names[k], name))
            return off[k] = 1;
    return 0;
}

int hk_com_off(const char *name)
{
    static const char *const NAMES[C_N] = {
        "IDirect3DDevice9::Present", "IDirect3DDevice9Ex::PresentEx", "IDirect3DDevice9::Clear",
        "IDirect3DDevice9::BeginScene", "IDirect3DDevice9::EndScene", "IDirect3DDevice9::DrawPrimitive",
        "IDirect3DDevice9::DrawIndexedPrimitive", "IDirect3DDevice9::DrawPrimitiveUP",
        "IDirect3DDevice9::DrawIndexedPrimitiveUP"};
    return hk_off_by_name(NAMES, g_off, C_N, name);
}
