/* dxgi.c: DXGI swap chains and Direct3D 11's drawing by name ("IDXGISwapChain::Present",
 * "ID3D11DeviceContext::Draw"), the way com.c does Direct3D 9's. The hook patches the
 * creators a game imports or looks up: D3D11CreateDevice and
 * D3D11CreateDeviceAndSwapChain (the immediate context's class gets its Clear* and
 * Draw* methods; the device's DXGI factory its CreateSwapChain, so that a swap chain
 * made later is found too), D3D10CreateDeviceAndSwapChain and CreateDXGIFactory/1/2
 * (the factory's CreateSwapChain and CreateSwapChainForHwnd). Every swap chain the game
 * gets has its class's Present (and Present1) pointed at the hook's: a step point, and
 * with drawing off S_OK at once. A method table is its class's: one patch a class. */
#define COBJMACROS
#include "hook.h"
#include "w3s_table.h"

#include <initguid.h> /* the interface ids asked for below, defined here: no import of dxgi.dll */
#include <d3d11.h>
#include <dxgi1_2.h>
#include <stddef.h>
#include <string.h>

#define SLOT(vtbl, method) ((int)(offsetof(vtbl, method) / sizeof(void *)))

static HRESULT(WINAPI *r_D3D11CreateDevice)(IDXGIAdapter *, D3D_DRIVER_TYPE, HMODULE, UINT, const D3D_FEATURE_LEVEL *,
                                            UINT, UINT, ID3D11Device **, D3D_FEATURE_LEVEL *, ID3D11DeviceContext **);
static HRESULT(WINAPI *r_D3D11CreateDeviceAndSwapChain)(IDXGIAdapter *, D3D_DRIVER_TYPE, HMODULE, UINT,
                                                        const D3D_FEATURE_LEVEL *, UINT, UINT,
                                                        const DXGI_SWAP_CHAIN_DESC *, IDXGISwapChain **,
                                                        ID3D11Device **, D3D_FEATURE_LEVEL *, ID3D11DeviceContext **);
/* D3D10's device is not needed here: only its swap chain (the same DXGI class). */
static HRESULT(WINAPI *r_D3D10CreateDeviceAndSwapChain)(IDXGIAdapter *, UINT, HMODULE, UINT, UINT,
                                                        DXGI_SWAP_CHAIN_DESC *, IDXGISwapChain **, void **);
static HRESULT(WINAPI *r_CreateDXGIFactory)(REFIID, void **);
static HRESULT(WINAPI *r_CreateDXGIFactory1)(REFIID, void **);
static HRESULT(WINAPI *r_CreateDXGIFactory2)(UINT, REFIID, void **);
static HRESULT(WINAPI *r_CreateSwapChain)(IDXGIFactory *, IUnknown *, DXGI_SWAP_CHAIN_DESC *, IDXGISwapChain **);
static HRESULT(WINAPI *r_CreateSwapChainForHwnd)(IDXGIFactory2 *, IUnknown *, HWND, const DXGI_SWAP_CHAIN_DESC1 *,
                                                 const DXGI_SWAP_CHAIN_FULLSCREEN_DESC *, IDXGIOutput *,
                                                 IDXGISwapChain1 **);
static HRESULT(WINAPI *r_Present)(IDXGISwapChain *, UINT, UINT);
static HRESULT(WINAPI *r_Present1)(IDXGISwapChain1 *, UINT, UINT, const DXGI_PRESENT_PARAMETERS *);
static void(WINAPI *r_ClearRenderTargetView)(ID3D11DeviceContext *, ID3D11RenderTargetView *, const FLOAT[4]);
static void(WINAPI *r_ClearDepthStencilView)(ID3D11DeviceContext *, ID3D11DepthStencilView *, UINT, FLOAT, UINT8);
static void(WINAPI *r_Draw)(ID3D11DeviceContext *, UINT, UINT);
static void(WINAPI *r_DrawIndexed)(ID3D11DeviceContext *, UINT, UINT, INT);
static void(WINAPI *r_DrawInstanced)(ID3D11DeviceContext *, UINT, UINT, UINT, UINT);
static void(WINAPI *r_DrawIndexedInstanced)(ID3D11DeviceContext *, UINT, UINT, UINT, INT, UINT);

enum { C_Present, C_Present1, C_ClearRenderTargetView, C_ClearDepthStencilView, C_Draw, C_DrawIndexed,
       C_DrawInstanced, C_DrawIndexedInstanced, C_N };
