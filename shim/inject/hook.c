/* hook.c: w3hook.dll, loaded into an unmodified game by w3inject.exe before the game's
 * first instruction (docs/hooking.md).
 *
 * In DllMain it reads its settings (W3H_*), patches the import tables of the game's
 * .exe (and of the DLLs W3H_MODULES names), or arms the breakpoint of an exported step
 * point (trap.c), and returns; nothing else runs under the
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
static const char *volatile g_in_adapter; /* the adapter function running, for a crash's cause */
static char g_adapter_path[MAX_PATH];
static struct {
    w3a_attach_fn attach;
    w3a_ready_fn ready;
    w3a_observe_fn observe;
    w3a_act_fn act;
    w3a_episode_end_fn episode_end;
    w3a_detach_fn detach;
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

/* "module+offset" of an address, for a crash's message. */
static void where(const void *addr, char *out, size_t n)
{
    HMODULE m = NULL;
    char path[MAX_PATH] = "?";
    if (GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                           (LPCSTR)addr, &m) && m) {
        GetModuleFileNameA(m, path, sizeof(path));
        const char *base = strrchr(path, '\\');
        snprintf(out, n, "%s+0x%llx", base ? base + 1 : path, (unsigned long long)((const char *)addr - (const char *)m));
    } else {
        snprintf(out, n, "%p (no module)", addr);
    }
}

/* A crash inside the adapter (or in code it called) ends the game with its cause; the
 * game's own exceptions go on to the game's handlers. */
static LONG CALLBACK on_exception(EXCEPTION_POINTERS *ep)
{
    DWORD code = ep->ExceptionRecord->ExceptionCode;
    const char *what = w3s_exception_name(code);
    void *at = ep->ExceptionRecord->ExceptionAddress;
    HMODULE m = NULL;
    GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT, (LPCSTR)at, &m);
    if (!what || (!g_in_adapter && (!g_adapter || m != g_adapter)))
        return EXCEPTION_CONTINUE_SEARCH;
    char loc[MAX_PATH + 32], detail[64] = "";
    where(at, loc, sizeof(loc));
    if (code == EXCEPTION_ACCESS_VIOLATION && ep->ExceptionRecord->NumberParameters >= 2)
        snprintf(detail, sizeof(detail), " %s address 0x%llx",
                 ep->ExceptionRecord->ExceptionInformation[0] == 1 ? "writing" : ep->ExceptionRecord->ExceptionInformation[0] == 8 ? "executing" : "reading",
                 (unsigned long long)ep->ExceptionRecord->ExceptionInformation[1]);
    hk_fatal(W3S_EXIT_ADAPTER, "the adapter %s crashed in %s: %s (0x%08lx)%s at %s", g_adapter_path,
             g_in_adapter ? g_in_adapter : "a thread of its own", what, (unsigned long)code, detail, loc);
    return EXCEPTION_CONTINUE_SEARCH;
}

/* ---- settings ---- */

static long env_long(const char *name, long dflt, long lo, long hi)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi)
        hk_fatal(W3S_EXIT_INJECT, "setting %s=%s: expected an integer in %ld..%ld", name, s, lo, hi);
    return v;
}

/* ---- the step point's other candidates, and drawing off ---- */

static BOOL(WINAPI *r_SwapBuffers)(HDC);
static BOOL(WINAPI *r_wglSwapBuffers)(HDC);
static BOOL(WINAPI *r_BitBlt)(HDC, int, int, int, int, HDC, int, int, DWORD);
static BOOL(WINAPI *r_StretchBlt)(HDC, int, int, int, int, HDC, int, int, int, int, DWORD);
static int(WINAPI *r_StretchDIBits)(HDC, int, int, int, int, int, int, int, int, const void *, const BITMAPINFO *, UINT, DWORD);
static int(WINAPI *r_SetDIBitsToDevice)(HDC, int, int, DWORD, DWORD, int, int, UINT, UINT, const void *, const BITMAPINFO *, UINT);
static BOOL(WINAPI *r_PatBlt)(HDC, int, int, int, int, DWORD);
static int(WINAPI *r_FillRect)(HDC, const RECT *, HBRUSH);
static BOOL(WINAPI *r_Rectangle)(HDC, int, int, int, int);
static BOOL(WINAPI *r_Ellipse)(HDC, int, int, int, int);
static BOOL(WINAPI *r_PeekMessageA)(MSG *, HWND, UINT, UINT, UINT);
static BOOL(WINAPI *r_PeekMessageW)(MSG *, HWND, UINT, UINT, UINT);
static FARPROC(WINAPI *r_GetProcAddress)(HMODULE, LPCSTR);

