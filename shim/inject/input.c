/* input.c: a player's keyboard and mouse, as the adapter gives them (host->key, tap,
 * type_char, mouse: w3h.h), reaching the game both ways a game reads input: as window
 * messages posted to its window's thread, and as the state it polls. A game that reads
 * GetCursorPos, GetAsyncKeyState, GetKeyState or GetKeyboardState each frame (a busy
 * loop's paddle, a DirectX game's keys) saw none of the posted messages: once the
 * adapter has given any input, those calls answer from what it gave (before that, the
 * real ones), and SetCursorPos moves the pointer they report. A key pressed and
 * released within one step is never down when the game polls; host->tap holds it down
 * until the next step, one frame, as a finger would. DirectInput 8's keyboard and mouse
 * devices answer the same way (below). */
#include "hook.h"
#include "w3h.h"

#include <stddef.h>
#include <string.h>
#define DIRECTINPUT_VERSION 0x0800
#include <dinput.h>

static void di_key_event(uint32_t vk, int down);
static void di_mouse_event(DWORD ofs, DWORD data);

/* ---- the keyboard ---- */

static uint8_t g_down[256];    /* keys this API holds down: the previous-state bit */
static uint8_t g_pressed[256]; /* pressed since the game's last GetAsyncKeyState of the key */
static uint8_t g_tapped[256];  /* tapped (host->tap): released at the next step */
static int g_virtual;          /* the adapter gave input: the polled state is this API's */
static HWND g_key_window;      /* where the last key went (a tap's release goes there too) */

/* Keys whose scan code a real keyboard sends with the E0 prefix (lParam bit 24). */
static int extended(uint32_t vk)
{
    switch (vk) {
    case VK_UP: case VK_DOWN: case VK_LEFT: case VK_RIGHT: case VK_INSERT: case VK_DELETE: case VK_HOME:
    case VK_END: case VK_PRIOR: case VK_NEXT: case VK_RCONTROL: case VK_RMENU: case VK_DIVIDE: case VK_NUMLOCK:
    case VK_LWIN: case VK_RWIN: case VK_APPS: case VK_SNAPSHOT:
        return 1;
    }
    return 0;
}

static LPARAM key_lparam(uint32_t vk, int down, int was_down)
{
    UINT scan = MapVirtualKeyA(vk, MAPVK_VK_TO_VSC) & 0xff;
    LPARAM lp = 1 | ((LPARAM)scan << 16);
    if (extended(vk))
        lp |= (LPARAM)1 << 24;
    if (vk == VK_MENU || vk == VK_LMENU || vk == VK_RMENU || g_down[VK_MENU])
        lp |= (LPARAM)1 << 29; /* the context code: Alt is down */
    if (!down || was_down)
        lp |= (LPARAM)1 << 30;
    if (!down)
        lp |= (LPARAM)1 << 31;
    return lp;
}

/* PostMessage to the window's thread: the game reads it from its own queue, as it reads
 * a player's keys. 0, or the Windows error. */
static int post(HWND w, UINT msg, WPARAM wp, LPARAM lp)
{
    return PostMessageA(w, msg, wp, lp) ? 0 : (int)GetLastError();
}

int hk_key(void *window, uint32_t vk, int down)
{
    if (!window || vk == 0 || vk > 255)
        return ERROR_INVALID_PARAMETER;
    int was = g_down[vk];
    /* Alt and F10 are system keys: Windows sends them as WM_SYSKEY*. */
    int sys = vk == VK_MENU || vk == VK_LMENU || vk == VK_RMENU || vk == VK_F10 || (g_down[VK_MENU] && vk != VK_CONTROL);
    UINT msg = down ? (sys ? WM_SYSKEYDOWN : WM_KEYDOWN) : (sys ? WM_SYSKEYUP : WM_KEYUP);
    int rc = post((HWND)window, msg, vk, key_lparam(vk, down, was));
    if (!rc) {
        if (down != was)
            di_key_event(vk, down);
        g_down[vk] = down ? 1 : 0;
        g_pressed[vk] |= down && !was;
        g_virtual = 1;
        g_key_window = (HWND)window;
    }
    return rc;
}

