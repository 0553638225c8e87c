/* w3s.c: the game side of the step protocol, native Linux and Windows (mingw-w64,
 * run under Wine). See w3s.h for the contract and docs/protocol.md for the protocol. */
#include "w3s.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <windows.h>
#else
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

struct w3s_conn {
    w3s_header *hdr;
    w3s_row *rows; /* this process's first row */
    uint32_t nrows;
    w3s_layout layout; /* the run's row shape, from the header */
    size_t map_size;
    uint64_t *posted; /* obs_seq this process last posted, per row (0: none) */
#ifdef _WIN32
    HANDLE file, mapping, obs, act;
#else
    int obs_fd, act_fd;
    long parent_pid;
#endif
};

static void w3s_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int w3s_env_int(const char *name, long dflt, long *out, char *err, size_t errlen)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = dflt;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end) {
        w3s_errf(err, errlen, "w3s: environment %s=%s is not an integer", name, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Checks the table against this build; fills err and returns W3S_EXIT_LAYOUT on a
 * mismatch, W3S_EXIT_ATTACH when the rows asked for are not in the table. */
static int w3s_check_table(w3s_conn *c, size_t size, long row0, long nrows, char *err, size_t errlen)
{
    const w3s_header *h = c->hdr;
    if (size < sizeof(w3s_header)) {
        w3s_errf(err, errlen, "w3s: table is %zu bytes, smaller than its header", size);
        return W3S_EXIT_LAYOUT;
    }
    if (h->magic != W3S_MAGIC || h->version != W3S_VERSION || h->header_size != sizeof(w3s_header)) {
        w3s_errf(err, errlen,
                 "w3s: layout mismatch: table has magic %016llx version %u header %u, "
                 "this game was built for version %u header %zu (rebuild it against shim/w3s_table.h)",
                 (unsigned long long)h->magic, h->version, h->header_size, W3S_VERSION, sizeof(w3s_header));
        return W3S_EXIT_LAYOUT;
    }
    if (w3s_layout_make(&c->layout, h->e_max, h->f_ent, h->g_glob, h->n_heads, h->head_max) < 0) {
        w3s_errf(err, errlen, "w3s: the table's row shape (%u entities x %u features, %u globals, %u heads of %u) "
                 "is out of range", h->e_max, h->f_ent, h->g_glob, h->n_heads, h->head_max);
        return W3S_EXIT_LAYOUT;
    }
    if (h->layout_hash != w3s_layout_hash(&c->layout) || h->row_size != c->layout.row_size) {
        w3s_errf(err, errlen,
                 "w3s: layout mismatch: table has hash %016llx row size %u, this game's shim lays the same shape "
                 "out as hash %016llx row size %u (rebuild it against shim/w3s_table.h)",
                 (unsigned long long)h->layout_hash, h->row_size, (unsigned long long)w3s_layout_hash(&c->layout),
                 c->layout.row_size);
        return W3S_EXIT_LAYOUT;
    }
    /* The segment holds rows row0 .. row0 + n_rows of the run's table: this game's. */
    if (row0 < (long)h->row0 || nrows <= 0 || (uint64_t)row0 + (uint64_t)nrows > (uint64_t)h->row0 + h->n_rows ||
        sizeof(w3s_header) + (uint64_t)h->n_rows * h->row_size > size) {
        w3s_errf(err, errlen, "w3s: rows %ld..%ld are not in a segment of rows %u..%u (%zu bytes)",
                 row0, row0 + nrows, h->row0, h->row0 + h->n_rows, size);
        return W3S_EXIT_ATTACH;
    }
    c->rows = (w3s_row *)((char *)c->hdr + h->header_size + (size_t)(row0 - (long)h->row0) * h->row_size);
    c->nrows = (uint32_t)nrows;
    return 0;
}

#ifdef _WIN32

static void w3s_win_err(char *err, size_t errlen, const char *call, const char *what)
{
    w3s_errf(err, errlen, "w3s: %s(%s) failed: Windows error %lu", call, what, (unsigned long)GetLastError());
}

static HANDLE w3s_open_fifo(const char *env, DWORD access, char *err, size_t errlen)
{
    const char *path = getenv(env);
    if (!path || !*path) {
        w3s_errf(err, errlen, "w3s: environment %s is not set (is this game started by w3async?)", env);
        return INVALID_HANDLE_VALUE;
    }
    HANDLE h = CreateFileA(path, access, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL, OPEN_EXISTING, 0, NULL);
    if (h == INVALID_HANDLE_VALUE)
        w3s_win_err(err, errlen, "CreateFileA", path);
    return h;
}

const char *w3s_exception_name(unsigned long code)
{
    switch (code) {
    case EXCEPTION_ACCESS_VIOLATION: return "access violation";
    case EXCEPTION_ILLEGAL_INSTRUCTION: return "illegal instruction";
    case EXCEPTION_PRIV_INSTRUCTION: return "privileged instruction";
    case EXCEPTION_INT_DIVIDE_BY_ZERO: return "integer divide by zero";
    case EXCEPTION_STACK_OVERFLOW: return "stack overflow";
    case EXCEPTION_IN_PAGE_ERROR: return "in-page error";
    case EXCEPTION_ARRAY_BOUNDS_EXCEEDED: return "array bounds exceeded";
    case EXCEPTION_DATATYPE_MISALIGNMENT: return "misaligned data";
    default: return NULL;
    }
}

void w3s_describe_exception(const EXCEPTION_RECORD *r, char *out, size_t n)
{
    const char *what = w3s_exception_name(r->ExceptionCode);
    char path[MAX_PATH] = "", loc[MAX_PATH + 32], detail[64] = "";
    HMODULE m = NULL;
    if (GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                           (LPCSTR)r->ExceptionAddress, &m) && m && GetModuleFileNameA(m, path, sizeof(path))) {
        const char *base = strrchr(path, '\\');
        snprintf(loc, sizeof(loc), "%s+0x%llx", base ? base + 1 : path,
                 (unsigned long long)((const char *)r->ExceptionAddress - (const char *)m));
    } else {
        snprintf(loc, sizeof(loc), "%p (no module)", r->ExceptionAddress);
    }
    if (r->ExceptionCode == EXCEPTION_ACCESS_VIOLATION && r->NumberParameters >= 2)
        snprintf(detail, sizeof(detail), " %s address 0x%llx",
                 r->ExceptionInformation[0] == 1 ? "writing" : r->ExceptionInformation[0] == 8 ? "executing" : "reading",
                 (unsigned long long)r->ExceptionInformation[1]);
    snprintf(out, n, "%s (0x%08lx)%s at %s", what ? what : "unhandled exception", (unsigned long)r->ExceptionCode,
             detail, loc);
}

/* The last chance for an exception nobody handled: say it and exit W3S_EXIT_CRASH, so
 * that the supervisor reads a crash, not an exit with the code's low byte, and Wine
 * never starts its debugger on the process. */
LONG WINAPI w3s_on_crash(EXCEPTION_POINTERS *ep)
{
    char said[MAX_PATH + 160];
    w3s_describe_exception(ep->ExceptionRecord, said, sizeof(said));
    fprintf(stderr, "w3s: the game crashed: %s (thread %lu)\n", said, (unsigned long)GetCurrentThreadId());
    fflush(stderr);
    TerminateProcess(GetCurrentProcess(), W3S_EXIT_CRASH);
    return EXCEPTION_EXECUTE_HANDLER;
}

int w3s_attach(w3s_conn **out, char *err, size_t errlen)
{
    *out = NULL;
    /* A crashing game must exit, never wait for a click on Wine's crash dialog. */
    SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX | SEM_NOOPENFILEERRORBOX);
    SetUnhandledExceptionFilter(w3s_on_crash);
    long row0, nrows;
    if (w3s_env_int("W3S_ROW0", -1, &row0, err, errlen) || w3s_env_int("W3S_NROWS", -1, &nrows, err, errlen))
        return W3S_EXIT_ATTACH;
    const char *path = getenv("W3S_SHM_PATH");
    if (!path || !*path) {
        w3s_errf(err, errlen, "w3s: environment W3S_SHM_PATH is not set (is this game started by w3async?)");
        return W3S_EXIT_ATTACH;
    }
    w3s_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        w3s_errf(err, errlen, "w3s: out of memory");
        return W3S_EXIT_ATTACH;
    }
    c->file = c->mapping = c->obs = c->act = INVALID_HANDLE_VALUE;
    int rc = W3S_EXIT_ATTACH;
    c->file = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL,
                          OPEN_EXISTING, 0, NULL);
    if (c->file == INVALID_HANDLE_VALUE) {
        w3s_win_err(err, errlen, "CreateFileA", path);
        goto err;
    }
    LARGE_INTEGER size;
    if (!GetFileSizeEx(c->file, &size)) {
        w3s_win_err(err, errlen, "GetFileSizeEx", path);
        goto err;
    }
    c->mapping = CreateFileMappingA(c->file, NULL, PAGE_READWRITE, 0, 0, NULL);
    if (!c->mapping) {
        c->mapping = INVALID_HANDLE_VALUE;
        w3s_win_err(err, errlen, "CreateFileMappingA", path);
        goto err;
    }
    c->hdr = MapViewOfFile(c->mapping, FILE_MAP_ALL_ACCESS, 0, 0, 0);
    if (!c->hdr) {
        w3s_win_err(err, errlen, "MapViewOfFile", path);
        goto err;
    }
    c->map_size = (size_t)size.QuadPart;
    if ((rc = w3s_check_table(c, c->map_size, row0, nrows, err, errlen)))
        goto err;
    rc = W3S_EXIT_ATTACH;
    c->obs = w3s_open_fifo("W3S_OBS_FIFO", GENERIC_WRITE, err, errlen);
    if (c->obs == INVALID_HANDLE_VALUE)
        goto err;
    c->act = w3s_open_fifo("W3S_ACT_FIFO", GENERIC_READ, err, errlen);
    if (c->act == INVALID_HANDLE_VALUE)
        goto err;
    c->posted = calloc(c->nrows, sizeof(uint64_t));
    if (!c->posted) {
        w3s_errf(err, errlen, "w3s: out of memory");
        goto err;
    }
    *out = c;
    return 0;
