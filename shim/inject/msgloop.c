/* msgloop.c: the window message calls a game's frame loop makes, as step points. */
#include "hook.h"

static BOOL(WINAPI *r_PeekMessageA)(MSG *, HWND, UINT, UINT, UINT);
static BOOL(WINAPI *r_PeekMessageW)(MSG *, HWND, UINT, UINT, UINT);

static BOOL WINAPI h_PeekMessageA(MSG *m, HWND w, UINT lo, UINT hi, UINT rm)
{
    if (hk_claim_step_thread("PeekMessageA"))
        hk_step();
    return r_PeekMessageA(m, w, lo, hi, rm);
}

static BOOL WINAPI h_PeekMessageW(MSG *m, HWND w, UINT lo, UINT hi, UINT rm)
{
    if (hk_claim_step_thread("PeekMessageW"))
        hk_step();
    return r_PeekMessageW(m, w, lo, hi, rm);
}

#define FN(name, kind) {#name, (void *)h_##name, (void **)&r_##name, kind, 0}
hk_fn hk_msg_fns[] = {
    FN(PeekMessageA, HK_STEP),
    FN(PeekMessageW, HK_STEP),
};
#undef FN
const int hk_n_msg_fns = sizeof(hk_msg_fns) / sizeof(hk_msg_fns[0]);

void hk_msg_init(void)
{
    r_PeekMessageA = PeekMessageA;
    r_PeekMessageW = PeekMessageW;
}