int hk_tap(void *window, uint32_t vk)
{
    int rc = hk_key(window, vk, 1);
    if (!rc)
        g_tapped[vk] = 1;
    return rc;
}

void hk_input_step(void)
{
    for (int vk = 0; vk < 256; vk++)
        if (g_tapped[vk]) {
            g_tapped[vk] = 0;
            if (g_down[vk])
                hk_key(g_key_window, (uint32_t)vk, 0);
        }
}

int hk_type_char(void *window, uint32_t ch)
{
    if (!window || ch > 0xffff)
        return ERROR_INVALID_PARAMETER;
    SHORT vks = VkKeyScanA((CHAR)(ch & 0xff));
    uint32_t vk = vks == -1 ? 0 : (uint32_t)(vks & 0xff);
    LPARAM lp = 1 | ((LPARAM)(MapVirtualKeyA(vk, MAPVK_VK_TO_VSC) & 0xff) << 16);
    return post((HWND)window, WM_CHAR, ch, lp);
}

/* ---- the mouse ---- */

/* The mouse buttons, as host->mouse's bits, their MK_ flags, messages and virtual keys. */
static const struct {
    uint32_t bit;
    WPARAM mk;
    UINT down, up;
    uint32_t vk;
} B[] = {
    {W3H_MOUSE_LEFT, MK_LBUTTON, WM_LBUTTONDOWN, WM_LBUTTONUP, VK_LBUTTON},
    {W3H_MOUSE_RIGHT, MK_RBUTTON, WM_RBUTTONDOWN, WM_RBUTTONUP, VK_RBUTTON},
    {W3H_MOUSE_MIDDLE, MK_MBUTTON, WM_MBUTTONDOWN, WM_MBUTTONUP, VK_MBUTTON},
};

static uint32_t g_buttons; /* the buttons held at the last call */
static HWND g_mouse_window; /* the pointer's window and its client position, at the last call */
static POINT g_at;

int hk_mouse(void *window, int32_t x, int32_t y, uint32_t buttons)
{
    if (!window || buttons & ~(W3H_MOUSE_LEFT | W3H_MOUSE_RIGHT | W3H_MOUSE_MIDDLE))
        return ERROR_INVALID_PARAMETER;
    LPARAM lp = MAKELPARAM((WORD)(SHORT)x, (WORD)(SHORT)y);
    g_virtual = 1;
    g_mouse_window = (HWND)window;
    if (x != g_at.x) /* DirectInput's buffered mouse data: relative moves, then the buttons */
        di_mouse_event(DIMOFS_X, (DWORD)(x - g_at.x));
    if (y != g_at.y)
        di_mouse_event(DIMOFS_Y, (DWORD)(y - g_at.y));
    g_at.x = x, g_at.y = y;
    WPARAM mk = 0;
    for (int i = 0; i < 3; i++)
        if (g_buttons & B[i].bit)
            mk |= B[i].mk;
    /* The key state a real mouse message carries: Shift and Ctrl as the keyboard holds them here. */
    if (g_down[VK_SHIFT])
        mk |= MK_SHIFT;
    if (g_down[VK_CONTROL])
        mk |= MK_CONTROL;
    int rc = post((HWND)window, WM_MOUSEMOVE, mk, lp);
    for (int i = 0; !rc && i < 3; i++) {
        uint32_t now = buttons & B[i].bit;
        if (now == (g_buttons & B[i].bit))
            continue;
        mk = now ? mk | B[i].mk : mk & ~B[i].mk; /* wParam: the state after the change */
        rc = post((HWND)window, now ? B[i].down : B[i].up, mk, lp);
        if (!rc) {
            g_buttons ^= B[i].bit;
            g_pressed[B[i].vk] |= now != 0;
            di_mouse_event((DWORD)DIMOFS_BUTTON0 + (DWORD)i, now ? 0x80 : 0);
        }
    }
    return rc;
}

/* ---- the state a game polls ---- */

static BOOL(WINAPI *r_GetCursorPos)(POINT *);
static BOOL(WINAPI *r_SetCursorPos)(int, int);
static SHORT(WINAPI *r_GetAsyncKeyState)(int);
static SHORT(WINAPI *r_GetKeyState)(int);
static BOOL(WINAPI *r_GetKeyboardState)(BYTE *);

