/* hostapi_adapter.c: the adapter of hostapi_game.exe (tests/shim/test_inject_hostapi.py):
 * it uses every ABI 2 and 3 host function and logs what they returned ("adapter: ..."), and
 * at fixed steps sends the game a script of keys, characters and mouse input whose
 * window messages the game prints. Rows: the null game's shape, one entity. */
#include <stdio.h>
#include <string.h>

#include "w3h.h"

#include <windows.h>

static const w3h_host *H;
static HWND g_wnd;
static uint32_t g_step;

static DWORD WINAPI fake_version(void) { return 0x12345678; }

W3A_EXPORT int w3a_attach(const w3h_host *host, char *err, size_t errlen)
{
    H = host;
    if (host->abi < 2) {
        snprintf(err, errlen, "hostapi adapter: the hook's ABI is %u", host->abi);
        return 1;
    }
    g_wnd = host->find_window("HostApiGame");
    host->log("find_window class %d, any %d, other class %d", g_wnd != NULL, host->find_window(NULL) == g_wnd,
              host->find_window("NoSuchClass") != NULL);
    BYTE *page = VirtualAlloc(NULL, 8192, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    DWORD old;
    VirtualProtect(page + 4096, 4096, PAGE_READONLY, &old);
    int rw = host->check_address(page, 8192, 0), ww = host->check_address(page, 8192, 1),
        w1 = host->check_address(page, 4096, 1);
    VirtualFree(page, 0, MEM_RELEASE);
    host->log("check_address exe read %d, exe write %d, null %d, pages read %d, pages write %d, first page write %d, "
              "freed %d", host->check_address(host->exe, 64, 0), host->check_address(host->exe, 64, 1),
              host->check_address(NULL, 4, 0), rw, ww, w1, host->check_address(page, 1, 0));
    void *real = host->patch_import(NULL, "kernel32.dll", "GetVersion", (void *)fake_version);
    host->log("patch_import GetVersion %d (the real one %d), from user32 %d, not imported %d", real != NULL,
              real == (void *)GetProcAddress(GetModuleHandleA("kernel32.dll"), "GetVersion"),
              host->patch_import(NULL, "user32.dll", "GetVersion", (void *)fake_version) != NULL,
              host->patch_import(NULL, NULL, "NoSuchFunction", (void *)fake_version) != NULL);
    return 0;
}

W3A_EXPORT void w3a_observe(w3s_row *r, uint32_t i)
{
    const w3s_layout *L = H->layout;
    w3s_obs_clear(L, r);
    r->lane = H->row0 + i, r->side = 0, r->episode = 0, r->step = g_step;
    r->flags = g_step ? 0 : W3S_FLAG_FIRST, r->reward = 0, r->discarded = 0, r->state_hash = g_step;
    r->n_ent = L->e_max ? 1 : 0;
    if (L->e_max)
        w3s_ent_type(L, r)[0] = 1;
    for (uint32_t h = 0; h < L->n_heads; h++)
        w3s_mask(L, r, h)[0] = 1;
    r->row_magic = W3S_ROW_MAGIC;
}

/* The script: one line of input a step, from step 2 (the window is shown by then). */
W3A_EXPORT void w3a_act(const w3s_row *r, uint32_t i)
{
    (void)r, (void)i;
    int rc = 0;
    switch (g_step++) {
    case 2: rc = H->key(g_wnd, VK_LEFT, 1); break;
    case 3: rc = H->key(g_wnd, VK_LEFT, 1); break; /* held: an auto-repeat */
    case 4: rc = H->key(g_wnd, VK_LEFT, 0); break;
    case 5: rc = H->key(g_wnd, 'A', 1) | H->key(g_wnd, 'A', 0); break;
    case 6: rc = H->type_char(g_wnd, 'z'); break;
    case 7: rc = H->mouse(g_wnd, 10, 20, W3H_MOUSE_LEFT); break;
    case 8: rc = H->mouse(g_wnd, 11, 21, 0); break;
    case 9: rc = H->key(g_wnd, VK_MENU, 1) | H->key(g_wnd, 'X', 1) | H->key(g_wnd, 'X', 0) | H->key(g_wnd, VK_MENU, 0); break;
    case 11: rc = H->abi >= 3 ? H->tap(g_wnd, 'B') : -1; break; /* down for the one frame until the next step */
    case 14: H->log("script done"); break;
    }
    if (rc)
        H->fail("hostapi adapter: input at step %u failed (Windows error %d)", g_step - 1, rc);
}
