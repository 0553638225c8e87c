/* patch.c: the import tables. Every part of the hook (clock.c, reads.c, timers.c,
 * draw.c, msgloop.c and the loader's calls here) lists the functions it can put in a
 * game's import tables; setup switches on those the settings ask for, and every module
 * in the process has each import of those names pointed at the hook: the .exe, the DLLs
 * loaded with it, and every DLL loaded later (LoadLibrary*, LdrLoadDll, then a scan of
 * the loader's list, so that a DLL's own dependencies are covered too). Only the PE
 * format's import tables: no disassembler.
 *
 * Not patched, each for a reason:
 * - the hook itself: its imports are its "real" functions;
 * - the adapter: it runs inside the step (a Sleep there must not make a step);
 * - ntdll, kernel32, kernelbase, win32u: the plumbing the hook's real functions go
 *   through (kernelbase's Sleep calls ntdll's NtDelayExecution, its
 *   GetSystemTimeAsFileTime NtQuerySystemTime...): patched, the hook's own waits and
 *   clock reads would come back into its replacements. The game reaches them only
 *   through imports, which are patched in the importing module.
 */
#include "hook.h"
#include "w3s_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <winternl.h>

static FARPROC(WINAPI *r_GetProcAddress)(HMODULE, LPCSTR);
static HMODULE(WINAPI *r_LoadLibraryA)(LPCSTR);
static HMODULE(WINAPI *r_LoadLibraryW)(LPCWSTR);
static HMODULE(WINAPI *r_LoadLibraryExA)(LPCSTR, HANDLE, DWORD);
static HMODULE(WINAPI *r_LoadLibraryExW)(LPCWSTR, HANDLE, DWORD);
/* Wine declares the flags a DWORD, Windows a PULONG: passed through, either fits. */
static LONG(NTAPI *r_LdrLoadDll)(const WCHAR *, void *, const void *, HMODULE *);
static LONG(NTAPI *r_LdrLockLoaderLock)(ULONG, ULONG *, ULONG_PTR *);
static LONG(NTAPI *r_LdrUnlockLoaderLock)(ULONG, ULONG_PTR);
/* Not NtCurrentTeb(): gcc 12 takes mingw's segment read for an out-of-bounds access. */
static PEB *(NTAPI *r_RtlGetCurrentPeb)(void);

static const wchar_t *const EXCLUDED[] = {L"ntdll.dll", L"kernel32.dll", L"kernelbase.dll", L"win32u.dll"};
#define N_EXCLUDED ((int)(sizeof(EXCLUDED) / sizeof(EXCLUDED[0])))

/* The modules whose calls of the step point are steps: the .exe and W3H_MODULES'. */
typedef struct range {
    BYTE *lo, *hi;
} range;
static range g_step_mods[16];
static int g_n_step_mods;
static HMODULE g_self, g_adapter;
static hk_fn *g_step_fn;
static void *g_step_plain; /* the step point's variant elsewhere (NULL: the real one) */

void hk_set_step_fn(hk_fn *f, void *plain)
{
    g_step_fn = f;
    g_step_plain = plain;
}

/* A module already patched: skipped by the next scan while it is the same image and
 * its first patched entry still points at the hook (a DLL unloaded and loaded again at
 * the same base has a fresh table). */
typedef struct seen {
    BYTE *base;
    DWORD size, stamp;
    ULONG_PTR *slot, val;
} seen;
static seen g_seen[1024];
static int g_n_seen;

static int in_step_module(const void *addr)
{
    for (int i = 0; i < g_n_step_mods; i++)
        if ((const BYTE *)addr >= g_step_mods[i].lo && (const BYTE *)addr < g_step_mods[i].hi)
            return 1;
    return 0;
}

/* What an import of f in a module points at: the step point's variant for that module,
 * or NULL (leave the real function). */
static void *target(const hk_fn *f, int step_module)
{
    if (f == g_step_fn && step_module)
        return f->repl;
    if (!f->on)
        return NULL;
    return f == g_step_fn ? g_step_plain : f->repl;
}

/* A game that looks its functions up at run time gets the hooked ones too, the variant
 * of the module that asks. */
static FARPROC WINAPI h_GetProcAddress(HMODULE m, LPCSTR name)
{
    if ((ULONG_PTR)name > 0xffff) {
        hk_fn *f = hk_find_fn(name);
        void *t = f ? target(f, in_step_module(__builtin_return_address(0))) : NULL;
        if (t && t != (void *)h_GetProcAddress)
            return (FARPROC)t;
    }
    return r_GetProcAddress(m, name);
}

