/* patch.c: the import tables. Every part of the hook (clock.c, draw.c, msgloop.c and
 * the loader's calls here) lists the functions it can put in a game's import tables;
 * setup switches on those the settings ask for, and patch_imports points each import
 * of those names at the hook. Only the PE format's import tables: no disassembler. */
#include "hook.h"
#include "w3s_table.h"

#include <stdio.h>
#include <string.h>

static FARPROC(WINAPI *r_GetProcAddress)(HMODULE, LPCSTR);

/* A game that looks its functions up at run time gets the hooked ones too. */
static FARPROC WINAPI h_GetProcAddress(HMODULE m, LPCSTR name)
{
    if ((ULONG_PTR)name > 0xffff) {
        hk_fn *f = hk_find_fn(name);
        if (f && f->on && f->repl != (void *)h_GetProcAddress)
            return (FARPROC)f->repl;
    }
    return r_GetProcAddress(m, name);
}

static hk_fn g_loader_fns[] = {
    {"GetProcAddress", (void *)h_GetProcAddress, (void **)&r_GetProcAddress, HK_LOADER, 0},
};

typedef struct fn_table {
    hk_fn *fns;
    const int *n;
} fn_table;

static const int g_n_loader_fns = sizeof(g_loader_fns) / sizeof(g_loader_fns[0]);
static const fn_table TABLES[] = {
    {hk_clock_fns, &hk_n_clock_fns},
    {hk_draw_fns, &hk_n_draw_fns},
    {hk_msg_fns, &hk_n_msg_fns},
    {hk_extra_fns, &hk_n_extra_fns},
    {g_loader_fns, &g_n_loader_fns},
};
#define N_TABLES ((int)(sizeof(TABLES) / sizeof(TABLES[0])))

hk_fn *hk_find_fn(const char *name)
{
    for (int t = 0; t < N_TABLES; t++)
        for (int i = 0; i < *TABLES[t].n; i++)
            if (!strcmp(TABLES[t].fns[i].name, name))
                return &TABLES[t].fns[i];
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
    for (int t = 0; t < N_TABLES; t++)
        for (int i = 0; i < *TABLES[t].n; i++)
            if (hk_can_be_step_point(&TABLES[t].fns[i]) && len < n)
                len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "", TABLES[t].fns[i].name);
}

void hk_set_on(unsigned kinds)
{
    r_GetProcAddress = GetProcAddress; /* the hook's own import: its table is never patched */
    for (int t = 0; t < N_TABLES; t++)
        for (int i = 0; i < *TABLES[t].n; i++)
            if (TABLES[t].fns[i].kind & kinds)
                TABLES[t].fns[i].on = 1;
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
    int n;
    int *step_found;
} patch_ctx;

static int patch_one(const char *dll, const char *name, ULONG_PTR *slot, void *ctx)
{
    (void)dll;
    patch_ctx *c = ctx;
    hk_fn *f = hk_find_fn(name);
    if (!f || !f->on)
        return 0;
    DWORD err = hk_set_slot(slot, (ULONG_PTR)f->repl);
    if (err)
        hk_fatal(W3S_EXIT_INJECT, "cannot patch the import of %s (VirtualProtect: Windows error %lu)", name,
                 (unsigned long)err);
    c->n++;
    if (hk_is_step_point(name))
        *c->step_found = 1;
    return 0;
}

int hk_patch_imports(HMODULE m, int *step_found)
{
    patch_ctx c = {0, step_found};
    hk_each_import(m, patch_one, &c);
    return c.n;
}
