/* duel_rt.c: the duel as an ordinary real-time Windows game. It knows nothing of any
 * harness: a fixed-timestep loop on QueryPerformanceCounter, GDI drawing into memory
 * bitmaps, Sleep(1) between frames, AI or human sides, a modding API (duel_rt.h).
 *
 *   duel_rt [--sides A,B] [--map open|choke|camps|rotate] [--seed S] [--lane L]
 *           [--step-turns N] [--time-limit N] [--games N] [--turns N] [--speed T]
 *           [--draw 0|1] [--quiet]
 *
 * A side is ai:easy, ai:normal, ai:hard or human (orders through duel_order). Orders
 * take effect at command turns (multiples of --step-turns), where the linked duel's
 * steps begin: after every command turn boundary the state equals the linked duel's
 * after as many steps, for the same seed, lane, map, sides and orders. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "../duel_setup.h"
#include "duel_rt.h"

#define DU_RT_CELL_PX 8    /* pixels per map cell */
#define DU_RT_END_S 3      /* the end of a game stays on screen this long (game time) */

static const du_orders du_rt_keep = {0, DU_CMD_KEEP, 0, -1};

typedef struct du_rt_args {
    du_cfg cfg; /* sides, map, seed, step_turns, time_limit: the setup du_lane_start takes */
    uint64_t lane_no;
    long games, turns, speed, draw, quiet;
} du_rt_args;

static duel_world du_w;
static du_orders du_queued[2];
static int du_queued_set[2];
static volatile LONG du_rematch_asked;

DUEL_RT_API duel_world *duel_state(void) { return &du_w; }

DUEL_RT_API int duel_order(int side, const du_orders *o)
{
    if (side < 0 || side > 1 || !o || du_w.ctl[side].kind != DU_CTL_AGENT)
        return -1;
    du_queued[side] = *o;
    du_queued_set[side] = 1;
    return 0;
}

DUEL_RT_API void duel_rematch(void) { du_rematch_asked = 1; }

/* ---- the command line ---- */

static int du_rt_usage(FILE *f)
{
    fprintf(f, "usage: duel_rt [--sides A,B] [--map open|choke|camps|rotate] [--seed S] [--lane L]\n"
               "               [--step-turns N] [--time-limit N] [--games N] [--turns N] [--speed T]\n"
               "               [--draw 0|1] [--quiet]\n"
               "sides: ai:easy ai:normal ai:hard human\n");
    return 2;
}

static int du_rt_long(const char *k, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "duel_rt: %s %s: must be an integer in %ld..%ld\n", k, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int du_rt_side(const char *s, du_ctl *c)
{
    memset(c, 0, sizeof(*c));
    if (!strcmp(s, "human")) {
        c->kind = DU_CTL_AGENT; /* orders from outside, as an agent's are in the linked duel */
        return 0;
    }
    return strncmp(s, "ai:", 3) || du_ctl_parse(s, c) ? -1 : 0;
}

static int du_rt_sides(const char *v, du_ctl ctl[2])
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", v);
    char *comma = strchr(buf, ',');
    if (comma)
        *comma = 0;
    if (!comma || du_rt_side(buf, &ctl[0]) || du_rt_side(comma + 1, &ctl[1])) {
        fprintf(stderr, "duel_rt: --sides %s: must be two sides A,B, each ai:easy, ai:normal, ai:hard or human\n", v);
        return -1;
    }
    return 0;
}

/* 0, 1 for --help, or -1 after a one-line error on stderr. */
static int du_rt_parse(int argc, char **argv, du_rt_args *a)
{
    memset(a, 0, sizeof(*a));
    du_rt_sides("ai:normal,ai:normal", a->cfg.ctl);
    a->cfg.map = -1;
    a->cfg.seed = 1;
    a->cfg.step_turns = 20;
    a->cfg.time_limit = 12000;
    a->speed = 20;
    a->draw = 1;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h"))
            return 1;
        if (!strcmp(k, "--quiet")) {
            a->quiet = 1;
            continue;
        }
        static const char *const with_value[] = {"--sides", "--map", "--seed", "--lane", "--step-turns", "--time-limit",
                                                 "--games", "--turns", "--speed", "--draw"};
        int known = 0;
        for (unsigned j = 0; j < sizeof(with_value) / sizeof(with_value[0]); j++)
            known |= !strcmp(k, with_value[j]);
        if (!known) {
            fprintf(stderr, "duel_rt: unknown argument '%s' (--help lists them)\n", k);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "duel_rt: %s needs a value\n", k);
            return -1;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(k, "--sides"))
            bad = du_rt_sides(v, a->cfg.ctl);
        else if (!strcmp(k, "--map")) {
            a->cfg.map = strcmp(v, "rotate") ? du_map_parse(v) : -1;
            if (a->cfg.map < 0 && strcmp(v, "rotate")) {
                fprintf(stderr, "duel_rt: --map %s: must be open, choke, camps or rotate\n", v);
                bad = -1;
            }
        } else if (!strcmp(k, "--seed"))
            bad = du_rt_long(k, v, LONG_MIN, LONG_MAX, &a->cfg.seed);
        else if (!strcmp(k, "--lane")) {
            long lane;
            bad = du_rt_long(k, v, 0, LONG_MAX, &lane);
            a->lane_no = (uint64_t)lane;
        } else if (!strcmp(k, "--step-turns"))
            bad = du_rt_long(k, v, 1, 1000, &a->cfg.step_turns);
        else if (!strcmp(k, "--time-limit"))
            bad = du_rt_long(k, v, 1, 10000000, &a->cfg.time_limit);
        else if (!strcmp(k, "--games"))
            bad = du_rt_long(k, v, 0, LONG_MAX, &a->games);
        else if (!strcmp(k, "--turns"))
            bad = du_rt_long(k, v, 0, LONG_MAX, &a->turns);
        else if (!strcmp(k, "--speed"))
            bad = du_rt_long(k, v, 1, 1000, &a->speed);
        else
            bad = du_rt_long(k, v, 0, 1, &a->draw);
        if (bad)
            return -1;
    }
    return 0;
}

