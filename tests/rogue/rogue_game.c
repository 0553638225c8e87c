/* rogue_game.c: a hostile game for the untrusted-game tests (tests/runtime/test_hostile_games.py).
 *
 * It attaches through the shim like any game, posts valid rows, and misbehaves as
 * W3R_MODE says, every step from step W3R_STEP (default 5) on:
 *   flip       after posting, flips its row's n_ent between 8 and 2^20 until answered
 *              (a value that changes between the supervisor's check and its use)
 *   fields     the same with the mask, the entity types and the features (NaN)
 *   header     writes its header: state = STOP, n_rows, row_size, magic
 *   neighbour  writes garbage past its own rows (where a neighbour's rows would be)
 *   act        answers itself: act_seq = obs_seq after posting
 *   exit0      exits 0 at once, before its first post
 *   helper     starts two helpers that sleep (one in its process group, one in a
 *              session of its own), prints their pids, then crashes
 *   flood      writes W3R_FLOOD_KB KiB (default 4096) of garbage to stdout and stderr
 *              (bytes that are not UTF-8, terminal escapes, no newline), then crashes
 *   burst      at step W3R_STEP, ignores SIGXFSZ, writes W3R_FLOOD_KB KiB of that garbage
 *              to stdout in one go (a write past its file size cap fails: it stops
 *              there), and steps on
 *   spew       writes W3R_FLOOD_KB KiB of that garbage to stdout every step, and steps
 *              on (a healthy game that logs without end)
 *   ring       a thread rings the obs doorbell in a tight loop; the game steps on
 *   orphan     its first start (W3S_SEED 0, slot 0) forks a child that leaves the
 *              process group, zeroes its environment block and keeps writing garbage
 *              into the rows it still maps (the supervisor sees them: bad_row), prints
 *              its pid, then crashes; later starts are honest
 *   steal      a thread makes the obs doorbell it inherited blocking (fcntl) and reads
 *              it without end, taking every game's rings; the game steps on
 *   deaf       from step W3R_STEP, its obs doorbell goes to /dev/null (its rings are
 *              lost) and it steps on, alone in its recipe or not
 *   neighbours from step W3R_STEP, opens every segment of its table by name
 *              (<table>-<slot>-<start>, slots 0-31, starts 1-8) but its own, writes each
 *              field of each header it opened and its rows, prints how many it opened
 *              ("rogue: opened N neighbour segments"), and steps on
 *   escape     at step W3R_STEP, a helper calls setsid and double-forks; the grandchild
 *              sleeps for good (its pid printed: "rogue: escaped pid N"); the game steps on
 *   connect    at step W3R_STEP, connects to 127.0.0.1:W3R_PORT and prints
 *              "rogue: connect ok" or "rogue: connect failed: <why>"; steps on
 *   fill       at step W3R_STEP, prints its OOM score adjustment ("rogue: oom_score_adj N"),
 *              writes W3R_FILL_MB MiB (default 256) to W3R_FILL_PATH (default
 *              /dev/shm/rogue-fill: memory, not its RSS), prints "rogue: filled N MiB: <why
 *              it stopped>", and steps on
 *   forks      at step W3R_STEP, forks children that sleep until a fork fails, prints
 *              "rogue: forked N: <why>", and steps on
 *   unlink     unlinks its own segment's name and points its obs doorbell at
 *              /dev/null, steps on (woken by the other games' rings), and crashes at
 *              step W3R_STEP + 50
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "w3s.h"

extern char **environ;

static void rogue_fill(w3s_row *r, uint32_t i, uint64_t step)
{
    r->lane = i / 2;
    r->side = i % 2;
    r->episode = 0;
    r->step = (uint32_t)step;
    r->flags = step == 0 ? W3S_FLAG_FIRST : 0;
    r->reward = 0.0f;
    r->n_ent = 8;
    r->discarded = 0;
    r->state_hash = step;
    w3s_obs_default *o = w3s_default_obs(r); /* the rogue game's rows have the default shape */
    for (int g = 0; g < W3S_G_GLOB; g++)
        o->glob[g] = 0.5f;
    for (int e = 0; e < 8; e++) {
        for (int f = 0; f < W3S_F_ENT; f++)
            o->ent[e][f] = 1.0f;
        o->ent_type[e] = (int16_t)(e % 4);
    }
    for (int h = 0; h < W3S_N_HEADS; h++) {
        memset(o->mask[h], 1, 8);
        memset(o->mask[h] + 8, 0, W3S_HEAD_MAX - 8);
    }
}