static int g_draw_off[16]; /* per draw function below: 1 when it is a no-op */
enum { D_SwapBuffers, D_wglSwapBuffers, D_BitBlt, D_StretchBlt, D_StretchDIBits, D_SetDIBitsToDevice, D_PatBlt,
       D_FillRect, D_Rectangle, D_Ellipse, D_N };
static const char *const DRAW_NAMES[D_N] = {"SwapBuffers", "wglSwapBuffers", "BitBlt", "StretchBlt", "StretchDIBits",
                                            "SetDIBitsToDevice", "PatBlt", "FillRect", "Rectangle", "Ellipse"};

/* A frame's step, when name is the step point and this is the step thread. */
static void step_at(const char *name)
{
    if (hk_claim_step_thread(name))
        hk_step();
}

static BOOL WINAPI h_SwapBuffers(HDC dc)
{
    step_at("SwapBuffers");
    return g_draw_off[D_SwapBuffers] ? TRUE : r_SwapBuffers(dc);
}

static BOOL WINAPI h_wglSwapBuffers(HDC dc)
{
    step_at("wglSwapBuffers");
    if (g_draw_off[D_wglSwapBuffers] || !r_wglSwapBuffers)
        return TRUE;
    return r_wglSwapBuffers(dc);
}

static BOOL WINAPI h_BitBlt(HDC d, int x, int y, int w, int h, HDC s, int sx, int sy, DWORD rop)
{
    step_at("BitBlt");
    return g_draw_off[D_BitBlt] ? TRUE : r_BitBlt(d, x, y, w, h, s, sx, sy, rop);
}

static BOOL WINAPI h_StretchBlt(HDC d, int x, int y, int w, int h, HDC s, int sx, int sy, int sw, int sh, DWORD rop)
{
    return g_draw_off[D_StretchBlt] ? TRUE : r_StretchBlt(d, x, y, w, h, s, sx, sy, sw, sh, rop);
}

static int WINAPI h_StretchDIBits(HDC d, int x, int y, int w, int h, int sx, int sy, int sw, int sh, const void *bits,
                                  const BITMAPINFO *bi, UINT use, DWORD rop)
{
    step_at("StretchDIBits");
    return g_draw_off[D_StretchDIBits] ? (sh < 0 ? -sh : sh) : r_StretchDIBits(d, x, y, w, h, sx, sy, sw, sh, bits, bi, use, rop);
}

static int WINAPI h_SetDIBitsToDevice(HDC d, int x, int y, DWORD w, DWORD h, int sx, int sy, UINT start, UINT lines,
                                      const void *bits, const BITMAPINFO *bi, UINT use)
{
    return g_draw_off[D_SetDIBitsToDevice] ? (int)lines : r_SetDIBitsToDevice(d, x, y, w, h, sx, sy, start, lines, bits, bi, use);
}

static BOOL WINAPI h_PatBlt(HDC d, int x, int y, int w, int h, DWORD rop)
{
    return g_draw_off[D_PatBlt] ? TRUE : r_PatBlt(d, x, y, w, h, rop);
}

