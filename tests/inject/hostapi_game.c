/* hostapi_game.c: a windowed game for tests/test_inject_hostapi.py that prints every
 * input message its window gets ("msg NAME wparam lparam"), what GetVersion returns
 * and what TextOutA returns (each when it changes), the input state it polls each frame
 * (GetCursorPos, GetAsyncKeyState, GetKeyState, GetKeyboardState: "poll ..." when it
 * changes), and otherwise sleeps 1 ms a frame between draining its messages. It knows
 * nothing of w3async and exports nothing. */
#include <stdio.h>
#include <string.h>
#include <windows.h>

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

int main(void)
{
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