/* ---- drawing: GDI into a memory bitmap, then a blit to a second one (the "screen") ---- */

typedef struct du_canvas {
    HDC dc, screen;
    HBITMAP bitmap, back;
    HGDIOBJ dc_old, screen_old;
    HBRUSH floor, rock, team[3];
    int w, h;
} du_canvas;

static HBITMAP du_rt_dib(HDC dc, int w, int h)
{
    BITMAPINFO bi;
    memset(&bi, 0, sizeof(bi));
    bi.bmiHeader.biSize = sizeof(bi.bmiHeader);
    bi.bmiHeader.biWidth = w;
    bi.bmiHeader.biHeight = -h; /* top-down */
    bi.bmiHeader.biPlanes = 1;
    bi.bmiHeader.biBitCount = 32;
    bi.bmiHeader.biCompression = BI_RGB;
    void *bits;
    return CreateDIBSection(dc, &bi, DIB_RGB_COLORS, &bits, NULL, 0);
}

/* 0, or -1 after a line on stderr naming the call. A DIB section for the back buffer
 * too: CreateCompatibleBitmap on a memory DC would give a 1-bit bitmap. */
static int du_canvas_open(du_canvas *cv)
{
    memset(cv, 0, sizeof(*cv));
    cv->w = cv->h = DU_MAP_MAX * DU_RT_CELL_PX;
    const char *call = "CreateCompatibleDC";
    if (!(cv->dc = CreateCompatibleDC(NULL)) || !(cv->screen = CreateCompatibleDC(NULL)))
        goto err;
    call = "CreateDIBSection";
    if (!(cv->bitmap = du_rt_dib(cv->dc, cv->w, cv->h)) || !(cv->back = du_rt_dib(cv->screen, cv->w, cv->h)))
        goto err;
    cv->dc_old = SelectObject(cv->dc, cv->bitmap);
    cv->screen_old = SelectObject(cv->screen, cv->back);
    cv->floor = CreateSolidBrush(RGB(40, 72, 40));
    cv->rock = CreateSolidBrush(RGB(110, 110, 110));
    cv->team[0] = CreateSolidBrush(RGB(60, 110, 230));
    cv->team[1] = CreateSolidBrush(RGB(220, 60, 50));
    cv->team[2] = CreateSolidBrush(RGB(220, 200, 60));
    return 0;
err:
    fprintf(stderr, "duel_rt: %s failed (error %lu)\n", call, (unsigned long)GetLastError());
    return -1;
}

static void du_canvas_close(du_canvas *cv)
{
    if (cv->dc_old)
        SelectObject(cv->dc, cv->dc_old);
    if (cv->screen_old)
        SelectObject(cv->screen, cv->screen_old);
    HGDIOBJ objs[] = {cv->bitmap, cv->back, cv->floor, cv->rock, cv->team[0], cv->team[1], cv->team[2]};
    for (unsigned i = 0; i < sizeof(objs) / sizeof(objs[0]); i++)
        if (objs[i])
            DeleteObject(objs[i]);
    if (cv->dc)
        DeleteDC(cv->dc);
    if (cv->screen)
        DeleteDC(cv->screen);
}

static void du_draw(du_canvas *cv, const du_lane *l)
{
    const du_map *m = l->map;
    const int px = DU_RT_CELL_PX;
    for (int y = 0; y < m->h; y++)
        for (int x = 0; x < m->w; x++) {
            RECT r = {x * px, y * px, (x + 1) * px, (y + 1) * px};
            FillRect(cv->dc, &r, m->block[y * DU_MAP_MAX + x] ? cv->rock : cv->floor);
        }
    for (int i = 0; i < l->n_units; i++) {
        const du_unit *u = &l->units[i];
        int cx = u->x * px / DU_FP, cy = u->y * px / DU_FP;
        SelectObject(cv->dc, cv->team[u->owner]);
        if (u->type == DU_BASE)
            Rectangle(cv->dc, cx - px, cy - px, cx + px, cy + px);
        else {
            int r = u->type == DU_HEAVY || u->type == DU_BOSS ? px / 2 : px * 3 / 8;
            Ellipse(cv->dc, cx - r, cy - r, cx + r, cy + r);
        }
    }
    BitBlt(cv->screen, 0, 0, cv->w, cv->h, cv->dc, 0, 0, SRCCOPY);
}