static const char *const NAMES[C_N] = {
    "IDXGISwapChain::Present",          "IDXGISwapChain1::Present1",           "ID3D11DeviceContext::ClearRenderTargetView",
    "ID3D11DeviceContext::ClearDepthStencilView", "ID3D11DeviceContext::Draw", "ID3D11DeviceContext::DrawIndexed",
    "ID3D11DeviceContext::DrawInstanced", "ID3D11DeviceContext::DrawIndexedInstanced"};
static int g_off[C_N]; /* per method above: 1 when it is a no-op */

static HRESULT WINAPI h_Present(IDXGISwapChain *s, UINT sync, UINT flags)
{
    hk_step_at(NAMES[C_Present]);
    return g_off[C_Present] ? S_OK : r_Present(s, sync, flags);
}

static HRESULT WINAPI h_Present1(IDXGISwapChain1 *s, UINT sync, UINT flags, const DXGI_PRESENT_PARAMETERS *p)
{
    hk_step_at(NAMES[C_Present1]);
    return g_off[C_Present1] ? S_OK : r_Present1(s, sync, flags, p);
}

static void WINAPI h_ClearRenderTargetView(ID3D11DeviceContext *c, ID3D11RenderTargetView *v, const FLOAT rgba[4])
{
    if (!g_off[C_ClearRenderTargetView])
        r_ClearRenderTargetView(c, v, rgba);
}

static void WINAPI h_ClearDepthStencilView(ID3D11DeviceContext *c, ID3D11DepthStencilView *v, UINT f, FLOAT d, UINT8 s)
{
    if (!g_off[C_ClearDepthStencilView])
        r_ClearDepthStencilView(c, v, f, d, s);
}

static void WINAPI h_Draw(ID3D11DeviceContext *c, UINT n, UINT start)
{
    if (!g_off[C_Draw])
        r_Draw(c, n, start);
}

static void WINAPI h_DrawIndexed(ID3D11DeviceContext *c, UINT n, UINT start, INT base)
{
    if (!g_off[C_DrawIndexed])
        r_DrawIndexed(c, n, start, base);
}

static void WINAPI h_DrawInstanced(ID3D11DeviceContext *c, UINT n, UINT inst, UINT start, UINT start_inst)
{
    if (!g_off[C_DrawInstanced])
        r_DrawInstanced(c, n, inst, start, start_inst);
}

static void WINAPI h_DrawIndexedInstanced(ID3D11DeviceContext *c, UINT n, UINT inst, UINT start, INT base,
                                          UINT start_inst)
{
    if (!g_off[C_DrawIndexedInstanced])
        r_DrawIndexedInstanced(c, n, inst, start, base, start_inst);
}

