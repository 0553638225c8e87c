/* w3s_table.h: the shared table of rows, defined once.
 *
 * The run's table is n_rows fixed-size rows, one per agent-controlled side of every
 * game lane; each game process owns a contiguous range of them. Every game gets a
 * POSIX shared-memory segment of its own, made anew at each start: a header page
 * followed by its rows only. The supervisor maps all of them side by side into one
 * contiguous view of the table (so rows are a multiple of the page size), and no game
 * can reach the header or the rows another game reads (the untrusted-game boundary,
 * docs/protocol.md). Python mirrors this layout as a numpy structured dtype
 * (w3async/sync/layout.py); tests/shim/test_layout.py compiles a program that prints every
 * offset and size below and proves both agree.
 *
 * Ownership (see docs/protocol.md): the game writes every field of a row except
 * act_seq, action and policy_version, which only the supervisor writes. A row is
 * waiting when obs_seq == act_seq + 1; the game bumps obs_seq last (release store),
 * the supervisor writes action, then act_seq = obs_seq last (release store). The
 * supervisor reads each waiting row once into memory of its own, checks that copy and
 * uses only it; it decides by its own record of act_seq, never by the table's.
 *
 * Change anything here and bump W3S_VERSION: the layout hash catches a stale build
 * anyway, the version makes the error message readable.
 */
#ifndef W3S_TABLE_H
#define W3S_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define W3S_MAGIC 0x3143595341335733ULL /* "W3ASYNC1" little-endian */
#define W3S_VERSION 3u
#define W3S_ROW_MAGIC 0x77337277u /* written by the game on every post */

/* A row's observation and answer are shaped by the run's game (its spec): an entity
 * table of e_max x f_ent floats with a type id each, g_glob global floats, n_heads
 * action heads (1..W3S_HEADS_MAX) of up to head_max choices with a mask each. The
 * header carries the shape; w3s_layout_make() turns it into the byte offsets every
 * side uses. The default shape below is the duel's (and the null game's). */
#define W3S_E_MAX 160   /* default: entities per observation */
#define W3S_F_ENT 16    /* default: float features per entity */
#define W3S_G_GLOB 32   /* default: global float features */
#define W3S_N_HEADS 4   /* default: action heads */
#define W3S_HEAD_MAX 192 /* default: choices per head (a pointer head needs e_max) */
#define W3S_HEADS_MAX 8  /* action heads a row can have */
#define W3S_SHAPE_E_LIMIT 4096     /* the largest entity count a shape may declare */
#define W3S_SHAPE_F_LIMIT 1024     /* features per entity */
#define W3S_SHAPE_G_LIMIT 65536    /* global features */
#define W3S_SHAPE_CHOICE_LIMIT 65536 /* choices per head */
#define W3S_ROW_SIZE_LIMIT (16u << 20) /* bytes a row may take */
#define W3S_OBS_OFFSET 128 /* the observation starts the row's third cache line */
#define W3S_HEADER_SIZE 4096
#define W3S_PAGE 4096 /* rows are a whole number of pages: each game's segment maps on its own */

/* Row flags, written by the game. */
#define W3S_FLAG_FIRST 1u     /* first step of an episode */
#define W3S_FLAG_DONE 2u      /* the episode ended at this step (terminal) */
#define W3S_FLAG_TRUNCATED 4u /* the episode was cut (time limit, reload) */
#define W3S_FLAG_TIME_LIMIT 8u /* with DONE: the game's own time limit ended it, its result the tie-break's */

/* Table states, written by the supervisor into the header. */
#define W3S_STATE_RUN 1u
#define W3S_STATE_STOP 2u /* games exit at their next wait */

/* Exit codes a game built on the shim uses, read by the supervisor. */
#define W3S_EXIT_OK 0       /* stopped when asked, or reached its episode quota */
#define W3S_EXIT_ATTACH 65  /* could not attach: missing env, shm or doorbell */
#define W3S_EXIT_LAYOUT 66  /* table magic, version or layout hash differ, or a row shape the game was not written for */
#define W3S_EXIT_CHECK 67   /* an answer failed the game's check (null game) */
#define W3S_EXIT_LOST 68    /* the supervisor went away */
#define W3S_EXIT_INJECT 69  /* the launcher could not inject the hook or the adapter (shim/inject) */
#define W3S_EXIT_ADAPTER 70 /* the adapter failed or crashed inside an injected game */
#define W3S_EXIT_KILLED 71  /* the launcher's game ended without exiting (killed from outside) */
#define W3S_EXIT_CRASH 72   /* a Windows game's unhandled exception: Wine's exit status keeps only the
                               low byte of its code (0xC0000005 -> 5), so it is said on stderr */
