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
extern hk_fn hk_extra_fns[]; /* draw.c: draw calls the recipe names that the hook does not know */
extern int hk_n_extra_fns;
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
/* Calls visit for every import by name of module m, with the DLL it comes from and its
 * import address table entry, until visit returns nonzero (returned). */
typedef int (*hk_import_visit)(const char *dll, const char *name, ULONG_PTR *slot, void *ctx);
int hk_each_import(HMODULE m, hk_import_visit visit, void *ctx);
/* Writes value into an import table entry (made writable for the write). 0, or the
 * Windows error of VirtualProtect. */
DWORD hk_set_slot(ULONG_PTR *slot, ULONG_PTR value);

/* hostapi.c: the adapter API's windows, input, imports and addresses (w3h.h, ABI 2;
 * each function's contract is its field's comment there). */
void *hk_find_window(const char *class_name);
int hk_key(void *window, uint32_t vk, int down);
int hk_type_char(void *window, uint32_t ch);
int hk_mouse(void *window, int32_t x, int32_t y, uint32_t buttons);
void *hk_patch_import(const char *importer, const char *dll, const char *name, void *fn);
int hk_check_address(const void *addr, size_t len, int write);

/* draw.c: the reals; W3H_DRAW_CALLS (a comma list) made no-ops, a fatal error naming an
 * unknown one. */
void hk_draw_init(void);
void hk_draw_off(const char *list);

/* msgloop.c: the reals. */
void hk_msg_init(void);

/* trap.c: the step point at a function the .exe exports ("export:NAME"). */
void hk_trap_install(const char *name);

void hk_log(const char *fmt, ...);
void hk_fatal(int code, const char *fmt, ...);

#endif
