/* hostapi_game.c: a windowed game for tests/shim/test_inject_hostapi.py that prints every
 * input message its window gets ("msg NAME wparam lparam"), what GetVersion returns
 * and what TextOutA returns (each when it changes), the input state it polls each frame
 * (GetCursorPos, GetAsyncKeyState, GetKeyState, GetKeyboardState: "poll ..." when it
 * changes), and otherwise sleeps 1 ms a frame between draining its messages. With
 * --dinput it also reads a DirectInput 8 keyboard's and mouse's buffered data each frame
 * ("di key OFS DATA", "di mouse OFS DATA": each event, the mouse's moves relative). It
 * knows nothing of w3async and exports nothing. */
#include <stdio.h>
#include <string.h>
#include <windows.h>
#define DIRECTINPUT_VERSION 0x0800
#include <dinput.h>

/* A buffered DirectInput device of the given format, or NULL. */
static IDirectInputDevice8A *hg_device(IDirectInput8A *di, HWND w, REFGUID kind, LPCDIDATAFORMAT format)
{
    IDirectInputDevice8A *dev = NULL;
    if (FAILED(IDirectInput8_CreateDevice(di, kind, &dev, NULL)))
        return NULL;
    DIPROPDWORD size = {{sizeof(DIPROPDWORD), sizeof(DIPROPHEADER), 0, DIPH_DEVICE}, 64};
    IDirectInputDevice8_SetDataFormat(dev, format);
    IDirectInputDevice8_SetCooperativeLevel(dev, w, DISCL_NONEXCLUSIVE | DISCL_BACKGROUND);
    IDirectInputDevice8_SetProperty(dev, DIPROP_BUFFERSIZE, &size.diph);
    IDirectInputDevice8_Acquire(dev);
    return dev;
}

static void hg_drain(IDirectInputDevice8A *dev, const char *what)
{
    DIDEVICEOBJECTDATA ev[16];
    DWORD n = 16;
    if (dev && SUCCEEDED(IDirectInputDevice8_GetDeviceData(dev, sizeof(ev[0]), ev, &n, 0)))
        for (DWORD i = 0; i < n; i++)
            printf("di %s %lu %ld\n", what, (unsigned long)ev[i].dwOfs, (long)ev[i].dwData);
    fflush(stdout);
}

static const struct {
    UINT msg;
    const char *name;
} HG_MSGS[] = {
    {WM_KEYDOWN, "WM_KEYDOWN"},       {WM_KEYUP, "WM_KEYUP"},           {WM_SYSKEYDOWN, "WM_SYSKEYDOWN"},
    {WM_SYSKEYUP, "WM_SYSKEYUP"},     {WM_CHAR, "WM_CHAR"},             {WM_SYSCHAR, "WM_SYSCHAR"},
    {WM_MOUSEMOVE, "WM_MOUSEMOVE"},   {WM_LBUTTONDOWN, "WM_LBUTTONDOWN"}, {WM_LBUTTONUP, "WM_LBUTTONUP"},
    {WM_RBUTTONDOWN, "WM_RBUTTONDOWN"}, {WM_RBUTTONUP, "WM_RBUTTONUP"},
};

static LRESULT CALLBACK hg_proc(HWND w, UINT msg, WPARAM wp, LPARAM lp)
{
    for (size_t i = 0; i < sizeof(HG_MSGS) / sizeof(HG_MSGS[0]); i++)
        if (HG_MSGS[i].msg == msg) {
            printf("msg %s 0x%llx 0x%08lx\n", HG_MSGS[i].name, (unsigned long long)wp, (unsigned long)(DWORD)lp);
            fflush(stdout);
            return 0;
        }
    return DefWindowProcA(w, msg, wp, lp);
}

int main(int argc, char **argv)
{
    int dinput = argc > 1 && !strcmp(argv[1], "--dinput");
    WNDCLASSA wc = {0};
    wc.lpfnWndProc = hg_proc;
    wc.hInstance = GetModuleHandleA(NULL);
    wc.lpszClassName = "HostApiGame";
    RegisterClassA(&wc);
    HWND w = CreateWindowA("HostApiGame", "hostapi", WS_OVERLAPPEDWINDOW, 0, 0, 320, 240, NULL, NULL, wc.hInstance, NULL);
    if (!w) {
        printf("hostapi: CreateWindow failed (error %lu)\n", GetLastError());
        return 1;
    }
    ShowWindow(w, SW_SHOW);
    IDirectInput8A *di = NULL;
    IDirectInputDevice8A *kb = NULL, *mouse = NULL;
    if (dinput && SUCCEEDED(DirectInput8Create(wc.hInstance, DIRECTINPUT_VERSION, &IID_IDirectInput8A, (void **)&di,
                                               NULL))) {
        kb = hg_device(di, w, &GUID_SysKeyboard, &c_dfDIKeyboard);
        mouse = hg_device(di, w, &GUID_SysMouse, &c_dfDIMouse);
        printf("hostapi: dinput keyboard %d mouse %d\n", kb != NULL, mouse != NULL);
        fflush(stdout);
    }
    HDC mem = CreateCompatibleDC(NULL);
    DWORD last_version = 0;
    BOOL last_text = -1;
    char last_polled[160] = "";
    for (;;) {
        MSG m;
        while (PeekMessageA(&m, NULL, 0, 0, PM_REMOVE)) {
            TranslateMessage(&m);
            DispatchMessageA(&m);
        }
        hg_drain(kb, "key");
        hg_drain(mouse, "mouse");
        POINT p;
        GetCursorPos(&p);
        ScreenToClient(w, &p);
        BYTE keys[256];
        GetKeyboardState(keys);
        char polled[160];
        snprintf(polled, sizeof(polled), "poll cursor %ld %ld left %d lbutton %d a-pressed %d b %d/%d", (long)p.x,
                 (long)p.y, GetAsyncKeyState(VK_LEFT) < 0, GetAsyncKeyState(VK_LBUTTON) < 0,
                 GetAsyncKeyState('A') & 1, (keys['B'] & 0x80) != 0, GetKeyState('B') < 0);
        if (strcmp(polled, last_polled)) {
            printf("%s\n", polled);
            fflush(stdout);
            strcpy(last_polled, polled);
        }
        DWORD v = GetVersion();
        BOOL t = TextOutA(mem, 0, 0, "x", 1);
        if (v != last_version || t != last_text) {
            printf("version 0x%08lx textout %d\n", (unsigned long)v, (int)t);
            fflush(stdout);
            last_version = v, last_text = t;
        }
        Sleep(1);
    }
}
