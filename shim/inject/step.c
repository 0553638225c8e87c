/* step.c: the step, and the adapter it calls (docs/hooking.md).
 *
 * At the first call of the step point the hook attaches to the table (the shim, w3s.c)
 * and calls the adapter's w3a_attach; at every call after, one step: the adapter
 * observes, the rows are posted and answered, the adapter acts, game time advances
 * step_ms (clock.c) and the timers it made due fire. Every step point calls hk_step or
 * hk_step_at (waits.c, draw.c, com.c, d3d8.c, dxgi.c, msgloop.c, trap.c; host->step):
 * they sit above this file, and what this file calls of the features (timers, input)
 * sits below it. A feature above that must act at each advance registers with
 * hk_on_advance (msgloop.c's window timers, by hook.c's set-up).
 *
 * An adapter that fails or crashes ends the game with one line naming it and
 * W3S_EXIT_ADAPTER; a lost table, with the shim's own exit code.
 */
#include "hook.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "w3h.h"
#include "w3s.h"

static HMODULE g_adapter;
static HANDLE g_clean; /* the launcher's event: set on every exit the game or the hook chose */
static w3s_conn *g_conn;
static w3h_host g_host;
static uint64_t g_steps;
static volatile LONG g_reached; /* the step point was reached (the first step began) */
static const char *volatile g_in_adapter; /* the adapter function running, for a crash's cause */
static char g_adapter_path[MAX_PATH];
static struct {
    w3a_attach_fn attach;
    w3a_ready_fn ready;
    w3a_observe_fn observe;
    w3a_act_fn act;
    w3a_episode_end_fn episode_end;
    w3a_detach_fn detach;
    w3a_frame_fn frame;
} g_ad;
static void (*g_on_advance[4])(void); /* hk_on_advance */
static int g_n_on_advance;

void hk_step_init(const char *adapter_path, HANDLE clean_event)
{
    snprintf(g_adapter_path, sizeof(g_adapter_path), "%s", adapter_path);
    g_clean = clean_event;
}

void hk_on_advance(void (*fn)(void))
{
    if (g_n_on_advance == (int)(sizeof(g_on_advance) / sizeof(g_on_advance[0])))
        hk_fatal(W3S_EXIT_INJECT, "hk_on_advance: more than %d callbacks", g_n_on_advance);
    g_on_advance[g_n_on_advance++] = fn;
}

int hk_step_reached(void) { return g_reached != 0; }

int hk_claim_step_thread(const char *name)
{
    if (!name || !hk_is_step_point(name) || hk_timers_firing()) /* a timer's callback runs inside a step */
        return 0;
    return hk_take_step_thread();
}

void hk_step_at(const char *name)
{
    if (hk_claim_step_thread(name))
        hk_step();
}

/* ---- the adapter's messages and crashes ---- */

static void host_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vsay("adapter: ", fmt, ap);
    va_end(ap);
}

static void host_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vsay("adapter failed: ", fmt, ap);
    va_end(ap);
    TerminateProcess(GetCurrentProcess(), W3S_EXIT_ADAPTER);
}

/* A crash inside the adapter (or in code it called) ends the game with its cause; the
 * game's own exceptions go on to the game's handlers. */
LONG CALLBACK hk_on_adapter_crash(EXCEPTION_POINTERS *ep)
{
    void *at = ep->ExceptionRecord->ExceptionAddress;
    HMODULE m = NULL;
    GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT, (LPCSTR)at, &m);
    if (!w3s_exception_name(ep->ExceptionRecord->ExceptionCode) || (!g_in_adapter && (!g_adapter || m != g_adapter)))
        return EXCEPTION_CONTINUE_SEARCH;
    char said[MAX_PATH + 160];
    w3s_describe_exception(ep->ExceptionRecord, said, sizeof(said));
    hk_fatal(W3S_EXIT_ADAPTER, "the adapter %s crashed in %s: %s", g_adapter_path,
             g_in_adapter ? g_in_adapter : "a thread of its own", said);
    return EXCEPTION_CONTINUE_SEARCH;
}

/* ---- the adapter and the step ---- */

static uint64_t host_game_time_ms(void) { return hk_clock_now() / HK_TICKS_PER_MS; }

static volatile int g_finish; /* host->finish was called: exit 0 after this step */
static void host_finish(void) { g_finish = 1; }

/* step_point = "adapter": the adapter's own hook in the game's frame makes the step. */
static void host_step(void)
{
    if (hk_config.step_adapter && hk_claim_step_thread(hk_config.step_point))
        hk_step();
}

int hk_adapter_frame(uint64_t *out)
{
    if (!g_ad.frame)
        return 0;
    g_in_adapter = "w3a_frame";
    *out = g_ad.frame();
    g_in_adapter = NULL;
    return 1;
}

static void *adapter_fn(const char *name, int required)
{
    void *f = (void *)GetProcAddress(g_adapter, name);
    if (!f && required)
        hk_fatal(W3S_EXIT_ADAPTER, "the adapter %s exports no %s (w3h.h)", g_adapter_path, name);
    return f;
}