#define W3S_EXIT_NO_STEP 73 /* an injected game never reached its step point within step_deadline_s:
                               the same game and settings would not reach it on a restart either */
#define W3S_EXIT_MSGBOX 74  /* an injected game showed a message box (modal: it would wait for a click);
                               the hook said its caption and text */

typedef struct w3s_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size; /* rows start at this offset */
    uint64_t layout_hash; /* w3s_layout_hash() of the supervisor's layout */
    uint32_t row_size;
    uint32_t n_rows;
    uint32_t e_max, f_ent, g_glob, n_heads, head_max; /* the rows' shape */
    volatile uint32_t state; /* W3S_STATE_* */
    uint64_t run_id;
    uint32_t row0; /* the table index of this segment's first row */
    uint8_t _pad[W3S_HEADER_SIZE - 68];
} w3s_header;

/* A row's first two cache lines; its observation follows at W3S_OBS_OFFSET, laid out
 * by the run's w3s_layout (reach it through w3s_glob, w3s_ent, w3s_ent_type, w3s_mask). */
typedef struct w3s_row {
    /* counters and bookkeeping: the first cache line */
    volatile uint64_t obs_seq; /* game: +1 per post, stored last */
    volatile uint64_t act_seq; /* supervisor: = obs_seq once answered, stored last */
    uint32_t row_magic;        /* game: W3S_ROW_MAGIC on every post */
    uint32_t lane;
    uint32_t side;
    uint32_t flags; /* W3S_FLAG_* */
    uint64_t episode;
    uint32_t step; /* step within the episode, 0 on FIRST */
    uint32_t n_ent;
    float reward; /* reward for the previous action */
    uint32_t discarded; /* orders the game discarded since the last post */
    uint64_t state_hash; /* the lane's whole state after this step */
    /* the answer: the second cache line (heads past the shape's n_heads are 0) */
    int32_t action[W3S_HEADS_MAX];
    uint32_t policy_version; /* which network answered */
    uint8_t _pad1[W3S_OBS_OFFSET - 100];
} w3s_row;

/* Compile-time checks that the structs have the sizes the protocol documents. */
typedef char w3s_check_header_size[(sizeof(w3s_header) == W3S_HEADER_SIZE) ? 1 : -1];
typedef char w3s_check_row_head[(sizeof(w3s_row) == W3S_OBS_OFFSET) ? 1 : -1];
typedef char w3s_check_answer_line[(offsetof(w3s_row, action) == 64) ? 1 : -1];

/* The run's row shape and where each observation field lies in a row (bytes from the
 * row's start): glob float[g_glob], then ent float[e_max][f_ent], then ent_type
 * int16[e_max], then mask uint8[n_heads][head_max], each right after the one before
 * (every field's size keeps the next one aligned); the row is padded to whole pages. */
typedef struct w3s_layout {
    uint32_t e_max, f_ent, g_glob, n_heads, head_max;
    uint32_t glob, ent, ent_type, mask; /* offsets */
    uint32_t obs_end;  /* the byte after the mask */
    uint32_t row_size; /* a whole number of W3S_PAGE */
} w3s_layout;

/* Fills *L for a shape; 0, or -1 when a dimension is out of its range (n_heads
 * 1..W3S_HEADS_MAX, head_max >= 1, f_ent 0 only with e_max 0, a row over
 * W3S_ROW_SIZE_LIMIT). */
static inline int w3s_layout_make(w3s_layout *L, uint32_t e_max, uint32_t f_ent, uint32_t g_glob, uint32_t n_heads,
                                  uint32_t head_max)
{
    if (e_max > W3S_SHAPE_E_LIMIT || f_ent > W3S_SHAPE_F_LIMIT || g_glob > W3S_SHAPE_G_LIMIT || n_heads < 1 ||
        n_heads > W3S_HEADS_MAX || head_max < 1 || head_max > W3S_SHAPE_CHOICE_LIMIT || (e_max && !f_ent))
        return -1;
    uint64_t glob = W3S_OBS_OFFSET;
    uint64_t ent = glob + 4ull * g_glob;
    uint64_t ent_type = ent + 4ull * e_max * f_ent;
    uint64_t mask = ent_type + 2ull * e_max;
    uint64_t end = mask + (uint64_t)n_heads * head_max;
    uint64_t row = (end + W3S_PAGE - 1) / W3S_PAGE * W3S_PAGE;
    if (row > W3S_ROW_SIZE_LIMIT)
        return -1;
    L->e_max = e_max, L->f_ent = f_ent, L->g_glob = g_glob, L->n_heads = n_heads, L->head_max = head_max;
    L->glob = (uint32_t)glob, L->ent = (uint32_t)ent, L->ent_type = (uint32_t)ent_type, L->mask = (uint32_t)mask;
    L->obs_end = (uint32_t)end, L->row_size = (uint32_t)row;
    return 0;
}

