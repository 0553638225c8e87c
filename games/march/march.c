/* march.c: a reference game shaped like Warcraft III's loop, that knows nothing of
 * w3async and exports nothing (docs/hooking.md, "March"). Its turn is paced by a thread
 * of its own that wakes the main thread by an event every MARCH_TURN_MS; the main thread
 * simulates the turn, reads the keyboard through DirectInput 8 and the mouse through
 * GetCursorPos, and draws through Direct3D 9 (Clear, DrawPrimitiveUP between BeginScene
 * and EndScene, Present). Beside them, threads of the kinds such a game has: one in
 * 10 ms timed waits (its sound), one on a periodic waitable timer (100 ms), and a
 * timer-queue timer (30 ms), each counting its wakes.
 *
 * The game: 8 units march from the left edge toward a rally point; a unit that comes
 * within MARCH_HOME px of the goal scores and starts again from the left. The rally
 * point is the mouse pointer, nudged 8 px a turn by the left and right arrow keys. A
 * march is MARCH_TURNS turns; then the next begins, its goal from a generator seeded by
 * the march's number. At every march's end it prints "march: march N turns T score S
 * hash H sound A timer B queue C": H hashes every turn's state, so it is the same for
 * the same input whatever was drawn.
 *
 *   march.exe [--marches N]   exit 0 after N marches (default: never) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <d3d9.h>
#define DIRECTINPUT_VERSION 0x0800
#include <dinput.h>

#define MARCH_TURN_MS 50
#define MARCH_TURNS 300
#define MARCH_UNITS 8
#define MARCH_W 320
#define MARCH_H 240
#define MARCH_HOME 6

/* The game's one state, read by its adapter at the offset nm finds (march.addresses.toml). */
struct march_state {
    int turn, marches, over, score, rally_x, rally_y, goal_x, goal_y;
    int unit_x[MARCH_UNITS], unit_y[MARCH_UNITS];
    volatile LONG sound, timer, queue; /* the background threads' wakes */
    uint64_t hash;
};
struct march_state march;

static HANDLE g_turn, g_quit;

static DWORD WINAPI pacer(void *arg)
{
    (void)arg;
    while (WaitForSingleObject(g_quit, MARCH_TURN_MS) == WAIT_TIMEOUT)
        SetEvent(g_turn);
    return 0;
}

static DWORD WINAPI sound(void *arg)
{
    (void)arg;
    while (WaitForSingleObject(g_quit, 10) == WAIT_TIMEOUT)
        InterlockedIncrement(&march.sound);
    return 0;
}

static DWORD WINAPI ticker(void *arg)
{
    (void)arg;
    HANDLE t = CreateWaitableTimerA(NULL, FALSE, NULL);
    LARGE_INTEGER due = {.QuadPart = -100 * 10000LL};
    SetWaitableTimer(t, &due, 100, NULL, NULL, FALSE);
    HANDLE both[2] = {g_quit, t};
    while (WaitForMultipleObjects(2, both, FALSE, INFINITE) == WAIT_OBJECT_0 + 1)
        InterlockedIncrement(&march.timer);
    return 0;
}

static VOID CALLBACK queued(PVOID arg, BOOLEAN fired)
{
    (void)arg, (void)fired;
    InterlockedIncrement(&march.queue);
}

static int next_random(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return (int)((*s >> 16) & 0x7fff);
}

static void new_march(void)
{
    uint32_t seed = (uint32_t)march.marches * 2654435761u + 1u;
    march.turn = march.over = march.score = 0;
    march.goal_x = MARCH_W / 2 + next_random(&seed) % (MARCH_W / 2 - 10);
    march.goal_y = 10 + next_random(&seed) % (MARCH_H - 20);
    for (int i = 0; i < MARCH_UNITS; i++)
        march.unit_x[i] = 0, march.unit_y[i] = 10 + i * (MARCH_H - 20) / MARCH_UNITS;
}

static int toward(int from, int to) { return from < to ? from + 2 : from > to ? from - 2 : from; }

