/* duel_map.c: the three maps, A* on their grids, and the A* memo (cut bit 1).
 *
 * Maps are point-symmetric (cell (x, y) mirrors (w-1-x, h-1-y)) so that neither side
 * has the better half. Obstacles never change during a game, so a path depends only on
 * (start, goal): that is what makes the memo exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duel.h"

typedef struct du_rect {
    int x, y, w, h;
} du_rect;

typedef struct du_map_def {
    const char *name;
    int w, h;
    int base_x, base_y; /* side 0; side 1 mirrors */
    const du_rect *rects;
    int n_rects;
    const int (*camps)[2]; /* one of each mirrored pair */
    int n_camps;
} du_map_def;

/* open: a plain field with a few rocks; no camps. */
static const du_rect du_open_rects[] = {{13, 5, 5, 3}, {8, 20, 2, 4}, {22, 12, 3, 2}};
/* choke: a wall down the middle with two narrow gaps, one small camp by each. */
static const du_rect du_choke_rects[] = {{15, 0, 2, 6}, {15, 9, 2, 7}, {10, 3, 2, 6}};
static const int du_choke_camps[][2] = {{20, 7}};
/* camps: larger, broken ground, four camps (two with a boss) worth a detour. */
static const du_rect du_camps_rects[] = {{10, 4, 4, 12}, {20, 16, 3, 8}, {30, 2, 3, 10}, {16, 30, 8, 3},
                                          {6, 34, 10, 2}, {36, 20, 2, 6}};
static const int du_camps_camps[][2] = {{24, 8}, {12, 40}};

static const du_map_def du_defs[DU_N_MAPS] = {
    {"open", 32, 32, 4, 16, du_open_rects, 3, NULL, 0},
    {"choke", 32, 32, 4, 16, du_choke_rects, 3, du_choke_camps, 1},
    {"camps", 48, 48, 5, 24, du_camps_rects, 6, du_camps_camps, 2},
};

static du_map du_maps[DU_N_MAPS];
static int du_maps_ready;

static void du_block_rect(du_map *m, int x0, int y0, int w, int h)
{
    for (int y = y0; y < y0 + h; y++)
        for (int x = x0; x < x0 + w; x++) {
            if (x < 0 || y < 0 || x >= m->w || y >= m->h)
                continue;
            m->block[y * DU_MAP_MAX + x] = 1;
            m->block[(m->h - 1 - y) * DU_MAP_MAX + (m->w - 1 - x)] = 1;
        }
}

