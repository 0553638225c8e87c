/* trap.c: the step point at a function the game's .exe exports (W3H_STEP_POINT =
 * "export:NAME"), for a game whose frame calls no import once a frame.
 *
 * The game calls its own function directly, not through an import table, so the hook
 * cannot redirect the call. Without a disassembler it cannot move the function's first
 * instruction aside either. Instead the function's first byte becomes a breakpoint
 * (int3): at each call the hook's exception handler makes the step, puts the byte back,
 * runs that one instruction under the trap flag, and re-arms the breakpoint at the
 * single-step exception that follows. Two exceptions a call: fine once a frame.
 */
#include "hook.h"

#include "w3s_table.h"

static BYTE *g_at;       /* the function's first byte */
static BYTE g_first;     /* what was there */
static DWORD g_rearm_tls = TLS_OUT_OF_INDEXES;

static void put_byte(BYTE b)
{
    DWORD old;
    VirtualProtect(g_at, 1, PAGE_EXECUTE_READWRITE, &old);
    *(volatile BYTE *)g_at = b;
    VirtualProtect(g_at, 1, old, &old);
    FlushInstructionCache(GetCurrentProcess(), g_at, 1);
}

static LONG CALLBACK on_trap(EXCEPTION_POINTERS *ep)
{
    DWORD code = ep->ExceptionRecord->ExceptionCode;
    CONTEXT *c = ep->ContextRecord;
    if (code == EXCEPTION_BREAKPOINT && ep->ExceptionRecord->ExceptionAddress == (void *)g_at) {
        if (hk_claim_step_thread(hk_config.step_point))
            hk_step();
        put_byte(g_first); /* the real first instruction runs, under the trap flag */
#ifdef _WIN64
        c->Rip = (DWORD64)(ULONG_PTR)g_at;
#else
        c->Eip = (DWORD)(ULONG_PTR)g_at;
#endif
        c->EFlags |= 0x100;
        TlsSetValue(g_rearm_tls, (void *)1);
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    if (code == EXCEPTION_SINGLE_STEP && TlsGetValue(g_rearm_tls)) {
        TlsSetValue(g_rearm_tls, NULL);
        put_byte(0xCC);
        c->EFlags &= ~0x100u;
        return EXCEPTION_CONTINUE_EXECUTION;
    }
    return EXCEPTION_CONTINUE_SEARCH;
}

void hk_trap_install(const char *name)
{
    g_at = (BYTE *)(void *)GetProcAddress(GetModuleHandleW(NULL), name);
    if (!g_at)
        hk_fatal(W3S_EXIT_INJECT, "the step point export:%s: the game's .exe exports no %s (its exports: "
                 "x86_64-w64-mingw32-objdump -p game.exe)", name, name);
    g_rearm_tls = TlsAlloc();
    g_first = *g_at;
    AddVectoredExceptionHandler(1, on_trap);
    put_byte(0xCC);
}
