/* hook.c: w3hook.dll, loaded into an unmodified game by w3inject.exe before the game's
 * first instruction (docs/hooking.md).
 *
 * In DllMain it reads its settings (W3H_*), patches the import tables of the game's
 * .exe (and of the DLLs W3H_MODULES names), or arms the breakpoint of a step point in
 * the game's code (trap.c: export:NAME, at:MODULE+0xOFFSET), and returns; nothing else runs under the
 * loader lock. At the first call of the step point it attaches to the table (the
 * shim, w3s.c) and calls the adapter's w3a_attach; at every call after, one step:
 * the adapter observes, the rows are posted and answered, the adapter acts, the
 * virtual clock advances step_ms (clock.c).
 *
 * The hook never lets a failure hang: a bad setting, a missing import, an adapter
 * that fails or crashes, each ends the game with one line naming it and an exit code
 * the supervisor reads (W3S_EXIT_INJECT, W3S_EXIT_ADAPTER, the shim's own).
 */
#include "hook.h"

#include <stdarg.h>
#include <tlhelp32.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "w3h.h"
#include "w3s.h"

hk_cfg hk_config;

static HMODULE g_self, g_adapter;
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

/* ---- messages and exits ---- */

static void hk_vwrite(const char *prefix, const char *fmt, va_list ap)
{
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "%s", prefix);
    n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 2, fmt, ap);
    if (n > (int)sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    DWORD w;
    WriteFile(GetStdHandle(STD_ERROR_HANDLE), buf, (DWORD)n, &w, NULL);
}

void hk_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vwrite("w3hook: ", fmt, ap);
    va_end(ap);
}

void hk_fatal(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vwrite("w3hook: ", fmt, ap);
    va_end(ap);
    /* TerminateProcess, not ExitProcess: no DLL detach or atexit of the game can hang it. */
    TerminateProcess(GetCurrentProcess(), (UINT)code);
}

static void host_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vwrite("adapter: ", fmt, ap);
    va_end(ap);
}

static void host_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vwrite("adapter failed: ", fmt, ap);
    va_end(ap);
    TerminateProcess(GetCurrentProcess(), W3S_EXIT_ADAPTER);
}

/* A crash inside the adapter (or in code it called) ends the game with its cause; the
 * game's own exceptions go on to the game's handlers. */
static LONG CALLBACK on_exception(EXCEPTION_POINTERS *ep)
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

/* ---- settings ---- */

/* A setting from the environment: the shim's parser (one for the game side and the
 * hook), then the hook's range; either failure ends the start, naming the setting. */
static long env_long(const char *name, long dflt, long lo, long hi)
{
    char err[256];
    long v = dflt;
    if (w3s_env_int(name, dflt, &v, err, sizeof(err)) || v < lo || v > hi)
        hk_fatal(W3S_EXIT_INJECT, "setting %s=%s: expected an integer in %ld..%ld", name, getenv(name), lo, hi);
    return v;
}

/* The step point (one of the hooked calls, or export:NAME), the parts' tables (patch.c)
 * and the hook's reals. */
int hk_is_step_point(const char *name)
{
    return !strcmp(hk_config.step_point, name);
}

/* The game's main thread: while the hook loads, the game's threads are its main thread,
 * suspended, and the launcher's loading thread (this one); the earliest created other
 * than this one. 0 when none is found. */
static DWORD main_thread(void)
{
    DWORD pid = GetCurrentProcessId(), me = GetCurrentThreadId(), best = 0;
    ULONGLONG best_t = ~0ULL;
    HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
    if (snap == INVALID_HANDLE_VALUE)
        return 0;
    THREADENTRY32 te = {.dwSize = sizeof(te)};
    for (BOOL ok = Thread32First(snap, &te); ok; ok = Thread32Next(snap, &te)) {
        if (te.th32OwnerProcessID != pid || te.th32ThreadID == me)
            continue;
        HANDLE t = OpenThread(THREAD_QUERY_LIMITED_INFORMATION, FALSE, te.th32ThreadID);
        FILETIME c, e, k, u;
        ULONGLONG ct = ~0ULL - 1;
        if (t && GetThreadTimes(t, &c, &e, &k, &u))
            ct = ((ULONGLONG)c.dwHighDateTime << 32) | c.dwLowDateTime;
        if (t)
            CloseHandle(t);
        if (ct < best_t)
            best_t = ct, best = te.th32ThreadID;
    }
    CloseHandle(snap);
    return best;
}

