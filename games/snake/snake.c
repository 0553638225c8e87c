/* snake.c: a small Snake for Windows. Arrow keys steer, P pauses, N starts a new game,
 * Esc quits. The snake moves one cell a timer tick (SetTimer, 100 ms); eating the food
 * grows it and scores a point; hitting a wall or itself ends the game, which starts
 * again by itself after a moment (or at N). The game pauses when its window loses the
 * focus (P resumes). The food's places come from rand(), seeded from time() at every
 * new game. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <windows.h>

#define SNAKE_COLS 20
#define SNAKE_ROWS 15
#define SNAKE_CELL 24
#define SNAKE_TICK_MS 100
#define SNAKE_TIMER 1
#define SNAKE_RESTART_TICKS 15 /* ticks the game over shows before the next game */
#define SNAKE_MAX (SNAKE_COLS * SNAKE_ROWS)

enum { SNAKE_UP, SNAKE_DOWN, SNAKE_LEFT, SNAKE_RIGHT };

/* The game. The body is a ring: segment k (0 the head) at (head - k) mod SNAKE_MAX. */
struct snake_state {
    int games;      /* games started */
    int ticks;      /* ticks of this game */
    int score;
    int dead;       /* ticks since the snake died; 0 while alive */
    int paused;
    int dir, next_dir;
    int food_x, food_y;
    int len, head;
    int x[SNAKE_MAX], y[SNAKE_MAX];
};

static struct snake_state snake;
static HDC snake_mem;

static int snake_at(int x, int y, int skip_tail)
{
    for (int k = 0; k < snake.len - skip_tail; k++) {
        int i = (snake.head - k + SNAKE_MAX) % SNAKE_MAX;
        if (snake.x[i] == x && snake.y[i] == y)
            return 1;
    }
    return 0;
}

static void snake_place_food(void)
{
    do {
        snake.food_x = rand() % SNAKE_COLS;
        snake.food_y = rand() % SNAKE_ROWS;
    } while (snake_at(snake.food_x, snake.food_y, 0));
}

static void snake_new_game(void)
{
    int games = snake.games, paused = snake.paused;
    memset(&snake, 0, sizeof(snake));
    snake.games = games + 1;
    snake.paused = paused;
    srand((unsigned)time(NULL));
    snake.len = 3;
    snake.head = 2;
    for (int k = 0; k < 3; k++)
        snake.x[k] = SNAKE_COLS / 2 - 2 + k, snake.y[k] = SNAKE_ROWS / 2;
    snake.dir = snake.next_dir = SNAKE_RIGHT;
    snake_place_food();
}

static void snake_tick(void)
{
    if (snake.dead) {
        if (++snake.dead > SNAKE_RESTART_TICKS)
            snake_new_game();
        return;
    }
    snake.ticks++;
    snake.dir = snake.next_dir;
    static const int DX[] = {0, 0, -1, 1}, DY[] = {-1, 1, 0, 0};
    int x = snake.x[snake.head] + DX[snake.dir], y = snake.y[snake.head] + DY[snake.dir];
    int eat = x == snake.food_x && y == snake.food_y;
    if (x < 0 || y < 0 || x >= SNAKE_COLS || y >= SNAKE_ROWS || snake_at(x, y, !eat)) {
        snake.dead = 1;
        return;
    }
    snake.head = (snake.head + 1) % SNAKE_MAX;
    snake.x[snake.head] = x, snake.y[snake.head] = y;
    if (eat) {
        snake.len++;
        snake.score++;
        if (snake.len < SNAKE_MAX)
            snake_place_food();
    }
}

static void snake_cell(int x, int y, COLORREF c)
{
    RECT r = {x * SNAKE_CELL + 1, y * SNAKE_CELL + 1, (x + 1) * SNAKE_CELL - 1, (y + 1) * SNAKE_CELL - 1};
    HBRUSH b = CreateSolidBrush(c);
    FillRect(snake_mem, &r, b);
    DeleteObject(b);
}

