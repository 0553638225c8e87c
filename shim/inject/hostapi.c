/* hostapi.c: the adapter API for a game with no modding exports (w3h.h, ABI 2): its
 * window, one more import patched, an address checked before it is read (a player's
 * input: input.c). What every hand-written adapter of a windowed game needed; each
 * function's contract is its w3h_host field's comment. */
#include "hook.h"
#include "w3h.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the window ---- */

typedef struct find_ctx {
    DWORD pid;
    const char *cls;
    HWND visible, any;
} find_ctx;

static BOOL CALLBACK find_one(HWND w, LPARAM lp)
{
    find_ctx *c = (find_ctx *)lp;
    DWORD pid = 0;
    GetWindowThreadProcessId(w, &pid);
    if (pid != c->pid || GetWindow(w, GW_OWNER))
        return TRUE;
    if (c->cls) {
        char cls[256];
        if (!GetClassNameA(w, cls, sizeof(cls)) || strcmp(cls, c->cls))
            return TRUE;
    }
    if (IsWindowVisible(w)) {
        c->visible = w;
        return FALSE;
    }
    if (!c->any)
        c->any = w;
    return TRUE;
}

void *hk_find_window(const char *class_name)
{
    find_ctx c = {GetCurrentProcessId(), class_name, NULL, NULL};
    /* EnumWindows lists the top-level windows of the desktop: IME and message-only
     * windows are not among them. */
    EnumWindows(find_one, (LPARAM)&c);
    return c.visible ? c.visible : c.any;
}

/* ---- imports ---- */

typedef struct imp_ctx {
    const char *dll, *name;
    void *fn, *old;
    DWORD err;
} imp_ctx;

static int patch_named(const char *dll, const char *name, ULONG_PTR *slot, void *ctx)
{
    imp_ctx *c = ctx;
    if (strcmp(name, c->name) || (c->dll && _stricmp(dll, c->dll)))
        return 0;
    c->old = (void *)*slot;
    c->err = hk_set_slot(slot, (ULONG_PTR)c->fn);
    if (!c->err)
        hk_patch_noted(slot);
    return 1;
}

void *hk_patch_import(const char *importer, const char *dll, const char *name, void *fn)
{
    HMODULE m = importer ? GetModuleHandleA(importer) : GetModuleHandleW(NULL);
    if (!m || !name || !fn)
        return NULL;
    imp_ctx c = {dll, name, fn, NULL, 0};
    hk_each_import(m, patch_named, &c);
    if (c.err) {
        hk_log("patch_import %s!%s: VirtualProtect failed (Windows error %lu)", importer ? importer : "exe", name,
               (unsigned long)c.err);
        return NULL;
    }
    return c.old;
}

/* ---- addresses ---- */

int hk_check_address(const void *addr, size_t len, int write)
{
    const BYTE *p = addr, *end = (const BYTE *)addr + len;
    if (!addr || end < p)
        return 0;
    const DWORD rd = PAGE_READONLY | PAGE_READWRITE | PAGE_WRITECOPY | PAGE_EXECUTE_READ | PAGE_EXECUTE_READWRITE |
                     PAGE_EXECUTE_WRITECOPY;
    const DWORD wr = PAGE_READWRITE | PAGE_WRITECOPY | PAGE_EXECUTE_READWRITE | PAGE_EXECUTE_WRITECOPY;
    do {
        MEMORY_BASIC_INFORMATION mi;
        if (!VirtualQuery(p, &mi, sizeof(mi)) || mi.State != MEM_COMMIT || (mi.Protect & (PAGE_GUARD | PAGE_NOACCESS)))
            return 0;
        if (!(mi.Protect & (write ? wr : rd)))
            return 0;
        p = (const BYTE *)mi.BaseAddress + mi.RegionSize;
    } while (p < end);
    return 1;
}

/* ---- exports and addresses ---- */

void *hk_find_export(const char *module, const char *name)
{
    HMODULE m = module ? GetModuleHandleA(module) : GetModuleHandleW(NULL);
    return m ? (void *)GetProcAddress(m, name) : NULL;
}

void *hk_find_address(const char *name)
{
    char key[128];
    snprintf(key, sizeof(key), "W3H_ADDR_%s", name);
    return hk_resolve_address(getenv(key), NULL);
}

void *hk_resolve_address(const char *spec, HMODULE *mod)
{
    const char *plus = spec ? strrchr(spec, '+') : NULL;
    if (!plus || plus == spec)
        return NULL;
    char name[MAX_PATH];
    snprintf(name, sizeof(name), "%.*s", (int)(plus - spec), spec);
    char *end;
    unsigned long long off = strtoull(plus + 1, &end, 0);
    if (*end || !plus[1])
        return NULL;
    HMODULE m = !strcmp(name, "exe") ? GetModuleHandleW(NULL) : GetModuleHandleA(name);
    if (mod)
        *mod = m;
    return m ? (void *)((BYTE *)m + off) : NULL;
}