static int rogue_answered(w3s_row *r, uint64_t seq)
{
    return __atomic_load_n(&r->act_seq, __ATOMIC_ACQUIRE) == seq;
}

/* n KiB of what a broken game may print: bytes that are not UTF-8, terminal escapes
 * (clear the screen, set the window title), NULs, and no newline. */
static void rogue_garbage(int fd, long kib)
{
    static char buf[1024];
    static const char esc[] = "\x1b[2J\x1b]0;rogue\x07\xff\xfe\xc3\x28";
    for (size_t k = 0; k < sizeof(buf); k++)
        buf[k] = (k % 64 < sizeof(esc) - 1) ? esc[k % 64] : (k % 64 == 40) ? 0 : (char)(0x80 | k);
    for (long k = 0; k < kib; k++)
        if (write(fd, buf, sizeof(buf)) < 0)
            return;
}

static void *rogue_ringer(void *arg)
{
    char err[256];
    for (;;)
        w3s_ring((w3s_conn *)arg, err, sizeof(err));
    return NULL;
}

/* The thief: the supervisor's obs doorbell, made blocking for every holder of the same
 * open file, read without end (an error, such as reading the write end of a pipe, is
 * retried after a millisecond). */
static void *rogue_thief(void *arg)
{
    int fd = *(int *)arg;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    for (;;) {
        uint64_t v;
        if (read(fd, &v, sizeof(v)) < 0)
            usleep(1000);
    }
    return NULL;
}

/* The orphan: out of the game's process group and session, no environment left to
 * find it by (/proc/PID/environ shows the original block, so zero it in place), and
 * still mapping the rows it writes garbage into. */
static void rogue_orphan(w3s_row *row0, char **env)
{
    setsid();
    for (char **e = env; *e; e++)
        memset(*e, 0, strlen(*e));
    for (uint64_t k = 0;; k++) {
        usleep(1000);
        row0->obs_seq = k;
        row0->n_ent = 1u << 20;
        row0->row_magic = 0xdeadbeef;
    }
}

/* Every segment of the table by name but this game's own: each header field and the
 * rows written with garbage. Returns how many it opened. */
static int rogue_neighbours(void)
{
    const char *own = getenv("W3S_SHM");
    char table[256];
    snprintf(table, sizeof(table), "%s", own ? own : "");
    for (int dashes = 0; dashes < 2; dashes++) { /* <table>-<slot>-<start>: cut the last two */
        char *d = strrchr(table, '-');
        if (d)
            *d = 0;
    }
    int opened = 0;
    for (int slot = 0; slot < 32; slot++)
        for (int start = 1; start <= 8; start++) {
            char name[300];
            snprintf(name, sizeof(name), "%s-%d-%d", table, slot, start);
            if (own && !strcmp(name, own))
                continue;
            int fd = shm_open(name, O_RDWR, 0);
            if (fd < 0)
                continue;
            opened++;
            struct stat st;
            size_t size = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
            uint8_t *p = size ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
            close(fd);
            if (p == MAP_FAILED)
                continue;
            memset(p, 0xAB, size); /* every field of its header and of its rows */
            munmap(p, size);
        }
    return opened;
}

static void rogue_escape(void)
{
    pid_t p = fork();
    if (p == 0) {
        setsid();
        pid_t q = fork();
        if (q == 0) {
            fprintf(stderr, "rogue: escaped pid %d\n", (int)getpid());
            fflush(stderr);
            for (;;)
                pause();
        }
        _exit(0);
    }
}