static void simulate(const BYTE *keys, POINT cursor)
{
    march.rally_x = cursor.x < 0 ? 0 : cursor.x > MARCH_W ? MARCH_W : cursor.x;
    march.rally_y = cursor.y < 0 ? 0 : cursor.y > MARCH_H ? MARCH_H : cursor.y;
    if (keys[DIK_LEFT] & 0x80)
        march.rally_x -= 8;
    if (keys[DIK_RIGHT] & 0x80)
        march.rally_x += 8;
    for (int i = 0; i < MARCH_UNITS; i++) {
        march.unit_x[i] = toward(march.unit_x[i], march.rally_x);
        march.unit_y[i] = toward(march.unit_y[i], march.rally_y);
        if (abs(march.unit_x[i] - march.goal_x) <= MARCH_HOME && abs(march.unit_y[i] - march.goal_y) <= MARCH_HOME) {
            march.score++;
            march.unit_x[i] = 0;
        }
    }
    march.turn++;
    const unsigned char *b = (const unsigned char *)&march;
    for (size_t k = 0; k < offsetof(struct march_state, sound); k++) /* the simulation's fields, not the counters */
        march.hash = (march.hash ^ b[k]) * 1099511628211ull;
    march.over = march.turn >= MARCH_TURNS;
}

typedef struct vertex {
    float x, y, z, rhw;
    DWORD color;
} vertex;

static void draw(IDirect3DDevice9 *dev)
{
    vertex v[MARCH_UNITS * 3 + 3];
    for (int i = 0; i <= MARCH_UNITS; i++) {
        float x = i < MARCH_UNITS ? (float)march.unit_x[i] : (float)march.goal_x;
        float y = i < MARCH_UNITS ? (float)march.unit_y[i] : (float)march.goal_y;
        DWORD c = i < MARCH_UNITS ? 0xff40c040u : 0xffe0c020u;
        v[3 * i] = (vertex){x, y - 4, 0.5f, 1, c};
        v[3 * i + 1] = (vertex){x + 4, y + 4, 0.5f, 1, c};
        v[3 * i + 2] = (vertex){x - 4, y + 4, 0.5f, 1, c};
    }
    IDirect3DDevice9_Clear(dev, 0, NULL, D3DCLEAR_TARGET, D3DCOLOR_XRGB(0x20, 0x30, 0x20), 1.0f, 0);
    IDirect3DDevice9_BeginScene(dev);
    IDirect3DDevice9_SetFVF(dev, D3DFVF_XYZRHW | D3DFVF_DIFFUSE);
    IDirect3DDevice9_DrawPrimitiveUP(dev, D3DPT_TRIANGLELIST, MARCH_UNITS + 1, v, sizeof(vertex));
    IDirect3DDevice9_EndScene(dev);
    IDirect3DDevice9_Present(dev, NULL, NULL, NULL, NULL);
}

static LRESULT CALLBACK wndproc(HWND w, UINT m, WPARAM wp, LPARAM lp)
{
    if (m == WM_DESTROY) {
        PostQuitMessage(0);
        return 0;
    }
    return DefWindowProcA(w, m, wp, lp);
}

static void fail(HWND win, const char *what, HRESULT hr)
{
    char text[160];
    snprintf(text, sizeof(text), "%s failed (0x%08lx).", what, (unsigned long)hr);
    MessageBoxA(win, text, "March", MB_OK | MB_ICONERROR);
    ExitProcess(3);
}