err:
    w3s_detach(c);
    return rc;
}

int w3s_ring(w3s_conn *c, char *err, size_t errlen)
{
    char one = 1;
    DWORD n = 0;
    if (!WriteFile(c->obs, &one, 1, &n, NULL) || n != 1) {
        w3s_win_err(err, errlen, "WriteFile", "obs doorbell");
        return -1;
    }
    return 0;
}

/* Blocks until the act doorbell rings. 0 on a ring, -1 when the supervisor's end is
 * gone (end of file: it held the only writer). */
static int w3s_wait_bell(w3s_conn *c, char *err, size_t errlen)
{
    char buf[64];
    DWORD n = 0;
    if (!ReadFile(c->act, buf, sizeof(buf), &n, NULL)) {
        w3s_win_err(err, errlen, "ReadFile", "act doorbell");
        return -1;
    }
    if (n == 0) {
        w3s_errf(err, errlen, "w3s: act doorbell closed: the supervisor went away");
        return -1;
    }
    return 0;
}

void w3s_detach(w3s_conn *c)
{
    if (!c)
        return;
    if (c->hdr)
        UnmapViewOfFile(c->hdr);
    if (c->mapping != INVALID_HANDLE_VALUE)
        CloseHandle(c->mapping);
    if (c->file != INVALID_HANDLE_VALUE)
        CloseHandle(c->file);
    if (c->obs != INVALID_HANDLE_VALUE)
        CloseHandle(c->obs);
    if (c->act != INVALID_HANDLE_VALUE)
        CloseHandle(c->act);
    free(c->posted);
    free(c);
}