/* ---- the game ---- */

static int64_t du_rt_now(void)
{
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    return t.QuadPart;
}

/* A new game at time now: no turn is due at its first frame. */
static void du_rt_new_game(const du_rt_args *a, int64_t now, int64_t *epoch)
{
    du_setup setup;
    du_lane_start(&du_w.lane, &du_w.cache, du_w.ctl, &a->cfg, du_w.lane_no, du_w.episode, &setup);
    du_w.applied[0] = du_w.applied[1] = du_rt_keep;
    du_w.over = 0;
    du_queued_set[0] = du_queued_set[1] = 0;
    du_rematch_asked = 0;
    *epoch = now;
}

/* One turn; at a command turn first the AI's orders and the queued human ones, applied
 * as du_game_step applies a step's (du_command). The step closes after its last turn
 * or the turn that ended the game, as du_step closes it. */
static void du_rt_turn(void)
{
    du_lane *l = &du_w.lane;
    if (l->turn % du_w.step_turns == 0) {
        du_orders o[2];
        for (int s = 0; s < 2; s++) {
            o[s] = du_queued_set[s] ? du_queued[s] : du_rt_keep;
            du_queued_set[s] = 0;
        }
        du_command(l, &du_w.cache, du_w.ctl, o, du_w.discarded);
        du_w.applied[0] = o[0];
        du_w.applied[1] = o[1];
    }
    du_turn(l, &du_w.cache);
    if (l->winner >= 0 || l->turn % du_w.step_turns == 0)
        du_step_close(l, &du_w.cache);
}

int main(int argc, char **argv)
{
    du_rt_args a;
    int p = du_rt_parse(argc, argv, &a);
    if (p)
        return p > 0 ? (du_rt_usage(stdout), 0) : 2;
    LARGE_INTEGER f;
    QueryPerformanceFrequency(&f);
    du_w.version = DUEL_RT_VERSION;
    du_w.size = (uint32_t)sizeof(du_w);
    du_w.seed = a.cfg.seed;
    du_w.lane_no = a.lane_no;
    du_w.map = a.cfg.map;
    du_w.step_turns = (int32_t)a.cfg.step_turns;
    du_w.time_limit = (int32_t)a.cfg.time_limit;
    du_w.speed = (int32_t)a.speed;
    du_w.qpc_freq = f.QuadPart;
    du_cache_init(&du_w.cache, 0, 0);
    du_canvas cv;
    if (a.draw && du_canvas_open(&cv)) {
        du_canvas_close(&cv);
        return 1;
    }
    const int64_t freq = f.QuadPart, speed = a.speed;
    int64_t epoch, end_at = 0;
    long turns = 0;
    du_rt_new_game(&a, du_rt_now(), &epoch);
    for (int quit = 0; !quit;) {
        int64_t now = du_rt_now();
        /* --games quits a frame after the last end: that frame was drawn and slept on */
        if (a.games > 0 && du_w.games_done >= (uint64_t)a.games)
            break;
        if (du_rematch_asked || (du_w.over && now - end_at >= DU_RT_END_S * freq)) {
            du_w.episode++;
            du_rt_new_game(&a, now, &epoch);
        }
        /* The classic fixed-timestep loop, with the turn's length kept exact as
         * freq/speed ticks (a fraction when speed does not divide freq): turn k of the
         * game is due at epoch + k * freq / speed, so N turns take exactly N/speed s
         * and a clock that jumps by a step's time runs exactly a step's turns. */
        while (du_w.lane.winner < 0 && (now - epoch) * speed >= ((int64_t)du_w.lane.turn + 1) * freq) {
            du_rt_turn();
            if (a.turns > 0 && ++turns >= a.turns) {
                quit = 1;
                break;
            }
        }
        if (!du_w.over && du_w.lane.winner >= 0) {
            du_w.over = 1;
            du_w.games_done++;
            end_at = epoch + (int64_t)du_w.lane.turn * freq / speed;
            if (!a.quiet) {
                printf("game %llu: winner %d, turns %d, map %s, seed %016llx\n", (unsigned long long)du_w.episode,
                       du_w.lane.winner, du_w.lane.turn, du_map_name(du_w.lane.setup.map),
                       (unsigned long long)du_w.lane.setup.seed);
                fflush(stdout);
            }
        }
        if (a.draw)
            du_draw(&cv, &du_w.lane);
        if (!quit)
            Sleep(1);
    }
    if (a.draw)
        du_canvas_close(&cv);
    du_cache_free(&du_w.cache);
    return 0;
}