static void attach(void);

/* A step point the game imports but never calls (the C runtime imports Sleep, the
 * game's frame calls something else) would hang the start until the supervisor's
 * start_timeout_s, three times over: this thread ends the game at the deadline instead,
 * naming the step point. It starts once DllMain returns (the loader lock) and sleeps in
 * wall time: the hook's own Sleep is never patched. */
static DWORD WINAPI deadline_watch(void *arg)
{
    (void)arg;
    Sleep(hk_config.step_deadline_ms);
    if (!g_reached)
        hk_fatal(W3S_EXIT_NO_STEP, "the step point %s was not reached within %lu ms (step_deadline_s): %s on the "
                 "step thread (%s); name a call the frame makes (docs/hooking.md, \"Finding the step point\")%s",
                 hk_config.step_point, (unsigned long)hk_config.step_deadline_ms,
                 hk_config.step_adapter ? "the adapter never called host->step" : "the game's frame does not call it",
                 hk_config.step_first ? "first" : "main", hk_config.step_first ? "" : " or try step_thread = \"first\"");
    return 0;
}

static void setup(void)
{
    hk_cfg *c = &hk_config;
    c->clock = (int)env_long("W3H_CLOCK", 1, 0, 1);
    c->step_ms = (uint32_t)env_long("W3H_STEP_MS", 50, 1, 3600 * 1000);
    c->draw = (int)env_long("W3H_DRAW", 1, 0, 1);
    c->park_slice_ms = (uint32_t)env_long("W3H_PARK_SLICE_MS", 5, 1, 1000);
    const char *st = getenv("W3H_STEP_THREAD");
    if (st && *st && strcmp(st, "main") && strcmp(st, "first"))
        hk_fatal(W3S_EXIT_INJECT, "setting W3H_STEP_THREAD=%s: expected main or first", st);
    c->step_first = st && !strcmp(st, "first");
    c->step_deadline_ms = (uint32_t)env_long("W3H_STEP_DEADLINE_MS", 10000, 0, 24 * 3600 * 1000);
    c->epoch_s = -1;
    const char *ep = getenv("W3H_EPOCH_S");
    if (ep && *ep) {
        /* strtoll, not env_long: a long is 32 bits on Windows and the seconds pass 2^31 in 2038. */
        char *end;
        long long v = strtoll(ep, &end, 10);
        if (*end || v < 0 || v > 253402300799LL) /* 9999-12-31, the last second SYSTEMTIME holds */
            hk_fatal(W3S_EXIT_INJECT, "setting W3H_EPOCH_S=%s: expected unix seconds in 0..253402300799 "
                     "([games.inject] epoch_s)", ep);
        c->epoch_s = v;
    }
    const char *sp = getenv("W3H_STEP_POINT");
    snprintf(c->step_point, sizeof(c->step_point), "%s", sp && *sp ? sp : "Sleep");
    c->step_adapter = !strcmp(c->step_point, "adapter");
    if (c->step_adapter)
        c->step_first = 1; /* the first thread to call host->step makes the steps */
    const char *ad = getenv("W3H_ADAPTER");
    if (!ad || !*ad)
        hk_fatal(W3S_EXIT_INJECT, "W3H_ADAPTER is not set: the adapter DLL's path (the launcher's --adapter)");
    snprintf(g_adapter_path, sizeof(g_adapter_path), "%s", ad);
    int trap = !strncmp(c->step_point, "export:", 7) || !strncmp(c->step_point, "at:", 3);
    hk_fn *spf = trap || c->step_adapter ? NULL : hk_find_fn(c->step_point);
    if (!trap && !c->step_adapter && !hk_can_be_step_point(spf)) {
        char known[512];
        hk_step_point_names(known, sizeof(known));
        hk_fatal(W3S_EXIT_INJECT, "W3H_STEP_POINT=%s: not a call the hook can make the step point (one of: %s; "
                 "or export:NAME, a function the .exe exports; at:MODULE+0xOFFSET, an address of its code; "
                 "adapter, the adapter calls host->step)", c->step_point, known);
    }
    hk_draw_init();
    hk_msg_init();
    hk_clock_init();
    hk_timers_init();
    if (!c->step_first) {
        DWORD tid = main_thread();
        if (!tid)
            hk_fatal(W3S_EXIT_INJECT, "cannot find the game's main thread (W3H_STEP_THREAD=first makes the first "
                     "thread to call the step point the step thread)");
        hk_set_step_thread(tid);
    }
    hk_input_init();
    hk_set_on(HK_LOADER | HK_FAULT | HK_INPUT | (c->clock ? HK_CLOCK | HK_WAIT | HK_TIMER : 0));
    if (spf)
        hk_set_step_fn(spf);
    if (!c->draw) {
        const char *calls = getenv("W3H_DRAW_CALLS");
        hk_draw_off(calls && *calls ? calls : "BitBlt,StretchBlt,StretchDIBits,SetDIBitsToDevice,SwapBuffers,wglSwapBuffers");
    }
    int step_found = spf && (spf->kind & HK_METHOD); /* reached through its creator's object (com.c) */
    if (trap) {
        hk_trap_install(c->step_point);
        step_found = 1;
    }
    if (c->step_adapter) {
        hk_trap_entry(attach); /* the adapter needs host->step before the first step */
        step_found = 1;
    }
    /* Every module's imports (patch.c); the step point counts in the .exe and W3H_MODULES'. */
    const char *mods = getenv("W3H_MODULES");
    step_found |= hk_patch_setup(mods);
    if (!step_found)
        hk_fatal(W3S_EXIT_INJECT, "the step point %s is not imported by the game's .exe%s: name a call the game makes "
                 "once a frame (W3H_STEP_POINT; docs/hooking.md, \"Finding the step point\")", c->step_point,
                 mods && *mods ? " or the modules in W3H_MODULES" : "");
    AddVectoredExceptionHandler(1, on_exception);
    /* Before the first step too (the shim sets it again at its attach): a crash of the
     * game's own, said at once; Wine's debugger would hold it seconds, then "step point
     * not reached". A filter the game sets later replaces it. */
    SetUnhandledExceptionFilter(w3s_on_crash);
    if (c->step_deadline_ms) { /* without its watch, a step point never reached would hang unseen */
        HANDLE t = CreateThread(NULL, 0, deadline_watch, NULL, 0, NULL);
        if (!t)
            hk_fatal(W3S_EXIT_INJECT, "cannot start the step deadline's watch thread (Windows error %lu)",
                     (unsigned long)GetLastError());
        CloseHandle(t);
    }
}

