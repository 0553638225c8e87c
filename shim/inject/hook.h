/* hook.h: what the hook DLL's parts share, in layers: a part calls only the parts of the
 * layers below its own, so each layer can be read, and changed, knowing only those
 * (tests/shim/test_hook_layers.py holds the files to it, from their compiled symbols).
 *
 *   1. base.c: settings, messages, exits
 *   2. patch.c: import and method tables; clock.c: game time, the step thread, parking
 *   3. timers.c: game-time timers; input.c: the input a game polls; hostapi.c: the
 *      adapter's host calls; faults.c: what would wait for a click
 *   4. step.c: the step and the adapter it calls (a feature above it that acts at each
 *      advance registers with hk_on_advance)
 *   5. the step points and the features above the step: waits.c (sleeps and timed
 *      waits), msgloop.c (window messages, SetTimer), draw.c (draw calls, drawing off),
 *      com.c (Direct3D 9's methods), trap.c (breakpoints)
 *   6. reads.c: the clock's reads, ntdll's sleeps and waits (waits.c's); d3d8.c, dxgi.c:
 *      Direct3D 8's, DXGI's and Direct3D 11's methods (com.c's helpers)
 *   7. hook.c: DllMain and the set-up, the one part that knows every other
 */
#ifndef W3H_HOOK_H
#define W3H_HOOK_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <windows.h>

#define HK_TICKS_PER_MS 10000ULL /* game time's unit: 100 ns */

/* One function the hook can put in an import table: its name, the replacement, and
 * the real function (the first import-table value seen, or GetProcAddress). */
typedef struct hk_fn {
    const char *name;
    void *repl;
    void **real;
    unsigned kind; /* HK_* */
    int on;        /* patched in this run */
} hk_fn;

/* A part's table of hk_fn, for the import patcher. */
typedef struct hk_fn_table {
    hk_fn *fns;
    const int *n;
} hk_fn_table;

/* HK_METHOD: a COM method by name ("IDirect3DDevice9::Present"), reached through its
 * object's method table (com.c), in no import table. */
enum { HK_CLOCK = 1, HK_WAIT = 2, HK_STEP = 4, HK_DRAW = 8, HK_LOADER = 16, HK_TIMER = 32, HK_FAULT = 64,
       HK_METHOD = 128, HK_INPUT = 256 };

/* The hook's functions: each part lists those it can put in an import table. */
extern hk_fn hk_wait_fns[]; /* waits.c: the sleeps and timed waits */
extern const int hk_n_wait_fns;
extern hk_fn hk_draw_fns[]; /* draw.c: the draw calls (and presents) */
extern const int hk_n_draw_fns;
extern hk_fn hk_extra_fns[]; /* draw.c: draw calls the recipe names that the hook does not know */
extern int hk_n_extra_fns;
extern hk_fn hk_msg_fns[]; /* msgloop.c: the window message calls */
extern const int hk_n_msg_fns;
extern hk_fn hk_read_fns[]; /* reads.c: the clock's reads, ntdll's sleeps and waits */
extern const int hk_n_read_fns;
extern hk_fn hk_timer_fns[]; /* timers.c: multimedia, waitable and queue timers */
extern const int hk_n_timer_fns;
extern hk_fn hk_fault_fns[]; /* faults.c: what would wait for a click (message boxes) */
extern const int hk_n_fault_fns;
extern hk_fn hk_com_fns[]; /* com.c: Direct3D's creators and its devices' methods by name */
extern const int hk_n_com_fns;
extern hk_fn hk_d3d8_fns[]; /* d3d8.c: Direct3D 8's creator and its devices' methods */
extern const int hk_n_d3d8_fns;
extern hk_fn hk_dxgi_fns[]; /* dxgi.c: DXGI's and Direct3D 11's creators, swap chains and contexts */
extern const int hk_n_dxgi_fns;
extern hk_fn hk_input_fns[]; /* input.c: the input state a game polls */
extern const int hk_n_input_fns;

/* ==== 1. base.c ==== */

