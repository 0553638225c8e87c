/* pong.c: a small Pong for Windows. You are the left paddle (Up/Down arrows), the
 * computer the right one; the first to --points points wins. One match a process: at
 * the end the window shows the result until you close it (Esc).
 *
 *   pong [--seed N] [--points N]
 *
 * The loop is the classic busy one: drain the window messages with PeekMessage, then
 * run a frame whenever the C library's clock() has moved on by a frame period (16 ms).
 * The serves' directions come from rand(), seeded by --seed, so one seed and one
 * sequence of key presses always play the same match. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <windows.h>

#define PONG_W 640
#define PONG_H 480
#define PONG_PAD_W 10
#define PONG_PAD_H 80
#define PONG_BALL 10
#define PONG_FRAME_MS 16
#define PONG_PLAYER_SPEED 8
#define PONG_CPU_SPEED 5
#define PONG_MAX_VX 14
#define PONG_SERVE_WAIT 30

/* The whole match. Positions in pixels of the 640x480 field. */
struct pong_state {
    int frame;        /* frames played */
    int over;         /* 1 once someone reached the points */
    int points;       /* points to win */
    int score[2];     /* [0] you (left), [1] the computer (right) */
    int ball_x, ball_y, ball_vx, ball_vy;
    int pad_y[2];     /* top of each paddle */
    int up, down;     /* the arrow keys held */
    int serve_wait;   /* frames until the ball moves */
};

static struct pong_state pong;
static HWND pong_wnd;
static HDC pong_mem;
static HBITMAP pong_bmp;

static void pong_serve(int toward)
{
    pong.ball_x = PONG_W / 2 - PONG_BALL / 2;
    pong.ball_y = PONG_H / 2 - PONG_BALL / 2;
    pong.ball_vx = toward ? 6 : -6;
    pong.ball_vy = rand() % 9 - 4;
    pong.serve_wait = PONG_SERVE_WAIT;
}

static void pong_new_match(int points)
{
    memset(&pong, 0, sizeof(pong));
    pong.points = points;
    pong.pad_y[0] = pong.pad_y[1] = PONG_H / 2 - PONG_PAD_H / 2;
    pong_serve(rand() & 1);
}

static int pong_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The ball bounces off paddle p when it overlaps it; its angle follows where it hit. */
static void pong_hit(int p, int pad_x)
{
    int bx = pong.ball_x, by = pong.ball_y;
    if (bx + PONG_BALL < pad_x || bx > pad_x + PONG_PAD_W)
        return;
    if (by + PONG_BALL < pong.pad_y[p] || by > pong.pad_y[p] + PONG_PAD_H)
        return;
    if ((p == 0 && pong.ball_vx > 0) || (p == 1 && pong.ball_vx < 0))
        return;
    int speed = abs(pong.ball_vx) + 1;
    if (speed > PONG_MAX_VX)
        speed = PONG_MAX_VX;
    pong.ball_vx = p == 0 ? speed : -speed;
    pong.ball_vy = (by + PONG_BALL / 2 - (pong.pad_y[p] + PONG_PAD_H / 2)) / 6;
    pong.ball_x = p == 0 ? pad_x + PONG_PAD_W + 1 : pad_x - PONG_BALL - 1;
}

static void pong_update(void)
{
    pong.frame++;
    if (pong.over)
        return;
    pong.pad_y[0] += (pong.down - pong.up) * PONG_PLAYER_SPEED;
    pong.pad_y[0] = pong_clamp(pong.pad_y[0], 0, PONG_H - PONG_PAD_H);
    int target = pong.ball_y + PONG_BALL / 2 - PONG_PAD_H / 2;
    int d = pong_clamp(target - pong.pad_y[1], -PONG_CPU_SPEED, PONG_CPU_SPEED);
    if (pong.ball_vx > 0)
        pong.pad_y[1] = pong_clamp(pong.pad_y[1] + d, 0, PONG_H - PONG_PAD_H);
    if (pong.serve_wait > 0) {
        pong.serve_wait--;
        return;
    }
    pong.ball_x += pong.ball_vx;
    pong.ball_y += pong.ball_vy;
    if (pong.ball_y < 0) {
        pong.ball_y = -pong.ball_y;
        pong.ball_vy = -pong.ball_vy;
    } else if (pong.ball_y > PONG_H - PONG_BALL) {
        pong.ball_y = 2 * (PONG_H - PONG_BALL) - pong.ball_y;
        pong.ball_vy = -pong.ball_vy;
    }
    pong_hit(0, 20);
    pong_hit(1, PONG_W - 20 - PONG_PAD_W);
    int scorer = pong.ball_x < -PONG_BALL ? 1 : pong.ball_x > PONG_W ? 0 : -1;
    if (scorer >= 0) {
        pong.score[scorer]++;
        if (pong.score[scorer] >= pong.points)
            pong.over = 1;
        else
            pong_serve(scorer == 0);
    }
}