/* Every passable cell reachable from side 0's base: the map is one piece. */
static int du_map_connected(const du_map *m)
{
    static int16_t q[DU_CELLS];
    uint8_t seen[DU_CELLS] = {0};
    int qh = 0, qt = 0, n = 0, total = 0;
    q[qt++] = (int16_t)m->base_cell[0];
    seen[m->base_cell[0]] = 1;
    while (qh < qt) {
        int c = q[qh++], x = c % DU_MAP_MAX, y = c / DU_MAP_MAX;
        n++;
        static const int d[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
        for (int k = 0; k < 4; k++) {
            int nx = x + d[k][0], ny = y + d[k][1];
            if (nx < 0 || ny < 0 || nx >= m->w || ny >= m->h)
                continue;
            int nc = ny * DU_MAP_MAX + nx;
            if (!m->block[nc] && !seen[nc]) {
                seen[nc] = 1;
                q[qt++] = (int16_t)nc;
            }
        }
    }
    for (int y = 0; y < m->h; y++)
        for (int x = 0; x < m->w; x++)
            total += !m->block[y * DU_MAP_MAX + x];
    return n == total;
}

static void du_maps_build(void)
{
    for (int i = 0; i < DU_N_MAPS; i++) {
        const du_map_def *d = &du_defs[i];
        du_map *m = &du_maps[i];
        memset(m, 0, sizeof(*m));
        m->w = d->w;
        m->h = d->h;
        for (int y = 0; y < DU_MAP_MAX; y++)
            for (int x = 0; x < DU_MAP_MAX; x++)
                m->block[y * DU_MAP_MAX + x] = (x >= m->w || y >= m->h);
        for (int r = 0; r < d->n_rects; r++)
            du_block_rect(m, d->rects[r].x, d->rects[r].y, d->rects[r].w, d->rects[r].h);
        m->base_cell[0] = d->base_y * DU_MAP_MAX + d->base_x;
        m->base_cell[1] = (m->h - 1 - d->base_y) * DU_MAP_MAX + (m->w - 1 - d->base_x);
        for (int c = 0; c < d->n_camps; c++) {
            int x = d->camps[c][0], y = d->camps[c][1];
            m->camp_cell[m->n_camps++] = y * DU_MAP_MAX + x;
            m->camp_cell[m->n_camps++] = (m->h - 1 - y) * DU_MAP_MAX + (m->w - 1 - x);
        }
        for (int ry = 0; ry < DU_REGIONS; ry++)
            for (int rx = 0; rx < DU_REGIONS; rx++) {
                int x0 = rx * m->w / DU_REGIONS, x1 = (rx + 1) * m->w / DU_REGIONS;
                int y0 = ry * m->h / DU_REGIONS, y1 = (ry + 1) * m->h / DU_REGIONS;
                int cx2 = x0 + x1 - 1, cy2 = y0 + y1 - 1; /* twice the centre */
                int best = -1, bestd = 1 << 30;
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++) {
                        if (m->block[y * DU_MAP_MAX + x])
                            continue;
                        int dx = 2 * x - cx2, dy = 2 * y - cy2, dd = dx * dx + dy * dy;
                        if (dd < bestd) {
                            bestd = dd;
                            best = y * DU_MAP_MAX + x;
                        }
                    }
                m->region_cell[ry * DU_REGIONS + rx] = best;
            }
        if (!du_map_connected(m)) {
            fprintf(stderr, "duel: map %s is not connected (a bug in duel_map.c)\n", d->name);
            abort();
        }
    }
    du_maps_ready = 1;
}

const du_map *du_map_get(int32_t map)
{
    if (!du_maps_ready)
        du_maps_build();
    return (map >= 0 && map < DU_N_MAPS) ? &du_maps[map] : NULL;
}

const char *du_map_name(int32_t map) { return (map >= 0 && map < DU_N_MAPS) ? du_defs[map].name : "?"; }

int du_map_parse(const char *s)
{
    for (int i = 0; i < DU_N_MAPS; i++)
        if (!strcmp(s, du_defs[i].name))
            return i;
    return -1;
}

/* ---- A* ---- */

#define DU_MEMO_SIZE 1024
typedef struct du_memo {
    int32_t key; /* (map * DU_CELLS + s) * DU_CELLS + g + 1, 0: empty */
    int32_t len;
    int16_t path[DU_PATH_MAX];
} du_memo;

void du_cache_init(du_cache *c, uint32_t cuts, int32_t break_step)
{
    memset(c, 0, sizeof(*c));
    c->cuts = cuts;
    c->break_step = break_step;
    c->epoch = 1;
    if (cuts & DU_CUT_ASTAR_MEMO)
        c->memo = calloc(DU_MEMO_SIZE, sizeof(du_memo));
}

void du_cache_free(du_cache *c)
{
    free(c->memo);
    c->memo = NULL;
}

/* Search scratch: one search at a time per process (lanes run one after another). */
static uint32_t du_gen;
static uint32_t du_seen_gen[DU_CELLS], du_closed_gen[DU_CELLS];
static int32_t du_g[DU_CELLS];
static int16_t du_parent[DU_CELLS];
static uint64_t du_heap[DU_CELLS * 8];

static int du_octile(int a, int b)
{
    int dx = abs(a % DU_MAP_MAX - b % DU_MAP_MAX), dy = abs(a / DU_MAP_MAX - b / DU_MAP_MAX);
    return dx < dy ? 14 * dx + 10 * (dy - dx) : 14 * dy + 10 * (dx - dy);
}

static void du_heap_push(int *n, uint64_t v)
{
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (du_heap[p] <= v)
            break;
        du_heap[i] = du_heap[p];
        i = p;
    }
    du_heap[i] = v;
}

