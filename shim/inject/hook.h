/* hook.h: what the hook DLL's parts share (hook.c: set-up, import patching, the step
 * and the adapter; clock.c: the virtual clock and the waits measured by it). */
#ifndef W3H_HOOK_H
#define W3H_HOOK_H

#include <stddef.h>
#include <stdint.h>
#include <windows.h>

/* One function the hook can put in an import table: its name, the replacement, and
 * the real function (the first import-table value seen, or GetProcAddress). */
typedef struct hk_fn {
    const char *name;
    void *repl;
    void **real;
    unsigned kind; /* HK_* */
    int on;        /* patched in this run */
} hk_fn;

enum { HK_CLOCK = 1, HK_WAIT = 2, HK_STEP = 4, HK_DRAW = 8, HK_LOADER = 16 };

/* The hook's functions: each part lists those it can put in an import table. */
extern hk_fn hk_clock_fns[]; /* clock.c: the clock's reads, sleeps and timed waits */
extern const int hk_n_clock_fns;
extern hk_fn hk_draw_fns[]; /* draw.c: the draw calls (and presents) */
extern const int hk_n_draw_fns;
extern hk_fn hk_msg_fns[]; /* msgloop.c: the window message calls */
extern const int hk_n_msg_fns;

/* Settings (W3H_* environment, docs/hooking.md). */
typedef struct hk_cfg {
    int clock;         /* W3H_CLOCK, default 1 */
    uint32_t step_ms;  /* W3H_STEP_MS, default 50 */
    char step_point[64]; /* W3H_STEP_POINT: an import the game calls once a frame */
    int draw;          /* W3H_DRAW, default 1 */
    uint32_t park_slice_ms; /* W3H_PARK_SLICE_MS: a parked wait's poll period, default 5 */
    int step_first; /* W3H_STEP_THREAD=first: the first thread to call the step point steps */
    uint32_t step_deadline_ms; /* W3H_STEP_DEADLINE_MS: the step point must be reached by then, 0 never */
    int step_adapter; /* W3H_STEP_POINT=adapter: the adapter calls host->step */
} hk_cfg;

extern hk_cfg hk_config;

/* clock.c */
void hk_clock_init(void);
/* Game time in 100 ns units since the hook attached. */
uint64_t hk_clock_now(void);
/* How often the other threads' timed waits woke: parked (on their handles and the
 * steps) and polled (waits that take no extra handle). */
void hk_clock_stats(uint64_t *park_wakes, uint64_t *polls);
/* Advances game time by ms and wakes the threads parked on it. */
void hk_clock_advance(uint32_t ms);
/* Whether the calling thread is the one that makes the steps, or no step has happened
 * yet: its waits cannot be waited out in game time, they return at once. */
int hk_is_step_thread(void);
/* The thread that makes the steps (W3H_STEP_THREAD=main: the game's main thread). */
void hk_set_step_thread(DWORD tid);
/* Whether name is the step point and the calling thread makes the steps: the first
 * thread to call the step point makes every step after. */
int hk_claim_step_thread(const char *name);
/* The step point (hook.c): one step, or a frame that is not a decision point. Returns
 * the game time it covered (step_ms). */
void hk_step(void);
/* Whether name is the configured step point. */
int hk_is_step_point(const char *name);
/* Game time advances step_ms without a step (nothing posted); the due game-time timers
 * fire. hk_step ends with it. */
void hk_advance(void);
/* The adapter's frame counter (its optional w3a_frame export): 1 with *out set, 0 when
 * the adapter exports none or has not attached yet. */
int hk_adapter_frame(uint64_t *out);

/* patch.c: the import tables. */
hk_fn *hk_find_fn(const char *name);
/* Switches on every function of the given HK_* kinds. */
void hk_set_on(unsigned kinds);
/* Whether f may be the step point (a call a frame makes, not a clock read). */
int hk_can_be_step_point(const hk_fn *f);
/* The names that may be the step point, ", "-separated, for an error message. */
void hk_step_point_names(char *out, size_t n);
/* Points every import of module m named like a switched-on function at the hook.
 * Returns the number of entries patched; *step_found is set when the step point was one. */
int hk_patch_imports(HMODULE m, int *step_found);

/* draw.c: the reals; W3H_DRAW_CALLS (a comma list) made no-ops, a fatal error naming an
 * unknown one. */
void hk_draw_init(void);
void hk_draw_off(const char *list);

/* msgloop.c: the reals; with a message call as the step point, the clock reads that
 * are the evidence of a frame. */
void hk_msg_init(void);
/* Fires the game-time timers (SetTimer) that are due at the current game time. */
void hk_timers_fire(void);

/* trap.c: the step point at a function the .exe exports ("export:NAME") or at an
 * address ("at:MODULE+0xOFFSET", "at:NAME" of W3H_ADDR_NAME), a breakpoint each. */
void hk_trap_install(const char *spec);
/* The address "module+0xoffset" names ("exe": the game's .exe), NULL when the module is
 * not loaded or the text is not of that form; *mod gets the module when not NULL. */
void *hk_resolve_address(const char *spec, HMODULE *mod);
/* A one-shot breakpoint at the .exe's entry point: fn runs on the game's main thread
 * before its first instruction (step_point = "adapter": the adapter attaches there). */
void hk_trap_entry(void (*fn)(void));

void hk_log(const char *fmt, ...);
void hk_fatal(int code, const char *fmt, ...);

#endif