/* ---- the adapter and the step ---- */

static void *host_find_export(const char *module, const char *name)
{
    HMODULE m = module ? GetModuleHandleA(module) : GetModuleHandleW(NULL);
    return m ? (void *)GetProcAddress(m, name) : NULL;
}

/* W3H_ADDR_<name>="module+0xoffset" ("exe" for the game's .exe). */
static void *host_find_address(const char *name)
{
    char key[128];
    snprintf(key, sizeof(key), "W3H_ADDR_%s", name);
    return hk_resolve_address(getenv(key), NULL);
}

static uint64_t host_game_time_ms(void) { return hk_clock_now() / 10000; }

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

static void attach(void)
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
        .find_export = host_find_export,
        .find_address = host_find_address,
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
        attach();
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
    hk_clock_advance(hk_config.step_ms); /* timers.c's timers fire in it */
    hk_msg_timers_fire();
}

BOOL WINAPI DllMain(HINSTANCE self, DWORD reason, LPVOID reserved)
{
    (void)reserved;
    if (reason == DLL_PROCESS_ATTACH) {
        g_self = self;
        DisableThreadLibraryCalls(self);
        /* A crash must end the game, never wait on a dialog. */
        SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX | SEM_NOOPENFILEERRORBOX);
        const char *ev = getenv("W3H_CLEAN_EVENT");
        g_clean = ev && *ev ? (HANDLE)(ULONG_PTR)strtoull(ev, NULL, 10) : NULL;
        setup();
    } else if (reason == DLL_PROCESS_DETACH && g_clean) {
        SetEvent(g_clean); /* the game exits by itself (ExitProcess): not a kill */
    }
    return TRUE;
}
