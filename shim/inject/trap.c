/* trap.c: the step point at a function of the game's own code, for a game whose frame
 * calls no import once a frame: a function the .exe exports (W3H_STEP_POINT =
 * "export:NAME") or any address (W3H_STEP_POINT = "at:exe+0x1a2b", "at:game.dll+0x40",
 * or "at:NAME" with the address in W3H_ADDR_NAME, the recipe's addresses).
 *
 * The game calls its own function directly, not through an import table, so the hook
 * cannot redirect the call. Without a disassembler it cannot move the function's first
 * instruction aside either. Instead the function's first byte becomes a breakpoint
 * (int3): at each call the hook's exception handler makes the step, puts the byte back,
 * runs that one instruction under the trap flag, and re-arms the breakpoint at the
 * single-step exception that follows. Two exceptions a call: fine once a frame.
 *
 * The same breakpoint, once, at the .exe's entry point runs the adapter's attach on the
 * game's main thread before the game's first instruction (step_point = "adapter").
 */
#include "hook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "w3s_table.h"

static BYTE *g_at;       /* the step point's first byte */
static BYTE g_first;     /* what was there */
static BYTE *g_entry;    /* the .exe's entry point, while its one-shot breakpoint is armed */
static BYTE g_entry_first;
static void (*g_entry_fn)(void);
static DWORD g_rearm_tls = TLS_OUT_OF_INDEXES;

static void put_byte(BYTE *at, BYTE b)
{
    DWORD old;
    VirtualProtect(at, 1, PAGE_EXECUTE_READWRITE, &old);
    *(volatile BYTE *)at = b;
    VirtualProtect(at, 1, old, &old);
    FlushInstructionCache(GetCurrentProcess(), at, 1);
}

static void set_ip(CONTEXT *c, BYTE *at)
{
#ifdef _WIN64
    c->Rip = (DWORD64)(ULONG_PTR)at;
#else
    c->Eip = (DWORD)(ULONG_PTR)at;
#endif
}

/* The breakpoints' exceptions; everything else goes on to the next handler. */
static LONG CALLBACK on_trap(EXCEPTION_POINTERS *ep)
{
    DWORD code = ep->ExceptionRecord->ExceptionCode;
    CONTEXT *c = ep->ContextRecord;
    void *addr = ep->ExceptionRecord->ExceptionAddress;
    if (code == EXCEPTION_BREAKPOINT && g_entry && addr == (void *)g_entry) {
        BYTE *at = g_entry;
        g_entry = NULL;
        put_byte(at, g_entry_first); /* once: the game's first instruction runs as it is */
        set_ip(c, at);
        g_entry_fn();
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    if (code == EXCEPTION_BREAKPOINT && g_at && addr == (void *)g_at) {
        if (hk_claim_step_thread(hk_config.step_point))
            hk_step();
        put_byte(g_at, g_first); /* the real first instruction runs, under the trap flag */
        set_ip(c, g_at);
        c->EFlags |= 0x100;
        TlsSetValue(g_rearm_tls, (void *)1);
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    if (code == EXCEPTION_SINGLE_STEP && TlsGetValue(g_rearm_tls)) {
        TlsSetValue(g_rearm_tls, NULL);
        put_byte(g_at, 0xCC);
        c->EFlags &= ~0x100u;
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    return EXCEPTION_CONTINUE_SEARCH;
}

static void add_handler(void)
{
    static int added;
    if (added++)
        return;
    g_rearm_tls = TlsAlloc();
    AddVectoredExceptionHandler(1, on_trap);
}

/* The name of the executable section of module m that holds rva, NULL when none does;
 * *code gets the module's executable sections ("name 0xstart..0xend", for the error). */
static const char *code_section(HMODULE m, uint64_t rva, char *code, size_t n)
{
    BYTE *base = (BYTE *)m;
    IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)(base + ((IMAGE_DOS_HEADER *)base)->e_lfanew);
    IMAGE_SECTION_HEADER *s = IMAGE_FIRST_SECTION(nt);
    static char found[IMAGE_SIZEOF_SHORT_NAME + 1];
    size_t len = 0;
    code[0] = 0;
    for (int i = 0; i < nt->FileHeader.NumberOfSections; i++, s++) {
        if (!(s->Characteristics & IMAGE_SCN_MEM_EXECUTE))
            continue;
        uint64_t size = s->Misc.VirtualSize ? s->Misc.VirtualSize : s->SizeOfRawData;
        if (len < n)
            len += (size_t)snprintf(code + len, n - len, "%s%.8s 0x%lx..0x%llx", len ? ", " : "", (const char *)s->Name,
                                    (unsigned long)s->VirtualAddress, (unsigned long long)(s->VirtualAddress + size));
        if (rva >= s->VirtualAddress && rva < s->VirtualAddress + size) {
            snprintf(found, sizeof(found), "%.8s", (const char *)s->Name);
            return found;
        }
    }
    return NULL;
}

void hk_trap_install(const char *spec)
{
    if (!strncmp(spec, "export:", 7)) {
        const char *name = spec + 7;
        g_at = (BYTE *)(void *)GetProcAddress(GetModuleHandleW(NULL), name);
        if (!g_at)
            hk_fatal(W3S_EXIT_INJECT, "the step point export:%s: the game's .exe exports no %s (its exports: "
                     "x86_64-w64-mingw32-objdump -p game.exe)", name, name);
    } else { /* "at:..." */
        const char *where = spec + 3, *text = where;
        if (!strchr(where, '+')) { /* a name of the recipe's addresses */
            char key[128];
            snprintf(key, sizeof(key), "W3H_ADDR_%s", where);
            text = getenv(key);
            if (!text || !*text)
                hk_fatal(W3S_EXIT_INJECT, "the step point %s: no address of that name (%s; [games.inject] addresses: "
                         "%s = \"exe+0x1a2b\"), and not of the form MODULE+0xOFFSET", spec, key, where);
        }
        HMODULE m = NULL;
        g_at = hk_resolve_address(text, &m);
        if (!g_at)
            hk_fatal(W3S_EXIT_INJECT, "the step point %s: %s is not of the form MODULE+0xOFFSET (\"exe+0x1a2b\", "
                     "\"game.dll+0x40\"), or its module is not loaded at the game's start (exe, or a DLL the .exe "
                     "imports)", spec, text);
        char code[256];
        uint64_t rva = (uint64_t)(g_at - (BYTE *)m);
        if (!code_section(m, rva, code, sizeof(code)))
            hk_fatal(W3S_EXIT_INJECT, "the step point %s: %s is not inside an executable section of its module (the "
                     "module's code: %s); give the offset of a function's first instruction from the module's base "
                     "(an RVA, as a disassembler shows it less the image base)", spec, text, code[0] ? code : "none");
    }
    g_first = *g_at;
    add_handler();
    put_byte(g_at, 0xCC);
}

void hk_trap_entry(void (*fn)(void))
{
    BYTE *base = (BYTE *)GetModuleHandleW(NULL);
    IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)(base + ((IMAGE_DOS_HEADER *)base)->e_lfanew);
    g_entry_fn = fn;
    g_entry = base + nt->OptionalHeader.AddressOfEntryPoint;
    g_entry_first = *g_entry;
    add_handler();
    put_byte(g_entry, 0xCC);
}
