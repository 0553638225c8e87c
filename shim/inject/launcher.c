/* launcher.c: w3inject.exe, starts an unmodified game with DLLs loaded into it before
 * its first instruction (docs/hooking.md).
 *
 *   w3inject.exe [--timeout-ms N] [--cwd DIR] --hook HOOK.dll [--adapter ADAPTER.dll]
 *                [--dll OTHER.dll]... [--own-desktop NAME] -- GAME.exe [ARGS]...
 *   w3inject.exe --desktop
 *   w3inject.exe --check
 *
 * --check prints "w3inject --check: ok (MACHINE)" and exits 0, touching nothing: the
 * runtime starts it in a prefix before any game, once per bitness the games need, to
 * find a prefix that cannot run programs of that bitness (a prefix made by a 64-bit-only
 * Wine starts no 32-bit program after wine32 is installed: "could not load kernel32.dll,
 * status c0000135").
 * --desktop makes the prefix's desktop (Wine starts explorer.exe for it) and exits: the
 * runtime runs it once, in a session of its own, before any game, so that the desktop
 * process is not in a game's process group (a game's exit ends its group).
 *
 * --own-desktop NAME starts the game on a desktop of its own (CreateDesktopW, then
 * STARTUPINFOW.lpDesktop): Wine keeps one foreground window per desktop, so two games
 * of one prefix on the shared desktop take the focus from each other (the second
 * game's window made the first get WM_ACTIVATEAPP 0 and WM_KILLFOCUS, measured), and a
 * game that pauses when it loses the focus stops. On a desktop of its own each game
 * keeps it.
 *
 * The game is created suspended; each DLL is loaded into it in order (the hook first,
 * then the adapter) by a thread started in the game at LoadLibraryW with the DLL's path
 * written into the game's memory; then the game's main thread is resumed. The
 * launcher stays, waits for the game and exits with the game's exit code, so the
 * supervisor keeps treating the launcher as the game. The game is in a job that
 * kills it when the launcher ends, however the launcher ends.
 *
 * Every DLL is checked before the game starts: the file exists, is a PE DLL for this
 * machine, the adapter exports what w3h.h requires, and every DLL it imports can be
 * found. A failure prints one line naming the DLL and the cause and exits
 * W3S_EXIT_INJECT (69), leaving nothing running.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <windows.h>

#include "pe.h"
#include "w3s_table.h"

#ifdef _WIN64
#define LAUNCHER_MACHINE IMAGE_FILE_MACHINE_AMD64
#else
#define LAUNCHER_MACHINE IMAGE_FILE_MACHINE_I386
#endif

#define MAX_DLLS 8

static const char *const ADAPTER_EXPORTS[] = {"w3a_attach", "w3a_observe", "w3a_act"};

typedef struct inj_dll {
    wchar_t path[MAX_PATH];
    char name[MAX_PATH];
    int adapter;
} inj_dll;

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "w3inject: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    ExitProcess((UINT)code);
}

static void utf8(char *dst, size_t n, const wchar_t *src)
{
    WideCharToMultiByte(CP_UTF8, 0, src, -1, dst, (int)n, NULL, NULL);
}

/* A full path: the game resolves a relative path against its own directory, not ours.
 * One longer than MAX_PATH is refused (cut, it would name another file). */
static void full_path(wchar_t *dst, const wchar_t *src)
{
    DWORD n = GetFullPathNameW(src, MAX_PATH, dst, NULL);
    if (n >= MAX_PATH) {
        char name[MAX_PATH];
        utf8(name, sizeof(name), src);
        die(2, "path %s...: its full path has %lu characters, more than the %d this launcher takes", name,
            (unsigned long)n, MAX_PATH - 1);
    }
    if (!n) {
        wcsncpy(dst, src, MAX_PATH - 1);
        dst[MAX_PATH - 1] = 0;
    }
}

/* Whether a DLL the given one imports can be found the way the game's loader would
 * look for it: next to the DLL, in the game's folder, the system folders, PATH. */
