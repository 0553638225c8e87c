/* hostapi.c: the adapter API for a game with no modding exports (w3h.h, ABI 2): its
 * window, a player's keyboard and mouse input as window messages, one more import
 * patched, an address checked before it is read. What every hand-written adapter of a
 * windowed game needed; each function's contract is its w3h_host field's comment. */
#include "hook.h"
#include "w3h.h"

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

/* ---- the keyboard ---- */

static uint8_t g_down[256]; /* keys this API holds down: the previous-state bit */

/* Keys whose scan code a real keyboard sends with the E0 prefix (lParam bit 24). */
static int extended(uint32_t vk)
{
    switch (vk) {
    case VK_UP: case VK_DOWN: case VK_LEFT: case VK_RIGHT: case VK_INSERT: case VK_DELETE: case VK_HOME:
    case VK_END: case VK_PRIOR: case VK_NEXT: case VK_RCONTROL: case VK_RMENU: case VK_DIVIDE: case VK_NUMLOCK:
    case VK_LWIN: case VK_RWIN: case VK_APPS: case VK_SNAPSHOT:
        return 1;
    }
    return 0;
}

static LPARAM key_lparam(uint32_t vk, int down, int was_down)
{
    UINT scan = MapVirtualKeyA(vk, MAPVK_VK_TO_VSC) & 0xff;
    LPARAM lp = 1 | ((LPARAM)scan << 16);
    if (extended(vk))
        lp |= (LPARAM)1 << 24;
    if (vk == VK_MENU || vk == VK_LMENU || vk == VK_RMENU || g_down[VK_MENU])
        lp |= (LPARAM)1 << 29; /* the context code: Alt is down */
    if (!down || was_down)
        lp |= (LPARAM)1 << 30;
    if (!down)
        lp |= (LPARAM)1 << 31;
    return lp;
}

/* PostMessage to the window's thread: the game reads it from its own queue, as it reads
 * a player's keys. 0, or the Windows error. */
static int post(HWND w, UINT msg, WPARAM wp, LPARAM lp)
{
    return PostMessageA(w, msg, wp, lp) ? 0 : (int)GetLastError();
}

int hk_key(void *window, uint32_t vk, int down)
{
    if (!window || vk == 0 || vk > 255)
        return ERROR_INVALID_PARAMETER;
    int was = g_down[vk];
    /* Alt and F10 are system keys: Windows sends them as WM_SYSKEY*. */
    int sys = vk == VK_MENU || vk == VK_LMENU || vk == VK_RMENU || vk == VK_F10 || (g_down[VK_MENU] && vk != VK_CONTROL);
    UINT msg = down ? (sys ? WM_SYSKEYDOWN : WM_KEYDOWN) : (sys ? WM_SYSKEYUP : WM_KEYUP);
    int rc = post((HWND)window, msg, vk, key_lparam(vk, down, was));
    if (!rc)
        g_down[vk] = down ? 1 : 0;
    return rc;
}

int hk_type_char(void *window, uint32_t ch)
{
    if (!window || ch > 0xffff)
        return ERROR_INVALID_PARAMETER;
    SHORT vks = VkKeyScanA((CHAR)(ch & 0xff));
    uint32_t vk = vks == -1 ? 0 : (uint32_t)(vks & 0xff);
    LPARAM lp = 1 | ((LPARAM)(MapVirtualKeyA(vk, MAPVK_VK_TO_VSC) & 0xff) << 16);
    return post((HWND)window, WM_CHAR, ch, lp);
}

/* ---- the mouse ---- */

static uint32_t g_buttons; /* the buttons held at the last call */

int hk_mouse(void *window, int32_t x, int32_t y, uint32_t buttons)
{
    if (!window || buttons & ~(W3H_MOUSE_LEFT | W3H_MOUSE_RIGHT | W3H_MOUSE_MIDDLE))
        return ERROR_INVALID_PARAMETER;
    static const struct { uint32_t bit; WPARAM mk; UINT down, up; } B[] = {
        {W3H_MOUSE_LEFT, MK_LBUTTON, WM_LBUTTONDOWN, WM_LBUTTONUP},
        {W3H_MOUSE_RIGHT, MK_RBUTTON, WM_RBUTTONDOWN, WM_RBUTTONUP},
        {W3H_MOUSE_MIDDLE, MK_MBUTTON, WM_MBUTTONDOWN, WM_MBUTTONUP},
    };
    LPARAM lp = MAKELPARAM((WORD)(SHORT)x, (WORD)(SHORT)y);
    WPARAM mk = 0;
    for (int i = 0; i < 3; i++)
        if (g_buttons & B[i].bit)
            mk |= B[i].mk;
    /* The key state a real mouse message carries: Shift and Ctrl as the keyboard holds them here. */
    if (g_down[VK_SHIFT])
        mk |= MK_SHIFT;
    if (g_down[VK_CONTROL])
        mk |= MK_CONTROL;
    int rc = post((HWND)window, WM_MOUSEMOVE, mk, lp);
    for (int i = 0; !rc && i < 3; i++) {
        uint32_t now = buttons & B[i].bit;
        if (now == (g_buttons & B[i].bit))
            continue;
        mk = now ? mk | B[i].mk : mk & ~B[i].mk; /* wParam: the state after the change */
        rc = post((HWND)window, now ? B[i].down : B[i].up, mk, lp);
        if (!rc)
            g_buttons ^= B[i].bit;
    }
    return rc;
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