static uint64_t du_heap_pop(int *n)
{
    uint64_t top = du_heap[0], v = du_heap[--(*n)];
    int i = 0;
    for (;;) {
        int a = 2 * i + 1, b = a + 1, m = i;
        uint64_t mv = v;
        if (a < *n && du_heap[a] < mv) {
            m = a;
            mv = du_heap[a];
        }
        if (b < *n && du_heap[b] < mv)
            m = b;
        if (m == i)
            break;
        du_heap[i] = du_heap[m];
        i = m;
    }
    du_heap[i] = v;
    return top;
}

/* The search itself: 8 neighbours, no corner cutting, octile costs 10/14. The heap
 * orders by (f, h, cell), so ties break the same way everywhere. */
static int du_astar_search(const du_map *m, int s, int g, int16_t *path)
{
    if (++du_gen == 0) {
        memset(du_seen_gen, 0, sizeof(du_seen_gen));
        memset(du_closed_gen, 0, sizeof(du_closed_gen));
        du_gen = 1;
    }
    int n = 0;
    du_seen_gen[s] = du_gen;
    du_g[s] = 0;
    du_parent[s] = -1;
    int h0 = du_octile(s, g);
    du_heap_push(&n, ((uint64_t)h0 << 40) | ((uint64_t)h0 << 20) | (uint64_t)s);
    static const int dx[8] = {1, -1, 0, 0, 1, 1, -1, -1}, dy[8] = {0, 0, 1, -1, 1, -1, 1, -1};
    int found = 0;
    while (n > 0) {
        int c = (int)(du_heap_pop(&n) & 0xfffff);
        if (du_closed_gen[c] == du_gen)
            continue;
        du_closed_gen[c] = du_gen;
        if (c == g) {
            found = 1;
            break;
        }
        int x = c % DU_MAP_MAX, y = c / DU_MAP_MAX;
        for (int k = 0; k < 8; k++) {
            int nx = x + dx[k], ny = y + dy[k];
            if (nx < 0 || ny < 0 || nx >= m->w || ny >= m->h)
                continue;
            int nc = ny * DU_MAP_MAX + nx;
            if (m->block[nc])
                continue;
            if (k >= 4 && (m->block[y * DU_MAP_MAX + nx] || m->block[ny * DU_MAP_MAX + x]))
                continue; /* no cutting corners */
            int ng = du_g[c] + (k >= 4 ? 14 : 10);
            if (du_seen_gen[nc] == du_gen && du_g[nc] <= ng)
                continue;
            du_seen_gen[nc] = du_gen;
            du_g[nc] = ng;
            du_parent[nc] = (int16_t)c;
            int h = du_octile(nc, g);
            du_heap_push(&n, ((uint64_t)(ng + h) << 40) | ((uint64_t)h << 20) | (uint64_t)nc);
        }
    }
    if (!found)
        return 0;
    int len = 0;
    for (int c = g; c != s; c = du_parent[c])
        len++;
    /* keep the first DU_PATH_MAX cells */
    int keep = len < DU_PATH_MAX ? len : DU_PATH_MAX, i = len;
    for (int c = g; c != s; c = du_parent[c]) {
        i--;
        if (i < keep)
            path[i] = (int16_t)c;
    }
    return keep;
}

int du_astar(const du_map *m, int s, int g, int16_t *path, du_cache *cache)
{
    if (s == g || s < 0 || g < 0 || m->block[g])
        return 0;
    if (!cache || !cache->memo)
        return du_astar_search(m, s, g, path);
    int32_t key = ((int32_t)(m - du_maps) * DU_CELLS + s) * DU_CELLS + g + 1;
    uint32_t slot = ((uint32_t)key * 2654435761u) >> 22; /* 10 bits */
    du_memo *e = &cache->memo[slot];
    if (e->key != key) {
        e->len = du_astar_search(m, s, g, e->path);
        e->key = key;
    }
    memcpy(path, e->path, (size_t)e->len * sizeof(int16_t));
    return e->len;
}