static int dep_found(const wchar_t *dll_dir, const wchar_t *game_dir, const char *dep)
{
    wchar_t w[MAX_PATH], buf[MAX_PATH];
    MultiByteToWideChar(CP_UTF8, 0, dep, -1, w, MAX_PATH);
    const wchar_t *dirs[] = {dll_dir, game_dir, NULL};
    for (int i = 0; i < 3; i++)
        if (SearchPathW(dirs[i], w, NULL, MAX_PATH, buf, NULL))
            return 1;
    HMODULE m = LoadLibraryExW(w, NULL, LOAD_LIBRARY_AS_DATAFILE);
    if (m) {
        FreeLibrary(m);
        return 1;
    }
    return 0;
}

static void dir_of(wchar_t *dst, const wchar_t *path)
{
    wcsncpy(dst, path, MAX_PATH - 1);
    dst[MAX_PATH - 1] = 0;
    wchar_t *s = wcsrchr(dst, L'\\');
    if (!s)
        s = wcsrchr(dst, L'/');
    if (s)
        *s = 0;
}

static void check_dll(const inj_dll *d, const wchar_t *game_dir)
{
    pe_info *pe = calloc(1, sizeof(pe_info));
    char err[512];
    if (!pe)
        die(W3S_EXIT_INJECT, "out of memory");
    if (pe_read(d->path, pe, err, sizeof(err)))
        die(W3S_EXIT_INJECT, "cannot inject %s", err);
    if (pe->machine != LAUNCHER_MACHINE)
        die(W3S_EXIT_INJECT, "cannot inject %s: it is a DLL for %s and the game is %s (wrong bitness: build it with the "
            "game's compiler)", d->name, pe_machine_name(pe->machine), pe_machine_name(LAUNCHER_MACHINE));
    if (!pe->is_dll)
        die(W3S_EXIT_INJECT, "cannot inject %s: it is a program, not a DLL", d->name);
    for (size_t i = 0; d->adapter && i < sizeof(ADAPTER_EXPORTS) / sizeof(ADAPTER_EXPORTS[0]); i++)
        if (!pe_exports(pe, ADAPTER_EXPORTS[i]))
            die(W3S_EXIT_INJECT, "cannot inject %s: the adapter exports no %s (w3h.h: declare it W3A_EXPORT)", d->name,
                ADAPTER_EXPORTS[i]);
    wchar_t dll_dir[MAX_PATH];
    dir_of(dll_dir, d->path);
    for (int i = 0; i < pe->n_imports; i++)
        if (!dep_found(dll_dir, game_dir, pe->imports[i]))
            die(W3S_EXIT_INJECT, "cannot inject %s: it imports %s, which is not found (next to it, next to the game, "
                "in the system folders or on PATH)", d->name, pe->imports[i]);
    free(pe);
}

static void check_game(const wchar_t *path)
{
    pe_info *pe = calloc(1, sizeof(pe_info));
    char err[512], name[MAX_PATH];
    utf8(name, sizeof(name), path);
    if (!pe)
        die(W3S_EXIT_INJECT, "out of memory");
    if (pe_read(path, pe, err, sizeof(err)))
        die(W3S_EXIT_INJECT, "cannot start the game: %s", err);
    if (pe->machine != LAUNCHER_MACHINE)
        die(W3S_EXIT_INJECT, "cannot start %s: it is a program for %s and this launcher is %s (use the launcher built "
            "for the game's bitness)", name, pe_machine_name(pe->machine), pe_machine_name(LAUNCHER_MACHINE));
    free(pe);
}

/* Appends arg to cmd with the quoting CommandLineToArgvW undoes. */
static void append_arg(wchar_t *cmd, size_t cap, const wchar_t *arg)
{
    size_t n = wcslen(cmd);
    if (n && n + 1 < cap)
        cmd[n++] = L' ';
    int quote = !*arg || wcspbrk(arg, L" \t\"") != NULL;
    if (quote && n + 1 < cap)
        cmd[n++] = L'"';
    for (const wchar_t *p = arg;; p++) {
        size_t slashes = 0;
        while (*p == L'\\')
            p++, slashes++;
        if (!*p) {
            for (size_t i = 0; i < (quote ? 2 * slashes : slashes) && n + 1 < cap; i++)
                cmd[n++] = L'\\';
            break;
        }
        if (*p == L'"') {
            for (size_t i = 0; i < 2 * slashes + 1 && n + 1 < cap; i++)
                cmd[n++] = L'\\';
        } else {
            for (size_t i = 0; i < slashes && n + 1 < cap; i++)
                cmd[n++] = L'\\';
        }
        if (n + 1 < cap)
            cmd[n++] = *p;
    }
    if (quote && n + 1 < cap)
        cmd[n++] = L'"';
    cmd[n] = 0;
}

