/* faults.c: a game that would wait for a click nobody makes. A message box on any of the
 * game's threads (a failed CreateDevice, a missing file, an assertion) is modal: under
 * Wine's null driver nobody sees it, and the game sat in it until the step deadline said
 * "step point not reached". Here the box ends the game at once with its caption and text
 * as the cause (exit W3S_EXIT_MSGBOX), one line. */
#include "hook.h"
#include "w3s_table.h"

#include <stdio.h>
#include <string.h>

static int(WINAPI *r_MessageBoxA)(HWND, LPCSTR, LPCSTR, UINT);
static int(WINAPI *r_MessageBoxW)(HWND, LPCWSTR, LPCWSTR, UINT);
static int(WINAPI *r_MessageBoxExA)(HWND, LPCSTR, LPCSTR, UINT, WORD);
static int(WINAPI *r_MessageBoxExW)(HWND, LPCWSTR, LPCWSTR, UINT, WORD);
static int(WINAPI *r_MessageBoxIndirectA)(const MSGBOXPARAMSA *);
static int(WINAPI *r_MessageBoxIndirectW)(const MSGBOXPARAMSW *);

#define SAID_MAX 400 /* of the box's text, in bytes of UTF-8 */

/* s (UTF-8 or the ANSI code page's) on one line: line breaks and tabs become spaces,
 * other control characters '?', cut to SAID_MAX. */
static void one_line(char *s)
{
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = *p == '\n' || *p == '\r' || *p == '\t' ? ' ' : '?';
}

static void from_wide(const WCHAR *w, char *out, int n)
{
    out[0] = 0;
    if (w && !WideCharToMultiByte(CP_UTF8, 0, w, -1, out, n, NULL, NULL))
        out[n - 1] = 0; /* cut: what fitted */
}

static void box(const char *caption, const char *text)
{
    char c[128], t[SAID_MAX];
    snprintf(c, sizeof(c), "%s", caption ? caption : "");
    snprintf(t, sizeof(t), "%s", text ? text : "");
    one_line(c);
    one_line(t);
    hk_fatal(W3S_EXIT_MSGBOX, "the game showed a message box, which would wait for a click nobody makes: \"%s\": "
             "\"%s\" (thread %lu)", c, t, (unsigned long)GetCurrentThreadId());
}

static void box_w(const WCHAR *caption, const WCHAR *text)
{
    char c[128], t[SAID_MAX];
    from_wide(caption, c, sizeof(c));
    from_wide(text, t, sizeof(t));
    box(c, t);
}

static int WINAPI h_MessageBoxA(HWND w, LPCSTR text, LPCSTR caption, UINT type)
{
    (void)w, (void)type;
    box(caption, text);
    return IDABORT;
}

static int WINAPI h_MessageBoxW(HWND w, LPCWSTR text, LPCWSTR caption, UINT type)
{
    (void)w, (void)type;
    box_w(caption, text);
    return IDABORT;
}

static int WINAPI h_MessageBoxExA(HWND w, LPCSTR text, LPCSTR caption, UINT type, WORD lang)
{
    (void)lang;
    return h_MessageBoxA(w, text, caption, type);
}

static int WINAPI h_MessageBoxExW(HWND w, LPCWSTR text, LPCWSTR caption, UINT type, WORD lang)
{
    (void)lang;
    return h_MessageBoxW(w, text, caption, type);
}

static int WINAPI h_MessageBoxIndirectA(const MSGBOXPARAMSA *p)
{
    box(p ? (const char *)p->lpszCaption : NULL, p ? (const char *)p->lpszText : NULL);
    return IDABORT;
}

static int WINAPI h_MessageBoxIndirectW(const MSGBOXPARAMSW *p)
{
    box_w(p ? p->lpszCaption : NULL, p ? p->lpszText : NULL);
    return IDABORT;
}

#define FN(name) {#name, (void *)h_##name, (void **)&r_##name, HK_FAULT, 0}
hk_fn hk_fault_fns[] = {
    FN(MessageBoxA), FN(MessageBoxW), FN(MessageBoxExA), FN(MessageBoxExW), FN(MessageBoxIndirectA),
    FN(MessageBoxIndirectW),
};
#undef FN
const int hk_n_fault_fns = sizeof(hk_fault_fns) / sizeof(hk_fault_fns[0]);
