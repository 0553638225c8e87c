/* w3h.h: the adapter API. What a user writes to drive a Windows game that was not
 * built for w3async (docs/hooking.md).
 *
 * The launcher (w3inject.exe) starts the unmodified game suspended, loads the hook
 * (w3hook.dll) and then the adapter (a DLL the user writes against this header) into
 * it, and resumes it. The hook patches the game's import tables: the virtual clock,
 * the step point, drawing off. At the step point it calls the adapter: the adapter
 * reads the game's state into rows and gives the answers to the game the way a
 * player's input would reach it. The hook does the rest: the table, the doorbells,
 * the clock, the exit codes.
 *
 * The adapter exports these by name (W3A_EXPORT):
 *
 *   w3a_attach   required  once, at the first step point, before the first step
 *   w3a_observe  required  every step: fill row i (0 .. host->nrows - 1)
 *   w3a_act      required  every step, after the answers: give row i's orders to the game
 *   w3a_ready    optional  at every step point call: 1 when this frame is a step, 0 when
 *                          it is not a decision point (a menu, a loading screen): then
 *                          game time still advances by step_ms and nothing is posted
 *   w3a_episode_end optional  after a row posted with W3S_FLAG_DONE was answered: start
 *                          the game's next episode (its own "new game", as a player would)
 *   w3a_detach   optional  when the supervisor asks the games to stop, before exit 0
 *   w3a_frame    optional  the game's frame counter: with PeekMessageA/W as the step
 *                          point, a drained queue is a step only when it changed
 *
 * An episode starts where the adapter says so: the row it fills with W3S_FLAG_FIRST.
 *
 * A crash inside any of these (an access violation, a bad instruction) ends the game
 * with exit W3S_EXIT_ADAPTER and a line on stderr naming the exception, the adapter's
 * function and the address (module+offset); the supervisor records it as the cause.
 */
#ifndef W3H_H
#define W3H_H

#include <stddef.h>
#include <stdint.h>

#include "w3s_table.h"

/* 2: the fields after finish (step; windows, input, imports, addresses); 3: patch_method, tap;
 * 4: layout (rows shaped by the game's spec). An adapter checks host->abi >= the ABI
 * whose fields it uses. */
#define W3H_ABI 4u

#ifdef _WIN32
#define W3A_EXPORT __declspec(dllexport)
#else
#define W3A_EXPORT
#endif