/* Loads d into the game: its path into the game's memory, a thread at LoadLibraryW.
 * Ends the game and the launcher with a named cause on any failure. */
static void load_into(PROCESS_INFORMATION *pi, const inj_dll *d, DWORD timeout_ms, const wchar_t *game_dir)
{
    size_t bytes = (wcslen(d->path) + 1) * sizeof(wchar_t);
    void *remote = VirtualAllocEx(pi->hProcess, NULL, bytes, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    if (!remote || !WriteProcessMemory(pi->hProcess, remote, d->path, bytes, NULL)) {
        TerminateProcess(pi->hProcess, W3S_EXIT_INJECT);
        die(W3S_EXIT_INJECT, "cannot inject %s: writing its path into the game failed (Windows error %lu)", d->name,
            (unsigned long)GetLastError());
    }
    /* kernel32 is at the same address in every process of a session. */
    LPTHREAD_START_ROUTINE load = (LPTHREAD_START_ROUTINE)(void *)GetProcAddress(GetModuleHandleW(L"kernel32.dll"), "LoadLibraryW");
    HANDLE t = CreateRemoteThread(pi->hProcess, NULL, 0, load, remote, 0, NULL);
    if (!t) {
        TerminateProcess(pi->hProcess, W3S_EXIT_INJECT);
        die(W3S_EXIT_INJECT, "cannot inject %s: CreateRemoteThread failed (Windows error %lu)", d->name,
            (unsigned long)GetLastError());
    }
    HANDLE both[2] = {t, pi->hProcess};
    DWORD w = WaitForMultipleObjects(2, both, FALSE, timeout_ms);
    /* The DLL may have ended the game itself (the hook does on a bad setting): then the
     * thread ends with the process, and the process's code is the cause. */
    if (w == WAIT_OBJECT_0 + 1 || WaitForSingleObject(pi->hProcess, 0) == WAIT_OBJECT_0) {
        DWORD code = 0;
        GetExitCodeProcess(pi->hProcess, &code);
        die((int)code, "the game exited with code %lu while %s was loading (its message is above)", (unsigned long)code,
            d->name);
    }
    if (w != WAIT_OBJECT_0) {
        TerminateProcess(pi->hProcess, W3S_EXIT_INJECT);
        WaitForSingleObject(pi->hProcess, 5000);
        die(W3S_EXIT_INJECT, "cannot inject %s: LoadLibrary did not return within %lu ms (a hang in its DllMain, or in "
            "a DLL it loads)", d->name, (unsigned long)timeout_ms);
    }
    DWORD loaded = 0;
    GetExitCodeThread(t, &loaded); /* the HMODULE's low 32 bits: zero only on failure */
    CloseHandle(t);
    VirtualFreeEx(pi->hProcess, remote, 0, MEM_RELEASE);
    if (!loaded) {
        TerminateProcess(pi->hProcess, W3S_EXIT_INJECT);
        (void)game_dir;
        die(W3S_EXIT_INJECT, "cannot inject %s: LoadLibrary failed in the game (its DllMain returned FALSE, or one of "
            "its imports failed to load)", d->name);
    }
}

int wmain(int argc, wchar_t **argv)
{
    inj_dll dlls[MAX_DLLS];
    int n_dlls = 0, have_hook = 0;
    DWORD timeout_ms = 20000;
    const wchar_t *cwd = NULL, *desktop = NULL;
    int i = 1;
    SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX | SEM_NOOPENFILEERRORBOX);
    if (argc == 2 && !wcscmp(argv[1], L"--check")) {
        printf("w3inject --check: ok (%s)\n", pe_machine_name(LAUNCHER_MACHINE));
        return fflush(stdout) ? 1 : 0;
    }
    if (argc == 2 && !wcscmp(argv[1], L"--desktop")) {
        HDC dc = CreateCompatibleDC(NULL); /* what a game's first drawing does: the desktop starts */
        if (dc)
            DeleteDC(dc);
        return GetDesktopWindow() ? 0 : 1;
    }
    for (; i < argc; i++) {
        const wchar_t *a = argv[i];
        if (!wcscmp(a, L"--")) {
            i++;
            break;
        }
        if (i + 1 >= argc)
            die(2, "option %ls needs a value", a);
        if (!wcscmp(a, L"--timeout-ms")) {
            wchar_t *end = NULL;
            unsigned long v = wcstoul(argv[++i], &end, 10);
            if (end == argv[i] || *end || !v || v > 86400000ul || argv[i][0] == L'-')
                die(2, "--timeout-ms %ls: not a whole number of milliseconds, 1..86400000", argv[i]);
            timeout_ms = (DWORD)v;
        } else if (!wcscmp(a, L"--cwd")) {
            cwd = argv[++i];
        } else if (!wcscmp(a, L"--own-desktop")) {
            desktop = argv[++i];
        } else if (!wcscmp(a, L"--hook") || !wcscmp(a, L"--adapter") || !wcscmp(a, L"--dll")) {
            if (n_dlls == MAX_DLLS)
                die(2, "at most %d DLLs", MAX_DLLS);
            inj_dll *d = &dlls[n_dlls++];
            full_path(d->path, argv[++i]);
            utf8(d->name, sizeof(d->name), d->path);
            d->adapter = !wcscmp(a, L"--adapter");
            have_hook |= !wcscmp(a, L"--hook");
        } else {
            die(2, "unknown option %ls (usage: w3inject.exe [--timeout-ms N] [--cwd DIR] --hook H.dll [--adapter A.dll] "
                "[--dll D.dll]... [--own-desktop NAME] -- GAME.exe [ARGS]...)", a);
        }
    }
    if (i >= argc)
        die(2, "no game: give it after -- (w3inject.exe --hook H.dll -- GAME.exe [ARGS]...)");
    if (!have_hook)
        die(2, "no --hook DLL");
    wchar_t game[MAX_PATH], game_dir[MAX_PATH];
    full_path(game, argv[i]);
    dir_of(game_dir, game);
    check_game(game);
    for (int k = 0; k < n_dlls; k++)
        check_dll(&dlls[k], game_dir);

    static wchar_t cmd[32768];
    cmd[0] = 0;
    append_arg(cmd, sizeof(cmd) / sizeof(cmd[0]), game);
    for (int k = i + 1; k < argc; k++)
        append_arg(cmd, sizeof(cmd) / sizeof(cmd[0]), argv[k]);

    /* The job ends the game when the launcher ends, even by SIGKILL: Wine closes the
     * launcher's handles and the last handle to the job kills what is in it. */
    /* Without the job a game would outlive a killed launcher, unseen: no job, no start. */
    HANDLE job = CreateJobObjectW(NULL, NULL);
    if (!job)
        die(W3S_EXIT_INJECT, "cannot make the job that ends the game with the launcher: CreateJobObjectW failed "
            "(Windows error %lu)", (unsigned long)GetLastError());
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION lim;
    memset(&lim, 0, sizeof(lim));
    lim.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    if (!SetInformationJobObject(job, JobObjectExtendedLimitInformation, &lim, sizeof(lim)))
        die(W3S_EXIT_INJECT, "cannot make the job end the game with the launcher: SetInformationJobObject failed "
            "(Windows error %lu)", (unsigned long)GetLastError());
    /* The hook sets this event when the game exits by itself (or when asked to stop): a
     * game killed from outside (SIGKILL under Wine) ends with code 0 and the event unset.
     * Without it a kill could not be told from an exit: no event, no start. */
    SECURITY_ATTRIBUTES inherit = {sizeof(inherit), NULL, TRUE};
    HANDLE clean = CreateEventW(&inherit, TRUE, FALSE, NULL);
    if (!clean)
        die(W3S_EXIT_INJECT, "cannot make the game's exit event: CreateEventW failed (Windows error %lu)",
            (unsigned long)GetLastError());
    wchar_t ev[32];
    swprintf(ev, 32, L"%llu", (unsigned long long)(ULONG_PTR)clean);
    SetEnvironmentVariableW(L"W3H_CLEAN_EVENT", ev);
    STARTUPINFOW si;
    memset(&si, 0, sizeof(si));
    si.cb = sizeof(si);
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    if (desktop) {
        /* The launcher holds the handle until it exits: the desktop lives as long as the
         * game; Wine starts its explorer.exe at the game's first window and ends it when
         * the desktop's last process is gone. */
        HDESK d = CreateDesktopW(desktop, NULL, NULL, 0, GENERIC_ALL, NULL);
        if (!d) {
            char name[MAX_PATH];
            utf8(name, sizeof(name), desktop);
            die(W3S_EXIT_INJECT, "cannot make the game's desktop %s: CreateDesktopW failed (Windows error %lu)", name,
                (unsigned long)GetLastError());
        }
        /* Wine 8 gives a new process its parent thread's desktop; lpDesktop moves only the
         * thread that first loads user32 (here the loading thread, not the game's main
         * thread: measured, the game's window was on "Default"). So the launcher moves
         * itself first (it has no window, so SetThreadDesktop may), then starts the game. */
        if (!SetThreadDesktop(d))
            die(W3S_EXIT_INJECT, "cannot move to the game's desktop: SetThreadDesktop failed (Windows error %lu)",
                (unsigned long)GetLastError());
        si.lpDesktop = (wchar_t *)desktop;
    }
    PROCESS_INFORMATION pi;
    /* Wine 8 fails about one CreateProcess in a few hundred with ERROR_INTERNAL_ERROR
     * when games are started many times a second (an episode quota recycling them):
     * that one is retried, each retry said on stderr; any other error is final. */
    BOOL started = FALSE;
    DWORD err = 0;
    for (int attempt = 0; attempt < 4 && !started; attempt++) {
        if (attempt) {
            fprintf(stderr, "w3inject: CreateProcess failed (Windows error %lu), retry %d\n", (unsigned long)err, attempt);
            Sleep(50 * attempt);
        }
        started = CreateProcessW(game, cmd, NULL, NULL, TRUE, CREATE_SUSPENDED, NULL, cwd ? cwd : game_dir, &si, &pi);
        err = started ? 0 : GetLastError();
        if (!started && err != ERROR_INTERNAL_ERROR)
            break;
    }
    if (!started) {
        char name[MAX_PATH];
        utf8(name, sizeof(name), game);
        die(W3S_EXIT_INJECT, "cannot start %s: CreateProcess failed (Windows error %lu)", name, (unsigned long)err);
    }
    if (!AssignProcessToJobObject(job, pi.hProcess)) {
        DWORD e = GetLastError();
        TerminateProcess(pi.hProcess, W3S_EXIT_INJECT); /* still suspended: it never ran */
        die(W3S_EXIT_INJECT, "cannot put the game in the launcher's job: AssignProcessToJobObject failed (Windows "
            "error %lu)", (unsigned long)e);
    }
    for (int k = 0; k < n_dlls; k++)
        load_into(&pi, &dlls[k], timeout_ms, game_dir);
    ResumeThread(pi.hThread);
    CloseHandle(pi.hThread);
    WaitForSingleObject(pi.hProcess, INFINITE);
    DWORD code = 0;
    GetExitCodeProcess(pi.hProcess, &code);
    if (code == 0 && WaitForSingleObject(clean, 0) != WAIT_OBJECT_0) {
        fprintf(stderr, "w3inject: the game ended without exiting (killed from outside: a signal, or another "
                        "process's TerminateProcess)\n");
        code = W3S_EXIT_KILLED;
    }
    if (code >= 0xC0000000u) { /* an exception nobody handled, before the hook's filter was set */
        fprintf(stderr, "w3inject: the game crashed: exception 0x%08lx%s\n", (unsigned long)code,
                code == 0xC0000005u ? " (access violation)" : code == 0xC00000FDu ? " (stack overflow)" : "");
        code = W3S_EXIT_CRASH; /* the exit status would keep only the code's low byte */
    }
    fflush(stderr);
    return (int)code;
}