static int WINAPI h_FillRect(HDC d, const RECT *r, HBRUSH b) { return g_draw_off[D_FillRect] ? 1 : r_FillRect(d, r, b); }
static BOOL WINAPI h_Rectangle(HDC d, int a, int b, int c, int e) { return g_draw_off[D_Rectangle] ? TRUE : r_Rectangle(d, a, b, c, e); }
static BOOL WINAPI h_Ellipse(HDC d, int a, int b, int c, int e) { return g_draw_off[D_Ellipse] ? TRUE : r_Ellipse(d, a, b, c, e); }

static BOOL WINAPI h_PeekMessageA(MSG *m, HWND w, UINT lo, UINT hi, UINT rm)
{
    step_at("PeekMessageA");
    return r_PeekMessageA(m, w, lo, hi, rm);
}

static BOOL WINAPI h_PeekMessageW(MSG *m, HWND w, UINT lo, UINT hi, UINT rm)
{
    step_at("PeekMessageW");
    return r_PeekMessageW(m, w, lo, hi, rm);
}

static hk_fn *find_fn(const char *name);

/* A game that looks its functions up at run time gets the hooked ones too. */
static FARPROC WINAPI h_GetProcAddress(HMODULE m, LPCSTR name)
{
    if ((ULONG_PTR)name > 0xffff) {
        hk_fn *f = find_fn(name);
        if (f && f->on && f->repl != (void *)h_GetProcAddress)
            return (FARPROC)f->repl;
    }
    return r_GetProcAddress(m, name);
}

#define FN(name, kind) {#name, (void *)h_##name, (void **)&r_##name, kind, 0}
static hk_fn g_fns[] = {
    FN(SwapBuffers, HK_STEP | HK_DRAW), FN(wglSwapBuffers, HK_STEP | HK_DRAW), FN(BitBlt, HK_STEP | HK_DRAW),
    FN(StretchBlt, HK_DRAW), FN(StretchDIBits, HK_STEP | HK_DRAW), FN(SetDIBitsToDevice, HK_DRAW),
    FN(PatBlt, HK_DRAW), FN(FillRect, HK_DRAW), FN(Rectangle, HK_DRAW), FN(Ellipse, HK_DRAW),
    FN(PeekMessageA, HK_STEP), FN(PeekMessageW, HK_STEP), FN(GetProcAddress, HK_LOADER),
};
#undef FN
#define N_FNS ((int)(sizeof(g_fns) / sizeof(g_fns[0])))

static hk_fn *find_fn(const char *name)
{
    for (int i = 0; i < hk_n_clock_fns; i++)
        if (!strcmp(hk_clock_fns[i].name, name))
            return &hk_clock_fns[i];
    for (int i = 0; i < N_FNS; i++)
        if (!strcmp(g_fns[i].name, name))
            return &g_fns[i];
    return NULL;
}

int hk_is_step_point(const char *name)
{
    return !strcmp(hk_config.step_point, name);
}

/* The step point may be any hooked function a frame calls, except the clock's reads
 * (a game reads the clock many times a frame) and the loader's. */
static int can_be_step_point(const hk_fn *f)
{
    return f && ((f->kind & (HK_STEP | HK_WAIT)) != 0);
}

/* ---- import tables ---- */

/* Points every import of m named like an active hook function at the hook. Returns
 * the number of entries patched; *step_found is set when the step point was one. */