/* What the hook gives the adapter at attach. Valid until the process exits. */
typedef struct w3h_host {
    uint32_t abi;     /* W3H_ABI of the hook that loaded the adapter */
    uint32_t nrows;   /* rows this process posts every step (the recipe's lanes * sides) */
    uint32_t row0;    /* the table index of row 0: global lane numbers derive from it */
    uint32_t step_ms; /* game time a step advances the virtual clock by */
    void *exe;        /* the game's .exe module (its HMODULE, its base address) */

    /* An export of a loaded module (module NULL: the game's .exe); NULL when the module
     * is not loaded or has no such export. */
    void *(*find_export)(const char *module, const char *name);
    /* An address the recipe names ([games.inject] addresses: name = "module+0xoffset",
     * module "exe" or a loaded DLL's name); NULL when the recipe has no such name or
     * its module is not loaded. */
    void *(*find_address)(const char *name);
    /* One line on the game's stderr (the run's game log), "adapter: " in front. */
    void (*log)(const char *fmt, ...);
    /* Ends the game now: the line on stderr, exit W3S_EXIT_ADAPTER. Does not return.
     * Use it for a state the adapter cannot go on from (an export gone, a garbled
     * game state); the supervisor restarts the game by its restart rules. */
    void (*fail)(const char *fmt, ...);
    /* Game time in milliseconds since the hook attached (the virtual clock). */
    uint64_t (*game_time_ms)(void);
    /* The game exits 0 after this step (w3a_detach called first): an episode quota, so
     * that the supervisor recycles the process (its restart rules: a healthy recycle is
     * not counted). */
    void (*finish)(void);
    /* With step_point = "adapter" ([games.inject]): one step, called by the adapter
     * from a hook of its own in the game's frame. The first thread to call it makes
     * every step after; calls from other threads are not steps. Returns after the
     * answers were acted on (w3a_act) and game time advanced step_ms. With any other
     * step point it does nothing. */
    void (*step)(void);

    /* ---- ABI 2 (with step above). Fields are only ever appended: a later field goes after every field
     * above and below, never between, so that an adapter built for an older ABI reads
     * the same offsets. What they are for: a game with no modding exports, reached
     * through its window, its input messages, its imports and its memory
     * (docs/hooking.md, "The adapter API"). All of them may be called from any w3a_*
     * function, on the game's step thread. ---- */

    /* The game's top-level window: one of this process's windows that no other window
     * owns, of the class class_name (NULL: any class), visible or not; a visible one
     * first. NULL when there is none yet (the game has not created it). */
    void *(*find_window)(const char *class_name);
    /* A key pressed (down 1) or released (down 0) as a player's keyboard gives it:
     * WM_KEYDOWN/WM_KEYUP (WM_SYSKEYDOWN/UP for Alt and F10) posted to window's
     * thread, lParam with a repeat count of 1, the scan code (MapVirtualKey), the
     * extended bit (arrows, Insert, Delete, Home, End, Page Up/Down, right Ctrl/Alt,
     * numpad Enter and /), the previous-state bit (1 when the key is already down: an
     * auto-repeat) and the transition bit (1 on release). The hook remembers which keys
     * it holds down. A key pressed and released in one step reaches the game as
     * WM_KEYDOWN, WM_KEYUP, then the WM_CHAR its TranslateMessage made (a keyboard's
     * key-up would come later). 0 on success, else the Windows error of PostMessage. */
    int (*key)(void *window, uint32_t vk, int down);
    /* A character typed (WM_CHAR, lParam as the key that types it): for a game that
     * reads WM_CHAR without translating WM_KEYDOWN itself. 0, or the Windows error. */
    int (*type_char)(void *window, uint32_t ch);
    /* The pointer at (x, y) in window's client coordinates with buttons held
     * (W3H_MOUSE_LEFT | W3H_MOUSE_RIGHT | W3H_MOUSE_MIDDLE): WM_MOUSEMOVE, then a
     * WM_xBUTTONDOWN/UP for each button whose state changed since the last call, each
     * with the key-state wParam (MK_*) and the coordinates. 0, or the Windows error. */
    int (*mouse)(void *window, int32_t x, int32_t y, uint32_t buttons);
    /* Points importer's import of name (from the DLL dll; NULL: from any DLL) at fn and
     * returns what it pointed at before (the real function, or the hook's replacement
     * for a call the hook patches). importer NULL: the game's .exe; else a loaded
     * module's name. NULL when the module is not loaded or does not import name (no
     * change made). Only this module's import table changes: its calls through
     * GetProcAddress and other modules' calls are untouched. */
    void *(*patch_import)(const char *importer, const char *dll, const char *name, void *fn);
    /* 1 when all of [addr, addr + len) is committed memory that can be read (and
     * written, with write 1) without a fault, else 0 (VirtualQuery; never touches the
     * memory). For an address from find_address before reading the game's state. */
    int (*check_address)(const void *addr, size_t len, int write);

    /* ---- ABI 3 ---- */

    /* Points method index of a COM object's method table at fn and returns the method it
     * pointed at before (call it for the real work); NULL when object is NULL, the method
     * is fn already, or the table cannot be written. The table is the object's class's:
     * every object of that class (every device a game makes) then calls fn. index is the
     * method's place in the interface's declaration, counting QueryInterface, AddRef and
     * Release as 0, 1 and 2 (from the SDK's C interface: offsetof(IFooVtbl, Method) /
     * sizeof(void *)). The Direct3D 9 methods the recipe can name (draw_calls,
     * step_point: docs/hooking.md) are patched so by the hook itself. */
    void *(*patch_method)(void *object, uint32_t index, void *fn);
    /* key(window, vk, 1) now and key(window, vk, 0) at the next step: the key is down for
     * the one frame between, as a finger taps it, so a game that polls its keys
     * (GetAsyncKeyState, GetKeyState, GetKeyboardState) or acts on "pressed this frame"
     * sees it. 0, or the Windows error. Once an adapter has given any input (key, tap,
     * mouse), the game's GetCursorPos, SetCursorPos and those three answer from what it
     * gave: the pointer at mouse's last position, the keys and buttons it holds. */
    int (*tap)(void *window, uint32_t vk);

    /* ---- ABI 4 ---- */

    /* The run's row shape and offsets (the recipe's [spec]: entities, features, globals,
     * head_sizes): fill a row through w3s_glob(L, row), w3s_ent(L, row, e),
     * w3s_ent_type(L, row) and w3s_mask(L, row, head) (shim/w3s_table.h). An adapter
     * written for one shape checks it at attach (w3a_kit_check_shape). */
    const w3s_layout *layout;
} w3h_host;

/* host->mouse's buttons. */
#define W3H_MOUSE_LEFT 1u
#define W3H_MOUSE_RIGHT 2u
#define W3H_MOUSE_MIDDLE 4u

/* 0 on success; nonzero with err filled (name the export, the address or the setting
 * that is missing): the game exits W3S_EXIT_ADAPTER with err as the cause. */
typedef int (*w3a_attach_fn)(const w3h_host *host, char *err, size_t errlen);
typedef int (*w3a_ready_fn)(void);
typedef void (*w3a_observe_fn)(w3s_row *row, uint32_t i);
typedef void (*w3a_act_fn)(const w3s_row *row, uint32_t i);
typedef void (*w3a_episode_end_fn)(uint32_t i);
typedef void (*w3a_detach_fn)(void);
typedef uint64_t (*w3a_frame_fn)(void);

#endif