/* Settings (W3H_* environment, docs/hooking.md; read by hook.c's set-up). */
typedef struct hk_cfg {
    int clock;         /* W3H_CLOCK, default 1 */
    uint32_t step_ms;  /* W3H_STEP_MS, default 50 */
    char step_point[64]; /* W3H_STEP_POINT: an import the game calls once a frame */
    int draw;          /* W3H_DRAW, default 1 */
    uint32_t park_slice_ms; /* W3H_PARK_SLICE_MS: a parked wait's poll period, default 5 */
    int step_first; /* W3H_STEP_THREAD=first: the first thread to call the step point steps */
    uint32_t step_deadline_ms; /* W3H_STEP_DEADLINE_MS: the step point must be reached by then, 0 never */
    int step_adapter; /* W3H_STEP_POINT=adapter: the adapter calls host->step */
    int64_t epoch_s; /* W3H_EPOCH_S: the game's system time at attach (unix seconds); -1: the real time */
} hk_cfg;

extern hk_cfg hk_config;

/* One line on stderr: "w3hook: ..."; hk_fatal then ends the game with code. */
void hk_log(const char *fmt, ...);
void hk_fatal(int code, const char *fmt, ...);
/* One line on stderr after prefix (the adapter's messages: step.c). */
void hk_vsay(const char *prefix, const char *fmt, va_list ap);
/* Whether name is the configured step point. */
int hk_is_step_point(const char *name);

/* ==== 2. patch.c: the import tables and method tables ==== */

/* Every part's table (hook.c's set-up, before any other call below). */
void hk_patch_tables(const hk_fn_table *tables, int n);
hk_fn *hk_find_fn(const char *name);
/* Switches on every function of the given HK_* kinds. */
void hk_set_on(unsigned kinds);
/* Makes f the step point: patched in the .exe and W3H_MODULES' modules even when its
 * kind is off; elsewhere plain (its variant that is never a step: hk_wait_plain), or
 * the real function when plain is NULL. Only
 * the .exe's calls are the game's frame: a Wine DLL that sleeps on the step thread (COM's
 * message pump, a CRT wait) must not make a step. */
void hk_set_step_fn(hk_fn *f, void *plain);
/* Whether f may be the step point (a call a frame makes, not a clock read). */
int hk_can_be_step_point(const hk_fn *f);
/* The names that may be the step point, ", "-separated, for an error message. */
void hk_step_point_names(char *out, size_t n);
/* Patches every module loaded now (but the hook's own, the adapter and Wine's plumbing):
 * each import named like a switched-on function points at the hook. The step point
 * counts only in the .exe and in the modules named in step_modules (a comma list,
 * W3H_MODULES: those must be loaded). Returns whether the step point was found. */
int hk_patch_setup(const char *step_modules);
/* Patches the modules loaded since the last scan (after a LoadLibrary, at the first
 * step: the adapter's own DLLs). Safe from any thread. */
void hk_patch_scan(void);
/* Calls visit for every import by name of module m, with the DLL it comes from and its
 * import address table entry, until visit returns nonzero (returned). */
typedef int (*hk_import_visit)(const char *dll, const char *name, ULONG_PTR *slot, void *ctx);
int hk_each_import(HMODULE m, hk_import_visit visit, void *ctx);
/* Writes value into an import table entry (made writable for the write). 0, or the
 * Windows error of VirtualProtect. */
DWORD hk_set_slot(ULONG_PTR *slot, ULONG_PTR value);
/* After host->patch_import wrote slot: keeps the scans from taking its module for a new
 * image (and patching the adapter's function away). */
void hk_patch_noted(ULONG_PTR *slot);
/* Points method index of object's method table at fn; the method it pointed at before,
 * or NULL (no object, already fn, or the table cannot be written). host->patch_method. */
void *hk_patch_method(void *object, uint32_t index, void *fn);

/* ==== 2. clock.c: game time ==== */

