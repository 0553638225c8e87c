/* hook.c: w3hook.dll, loaded into an unmodified game by w3inject.exe before the game's
 * first instruction (docs/hooking.md): its entry point and its set-up, the one file
 * that knows every part (hook.h lists the layers).
 *
 * In DllMain it reads its settings (W3H_*), gives the import patcher every part's table
 * of functions (patch.c), patches the import tables of the game's .exe (and of the DLLs
 * W3H_MODULES names), or arms the breakpoint of a step point in the game's code (trap.c:
 * export:NAME, at:MODULE+0xOFFSET), and returns; nothing else runs under the loader
 * lock. The steps begin at the first call of the step point (step.c).
 *
 * The hook never lets a failure hang: a bad setting, a missing import, an adapter
 * that fails or crashes, each ends the game with one line naming it and an exit code
 * the supervisor reads (W3S_EXIT_INJECT, W3S_EXIT_ADAPTER, the shim's own).
 */
#include "hook.h"

#include <tlhelp32.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "w3s.h"

static HANDLE g_clean; /* the launcher's event: set on every exit the game or the hook chose */

/* Every part's functions, for the import patcher (patch.c adds the loader's own). */
static const hk_fn_table TABLES[] = {
    {hk_wait_fns, &hk_n_wait_fns},   {hk_read_fns, &hk_n_read_fns},   {hk_timer_fns, &hk_n_timer_fns},
    {hk_draw_fns, &hk_n_draw_fns},   {hk_msg_fns, &hk_n_msg_fns},     {hk_extra_fns, &hk_n_extra_fns},
    {hk_fault_fns, &hk_n_fault_fns}, {hk_com_fns, &hk_n_com_fns},     {hk_input_fns, &hk_n_input_fns},
    {hk_d3d8_fns, &hk_n_d3d8_fns},   {hk_dxgi_fns, &hk_n_dxgi_fns},
};

/* The graphics APIs' methods that W3H_DRAW_CALLS may name (draw.c asks each). */
static const hk_off_fn METHODS_OFF[] = {hk_com_off, hk_d3d8_off, hk_dxgi_off};

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

/* A step point the game imports but never calls (the C runtime imports Sleep, the
 * game's frame calls something else) would hang the start until the supervisor's
 * start_timeout_s, three times over: this thread ends the game at the deadline instead,
 * naming the step point. It starts once DllMain returns (the loader lock) and sleeps in
 * wall time: the hook's own Sleep is never patched. */
static DWORD WINAPI deadline_watch(void *arg)
{
    (void)arg;
    Sleep(hk_config.step_deadline_ms);
    if (!hk_step_reached())
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
    hk_step_init(ad, g_clean);
    hk_patch_tables(TABLES, (int)(sizeof(TABLES) / sizeof(TABLES[0])));
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
    hk_on_advance(hk_msg_timers_fire); /* SetTimer's game-time timers, after the others (step.c) */
    hk_reads_init();
    hk_clock_init();
    hk_waits_init();
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
        hk_set_step_fn(spf, hk_wait_plain(spf->name));
    if (!c->draw) {
        const char *calls = getenv("W3H_DRAW_CALLS");
        hk_draw_off(calls && *calls ? calls : "BitBlt,StretchBlt,StretchDIBits,SetDIBitsToDevice,SwapBuffers,wglSwapBuffers",
                    METHODS_OFF, (int)(sizeof(METHODS_OFF) / sizeof(METHODS_OFF[0])));
    }
    int step_found = spf && (spf->kind & HK_METHOD); /* reached through its creator's object (com.c) */
    if (trap) {
        hk_trap_install(c->step_point);
        step_found = 1;
    }
    if (c->step_adapter) {
        hk_trap_entry(hk_attach); /* the adapter needs host->step before the first step */
        step_found = 1;
    }
    /* Every module's imports (patch.c); the step point counts in the .exe and W3H_MODULES'. */
    const char *mods = getenv("W3H_MODULES");
    step_found |= hk_patch_setup(mods);
    if (!step_found)
        hk_fatal(W3S_EXIT_INJECT, "the step point %s is not imported by the game's .exe%s: name a call the game makes "
                 "once a frame (W3H_STEP_POINT; docs/hooking.md, \"Finding the step point\")", c->step_point,
                 mods && *mods ? " or the modules in W3H_MODULES" : "");
    AddVectoredExceptionHandler(1, hk_on_adapter_crash);
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

BOOL WINAPI DllMain(HINSTANCE self, DWORD reason, LPVOID reserved)
{
    (void)reserved;
    if (reason == DLL_PROCESS_ATTACH) {
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
