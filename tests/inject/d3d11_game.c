/* d3d11_game.c: a Direct3D 11 game that knows nothing of w3async, for the injection
 * tests (tests/shim/test_inject_graphics.py): a window, a device and its swap chain
 * (D3D11CreateDeviceAndSwapChain, or with --factory a device alone and a swap chain
 * from its DXGI factory, as engines do), and the paced frame loop of paced_game.h,
 * which clears the back buffer (ClearRenderTargetView) and presents
 * (IDXGISwapChain::Present). --readback copies the back buffer to a staging texture
 * after the first frame's clear and prints its first pixel: the clear colour
 * 0xff336699 when the clear drew. */
#define COBJMACROS
#include "paced_game.h"
#include <d3d11.h>

static IDXGISwapChain *swap_chain_from_factory(ID3D11Device *dev, DXGI_SWAP_CHAIN_DESC *sd)
{
    IDXGIDevice *dd = NULL;
    IDXGIAdapter *ad = NULL;
    IDXGIFactory *f = NULL;
    IDXGISwapChain *sc = NULL;
    if (SUCCEEDED(ID3D11Device_QueryInterface(dev, &IID_IDXGIDevice, (void **)&dd)) &&
        SUCCEEDED(IDXGIDevice_GetAdapter(dd, &ad)) && SUCCEEDED(IDXGIAdapter_GetParent(ad, &IID_IDXGIFactory, (void **)&f)))
        IDXGIFactory_CreateSwapChain(f, (IUnknown *)dev, sd, &sc);
    if (f)
        IDXGIFactory_Release(f);
    if (ad)
        IDXGIAdapter_Release(ad);
    if (dd)
        IDXGIDevice_Release(dd);
    return sc;
}

int main(int argc, char **argv)
{
    paced run = paced_start("d3d11", argc, argv);
    int factory = 0;
    for (int i = 1; i < argc; i++)
        factory |= !strcmp(argv[i], "--factory");
    HWND win = paced_window("d3d11_game", WS_OVERLAPPEDWINDOW, 320, 240);
    DXGI_SWAP_CHAIN_DESC sd = {0};
    sd.BufferDesc.Width = 320;
    sd.BufferDesc.Height = 240;
    sd.BufferDesc.Format = DXGI_FORMAT_R8G8B8A8_UNORM;
    sd.SampleDesc.Count = 1;
    sd.BufferUsage = DXGI_USAGE_RENDER_TARGET_OUTPUT;
    sd.BufferCount = 1;
    sd.OutputWindow = win;
    sd.Windowed = TRUE;
    sd.SwapEffect = DXGI_SWAP_EFFECT_DISCARD;
    ID3D11Device *dev = NULL;
    ID3D11DeviceContext *ctx = NULL;
    IDXGISwapChain *sc = NULL;
    HRESULT hr;
    if (factory) {
        hr = D3D11CreateDevice(NULL, D3D_DRIVER_TYPE_HARDWARE, NULL, 0, NULL, 0, D3D11_SDK_VERSION, &dev, NULL, &ctx);
        if (SUCCEEDED(hr) && !(sc = swap_chain_from_factory(dev, &sd)))
            hr = E_FAIL;
    } else {
        hr = D3D11CreateDeviceAndSwapChain(NULL, D3D_DRIVER_TYPE_HARDWARE, NULL, 0, NULL, 0, D3D11_SDK_VERSION, &sd, &sc,
                                           &dev, NULL, &ctx);
    }
    ID3D11Texture2D *bb = NULL;
    ID3D11RenderTargetView *rtv = NULL;
    if (SUCCEEDED(hr))
        hr = IDXGISwapChain_GetBuffer(sc, 0, &IID_ID3D11Texture2D, (void **)&bb);
    if (SUCCEEDED(hr))
        hr = ID3D11Device_CreateRenderTargetView(dev, (ID3D11Resource *)bb, NULL, &rtv);
    if (FAILED(hr)) {
        char text[128];
        snprintf(text, sizeof(text), "The Direct3D 11 device could not be created (0x%08lx).", (unsigned long)hr);
        MessageBoxA(win, text, "d3d11_game", MB_OK | MB_ICONERROR);
        return 3;
    }
    printf("d3d11: device made\n");
    fflush(stdout);
    static const FLOAT clear[4] = {0.2f, 0.4f, 0.6f, 1.0f};
    for (;;) {
        paced_frame(&run);
        ID3D11DeviceContext_ClearRenderTargetView(ctx, rtv, clear);
        if (paced_reads_back(&run)) {
            D3D11_TEXTURE2D_DESC td;
            ID3D11Texture2D_GetDesc(bb, &td);
            td.Usage = D3D11_USAGE_STAGING;
            td.BindFlags = 0;
            td.CPUAccessFlags = D3D11_CPU_ACCESS_READ;
            td.MiscFlags = 0;
            ID3D11Texture2D *st = NULL;
            D3D11_MAPPED_SUBRESOURCE m;
            unsigned char px[4] = {0};
            if (SUCCEEDED(ID3D11Device_CreateTexture2D(dev, &td, NULL, &st))) {
                ID3D11DeviceContext_CopyResource(ctx, (ID3D11Resource *)st, (ID3D11Resource *)bb);
                if (SUCCEEDED(ID3D11DeviceContext_Map(ctx, (ID3D11Resource *)st, 0, D3D11_MAP_READ, 0, &m))) {
                    memcpy(px, m.pData, 4);
                    ID3D11DeviceContext_Unmap(ctx, (ID3D11Resource *)st, 0);
                }
                ID3D11Texture2D_Release(st);
            }
            paced_pixel(&run, px[0], px[1], px[2]);
        }
        IDXGISwapChain_Present(sc, 0, 0);
        paced_end();
    }
}