/* OpenGL past 1.1 (and any extension) is reached through wglGetProcAddress, never an
 * import: the draw calls the recipe names (glDrawElementsInstanced@20) and the step
 * point are given out there too. opengl32.dll is loaded when a game calls it. */
static PROC(WINAPI *r_wglGetProcAddress)(LPCSTR);

static PROC WINAPI h_wglGetProcAddress(LPCSTR name)
{
    if (name) {
        hk_fn *f = hk_find_fn(name);
        void *t = f ? target(f, in_step_module(__builtin_return_address(0))) : NULL;
        if (t)
            return (PROC)t;
    }
    if (!r_wglGetProcAddress) {
        HMODULE gl = GetModuleHandleA("opengl32.dll");
        r_wglGetProcAddress = gl ? (PROC(WINAPI *)(LPCSTR))(void *)r_GetProcAddress(gl, "wglGetProcAddress") : NULL;
    }
    return r_wglGetProcAddress ? r_wglGetProcAddress(name) : NULL;
}

/* A DLL loaded now is patched once LoadLibrary returns: its DllMain (and threads it
 * starts there) read the real clock until then. The error code is the load's. */
#define AFTER_LOAD(call)                                                                                               \
    HMODULE m = call;                                                                                                  \
    DWORD e = GetLastError();                                                                                          \
    if (m)                                                                                                             \
        hk_patch_scan();                                                                                               \
    SetLastError(e);                                                                                                   \
    return m

static HMODULE WINAPI h_LoadLibraryA(LPCSTR n) { AFTER_LOAD(r_LoadLibraryA(n)); }
static HMODULE WINAPI h_LoadLibraryW(LPCWSTR n) { AFTER_LOAD(r_LoadLibraryW(n)); }
static HMODULE WINAPI h_LoadLibraryExA(LPCSTR n, HANDLE f, DWORD fl) { AFTER_LOAD(r_LoadLibraryExA(n, f, fl)); }
static HMODULE WINAPI h_LoadLibraryExW(LPCWSTR n, HANDLE f, DWORD fl) { AFTER_LOAD(r_LoadLibraryExW(n, f, fl)); }

static LONG NTAPI h_LdrLoadDll(const WCHAR *path, void *flags, const void *name, HMODULE *out)
{
    LONG st = r_LdrLoadDll(path, flags, name, out);
    if (st >= 0)
        hk_patch_scan();
    return st;
}

#define FN(name) {#name, (void *)h_##name, (void **)&r_##name, HK_LOADER, 0}
static hk_fn g_loader_fns[] = {
    FN(GetProcAddress), FN(LoadLibraryA), FN(LoadLibraryW), FN(LoadLibraryExA), FN(LoadLibraryExW), FN(LdrLoadDll),
    FN(wglGetProcAddress),
};
#undef FN

static const int g_n_loader_fns = sizeof(g_loader_fns) / sizeof(g_loader_fns[0]);
/* The parts' tables (hk_patch_tables, by hook.c's set-up), then the loader's. */
static hk_fn_table g_tables[16];
static int g_n_tables;

void hk_patch_tables(const hk_fn_table *tables, int n)
{
    if (n + 1 > (int)(sizeof(g_tables) / sizeof(g_tables[0])))
        hk_fatal(W3S_EXIT_INJECT, "hk_patch_tables: %d tables, room for %d", n,
                 (int)(sizeof(g_tables) / sizeof(g_tables[0])) - 1);
    for (int t = 0; t < n; t++)
        g_tables[t] = tables[t];
    g_tables[n] = (hk_fn_table){g_loader_fns, &g_n_loader_fns};
    g_n_tables = n + 1;
}


hk_fn *hk_find_fn(const char *name)
{
    for (int t = 0; t < g_n_tables; t++)
        for (int i = 0; i < *g_tables[t].n; i++)
            if (!strcmp(g_tables[t].fns[i].name, name))
                return &g_tables[t].fns[i];
    return NULL;
}

/* The step point may be any hooked function a frame calls, except the clock's reads
 * (a game reads the clock many times a frame) and the loader's. */
int hk_can_be_step_point(const hk_fn *f)
{
    return f && ((f->kind & (HK_STEP | HK_WAIT)) != 0);
}

void hk_step_point_names(char *out, size_t n)
{
    size_t len = 0;
    out[0] = 0;
    for (int t = 0; t < g_n_tables; t++)
        for (int i = 0; i < *g_tables[t].n; i++)
            if (hk_can_be_step_point(&g_tables[t].fns[i]) && len < n)
                len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "", g_tables[t].fns[i].name);
}