static void pong_render(void)
{
    RECT all = {0, 0, PONG_W, PONG_H};
    FillRect(pong_mem, &all, (HBRUSH)GetStockObject(BLACK_BRUSH));
    SelectObject(pong_mem, GetStockObject(WHITE_BRUSH));
    Rectangle(pong_mem, 20, pong.pad_y[0], 20 + PONG_PAD_W, pong.pad_y[0] + PONG_PAD_H);
    Rectangle(pong_mem, PONG_W - 20 - PONG_PAD_W, pong.pad_y[1], PONG_W - 20, pong.pad_y[1] + PONG_PAD_H);
    Ellipse(pong_mem, pong.ball_x, pong.ball_y, pong.ball_x + PONG_BALL, pong.ball_y + PONG_BALL);
    for (int y = 0; y < PONG_H; y += 24) {
        MoveToEx(pong_mem, PONG_W / 2, y, NULL);
        LineTo(pong_mem, PONG_W / 2, y + 12);
    }
    char text[64];
    SetBkMode(pong_mem, TRANSPARENT);
    SetTextColor(pong_mem, RGB(255, 255, 255));
    int n = snprintf(text, sizeof(text), "%d    %d", pong.score[0], pong.score[1]);
    TextOutA(pong_mem, PONG_W / 2 - 30, 10, text, n);
    if (pong.over) {
        n = snprintf(text, sizeof(text), "%s - Esc to quit", pong.score[0] > pong.score[1] ? "You win" : "You lose");
        TextOutA(pong_mem, PONG_W / 2 - 70, PONG_H / 2, text, n);
    }
    HDC dc = GetDC(pong_wnd);
    BitBlt(dc, 0, 0, PONG_W, PONG_H, pong_mem, 0, 0, SRCCOPY);
    ReleaseDC(pong_wnd, dc);
}

static LRESULT CALLBACK pong_proc(HWND w, UINT msg, WPARAM wp, LPARAM lp)
{
    switch (msg) {
    case WM_KEYDOWN:
    case WM_KEYUP: {
        int down = msg == WM_KEYDOWN;
        if (wp == VK_UP)
            pong.up = down;
        else if (wp == VK_DOWN)
            pong.down = down;
        else if (wp == VK_ESCAPE && down)
            DestroyWindow(w);
        return 0;
    }
    case WM_PAINT: {
        PAINTSTRUCT ps;
        BeginPaint(w, &ps);
        EndPaint(w, &ps);
        pong_render();
        return 0;
    }
    case WM_DESTROY:
        PostQuitMessage(0);
        return 0;
    }
    return DefWindowProcA(w, msg, wp, lp);
}

int main(int argc, char **argv)
{
    long seed = 1, points = 3;
    for (int i = 1; i < argc; i++) {
        long *v = !strcmp(argv[i], "--seed") ? &seed : !strcmp(argv[i], "--points") ? &points : NULL;
        char *end = NULL;
        if (!v || i + 1 >= argc || (*v = strtol(argv[i + 1], &end, 10), *end) || (v == &points && (points < 1 || points > 99))) {
            fprintf(stderr, "usage: pong [--seed N] [--points 1..99]\n");
            return 2;
        }
        i++;
    }
    srand((unsigned)seed);
    pong_new_match((int)points);

    HINSTANCE inst = GetModuleHandleA(NULL);
    WNDCLASSA wc = {0};
    wc.lpfnWndProc = pong_proc;
    wc.hInstance = inst;
    wc.hCursor = LoadCursorA(NULL, (LPCSTR)IDC_ARROW);
    wc.lpszClassName = "PongWindow";
    if (!RegisterClassA(&wc)) {
        fprintf(stderr, "pong: RegisterClass failed (error %lu)\n", GetLastError());
        return 1;
    }
    RECT r = {0, 0, PONG_W, PONG_H};
    DWORD style = WS_OVERLAPPED | WS_CAPTION | WS_SYSMENU | WS_MINIMIZEBOX;
    AdjustWindowRect(&r, style, FALSE);
    pong_wnd = CreateWindowA("PongWindow", "Pong", style, CW_USEDEFAULT, CW_USEDEFAULT, r.right - r.left,
                             r.bottom - r.top, NULL, NULL, inst, NULL);
    if (!pong_wnd) {
        fprintf(stderr, "pong: CreateWindow failed (error %lu)\n", GetLastError());
        return 1;
    }
    HDC dc = GetDC(pong_wnd);
    pong_mem = CreateCompatibleDC(dc);
    pong_bmp = CreateCompatibleBitmap(dc, PONG_W, PONG_H);
    SelectObject(pong_mem, pong_bmp);
    SelectObject(pong_mem, GetStockObject(WHITE_PEN));
    ReleaseDC(pong_wnd, dc);
    ShowWindow(pong_wnd, SW_SHOW);
    UpdateWindow(pong_wnd);

    clock_t last = clock();
    MSG msg;
    for (;;) {
        while (PeekMessageA(&msg, NULL, 0, 0, PM_REMOVE)) {
            if (msg.message == WM_QUIT)
                goto done;
            TranslateMessage(&msg);
            DispatchMessageA(&msg);
        }
        clock_t now = clock();
        if (now - last >= PONG_FRAME_MS * CLOCKS_PER_SEC / 1000) {
            last = now;
            pong_update();
            pong_render();
        }
    }
done:
    DeleteObject(pong_bmp);
    DeleteDC(pong_mem);
    return pong.over ? 0 : 3;
}