static int held(int vk)
{
    for (int i = 0; i < 3; i++)
        if ((uint32_t)vk == B[i].vk)
            return (g_buttons & B[i].bit) != 0;
    return vk >= 0 && vk < 256 && g_down[vk];
}

static BOOL WINAPI h_GetCursorPos(POINT *p)
{
    if (!g_virtual)
        return r_GetCursorPos(p);
    if (!p) {
        SetLastError(ERROR_NOACCESS);
        return FALSE;
    }
    *p = g_at;
    if (g_mouse_window)
        ClientToScreen(g_mouse_window, p); /* the pointer is kept in its window's client coordinates */
    return TRUE;
}

static BOOL WINAPI h_SetCursorPos(int x, int y)
{
    if (!g_virtual)
        return r_SetCursorPos(x, y);
    POINT p = {x, y};
    if (g_mouse_window)
        ScreenToClient(g_mouse_window, &p);
    g_at = p;
    return TRUE;
}

static SHORT WINAPI h_GetAsyncKeyState(int vk)
{
    if (!g_virtual)
        return r_GetAsyncKeyState(vk);
    if (vk < 0 || vk > 255)
        return 0;
    SHORT s = (SHORT)((held(vk) ? 0x8000 : 0) | (g_pressed[vk] ? 1 : 0));
    g_pressed[vk] = 0;
    return s;
}

static SHORT WINAPI h_GetKeyState(int vk)
{
    return g_virtual ? (SHORT)(held(vk) ? 0x8000 : 0) : r_GetKeyState(vk);
}

static BOOL WINAPI h_GetKeyboardState(BYTE *keys)
{
    if (!g_virtual)
        return r_GetKeyboardState(keys);
    if (!keys) {
        SetLastError(ERROR_NOACCESS);
        return FALSE;
    }
    for (int vk = 0; vk < 256; vk++)
        keys[vk] = held(vk) ? 0x80 : 0;
    return TRUE;
}

/* ---- DirectInput 8: its keyboard and mouse devices ---- */

/* DirectInput8Create's object: its CreateDevice is patched; the devices that makes, their
 * GetDeviceState and GetDeviceData. Once the adapter has given input, a keyboard's state
 * (256 bytes by DIK code) is the keys held, a mouse's (DIMOUSESTATE or DIMOUSESTATE2)
 * the pointer's move since the last read and the buttons held, and a device's buffered
 * data its transitions since the last read: a keyboard's keys, a mouse's moves (DIMOFS_X,
 * DIMOFS_Y: relative) and buttons (DIMOFS_BUTTON0-2). */
static HRESULT(WINAPI *r_DirectInput8Create)(HINSTANCE, DWORD, REFIID, LPVOID *, LPUNKNOWN);
static HRESULT(WINAPI *r_CreateDeviceA)(IDirectInput8A *, REFGUID, LPDIRECTINPUTDEVICE8A *, LPUNKNOWN);
static HRESULT(WINAPI *r_CreateDeviceW)(IDirectInput8W *, REFGUID, LPDIRECTINPUTDEVICE8W *, LPUNKNOWN);
typedef HRESULT(WINAPI *state_fn)(void *, DWORD, LPVOID);
typedef HRESULT(WINAPI *data_fn)(void *, DWORD, LPDIDEVICEOBJECTDATA, LPDWORD, DWORD);
static state_fn r_GetDeviceStateA, r_GetDeviceStateW;
static data_fn r_GetDeviceDataA, r_GetDeviceDataW;

#define DI_GUID_KEYBOARD 0x6F1D2B61u /* GUID_SysKeyboard's and GUID_SysMouse's first field */
#define DI_GUID_MOUSE 0x6F1D2B60u
#define DI_IID_8W 0xBF798031u /* IID_IDirectInput8W's (A: ...30) */

static struct { void *dev; int mouse; } g_devices[16];
static int g_n_devices;
static POINT g_di_at; /* the pointer where a mouse's state was last read */

/* What a device's GetDeviceData has not returned yet: the keyboard's key transitions,
 * the mouse's moves and button transitions; one sequence for both, as DirectInput's. */
