/* d3d9_game.c: a Direct3D 9 game (or, built with -DGAME_D3D8, a Direct3D 8 one) that
 * knows nothing of w3async, for the injection tests (tests/shim/test_inject_graphics.py): a
 * window, a device (HAL, software vertex processing), and
 * a frame loop paced at 60 simulation ticks a second by timeGetTime and Sleep(1) under
 * timeBeginPeriod(1), which clears, draws two triangles with DrawPrimitiveUP between
 * BeginScene and EndScene, and presents. The simulation (its hash) depends only on its
 * ticks and on the orders the adapter gives (probe_order), never on what was drawn.
 * --readback (paced_game.h) reads the back buffer's first pixel after the first frame's
 * Clear: the clear colour 0xff336699 when Clear drew.
 * A device that cannot be made is said in a message box, as games do. The Direct3D 8
 * build imports Direct3DCreate8 on i386 (as the games of its time) and looks it up with
 * GetProcAddress on x86-64 (mingw-w64 has no 64-bit import library for d3d8).
 */
#include "paced_game.h"
#ifdef GAME_D3D8
#include <d3d8.h>
#define TAG "d3d8"
typedef IDirect3D8 d3d_t;
typedef IDirect3DDevice8 device_t;
typedef IDirect3DSurface8 surface_t;
#define DEV(method, ...) IDirect3DDevice8_##method(__VA_ARGS__)
#define GET_BACK_BUFFER(dev, bb) IDirect3DDevice8_GetBackBuffer(dev, 0, D3DBACKBUFFER_TYPE_MONO, bb)
#define SET_FVF(dev, fvf) IDirect3DDevice8_SetVertexShader(dev, fvf)
#define LOCK(bb, lr) IDirect3DSurface8_LockRect(bb, lr, NULL, D3DLOCK_READONLY)
#define UNLOCK(bb) IDirect3DSurface8_UnlockRect(bb)
#define RELEASE(bb) IDirect3DSurface8_Release(bb)
static d3d_t *create_d3d(void)
{
#ifdef _WIN64
    HMODULE m = LoadLibraryA("d3d8.dll");
    IDirect3D8 *(WINAPI * create)(UINT) = m ? (void *)GetProcAddress(m, "Direct3DCreate8") : NULL;
    return create ? create(D3D_SDK_VERSION) : NULL;
#else
    return Direct3DCreate8(D3D_SDK_VERSION);
#endif
}
#else
#include <d3d9.h>
#define TAG "d3d9"
typedef IDirect3D9 d3d_t;
typedef IDirect3DDevice9 device_t;
typedef IDirect3DSurface9 surface_t;
#define DEV(method, ...) IDirect3DDevice9_##method(__VA_ARGS__)
#define GET_BACK_BUFFER(dev, bb) IDirect3DDevice9_GetBackBuffer(dev, 0, 0, D3DBACKBUFFER_TYPE_MONO, bb)
#define SET_FVF(dev, fvf) IDirect3DDevice9_SetFVF(dev, fvf)
#define LOCK(bb, lr) IDirect3DSurface9_LockRect(bb, lr, NULL, D3DLOCK_READONLY)
#define UNLOCK(bb) IDirect3DSurface9_UnlockRect(bb)
#define RELEASE(bb) IDirect3DSurface9_Release(bb)
static d3d_t *create_d3d(void) { return Direct3DCreate9(D3D_SDK_VERSION); }
#endif

typedef struct vertex {
    float x, y, z, rhw;
    DWORD color;
} vertex;

int main(int argc, char **argv)
{
    paced run = paced_start(TAG, argc, argv);
    HWND win = paced_window(TAG "_game", WS_OVERLAPPEDWINDOW, 320, 240);
    d3d_t *d3d = create_d3d();
    D3DPRESENT_PARAMETERS pp = {0};
    pp.Windowed = TRUE;
    pp.SwapEffect = D3DSWAPEFFECT_DISCARD;
    pp.BackBufferFormat = D3DFMT_X8R8G8B8;
    pp.BackBufferWidth = 320;
    pp.BackBufferHeight = 240;
    pp.hDeviceWindow = win;
#ifndef GAME_D3D8
    pp.PresentationInterval = D3DPRESENT_INTERVAL_IMMEDIATE;
#endif
    pp.Flags = run.readback ? D3DPRESENTFLAG_LOCKABLE_BACKBUFFER : 0;
    device_t *dev = NULL;
    HRESULT hr = d3d ? d3d->lpVtbl->CreateDevice(d3d, D3DADAPTER_DEFAULT, D3DDEVTYPE_HAL, win,
                                                 D3DCREATE_SOFTWARE_VERTEXPROCESSING, &pp, &dev)
                     : E_FAIL;
    if (FAILED(hr)) {
        char text[128];
        snprintf(text, sizeof(text), "The Direct3D device could not be created (0x%08lx).", (unsigned long)hr);
        MessageBoxA(win, text, TAG "_game", MB_OK | MB_ICONERROR);
        return 3;
    }
    printf(TAG ": device made\n");
    fflush(stdout);
    vertex tri[6];
    for (;;) {
        paced_frame(&run);
        float x = (float)(probe_state.frames % 200);
        for (int i = 0; i < 6; i++) {
            tri[i] = (vertex){x + (float)(i % 3) * 40.0f, 40.0f + (float)(i / 3) * 80.0f + (float)((i % 3) == 2) * 60.0f,
                              0.5f, 1.0f, 0xffff0000u | (DWORD)(i * 40)};
        }
        DEV(Clear, dev, 0, NULL, D3DCLEAR_TARGET, D3DCOLOR_XRGB(0x33, 0x66, 0x99), 1.0f, 0);
        if (paced_reads_back(&run)) {
            surface_t *bb = NULL;
            D3DLOCKED_RECT lr;
            DWORD pixel = 0;
            if (SUCCEEDED(GET_BACK_BUFFER(dev, &bb)) && SUCCEEDED(LOCK(bb, &lr))) {
                pixel = *(DWORD *)lr.pBits;
                UNLOCK(bb);
            }
            if (bb)
                RELEASE(bb);
            paced_pixel(&run, pixel >> 16, pixel >> 8, pixel);
        }
        DEV(BeginScene, dev);
        SET_FVF(dev, D3DFVF_XYZRHW | D3DFVF_DIFFUSE);
        DEV(DrawPrimitiveUP, dev, D3DPT_TRIANGLELIST, 2, tri, sizeof(vertex));
        DEV(EndScene, dev);
        DEV(Present, dev, NULL, NULL, NULL, NULL);
        paced_end();
    }
}