#else /* native Linux */

int w3s_attach(w3s_conn **out, char *err, size_t errlen)
{
    *out = NULL;
    long row0, nrows, obs_fd, act_fd, ppid;
    if (w3s_env_int("W3S_ROW0", -1, &row0, err, errlen) || w3s_env_int("W3S_NROWS", -1, &nrows, err, errlen) ||
        w3s_env_int("W3S_OBS_FD", -1, &obs_fd, err, errlen) || w3s_env_int("W3S_ACT_FD", -1, &act_fd, err, errlen) ||
        w3s_env_int("W3S_PARENT_PID", 0, &ppid, err, errlen))
        return W3S_EXIT_ATTACH;
    const char *name = getenv("W3S_SHM");
    if (!name || !*name || obs_fd < 0 || act_fd < 0) {
        w3s_errf(err, errlen, "w3s: environment W3S_SHM, W3S_OBS_FD or W3S_ACT_FD is not set "
                              "(is this game started by w3async?)");
        return W3S_EXIT_ATTACH;
    }
    /* Die with the supervisor: a game blocked on its doorbell would otherwise wait
     * forever for a parent that is gone. */
    if (ppid > 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != (pid_t)ppid) {
            w3s_errf(err, errlen, "w3s: the supervisor (pid %ld) is already gone", ppid);
            return W3S_EXIT_LOST;
        }
    }
    w3s_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        w3s_errf(err, errlen, "w3s: out of memory");
        return W3S_EXIT_ATTACH;
    }
    c->obs_fd = (int)obs_fd;
    c->act_fd = (int)act_fd;
    c->parent_pid = ppid;
    int rc = W3S_EXIT_ATTACH;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        w3s_errf(err, errlen, "w3s: shm_open(%s) failed: %s", name, strerror(errno));
        goto err;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        w3s_errf(err, errlen, "w3s: fstat(%s) failed: %s", name, strerror(errno));
        close(fd);
        goto err;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        w3s_errf(err, errlen, "w3s: mmap(%s, %lld bytes) failed: %s", name, (long long)st.st_size, strerror(errno));
        goto err;
    }
    c->hdr = p;
    c->map_size = (size_t)st.st_size;
    if ((rc = w3s_check_table(c, c->map_size, row0, nrows, err, errlen)))
        goto err;
    rc = W3S_EXIT_ATTACH;
    c->posted = calloc(c->nrows, sizeof(uint64_t));
    if (!c->posted) {
        w3s_errf(err, errlen, "w3s: out of memory");
        goto err;
    }
    *out = c;
    return 0;