/* The observation fields of row r. */
static inline float *w3s_glob(const w3s_layout *L, w3s_row *r) { return (float *)((char *)r + L->glob); }
static inline float *w3s_ent(const w3s_layout *L, w3s_row *r, uint32_t e)
{
    return (float *)((char *)r + L->ent) + (size_t)e * L->f_ent;
}
static inline int16_t *w3s_ent_type(const w3s_layout *L, w3s_row *r) { return (int16_t *)((char *)r + L->ent_type); }
static inline uint8_t *w3s_mask(const w3s_layout *L, w3s_row *r, uint32_t head)
{
    return (uint8_t *)r + L->mask + (size_t)head * L->head_max;
}
/* Zeroes the whole observation (globals, entities, types, masks). */
static inline void w3s_obs_clear(const w3s_layout *L, w3s_row *r)
{
    for (uint8_t *p = (uint8_t *)r + L->glob, *end = (uint8_t *)r + L->obs_end; p < end; p++)
        *p = 0;
}

/* The default shape's observation as a struct, for a game written for it (the duel,
 * the null game): w3s_default_obs(row)->ent[e][f]. Valid only in a run of that shape:
 * such a game checks it at attach (w3s_check_shape). */
typedef struct w3s_obs_default {
    float glob[W3S_G_GLOB];
    float ent[W3S_E_MAX][W3S_F_ENT];
    int16_t ent_type[W3S_E_MAX];
    uint8_t mask[W3S_N_HEADS][W3S_HEAD_MAX];
} w3s_obs_default;
static inline w3s_obs_default *w3s_default_obs(w3s_row *r) { return (w3s_obs_default *)((char *)r + W3S_OBS_OFFSET); }

/* FNV-1a over 32-bit words, the same on both sides (w3async/sync/layout.py). */
static inline uint64_t w3s_fnv_word(uint64_t h, uint32_t w)
{
    for (int i = 0; i < 4; i++) {
        h ^= (w >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The layout hash: version, row size, the shape, every row field's offset and size in
 * declaration order (padding excluded), then the observation's offsets. */
static inline uint64_t w3s_layout_hash(const w3s_layout *L)
{
#define W3S_F(field) \
    h = w3s_fnv_word(h, (uint32_t)offsetof(w3s_row, field)); \
    h = w3s_fnv_word(h, (uint32_t)sizeof(((w3s_row *)0)->field));
    uint64_t h = 0xcbf29ce484222325ULL;
    h = w3s_fnv_word(h, W3S_VERSION);
    h = w3s_fnv_word(h, L->row_size);
    h = w3s_fnv_word(h, L->e_max);
    h = w3s_fnv_word(h, L->f_ent);
    h = w3s_fnv_word(h, L->g_glob);
    h = w3s_fnv_word(h, L->n_heads);
    h = w3s_fnv_word(h, L->head_max);
    W3S_F(obs_seq) W3S_F(act_seq) W3S_F(row_magic) W3S_F(lane) W3S_F(side)
    W3S_F(flags) W3S_F(episode) W3S_F(step) W3S_F(n_ent) W3S_F(reward)
    W3S_F(discarded) W3S_F(state_hash) W3S_F(action) W3S_F(policy_version)
#undef W3S_F
    h = w3s_fnv_word(h, L->glob);
    h = w3s_fnv_word(h, L->ent);
    h = w3s_fnv_word(h, L->ent_type);
    h = w3s_fnv_word(h, L->mask);
    h = w3s_fnv_word(h, L->obs_end);
    return h;
}

/* The answer the check policy gives (recipes with policy = "check"): the null game
 * recomputes it for every row, so a lost, stale or misrouted answer is caught. */
static inline int32_t w3s_check_answer(uint64_t obs_seq, uint32_t lane, uint32_t side, uint32_t head)
{
    uint32_t x = (uint32_t)obs_seq * 0x9E3779B1u;
    x ^= lane * 0x85EBCA77u;
    x ^= side * 0xC2B2AE3Du;
    x ^= head * 0x27D4EB2Fu;
    x ^= x >> 15;
    return (int32_t)(x & 0x7fffu);
}

#endif