int WINAPI WinMain(HINSTANCE inst, HINSTANCE prev, LPSTR cmd, int show)
{
    (void)prev, (void)show;
    long marches = -1;
    const char *m = strstr(cmd, "--marches ");
    if (m)
        marches = atol(m + 10);
    WNDCLASSA wc = {0};
    wc.lpfnWndProc = wndproc;
    wc.hInstance = inst;
    wc.lpszClassName = "MarchWindow";
    RegisterClassA(&wc);
    HWND win = CreateWindowA("MarchWindow", "March", WS_OVERLAPPEDWINDOW, 0, 0, MARCH_W, MARCH_H, NULL, NULL, inst, NULL);
    ShowWindow(win, SW_SHOW);
    IDirect3D9 *d3d = Direct3DCreate9(D3D_SDK_VERSION);
    D3DPRESENT_PARAMETERS pp = {0};
    pp.Windowed = TRUE, pp.SwapEffect = D3DSWAPEFFECT_DISCARD, pp.BackBufferFormat = D3DFMT_X8R8G8B8;
    pp.BackBufferWidth = MARCH_W, pp.BackBufferHeight = MARCH_H, pp.hDeviceWindow = win;
    pp.PresentationInterval = D3DPRESENT_INTERVAL_IMMEDIATE;
    IDirect3DDevice9 *dev = NULL;
    HRESULT hr = d3d ? IDirect3D9_CreateDevice(d3d, D3DADAPTER_DEFAULT, D3DDEVTYPE_HAL, win,
                                                D3DCREATE_SOFTWARE_VERTEXPROCESSING, &pp, &dev) : E_FAIL;
    if (FAILED(hr))
        fail(win, "Making the Direct3D 9 device", hr);
    IDirectInput8A *di = NULL;
    IDirectInputDevice8A *kbd = NULL;
    hr = DirectInput8Create(inst, DIRECTINPUT_VERSION, &IID_IDirectInput8A, (void **)&di, NULL);
    if (SUCCEEDED(hr))
        hr = IDirectInput8_CreateDevice(di, &GUID_SysKeyboard, &kbd, NULL);
    if (FAILED(hr))
        fail(win, "Making the DirectInput keyboard", hr);
    IDirectInputDevice8_SetDataFormat(kbd, &c_dfDIKeyboard);
    IDirectInputDevice8_SetCooperativeLevel(kbd, win, DISCL_NONEXCLUSIVE | DISCL_BACKGROUND);
    IDirectInputDevice8_Acquire(kbd);
    g_turn = CreateEventA(NULL, FALSE, FALSE, NULL);
    g_quit = CreateEventA(NULL, TRUE, FALSE, NULL);
    HANDLE threads[3] = {CreateThread(NULL, 0, pacer, NULL, 0, NULL), CreateThread(NULL, 0, sound, NULL, 0, NULL),
                         CreateThread(NULL, 0, ticker, NULL, 0, NULL)};
    HANDLE qt = NULL;
    CreateTimerQueueTimer(&qt, NULL, queued, NULL, 30, 30, 0);
    new_march();
    printf("march: started\n");
    fflush(stdout);
    for (;;) {
        DWORD r = MsgWaitForMultipleObjects(1, &g_turn, FALSE, INFINITE, QS_ALLINPUT);
        if (r == WAIT_OBJECT_0 + 1) {
            MSG msg;
            while (PeekMessageA(&msg, NULL, 0, 0, PM_REMOVE)) {
                if (msg.message == WM_QUIT)
                    goto out;
                TranslateMessage(&msg);
                DispatchMessageA(&msg);
            }
            continue;
        }
        BYTE keys[256] = {0};
        if (IDirectInputDevice8_GetDeviceState(kbd, sizeof(keys), keys) == DIERR_INPUTLOST) {
            IDirectInputDevice8_Acquire(kbd);
            memset(keys, 0, sizeof(keys));
        }
        POINT cursor;
        GetCursorPos(&cursor);
        ScreenToClient(win, &cursor);
        if (march.over) {
            march.marches++;
            new_march();
        }
        simulate(keys, cursor);
        if (march.over) {
            printf("march: march %d turns %d score %d hash %016llx sound %ld timer %ld queue %ld\n", march.marches,
                   march.turn, march.score, (unsigned long long)march.hash, march.sound, march.timer, march.queue);
            fflush(stdout);
            if (marches >= 0 && march.marches + 1 >= marches)
                break;
        }
        draw(dev);
    }
out:
    SetEvent(g_quit);
    WaitForMultipleObjects(3, threads, TRUE, 1000);
    if (qt)
        DeleteTimerQueueTimer(NULL, qt, NULL);
    return 0;
}