static void snake_paint(HWND w)
{
    PAINTSTRUCT ps;
    HDC dc = BeginPaint(w, &ps);
    RECT all = {0, 0, SNAKE_COLS * SNAKE_CELL, SNAKE_ROWS * SNAKE_CELL + 30};
    FillRect(snake_mem, &all, (HBRUSH)GetStockObject(BLACK_BRUSH));
    snake_cell(snake.food_x, snake.food_y, RGB(220, 40, 40));
    for (int k = 0; k < snake.len; k++) {
        int i = (snake.head - k + SNAKE_MAX) % SNAKE_MAX;
        snake_cell(snake.x[i], snake.y[i], k ? RGB(40, 160, 40) : RGB(120, 240, 120));
    }
    char text[96];
    int n = snprintf(text, sizeof(text), "Score %d   %s", snake.score,
                     snake.dead ? "Game over" : snake.paused ? "Paused - P to go on" : "");
    SetBkMode(snake_mem, TRANSPARENT);
    SetTextColor(snake_mem, RGB(255, 255, 255));
    TextOutA(snake_mem, 8, SNAKE_ROWS * SNAKE_CELL + 6, text, n);
    BitBlt(dc, 0, 0, all.right, all.bottom, snake_mem, 0, 0, SRCCOPY);
    EndPaint(w, &ps);
}

static LRESULT CALLBACK snake_proc(HWND w, UINT msg, WPARAM wp, LPARAM lp)
{
    switch (msg) {
    case WM_CREATE: {
        HDC dc = GetDC(w);
        snake_mem = CreateCompatibleDC(dc);
        SelectObject(snake_mem, CreateCompatibleBitmap(dc, SNAKE_COLS * SNAKE_CELL, SNAKE_ROWS * SNAKE_CELL + 30));
        ReleaseDC(w, dc);
        snake_new_game();
        SetTimer(w, SNAKE_TIMER, SNAKE_TICK_MS, NULL);
        return 0;
    }
    case WM_TIMER:
        if (wp == SNAKE_TIMER && !snake.paused) {
            snake_tick();
            InvalidateRect(w, NULL, FALSE);
        }
        return 0;
    case WM_KEYDOWN: {
        int want = wp == VK_UP ? SNAKE_UP : wp == VK_DOWN ? SNAKE_DOWN : wp == VK_LEFT ? SNAKE_LEFT
                 : wp == VK_RIGHT ? SNAKE_RIGHT : -1;
        /* No turning back onto yourself. */
        if (want >= 0 && !snake.paused && (want ^ 1) != snake.dir)
            snake.next_dir = want;
        else if (wp == 'P')
            snake.paused = !snake.paused;
        else if (wp == 'N')
            snake_new_game();
        else if (wp == VK_ESCAPE)
            DestroyWindow(w);
        InvalidateRect(w, NULL, FALSE);
        return 0;
    }
    case WM_ACTIVATE:
        if (LOWORD(wp) == WA_INACTIVE)
            snake.paused = 1;
        break;
    case WM_KILLFOCUS:
        snake.paused = 1;
        InvalidateRect(w, NULL, FALSE);
        return 0;
    case WM_PAINT:
        snake_paint(w);
        return 0;
    case WM_DESTROY:
        KillTimer(w, SNAKE_TIMER);
        PostQuitMessage(0);
        return 0;
    }
    return DefWindowProcA(w, msg, wp, lp);
}

int WINAPI WinMain(HINSTANCE inst, HINSTANCE prev, LPSTR cmd, int show)
{
    (void)prev, (void)cmd;
    WNDCLASSA wc = {0};
    wc.lpfnWndProc = snake_proc;
    wc.hInstance = inst;
    wc.hCursor = LoadCursorA(NULL, (LPCSTR)IDC_ARROW);
    wc.lpszClassName = "SnakeWindow";
    if (!RegisterClassA(&wc)) {
        fprintf(stderr, "snake: RegisterClass failed (error %lu)\n", GetLastError());
        return 1;
    }
    RECT r = {0, 0, SNAKE_COLS * SNAKE_CELL, SNAKE_ROWS * SNAKE_CELL + 30};
    DWORD style = WS_OVERLAPPED | WS_CAPTION | WS_SYSMENU | WS_MINIMIZEBOX;
    AdjustWindowRect(&r, style, FALSE);
    HWND w = CreateWindowA("SnakeWindow", "Snake", style, CW_USEDEFAULT, CW_USEDEFAULT, r.right - r.left,
                           r.bottom - r.top, NULL, NULL, inst, NULL);
    if (!w) {
        fprintf(stderr, "snake: CreateWindow failed (error %lu)\n", GetLastError());
        return 1;
    }
    ShowWindow(w, show ? show : SW_SHOW);
    UpdateWindow(w);
    MSG msg;
    while (GetMessageA(&msg, NULL, 0, 0) > 0) {
        TranslateMessage(&msg);
        DispatchMessageA(&msg);
    }
    return 0;
}
