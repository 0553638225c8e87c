/* base.c: what every part of the hook uses and nothing of the hook's own: its settings
 * (hk_config, read by hook.c's set-up) and its messages and exits. The bottom layer: it
 * calls no other part (hook.h lists the layers). */
#include "hook.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

hk_cfg hk_config;

void hk_vsay(const char *prefix, const char *fmt, va_list ap)
{
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "%s", prefix);
    n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 2, fmt, ap);
    if (n > (int)sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    DWORD w;
    WriteFile(GetStdHandle(STD_ERROR_HANDLE), buf, (DWORD)n, &w, NULL);
}

void hk_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vsay("w3hook: ", fmt, ap);
    va_end(ap);
}

void hk_fatal(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hk_vsay("w3hook: ", fmt, ap);
    va_end(ap);
    /* TerminateProcess, not ExitProcess: no DLL detach or atexit of the game can hang it. */
    TerminateProcess(GetCurrentProcess(), (UINT)code);
}

int hk_is_step_point(const char *name)
{
    return !strcmp(hk_config.step_point, name);
}