typedef struct di_queue {
    struct { DWORD ofs, data, time, seq; } ev[256];
    int n;
} di_queue;
static di_queue g_keys_q, g_mouse_q;
static DWORD g_seq;

static DWORD dik(uint32_t vk)
{
    return (MapVirtualKeyA(vk, MAPVK_VK_TO_VSC) & 0xff) | (extended(vk) ? 0x80 : 0);
}

static void di_push(di_queue *q, DWORD ofs, DWORD data)
{
    if (q->n == (int)(sizeof(q->ev) / sizeof(q->ev[0]))) /* full: the oldest goes, as DirectInput's buffer */
        memmove(q->ev, q->ev + 1, sizeof(q->ev) - sizeof(q->ev[0])), q->n--;
    q->ev[q->n].ofs = ofs, q->ev[q->n].data = data, q->ev[q->n].time = GetTickCount(), q->ev[q->n].seq = ++g_seq;
    q->n++;
}

static void di_key_event(uint32_t vk, int down) { di_push(&g_keys_q, dik(vk), down ? 0x80 : 0); }
static void di_mouse_event(DWORD ofs, DWORD data) { di_push(&g_mouse_q, ofs, data); }

static int is_mouse(void *dev)
{
    for (int i = 0; i < g_n_devices; i++)
        if (g_devices[i].dev == dev)
            return g_devices[i].mouse;
    return 0;
}

static HRESULT device_state(void *dev, DWORD n, LPVOID out, state_fn real)
{
    if (!g_virtual || !out)
        return real(dev, n, out);
    if (n == 256) {
        memset(out, 0, 256);
        for (int vk = 1; vk < 256; vk++)
            if (g_down[vk])
                ((BYTE *)out)[dik((uint32_t)vk)] = 0x80;
        return DI_OK;
    }
    if (n == sizeof(DIMOUSESTATE) || n == sizeof(DIMOUSESTATE2)) {
        DIMOUSESTATE2 m = {0};
        m.lX = g_at.x - g_di_at.x, m.lY = g_at.y - g_di_at.y;
        g_di_at = g_at;
        for (int i = 0; i < 3; i++)
            m.rgbButtons[i] = (g_buttons & B[i].bit) ? 0x80 : 0;
        memcpy(out, &m, n);
        return DI_OK;
    }
    return real(dev, n, out);
}

static HRESULT device_data(void *dev, DWORD size, LPDIDEVICEOBJECTDATA out, LPDWORD inout, DWORD flags, data_fn real)
{
    if (!g_virtual || !inout || size < sizeof(DIDEVICEOBJECTDATA_DX3))
        return real(dev, size, out, inout, flags);
    di_queue *q = is_mouse(dev) ? &g_mouse_q : &g_keys_q;
    int n = q->n;
    if (out && (DWORD)n > *inout)
        n = (int)*inout;
    for (int i = 0; out && i < n; i++) {
        DIDEVICEOBJECTDATA *d = (DIDEVICEOBJECTDATA *)((BYTE *)out + (size_t)i * size);
        memset(d, 0, size);
        d->dwOfs = q->ev[i].ofs, d->dwData = q->ev[i].data, d->dwTimeStamp = q->ev[i].time;
        d->dwSequence = q->ev[i].seq;
    }
    if (!(flags & DIGDD_PEEK)) {
        memmove(q->ev, q->ev + n, sizeof(q->ev[0]) * (size_t)(q->n - n));
        q->n -= n;
    }
    *inout = (DWORD)n;
    return DI_OK;
}

static HRESULT WINAPI h_GetDeviceStateA(void *d, DWORD n, LPVOID o) { return device_state(d, n, o, r_GetDeviceStateA); }
static HRESULT WINAPI h_GetDeviceStateW(void *d, DWORD n, LPVOID o) { return device_state(d, n, o, r_GetDeviceStateW); }

static HRESULT WINAPI h_GetDeviceDataA(void *d, DWORD s, LPDIDEVICEOBJECTDATA o, LPDWORD io, DWORD f)
{
    return device_data(d, s, o, io, f, r_GetDeviceDataA);
}