void hk_set_on(unsigned kinds)
{
    /* The real functions are the hook's own imports: its table is never patched. */
    r_GetProcAddress = GetProcAddress;
    r_LoadLibraryA = LoadLibraryA;
    r_LoadLibraryW = LoadLibraryW;
    r_LoadLibraryExA = LoadLibraryExA;
    r_LoadLibraryExW = LoadLibraryExW;
    HMODULE nt = GetModuleHandleW(L"ntdll.dll");
    r_LdrLoadDll = (void *)GetProcAddress(nt, "LdrLoadDll");
    r_LdrLockLoaderLock = (void *)GetProcAddress(nt, "LdrLockLoaderLock");
    r_LdrUnlockLoaderLock = (void *)GetProcAddress(nt, "LdrUnlockLoaderLock");
    r_RtlGetCurrentPeb = (void *)GetProcAddress(nt, "RtlGetCurrentPeb");
    for (int t = 0; t < g_n_tables; t++)
        for (int i = 0; i < *g_tables[t].n; i++)
            if (g_tables[t].fns[i].kind & kinds)
                g_tables[t].fns[i].on = 1;
}

int hk_each_import(HMODULE m, hk_import_visit visit, void *ctx)
{
    BYTE *base = (BYTE *)m;
    IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)(base + ((IMAGE_DOS_HEADER *)base)->e_lfanew);
    IMAGE_DATA_DIRECTORY dir = nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
    if (!dir.VirtualAddress)
        return 0;
    for (IMAGE_IMPORT_DESCRIPTOR *d = (IMAGE_IMPORT_DESCRIPTOR *)(base + dir.VirtualAddress); d->Name; d++) {
        if (!d->OriginalFirstThunk) /* no names left to match (a bound, stripped table) */
            continue;
        const char *dll = (const char *)(base + d->Name);
        IMAGE_THUNK_DATA *names = (IMAGE_THUNK_DATA *)(base + d->OriginalFirstThunk);
        IMAGE_THUNK_DATA *iat = (IMAGE_THUNK_DATA *)(base + d->FirstThunk);
        for (; names->u1.AddressOfData; names++, iat++) {
            if (IMAGE_SNAP_BY_ORDINAL(names->u1.Ordinal))
                continue;
            const char *name = (const char *)((IMAGE_IMPORT_BY_NAME *)(base + names->u1.AddressOfData))->Name;
            int rc = visit(dll, name, (ULONG_PTR *)&iat->u1.Function, ctx);
            if (rc)
                return rc;
        }
    }
    return 0;
}

DWORD hk_set_slot(ULONG_PTR *slot, ULONG_PTR value)
{
    DWORD old;
    if (!VirtualProtect(slot, sizeof(*slot), PAGE_READWRITE, &old))
        return GetLastError();
    *slot = value;
    VirtualProtect(slot, sizeof(*slot), old, &old);
    return 0;
}

typedef struct patch_ctx {
    const wchar_t *name;
    int step_module, n;
    int *step_found;
    ULONG_PTR *first;
} patch_ctx;

static int patch_one(const char *dll, const char *fn, ULONG_PTR *slot, void *ctx)
{
    (void)dll;
    patch_ctx *c = ctx;
    hk_fn *f = hk_find_fn(fn);
    void *t = f ? target(f, c->step_module) : NULL;
    if (!t)
        return 0;
    if (c->step_module && hk_is_step_point(fn))
        *c->step_found = 1;
    if (!c->first)
        c->first = slot;
    c->n++;
    if (*slot == (ULONG_PTR)t)
        return 0;
    DWORD err = hk_set_slot(slot, (ULONG_PTR)t);
    if (err)
        hk_fatal(W3S_EXIT_INJECT, "cannot patch %ls's import of %s (VirtualProtect: Windows error %lu)", c->name, fn,
                 (unsigned long)err);
    return 0;
}

/* Points module base's imports at the hook. Returns the number of entries patched;
 * *first is the first one's slot. */
static int patch_module(BYTE *base, const wchar_t *name, int step_module, int *step_found, ULONG_PTR **first)
{
    patch_ctx c = {name, step_module, 0, step_found, NULL};
    hk_each_import((HMODULE)base, patch_one, &c);
    *first = c.first;
    return c.n;
}