/* Reads the real clocks for the origins (or W3H_EPOCH_S's fixed ones); after setup(). */
void hk_clock_init(void);
/* Game time in 100 ns units since the hook attached. */
uint64_t hk_clock_now(void);
/* Whether a step has happened (before it, the game's start-up runs in wall time). */
int hk_clock_stepped(void);
/* Moves game time on by ms; hk_clock_wake then wakes the threads parked on it (step.c
 * fires the timers between the two). */
void hk_clock_advance(uint32_t ms);
void hk_clock_wake(void);
/* Parks the calling thread on the clock until game time reaches end; before the first
 * step it also ends after wall_ms of wall time. */
void hk_clock_park(uint64_t end, DWORD wall_ms);
/* A thread's event that every hk_clock_wake sets while it is listed. */
typedef struct hk_listener {
    HANDLE wake;
    struct hk_listener *next;
} hk_listener;
void hk_clock_listen(hk_listener *p);
void hk_clock_unlisten(hk_listener *p);
/* How often the other threads' timed waits woke: parked (on their handles and the
 * steps) and polled (waits that take no extra handle); waits.c counts each wake. */
void hk_clock_count_wake(int parked);
void hk_clock_stats(uint64_t *park_wakes, uint64_t *polls);
/* Game time as the game's counters read it: the real counter at attach plus game time
 * (100 ns units), the system time at attach plus game time (FILETIME units), and the
 * tick count at attach plus game time (ms). */
uint64_t hk_clock_counter(void);
uint64_t hk_clock_systime(void);
uint64_t hk_clock_tick_ms(void);
/* Whether the step thread read the clock (any of the three above) since the last call;
 * clears it. */
int hk_clock_take_read(void);
/* Whether the calling thread is the one that makes the steps, or no step has happened
 * yet: its waits cannot be waited out in game time, they return at once. */
int hk_is_step_thread(void);
/* The thread that makes the steps (W3H_STEP_THREAD=main: the game's main thread). */
void hk_set_step_thread(DWORD tid);
/* Whether the calling thread makes the steps, after making it the step thread when none
 * is yet (W3H_STEP_THREAD=first). hk_claim_step_thread asks this last. */
int hk_take_step_thread(void);

/* ==== 3. timers.c, input.c, hostapi.c, faults.c ==== */

/* timers.c: fires, on the calling (step) thread, every timer game time has reached, in
 * order of due time (then of arming); periodic ones as often as their period fits. */
void hk_timers_init(void);
void hk_timers_fire(void);
/* Whether the calling thread runs a timer's callback now (no step may start in it). */
int hk_timers_firing(void);

/* input.c: the real polled-input functions (after setup). */
void hk_input_init(void);
/* At each step, before the answers: the keys tapped at the last one are released. */
void hk_input_step(void);

/* hostapi.c: the adapter API's windows, input, imports and addresses (w3h.h, ABI 2;
 * each function's contract is its field's comment there). */
void *hk_find_window(const char *class_name);
int hk_key(void *window, uint32_t vk, int down);
int hk_tap(void *window, uint32_t vk);
int hk_type_char(void *window, uint32_t ch);
int hk_mouse(void *window, int32_t x, int32_t y, uint32_t buttons);
void *hk_patch_import(const char *importer, const char *dll, const char *name, void *fn);
int hk_check_address(const void *addr, size_t len, int write);
void *hk_find_export(const char *module, const char *name);
/* W3H_ADDR_<name>="module+0xoffset" ("exe" for the game's .exe). */
void *hk_find_address(const char *name);
/* The address "module+0xoffset" names ("exe": the game's .exe), NULL when the module is
 * not loaded or the text is not of that form; *mod gets the module when not NULL. */
void *hk_resolve_address(const char *spec, HMODULE *mod);

/* ==== 4. step.c: the step and the adapter ==== */

/* The adapter DLL's path (W3H_ADAPTER) and the launcher's exit event (NULL: none). */
void hk_step_init(const char *adapter_path, HANDLE clean_event);
/* fn runs at every advance, after the timers and the wake (set-up only; at most 4). */
void hk_on_advance(void (*fn)(void));
/* Attaches to the table and the adapter (the first step does it, or the .exe's entry
 * with step_point = "adapter"). */