static int patch_imports(HMODULE m, int *step_found)
{
    BYTE *base = (BYTE *)m;
    IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)(base + ((IMAGE_DOS_HEADER *)base)->e_lfanew);
    IMAGE_DATA_DIRECTORY dir = nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
    int n = 0;
    if (!dir.VirtualAddress)
        return 0;
    for (IMAGE_IMPORT_DESCRIPTOR *d = (IMAGE_IMPORT_DESCRIPTOR *)(base + dir.VirtualAddress); d->Name; d++) {
        if (!d->OriginalFirstThunk) /* no names left to match (a bound, stripped table) */
            continue;
        IMAGE_THUNK_DATA *names = (IMAGE_THUNK_DATA *)(base + d->OriginalFirstThunk);
        IMAGE_THUNK_DATA *iat = (IMAGE_THUNK_DATA *)(base + d->FirstThunk);
        for (; names->u1.AddressOfData; names++, iat++) {
            if (IMAGE_SNAP_BY_ORDINAL(names->u1.Ordinal))
                continue;
            const char *name = (const char *)((IMAGE_IMPORT_BY_NAME *)(base + names->u1.AddressOfData))->Name;
            hk_fn *f = find_fn(name);
            if (!f || !f->on)
                continue;
            DWORD old;
            if (!VirtualProtect(&iat->u1.Function, sizeof(iat->u1.Function), PAGE_READWRITE, &old))
                hk_fatal(W3S_EXIT_INJECT, "cannot patch the import of %s (VirtualProtect: Windows error %lu)", name,
                         (unsigned long)GetLastError());
            iat->u1.Function = (ULONG_PTR)f->repl;
            VirtualProtect(&iat->u1.Function, sizeof(iat->u1.Function), old, &old);
            n++;
            if (hk_is_step_point(name))
                *step_found = 1;
        }
    }
    return n;
}

static void set_on(unsigned kinds)
{
    for (int i = 0; i < hk_n_clock_fns; i++)
        if (hk_clock_fns[i].kind & kinds)
            hk_clock_fns[i].on = 1;
    for (int i = 0; i < N_FNS; i++)
        if (g_fns[i].kind & kinds)
            g_fns[i].on = 1;
}

/* W3H_DRAW_CALLS: the draw calls that become no-ops while W3H_DRAW=0. */
static void set_draw_off(const char *list)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
        int k = 0;
        while (k < D_N && strcmp(DRAW_NAMES[k], tok))
            k++;
        if (k == D_N) {
            char known[256] = "";
            for (int j = 0; j < D_N; j++)
                strcat(strcat(known, j ? ", " : ""), DRAW_NAMES[j]);
            hk_fatal(W3S_EXIT_INJECT, "W3H_DRAW_CALLS names %s, which is not a draw call the hook knows (%s)", tok, known);
        }
        g_draw_off[k] = 1;
        find_fn(tok)->on = 1;
    }
}