static int excluded(BYTE *base, const UNICODE_STRING *full)
{
    if (base == (BYTE *)g_self || (g_adapter && base == (BYTE *)g_adapter))
        return 1;
    const wchar_t *s = full->Buffer, *name = s;
    for (USHORT i = 0; s && i < full->Length / sizeof(wchar_t); i++)
        if (s[i] == L'\\' || s[i] == L'/')
            name = s + i + 1;
    for (int i = 0; name && i < N_EXCLUDED; i++)
        if (!_wcsicmp(name, EXCLUDED[i]))
            return 1;
    return 0;
}

/* Patches every module in the loader's list not seen before, under the loader lock (a
 * DLL that another thread loads meanwhile waits; it is patched by that thread's scan). */
static void scan(int *step_found)
{
    ULONG_PTR cookie = 0;
    if (r_LdrLockLoaderLock)
        r_LdrLockLoaderLock(0, NULL, &cookie);
    if (!g_adapter) { /* loaded by the launcher after the hook */
        const char *ad = getenv("W3H_ADAPTER");
        g_adapter = ad && *ad ? GetModuleHandleA(ad) : NULL;
    }
    PEB_LDR_DATA *ldr = r_RtlGetCurrentPeb()->Ldr;
    LIST_ENTRY *head = &ldr->InMemoryOrderModuleList;
    for (LIST_ENTRY *e = head->Flink; e != head; e = e->Flink) {
        LDR_DATA_TABLE_ENTRY *m = CONTAINING_RECORD(e, LDR_DATA_TABLE_ENTRY, InMemoryOrderLinks);
        BYTE *base = m->DllBase;
        if (!base || excluded(base, &m->FullDllName))
            continue;
        IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)(base + ((IMAGE_DOS_HEADER *)base)->e_lfanew);
        DWORD size = nt->OptionalHeader.SizeOfImage, stamp = nt->FileHeader.TimeDateStamp;
        int k = 0;
        while (k < g_n_seen && g_seen[k].base != base)
            k++;
        seen *s = &g_seen[k];
        if (k < g_n_seen && s->size == size && s->stamp == stamp && (!s->slot || *s->slot == s->val))
            continue;
        ULONG_PTR *first;
        patch_module(base, m->FullDllName.Buffer, in_step_module(base), step_found, &first);
        if (k == g_n_seen) {
            if (g_n_seen == (int)(sizeof(g_seen) / sizeof(g_seen[0])))
                continue; /* more modules than the list: patched, and checked again at every scan */
            g_n_seen++;
        }
        *s = (seen){base, size, stamp, first, first ? *first : 0};
    }
    if (r_LdrUnlockLoaderLock)
        r_LdrUnlockLoaderLock(0, cookie);
}

void hk_patch_noted(ULONG_PTR *slot)
{
    /* A slot the adapter repointed (host->patch_import) that a scan keeps as a module's
     * mark: the new value is the mark, or the next scan would take the module for a
     * fresh image and patch the adapter's function away. */
    for (int k = 0; k < g_n_seen; k++)
        if (g_seen[k].slot == slot)
            g_seen[k].val = *slot;
}

void hk_patch_scan(void)
{
    int step_found = 0;
    scan(&step_found);
}

static void add_step_module(HMODULE m)
{
    BYTE *base = (BYTE *)m;
    IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)(base + ((IMAGE_DOS_HEADER *)base)->e_lfanew);
    if (g_n_step_mods < (int)(sizeof(g_step_mods) / sizeof(g_step_mods[0])))
        g_step_mods[g_n_step_mods++] = (range){base, base + nt->OptionalHeader.SizeOfImage};
}

int hk_patch_setup(const char *step_modules)
{
    GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                       (LPCWSTR)(void *)hk_patch_setup, &g_self);
    add_step_module(GetModuleHandleW(NULL));
    if (step_modules && *step_modules) {
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", step_modules);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            HMODULE m = GetModuleHandleA(tok);
            if (!m)
                hk_fatal(W3S_EXIT_INJECT, "W3H_MODULES names %s, which the game has not loaded at its start", tok);
            add_step_module(m);
        }
    }
    int step_found = 0;
    scan(&step_found);
    return step_found;
}

void *hk_patch_method(void *object, uint32_t index, void *fn)
{
    if (!object || !fn)
        return NULL;
    ULONG_PTR *slot = (ULONG_PTR *)*(void ***)object + index;
    ULONG_PTR before = *slot;
    if (before == (ULONG_PTR)fn)
        return NULL; /* already ours: there is no other original to give */
    return hk_set_slot(slot, (ULONG_PTR)fn) ? NULL : (void *)before;
}