err:
    c->obs_fd = c->act_fd = -1; /* inherited: the caller's to close */
    w3s_detach(c);
    return rc;
}

int w3s_ring(w3s_conn *c, char *err, size_t errlen)
{
    uint64_t one = 1;
    for (;;) {
        ssize_t n = write(c->obs_fd, &one, sizeof(one));
        if (n == (ssize_t)sizeof(one))
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0; /* a full pipe: rings not yet read, so a wake-up is pending */
        w3s_errf(err, errlen, "w3s: write(obs doorbell fd %d) failed: %s", c->obs_fd,
                 n < 0 ? strerror(errno) : "short write");
        return -1;
    }
}

static int w3s_wait_bell(w3s_conn *c, char *err, size_t errlen)
{
    for (;;) {
        struct pollfd pfd = {.fd = c->act_fd, .events = POLLIN};
        /* Wake once a second to notice a supervisor that is gone without a ring. */
        int n = poll(&pfd, 1, 1000);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            w3s_errf(err, errlen, "w3s: poll(act doorbell fd %d) failed: %s", c->act_fd, strerror(errno));
            return -1;
        }
        if (n == 0) {
            if (c->parent_pid > 0 && getppid() != (pid_t)c->parent_pid) {
                w3s_errf(err, errlen, "w3s: the supervisor (pid %ld) went away", c->parent_pid);
                return -1;
            }
            if (c->hdr->state == W3S_STATE_STOP)
                return 0;
            continue;
        }
        uint64_t v;
        ssize_t r = read(c->act_fd, &v, sizeof(v));
        if (r == (ssize_t)sizeof(v))
            return 0;
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        w3s_errf(err, errlen, "w3s: read(act doorbell fd %d) failed: %s", c->act_fd,
                 r < 0 ? strerror(errno) : "short read");
        return -1;
    }
}