static void init_reals(void)
{
    r_SwapBuffers = SwapBuffers;
    r_BitBlt = BitBlt;
    r_StretchBlt = StretchBlt;
    r_StretchDIBits = StretchDIBits;
    r_SetDIBitsToDevice = SetDIBitsToDevice;
    r_PatBlt = PatBlt;
    r_FillRect = FillRect;
    r_Rectangle = Rectangle;
    r_Ellipse = Ellipse;
    r_PeekMessageA = PeekMessageA;
    r_PeekMessageW = PeekMessageW;
    r_GetProcAddress = GetProcAddress;
    HMODULE gl = GetModuleHandleA("opengl32.dll");
    r_wglSwapBuffers = gl ? (BOOL(WINAPI *)(HDC))(void *)GetProcAddress(gl, "wglSwapBuffers") : NULL;
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
    const char *sp = getenv("W3H_STEP_POINT");
    snprintf(c->step_point, sizeof(c->step_point), "%s", sp && *sp ? sp : "Sleep");
    const char *ad = getenv("W3H_ADAPTER");
    if (!ad || !*ad)
        hk_fatal(W3S_EXIT_INJECT, "W3H_ADAPTER is not set: the adapter DLL's path (the launcher's --adapter)");
    snprintf(g_adapter_path, sizeof(g_adapter_path), "%s", ad);
    const char *export = !strncmp(c->step_point, "export:", 7) ? c->step_point + 7 : NULL;
    hk_fn *spf = export ? NULL : find_fn(c->step_point);
    if (!export && !can_be_step_point(spf)) {
        char known[512] = "";
        for (int i = 0; i < hk_n_clock_fns; i++)
            if (can_be_step_point(&hk_clock_fns[i]))
                strcat(strcat(known, *known ? ", " : ""), hk_clock_fns[i].name);
        for (int i = 0; i < N_FNS; i++)
            if (can_be_step_point(&g_fns[i]))
                strcat(strcat(known, ", "), g_fns[i].name);
        hk_fatal(W3S_EXIT_INJECT, "W3H_STEP_POINT=%s: not a call the hook can make the step point (one of: %s; "
                 "or export:NAME, a function the .exe exports)", c->step_point, known);
    }
    init_reals();
    hk_clock_init();
    if (!c->step_first) {
        DWORD tid = main_thread();
        if (!tid)
            hk_fatal(W3S_EXIT_INJECT, "cannot find the game's main thread (W3H_STEP_THREAD=first makes the first "
                     "thread to call the step point the step thread)");
        hk_set_step_thread(tid);
    }
    set_on(HK_LOADER | (c->clock ? HK_CLOCK | HK_WAIT : 0));
    if (spf)
        spf->on = 1;
    if (!c->draw) {
        const char *calls = getenv("W3H_DRAW_CALLS");
        set_draw_off(calls && *calls ? calls : "BitBlt,StretchBlt,StretchDIBits,SetDIBitsToDevice,SwapBuffers,wglSwapBuffers");
    }
    int step_found = 0;
    if (export) {
        hk_trap_install(export);
        step_found = 1;
    }
    patch_imports(GetModuleHandleW(NULL), &step_found);
    const char *mods = getenv("W3H_MODULES");
    if (mods && *mods) {
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", mods);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            HMODULE m = GetModuleHandleA(tok);
            if (!m)
                hk_fatal(W3S_EXIT_INJECT, "W3H_MODULES names %s, which the game has not loaded at its start", tok);
            patch_imports(m, &step_found);
        }
    }
    if (!step_found)
        hk_fatal(W3S_EXIT_INJECT, "the step point %s is not imported by the game's .exe%s: name a call the game makes "
                 "once a frame (W3H_STEP_POINT; docs/hooking.md, \"Finding the step point\")", c->step_point,
                 mods && *mods ? " or the modules in W3H_MODULES" : "");
    AddVectoredExceptionHandler(1, on_exception);
}

/* ---- the adapter and the step ---- */

static void *host_find_export(const char *module, const char *name)
{
    HMODULE m = module ? GetModuleHandleA(module) : GetModuleHandleW(NULL);
    return m ? (void *)r_GetProcAddress(m, name) : NULL;
}

/* W3H_ADDR_<name>="module+0xoffset" ("exe" for the game's .exe). */
static void *host_find_address(const char *name)
{
    char key[128];
    snprintf(key, sizeof(key), "W3H_ADDR_%s", name);
    const char *v = getenv(key);
    const char *plus = v ? strrchr(v, '+') : NULL;
    if (!plus)
        return NULL;
    char mod[MAX_PATH];
    snprintf(mod, sizeof(mod), "%.*s", (int)(plus - v), v);
    char *end;
    unsigned long long off = strtoull(plus + 1, &end, 0);
    if (*end)
        return NULL;
    HMODULE m = !strcmp(mod, "exe") ? GetModuleHandleW(NULL) : GetModuleHandleA(mod);
    return m ? (void *)((BYTE *)m + off) : NULL;
}

static uint64_t host_game_time_ms(void) { return hk_clock_now() / 10000; }

static volatile int g_finish; /* host->finish was called: exit 0 after this step */
static void host_finish(void) { g_finish = 1; }

static void *adapter_fn(const char *name, int required)
{
    void *f = (void *)r_GetProcAddress(g_adapter, name);
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
    int rc = w3s_attach(&g_conn, err, sizeof(err));
    if (rc)
        hk_fatal(rc, "%s", err);
    long row0 = 0;
    w3s_env_int("W3S_ROW0", 0, &row0, err, sizeof(err));
    g_host = (w3h_host){W3H_ABI, w3s_nrows(g_conn), (uint32_t)row0, hk_config.step_ms, GetModuleHandleW(NULL),
                        host_find_export, host_find_address, host_log, host_fail, host_game_time_ms, host_finish};
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
    hk_clock_advance(hk_config.step_ms);
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