#define M(obj, vtbl, method) \
    hk_patch_class(obj, SLOT(vtbl, method), (void *)h_##method, (void **)&r_##method, NAMES[C_##method])

static void patch_swap_chain(IDXGISwapChain *s)
{
    if (!s)
        return;
    M(s, IDXGISwapChainVtbl, Present);
    IDXGISwapChain1 *s1 = NULL;
    if (SUCCEEDED(IDXGISwapChain_QueryInterface(s, &IID_IDXGISwapChain1, (void **)&s1)) && s1) {
        M(s1, IDXGISwapChain1Vtbl, Present1);
        IDXGISwapChain1_Release(s1);
    }
}

static void patch_context(ID3D11DeviceContext *c)
{
    if (!c)
        return;
    M(c, ID3D11DeviceContextVtbl, ClearRenderTargetView);
    M(c, ID3D11DeviceContextVtbl, ClearDepthStencilView);
    M(c, ID3D11DeviceContextVtbl, Draw);
    M(c, ID3D11DeviceContextVtbl, DrawIndexed);
    M(c, ID3D11DeviceContextVtbl, DrawInstanced);
    M(c, ID3D11DeviceContextVtbl, DrawIndexedInstanced);
}
#undef M

static HRESULT WINAPI h_CreateSwapChain(IDXGIFactory *f, IUnknown *dev, DXGI_SWAP_CHAIN_DESC *d, IDXGISwapChain **out)
{
    HRESULT hr = r_CreateSwapChain(f, dev, d, out);
    if (SUCCEEDED(hr) && out)
        patch_swap_chain(*out);
    return hr;
}

static HRESULT WINAPI h_CreateSwapChainForHwnd(IDXGIFactory2 *f, IUnknown *dev, HWND w, const DXGI_SWAP_CHAIN_DESC1 *d,
                                               const DXGI_SWAP_CHAIN_FULLSCREEN_DESC *fs, IDXGIOutput *o,
                                               IDXGISwapChain1 **out)
{
    HRESULT hr = r_CreateSwapChainForHwnd(f, dev, w, d, fs, o, out);
    if (SUCCEEDED(hr) && out)
        patch_swap_chain((IDXGISwapChain *)*out);
    return hr;
}

/* A factory's swap-chain makers: the class's table, for every factory of it. */
static void patch_factory(IUnknown *any)
{
    IDXGIFactory *f = NULL;
    if (!any || FAILED(IUnknown_QueryInterface(any, &IID_IDXGIFactory, (void **)&f)) || !f)
        return;
    hk_patch_class(f, SLOT(IDXGIFactoryVtbl, CreateSwapChain), (void *)h_CreateSwapChain, (void **)&r_CreateSwapChain,
                   "IDXGIFactory::CreateSwapChain");
    IDXGIFactory2 *f2 = NULL;
    if (SUCCEEDED(IDXGIFactory_QueryInterface(f, &IID_IDXGIFactory2, (void **)&f2)) && f2) {
        hk_patch_class(f2, SLOT(IDXGIFactory2Vtbl, CreateSwapChainForHwnd), (void *)h_CreateSwapChainForHwnd,
                       (void **)&r_CreateSwapChainForHwnd, "IDXGIFactory2::CreateSwapChainForHwnd");
        IDXGIFactory2_Release(f2);
    }
    IDXGIFactory_Release(f);
}

/* The factory a device was made by (IDXGIDevice, its adapter, the adapter's parent):
 * where a game that made its device alone makes its swap chain. */
static void patch_factory_of(ID3D11Device *dev)
{
    IDXGIDevice *dd = NULL;
    IDXGIAdapter *ad = NULL;
    IDXGIFactory *f = NULL;
    if (dev && SUCCEEDED(ID3D11Device_QueryInterface(dev, &IID_IDXGIDevice, (void **)&dd)) && dd) {
        if (SUCCEEDED(IDXGIDevice_GetAdapter(dd, &ad)) && ad) {
            if (SUCCEEDED(IDXGIAdapter_GetParent(ad, &IID_IDXGIFactory, (void **)&f)) && f) {
                patch_factory((IUnknown *)f);
                IDXGIFactory_Release(f);
            }
            IDXGIAdapter_Release(ad);
        }
        IDXGIDevice_Release(dd);
    }
}

/* The device and its immediate context, asked of the device where the game did not ask
 * for the context itself. */
static void patch_device(ID3D11Device *dev, ID3D11DeviceContext *ctx)
{
    if (!dev)
        return;
    if (ctx)
        patch_context(ctx);
    else {
        ID3D11Device_GetImmediateContext(dev, &ctx);
        patch_context(ctx);
        if (ctx)
            ID3D11DeviceContext_Release(ctx);
    }
    patch_factory_of(dev);
}

static HRESULT WINAPI h_D3D11CreateDevice(IDXGIAdapter *a, D3D_DRIVER_TYPE t, HMODULE sw, UINT fl,
                                          const D3D_FEATURE_LEVEL *lv, UINT n, UINT sdk, ID3D11Device **dev,
                                          D3D_FEATURE_LEVEL *got, ID3D11DeviceContext **ctx)
{
    if (!r_D3D11CreateDevice)
        r_D3D11CreateDevice = hk_graphics_export("d3d11.dll", "D3D11CreateDevice");
    HRESULT hr = r_D3D11CreateDevice(a, t, sw, fl, lv, n, sdk, dev, got, ctx);
    if (SUCCEEDED(hr) && dev)
        patch_device(*dev, ctx ? *ctx : NULL);
    return hr;
}

static HRESULT WINAPI h_D3D11CreateDeviceAndSwapChain(IDXGIAdapter *a, D3D_DRIVER_TYPE t, HMODULE sw, UINT fl,
                                                      const D3D_FEATURE_LEVEL *lv, UINT n, UINT sdk,
                                                      const DXGI_SWAP_CHAIN_DESC *d, IDXGISwapChain **sc,
                                                      ID3D11Device **dev, D3D_FEATURE_LEVEL *got,
                                                      ID3D11DeviceContext **ctx)
{
    if (!r_D3D11CreateDeviceAndSwapChain)
        r_D3D11CreateDeviceAndSwapChain = hk_graphics_export("d3d11.dll", "D3D11CreateDeviceAndSwapChain");
    HRESULT hr = r_D3D11CreateDeviceAndSwapChain(a, t, sw, fl, lv, n, sdk, d, sc, dev, got, ctx);
    if (SUCCEEDED(hr)) {
        if (dev)
            patch_device(*dev, ctx ? *ctx : NULL);
        if (sc)
            patch_swap_chain(*sc);
    }
    return hr;
}

static HRESULT WINAPI h_D3D10CreateDeviceAndSwapChain(IDXGIAdapter *a, UINT t, HMODULE sw, UINT fl, UINT sdk,
                                                      DXGI_SWAP_CHAIN_DESC *d, IDXGISwapChain **sc, void **dev)
{
    if (!r_D3D10CreateDeviceAndSwapChain)
        r_D3D10CreateDeviceAndSwapChain = hk_graphics_export("d3d10.dll", "D3D10CreateDeviceAndSwapChain");
    HRESULT hr = r_D3D10CreateDeviceAndSwapChain(a, t, sw, fl, sdk, d, sc, dev);
    if (SUCCEEDED(hr) && sc)
        patch_swap_chain(*sc);
    return hr;
}

static HRESULT WINAPI h_CreateDXGIFactory(REFIID id, void **out)
{
    if (!r_CreateDXGIFactory)
        r_CreateDXGIFactory = hk_graphics_export("dxgi.dll", "CreateDXGIFactory");
    HRESULT hr = r_CreateDXGIFactory(id, out);
    if (SUCCEEDED(hr) && out)
        patch_factory(*out);
    return hr;
}

static HRESULT WINAPI h_CreateDXGIFactory1(REFIID id, void **out)
{
    if (!r_CreateDXGIFactory1)
        r_CreateDXGIFactory1 = hk_graphics_export("dxgi.dll", "CreateDXGIFactory1");
    HRESULT hr = r_CreateDXGIFactory1(id, out);
    if (SUCCEEDED(hr) && out)
        patch_factory(*out);
    return hr;
}

static HRESULT WINAPI h_CreateDXGIFactory2(UINT flags, REFIID id, void **out)
{
    if (!r_CreateDXGIFactory2)
        r_CreateDXGIFactory2 = hk_graphics_export("dxgi.dll", "CreateDXGIFactory2");
    HRESULT hr = r_CreateDXGIFactory2(flags, id, out);
    if (SUCCEEDED(hr) && out)
        patch_factory(*out);
    return hr;
}

/* The creators are imports (HK_LOADER: always patched); the methods are named for the
 * step point and draw_calls, and reached through them. */
#define CREATOR(name) {#name, (void *)h_##name, (void **)&r_##name, HK_LOADER, 0}
hk_fn hk_dxgi_fns[] = {
    CREATOR(D3D11CreateDevice), CREATOR(D3D11CreateDeviceAndSwapChain), CREATOR(D3D10CreateDeviceAndSwapChain),
    CREATOR(CreateDXGIFactory), CREATOR(CreateDXGIFactory1), CREATOR(CreateDXGIFactory2),
    {"IDXGISwapChain::Present", (void *)h_Present, (void **)&r_Present, HK_STEP | HK_DRAW | HK_METHOD, 0},
    {"IDXGISwapChain1::Present1", (void *)h_Present1, (void **)&r_Present1, HK_STEP | HK_DRAW | HK_METHOD, 0},
    {"ID3D11DeviceContext::ClearRenderTargetView", (void *)h_ClearRenderTargetView, (void **)&r_ClearRenderTargetView,
     HK_DRAW | HK_METHOD, 0},
    {"ID3D11DeviceContext::ClearDepthStencilView", (void *)h_ClearDepthStencilView, (void **)&r_ClearDepthStencilView,
     HK_DRAW | HK_METHOD, 0},
    {"ID3D11DeviceContext::Draw", (void *)h_Draw, (void **)&r_Draw, HK_DRAW | HK_METHOD, 0},
    {"ID3D11DeviceContext::DrawIndexed", (void *)h_DrawIndexed, (void **)&r_DrawIndexed, HK_DRAW | HK_METHOD, 0},
    {"ID3D11DeviceContext::DrawInstanced", (void *)h_DrawInstanced, (void **)&r_DrawInstanced, HK_DRAW | HK_METHOD, 0},
    {"ID3D11DeviceContext::DrawIndexedInstanced", (void *)h_DrawIndexedInstanced, (void **)&r_DrawIndexedInstanced,
     HK_DRAW | HK_METHOD, 0},
};
#undef CREATOR
const int hk_n_dxgi_fns = sizeof(hk_dxgi_fns) / sizeof(hk_dxgi_fns[0]);

int hk_dxgi_off(const char *name)
{
    return hk_off_by_name(NAMES, g_off, C_N, name);
}