static HRESULT WINAPI h_GetDeviceDataW(void *d, DWORD s, LPDIDEVICEOBJECTDATA o, LPDWORD io, DWORD f)
{
    return device_data(d, s, o, io, f, r_GetDeviceDataW);
}

static void keep(void **real, void *before)
{
    if (before && !*real)
        *real = before;
}

static void patch_device(void *dev, REFGUID kind, int wide)
{
    if (g_n_devices < (int)(sizeof(g_devices) / sizeof(g_devices[0])))
        g_devices[g_n_devices].dev = dev, g_devices[g_n_devices++].mouse = kind && kind->Data1 == DI_GUID_MOUSE;
    uint32_t st = (uint32_t)(offsetof(IDirectInputDevice8AVtbl, GetDeviceState) / sizeof(void *));
    uint32_t dt = (uint32_t)(offsetof(IDirectInputDevice8AVtbl, GetDeviceData) / sizeof(void *));
    keep((void **)(wide ? &r_GetDeviceStateW : &r_GetDeviceStateA),
         hk_patch_method(dev, st, wide ? (void *)h_GetDeviceStateW : (void *)h_GetDeviceStateA));
    keep((void **)(wide ? &r_GetDeviceDataW : &r_GetDeviceDataA),
         hk_patch_method(dev, dt, wide ? (void *)h_GetDeviceDataW : (void *)h_GetDeviceDataA));
}

static HRESULT WINAPI h_CreateDeviceA(IDirectInput8A *di, REFGUID g, LPDIRECTINPUTDEVICE8A *out, LPUNKNOWN outer)
{
    HRESULT hr = r_CreateDeviceA(di, g, out, outer);
    if (SUCCEEDED(hr) && out && *out)
        patch_device(*out, g, 0);
    return hr;
}

static HRESULT WINAPI h_CreateDeviceW(IDirectInput8W *di, REFGUID g, LPDIRECTINPUTDEVICE8W *out, LPUNKNOWN outer)
{
    HRESULT hr = r_CreateDeviceW(di, g, out, outer);
    if (SUCCEEDED(hr) && out && *out)
        patch_device(*out, g, 1);
    return hr;
}

static HRESULT WINAPI h_DirectInput8Create(HINSTANCE inst, DWORD version, REFIID riid, LPVOID *out, LPUNKNOWN outer)
{
    if (!r_DirectInput8Create) { /* dinput8.dll's, looked up at the game's first call (the hook imports no DirectInput) */
        HMODULE m = GetModuleHandleA("dinput8.dll");
        r_DirectInput8Create = m ? (void *)GetProcAddress(m, "DirectInput8Create") : NULL;
        if (!r_DirectInput8Create)
            hk_fatal(W3S_EXIT_INJECT, "the game called DirectInput8Create, which dinput8.dll does not export here");
    }
    HRESULT hr = r_DirectInput8Create(inst, version, riid, out, outer);
    if (SUCCEEDED(hr) && out && *out) {
        int wide = riid && riid->Data1 == DI_IID_8W;
        uint32_t cd = (uint32_t)(offsetof(IDirectInput8AVtbl, CreateDevice) / sizeof(void *));
        if (wide)
            keep((void **)&r_CreateDeviceW, hk_patch_method(*out, cd, (void *)h_CreateDeviceW));
        else
            keep((void **)&r_CreateDeviceA, hk_patch_method(*out, cd, (void *)h_CreateDeviceA));
    }
    return hr;
}

void hk_input_init(void)
{
    /* The real functions are the hook's own imports: its table is never patched. */
    r_GetCursorPos = GetCursorPos;
    r_SetCursorPos = SetCursorPos;
    r_GetAsyncKeyState = GetAsyncKeyState;
    r_GetKeyState = GetKeyState;
    r_GetKeyboardState = GetKeyboardState;
}

#define FN(name) {#name, (void *)h_##name, (void **)&r_##name, HK_INPUT, 0}
hk_fn hk_input_fns[] = {
    FN(GetCursorPos), FN(SetCursorPos), FN(GetAsyncKeyState), FN(GetKeyState), FN(GetKeyboardState),
    FN(DirectInput8Create),
};
#undef FN
const int hk_n_input_fns = sizeof(hk_input_fns) / sizeof(hk_input_fns[0]);