static void rogue_connect(void)
{
    const char *port = getenv("W3R_PORT");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port ? atoi(port) : 1)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        fprintf(stderr, "rogue: connect ok\n");
    else
        fprintf(stderr, "rogue: connect failed: %s\n", strerror(errno));
    fflush(stderr);
    if (fd >= 0)
        close(fd);
}

static void rogue_fill_file(void)
{
    char err[64], line[64] = "";
    long mb = 256;
    const char *path = getenv("W3R_FILL_PATH");
    FILE *f = fopen("/proc/self/oom_score_adj", "r");
    if (f && fgets(line, sizeof line, f))
        fprintf(stderr, "rogue: oom_score_adj %s", line);
    if (f)
        fclose(f);
    w3s_env_int("W3R_FILL_MB", 256, &mb, err, sizeof(err));
    static char chunk[1 << 20];
    memset(chunk, 0x5a, sizeof chunk);
    int fd = open(path ? path : "/dev/shm/rogue-fill", O_CREAT | O_WRONLY | O_TRUNC, 0600);
    long done = 0;
    const char *why = fd < 0 ? strerror(errno) : "all written";
    while (fd >= 0 && done < mb) {
        if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) {
            why = strerror(errno);
            break;
        }
        done++;
    }
    fprintf(stderr, "rogue: filled %ld MiB: %s\n", done, why);
    fflush(stderr);
}

static void rogue_forks(void)
{
    long n = 0;
    for (;;) {
        pid_t p = fork();
        if (p == 0) {
            for (;;)
                pause();
        }
        if (p < 0)
            break;
        n++;
    }
    fprintf(stderr, "rogue: forked %ld: %s\n", n, strerror(errno));
    fflush(stderr);
}

int main(void)
{
    char err[512];
    const char *mode = getenv("W3R_MODE");
    long from = 5;
    if (!mode)
        mode = "";
    w3s_env_int("W3R_STEP", 5, &from, err, sizeof(err));
    long kib = 4096, seed = 0;
    w3s_env_int("W3R_FLOOD_KB", 4096, &kib, err, sizeof(err));
    w3s_env_int("W3S_SEED", 0, &seed, err, sizeof(err));
    if (!strcmp(mode, "exit0"))
        return 0;
    if (!strcmp(mode, "orphan") && seed != 0)
        mode = "";
    w3s_conn *c = NULL;
    int rc = w3s_attach(&c, err, sizeof(err));
    if (!rc && w3s_check_shape(c, W3S_E_MAX, W3S_F_ENT, W3S_G_GLOB, W3S_N_HEADS, W3S_HEAD_MAX, err, sizeof(err)))
        rc = W3S_EXIT_LAYOUT;
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return rc;
    }
    uint32_t n = w3s_nrows(c);