void hk_attach(void)
{
    char err[512];
    g_adapter = GetModuleHandleA(g_adapter_path);
    if (!g_adapter)
        hk_fatal(W3S_EXIT_INJECT, "the adapter %s is not loaded in the game (was it given to w3inject.exe --adapter?)",
                 g_adapter_path);
    g_ad.attach = (w3a_attach_fn)adapter_fn("w3a_attach", 1);
    g_ad.observe = (w3a_observe_fn)adapter_fn("w3a_observe", 1);
    g_ad.act = (w3a_act_fn)adapter_fn("w3a_act", 1);
    g_ad.ready = (w3a_ready_fn)adapter_fn("w3a_ready", 0);
    g_ad.episode_end = (w3a_episode_end_fn)adapter_fn("w3a_episode_end", 0);
    g_ad.detach = (w3a_detach_fn)adapter_fn("w3a_detach", 0);
    g_ad.frame = (w3a_frame_fn)adapter_fn("w3a_frame", 0);
    hk_patch_scan(); /* the DLLs loaded after setup (the adapter's own), but the adapter */
    int rc = w3s_attach(&g_conn, err, sizeof(err));
    if (rc)
        hk_fatal(rc, "%s", err);
    long row0 = 0;
    if (w3s_env_int("W3S_ROW0", 0, &row0, err, sizeof(err)))
        hk_fatal(W3S_EXIT_ATTACH, "%s", err); /* w3s_attach read it too: not reached */
    g_host = (w3h_host){
        .abi = W3H_ABI,
        .nrows = w3s_nrows(g_conn),
        .row0 = (uint32_t)row0,
        .step_ms = hk_config.step_ms,
        .exe = GetModuleHandleW(NULL),
        .find_export = hk_find_export,
        .find_address = hk_find_address,
        .log = host_log,
        .fail = host_fail,
        .game_time_ms = host_game_time_ms,
        .finish = host_finish,
        .step = host_step,
        .find_window = hk_find_window,
        .key = hk_key,
        .type_char = hk_type_char,
        .mouse = hk_mouse,
        .patch_import = hk_patch_import,
        .check_address = hk_check_address,
        .patch_method = hk_patch_method,
        .tap = hk_tap,
        .layout = w3s_layout_of(g_conn),
    };
    err[0] = 0;
    g_in_adapter = "w3a_attach";
    rc = g_ad.attach(&g_host, err, sizeof(err));
    g_in_adapter = NULL;
    if (rc)
        hk_fatal(W3S_EXIT_ADAPTER, "the adapter %s could not attach: %s", g_adapter_path, err[0] ? err : "(no message)");
}

static void stop(int code, const char *why)
{
    uint64_t wakes, polls;
    hk_clock_stats(&wakes, &polls);
    hk_log("%llu steps; other threads' timed waits woke %llu times parked, %llu times polling",
           (unsigned long long)g_steps, (unsigned long long)wakes, (unsigned long long)polls);
    if (g_ad.detach) {
        g_in_adapter = "w3a_detach";
        g_ad.detach();
        g_in_adapter = NULL;
    }
    if (why)
        hk_log("%s", why);
    w3s_detach(g_conn);
    if (g_clean)
        SetEvent(g_clean);
    TerminateProcess(GetCurrentProcess(), (UINT)code);
}

void hk_step(void)
{
    char err[512];
    g_reached = 1;
    if (!g_conn)
        hk_attach();
    int ready = 1;
    if (g_ad.ready) {
        g_in_adapter = "w3a_ready";
        ready = g_ad.ready();
        g_in_adapter = NULL;
    }
    if (ready) {
        uint32_t n = w3s_nrows(g_conn);
        g_in_adapter = "w3a_observe";
        for (uint32_t i = 0; i < n; i++)
            g_ad.observe(w3s_row_at(g_conn, i), i);
        g_in_adapter = NULL;
        hk_input_step(); /* a tap's key up, after the frame that saw it down */
        int w = w3s_exchange(g_conn, err, sizeof(err));
        if (w > 0)
            stop(W3S_EXIT_OK, NULL);
        if (w < 0)
            stop(W3S_EXIT_LOST, err);
        g_in_adapter = "w3a_act";
        for (uint32_t i = 0; i < n; i++)
            g_ad.act(w3s_row_at(g_conn, i), i);
        g_in_adapter = "w3a_episode_end";
        for (uint32_t i = 0; g_ad.episode_end && i < n; i++)
            if (w3s_row_at(g_conn, i)->flags & W3S_FLAG_DONE)
                g_ad.episode_end(i);
        g_in_adapter = NULL;
        g_steps++;
        if (g_finish)
            stop(W3S_EXIT_OK, NULL);
    }
    hk_advance();
}

void hk_advance(void)
{
    hk_clock_advance(hk_config.step_ms);
    /* The timers first: a thread parked on a timer's event or waitable timer must find
     * it signalled when it wakes for this step, not time out at the same game time. */
    hk_timers_fire();
    hk_clock_wake();
    for (int i = 0; i < g_n_on_advance; i++)
        g_on_advance[i]();
}