void w3s_detach(w3s_conn *c)
{
    if (!c)
        return;
    if (c->hdr)
        munmap(c->hdr, c->map_size);
    if (c->obs_fd >= 0)
        close(c->obs_fd);
    if (c->act_fd >= 0)
        close(c->act_fd);
    free(c->posted);
    free(c);
}

#endif

uint32_t w3s_nrows(const w3s_conn *c) { return c->nrows; }

w3s_row *w3s_row_at(w3s_conn *c, uint32_t i)
{
    return i < c->nrows ? (w3s_row *)((char *)c->rows + (size_t)i * c->layout.row_size) : NULL;
}

const w3s_layout *w3s_layout_of(const w3s_conn *c) { return &c->layout; }

int w3s_check_shape(const w3s_conn *c, uint32_t e_max, uint32_t f_ent, uint32_t g_glob, uint32_t n_heads,
                    uint32_t head_max, char *err, size_t errlen)
{
    const w3s_layout *L = &c->layout;
    if (L->e_max == e_max && (L->f_ent == f_ent || !e_max) && L->g_glob == g_glob && L->n_heads == n_heads &&
        L->head_max == head_max)
        return 0;
    w3s_errf(err, errlen, "w3s: the run's rows are %u entities x %u features, %u globals, %u heads of %u choices; "
             "this game writes %u x %u, %u globals, %u heads of %u (the recipe's [spec] entities, features, "
             "globals and head_sizes must match the game)", L->e_max, L->f_ent, L->g_glob, L->n_heads, L->head_max,
             e_max, f_ent, g_glob, n_heads, head_max);
    return -1;
}

const w3s_header *w3s_header_of(const w3s_conn *c) { return c->hdr; }

void w3s_post(w3s_conn *c, uint32_t i)
{
    w3s_row *r = w3s_row_at(c, i);
    r->row_magic = W3S_ROW_MAGIC;
    uint64_t seq = __atomic_load_n(&r->obs_seq, __ATOMIC_RELAXED) + 1;
    c->posted[i] = seq;
    /* Release: every field written above is visible before the new sequence. */
    __atomic_store_n(&r->obs_seq, seq, __ATOMIC_RELEASE);
}

int w3s_wait(w3s_conn *c, char *err, size_t errlen)
{
    for (;;) {
        int pending = 0;
        for (uint32_t i = 0; i < c->nrows; i++)
            if (c->posted[i] && __atomic_load_n(&w3s_row_at(c, i)->act_seq, __ATOMIC_ACQUIRE) != c->posted[i])
                pending = 1;
        if (!pending) {
            memset(c->posted, 0, c->nrows * sizeof(uint64_t));
            return 0;
        }
        if (c->hdr->state == W3S_STATE_STOP)
            return 1;
        if (w3s_wait_bell(c, err, errlen))
            return -1;
    }
}

int w3s_exchange(w3s_conn *c, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < c->nrows; i++)
        w3s_post(c, i);
    if (w3s_ring(c, err, errlen))
        return -1;
    return w3s_wait(c, err, errlen);
}