void hk_attach(void);
/* Whether name is the step point and the calling thread makes the steps: the first
 * thread to call the step point makes every step after. Never inside a timer's callback. */
int hk_claim_step_thread(const char *name);
/* The step point: one step, or a frame that is not a decision point (the adapter's
 * w3a_ready said 0); either way game time then advances step_ms (hk_advance). */
void hk_step(void);
/* A frame's step, when name is the step point and the calling thread makes the steps. */
void hk_step_at(const char *name);
/* Game time advances step_ms without a step (nothing posted); the due game-time timers
 * fire. hk_step ends with it. */
void hk_advance(void);
/* The adapter's frame counter (its optional w3a_frame export): 1 with *out set, 0 when
 * the adapter exports none or has not attached yet. */
int hk_adapter_frame(uint64_t *out);
/* Whether the first step began (the step deadline's watch asks). */
int hk_step_reached(void);
/* The vectored handler that ends the game when the adapter crashes. */
LONG CALLBACK hk_on_adapter_crash(EXCEPTION_POINTERS *ep);

/* ==== 5 and 6. the step points and the features above the step ==== */

/* waits.c: the reals. */
void hk_waits_init(void);
/* A sleep and a timed wait on handles measured in game time, never a step: for the
 * replacements of ntdll's (reads.c). Same results as SleepEx and
 * WaitForMultipleObjectsEx. */
DWORD hk_game_sleep(DWORD ms, BOOL alertable);
DWORD hk_game_wait(DWORD n, const HANDLE *h, BOOL all, DWORD ms, BOOL alertable);
/* The variant of the wait named name that is never a step (NULL: none). */
void *hk_wait_plain(const char *name);

/* reads.c: the reals. */
void hk_reads_init(void);

/* msgloop.c: the reals; with a message call as the step point, the clock reads that
 * are the evidence of a frame. */
void hk_msg_init(void);
/* Fires the game-time window timers (SetTimer) that are due at the current game time
 * (timers.c fires the others at each advance); the set-up registers it with hk_on_advance. */
void hk_msg_timers_fire(void);

/* draw.c: the reals; W3H_DRAW_CALLS (a comma list) made no-ops: the draw calls it knows,
 * then each of methods asked (a graphics API's method by name), else a name of the form
 * Name@ARGBYTES; a fatal error naming an unknown one. */
typedef int (*hk_off_fn)(const char *name);
void hk_draw_init(void);
void hk_draw_off(const char *list, const hk_off_fn *methods, int n_methods);

/* com.c */
/* Points the method at repl once, keeping the first original in *real (a class's table
 * is patched once; a second table of the same class keeps the first original); a fatal
 * error naming the method where the table cannot be written. */
void hk_patch_class(void *object, int index, void *repl, void **real, const char *name);
/* The real export name of dll, looked up when the game first calls the hook's
 * replacement (the hook imports no graphics DLL: it would load it into every game); a
 * fatal error where the DLL does not export it. */
void *hk_graphics_export(const char *dll, const char *name);
/* Drawing off for a COM method named in W3H_DRAW_CALLS: 1 when name is one (draw.c):
 * Direct3D 9's (com.c), Direct3D 8's (d3d8.c), DXGI's and Direct3D 11's (dxgi.c). */
int hk_com_off(const char *name);
/* The one of names[0..n) that is name gets off[k] = 1; returns whether one was. */
int hk_off_by_name(const char *const *names, int *off, int n, const char *name);
int hk_d3d8_off(const char *name);
int hk_dxgi_off(const char *name);

/* trap.c: the step point at a function the .exe exports ("export:NAME") or at an
 * address ("at:MODULE+0xOFFSET", "at:NAME" of W3H_ADDR_NAME), a breakpoint each. */
void hk_trap_install(const char *spec);
/* A one-shot breakpoint at the .exe's entry point: fn runs on the game's main thread
 * before its first instruction (step_point = "adapter": the adapter attaches there). */
void hk_trap_entry(void (*fn)(void));

#endif