#define ROW(i) w3s_row_at(c, (i))
    if (!strcmp(mode, "ring")) {
        pthread_t t;
        pthread_create(&t, NULL, rogue_ringer, c);
    }
    static int obs_fd;
    if (!strcmp(mode, "steal")) {
        pthread_t t;
        obs_fd = atoi(getenv("W3S_OBS_FD"));
        pthread_create(&t, NULL, rogue_thief, &obs_fd);
    }
    for (uint64_t step = 0;; step++) {
        int bad = (long)step >= from;
        for (uint32_t i = 0; i < n; i++)
            rogue_fill(ROW(i), i, step);
        if (bad && !strcmp(mode, "helper")) {
            for (int k = 0; k < 2; k++) {
                pid_t p = fork();
                if (p == 0) {
                    if (k == 1)
                        setsid();
                    for (;;)
                        pause();
                }
                fprintf(stderr, "rogue: helper pid %d\n", (int)p);
            }
            fflush(stderr);
            abort();
        }
        if (bad && !strcmp(mode, "flood")) {
            rogue_garbage(1, kib);
            rogue_garbage(2, kib);
            abort();
        }
        if ((long)step == from && !strcmp(mode, "burst")) {
            signal(SIGXFSZ, SIG_IGN);
            rogue_garbage(1, kib);
        }
        if (bad && !strcmp(mode, "spew"))
            rogue_garbage(1, kib);
        if (bad && !strcmp(mode, "orphan")) {
            pid_t p = fork();
            if (p == 0)
                rogue_orphan(ROW(0), environ);
            fprintf(stderr, "rogue: orphan pid %d\n", (int)p);
            fflush(stderr);
            usleep(200000); /* time for it to hide */
            abort();
        }
        if ((long)step == from && !strcmp(mode, "unlink")) {
            const char *name = getenv("W3S_SHM");
            int null = open("/dev/null", O_WRONLY);
            if (name)
                shm_unlink(name);
            dup2(null, atoi(getenv("W3S_OBS_FD")));
        }
        if (bad && !strcmp(mode, "neighbours") && step % 50 == (uint64_t)from % 50) {
            fprintf(stderr, "rogue: opened %d neighbour segments\n", rogue_neighbours());
            fflush(stderr);
        }
        if ((long)step == from && !strcmp(mode, "fill"))
            rogue_fill_file();
        if ((long)step == from && !strcmp(mode, "forks"))
            rogue_forks();
        if ((long)step == from && !strcmp(mode, "escape"))
            rogue_escape();
        if ((long)step == from && !strcmp(mode, "connect"))
            rogue_connect();
        if ((long)step == from && !strcmp(mode, "deaf"))
            dup2(open("/dev/null", O_WRONLY), atoi(getenv("W3S_OBS_FD")));
        if ((long)step == from + 50 && !strcmp(mode, "unlink"))
            abort();
        if (bad && !strcmp(mode, "header")) {
            w3s_header *h = (w3s_header *)w3s_header_of(c);
            h->state = W3S_STATE_STOP;
            h->n_rows = 1u << 30;
            h->row_size = 7;
            h->magic = 0;
        }
        if (bad && !strcmp(mode, "neighbour")) {
            /* Past this game's rows: where the next game's rows are in the supervisor's
             * table. In its own segment there is nothing there: this game faults. */
            volatile uint8_t *p = (volatile uint8_t *)ROW(n - 1) + w3s_layout_of(c)->row_size;
            for (size_t k = 0; k < 4 * (size_t)w3s_layout_of(c)->row_size; k++)
                p[k] = 0xAB;
        }
        for (uint32_t i = 0; i < n; i++)
            w3s_post(c, i);
        if (bad && !strcmp(mode, "act"))
            for (uint32_t i = 0; i < n; i++)
                ROW(i)->act_seq = ROW(i)->obs_seq;
        if (w3s_ring(c, err, sizeof(err))) {
            fprintf(stderr, "%s\n", err);
            return W3S_EXIT_LOST;
        }
        if (bad && (!strcmp(mode, "flip") || !strcmp(mode, "fields"))) {
            /* Keep changing the posted row until it is answered (or stop is asked). */
            uint64_t seq = ROW(0)->obs_seq;
            for (uint32_t k = 0; !rogue_answered(ROW(0), seq) && w3s_header_of(c)->state != W3S_STATE_STOP; k++) {
                int odd = k & 1;
                if (!strcmp(mode, "flip")) {
                    ROW(0)->n_ent = odd ? (1u << 20) : 8;
                } else {
                    w3s_default_obs(ROW(0))->mask[k % W3S_N_HEADS][0] = odd ? 9 : 1;
                    w3s_default_obs(ROW(0))->ent_type[k % 8] = odd ? (int16_t)30000 : 1;
                    w3s_default_obs(ROW(0))->ent[k % 8][0] = odd ? (float)NAN : 1.0f;
                }
            }
        }
        int w = w3s_wait(c, err, sizeof(err));
        if (w) {
            if (w < 0)
                fprintf(stderr, "%s\n", err);
            w3s_detach(c);
            return w > 0 ? W3S_EXIT_OK : W3S_EXIT_LOST;
        }
    }
}
