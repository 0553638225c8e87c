/* null_game.c: a game with no game in it, for the harness's tests and benchmarks.
 *
 * It runs W3S_NROWS/W3S_SIDES lanes of two agent sides each (or of one, W3S_SIDES=1), posts every row at once, rings
 * once, waits for the answers and, in check mode, recomputes every answer from the
 * row's sequence number, lane and side (w3s_check_answer): a lost, stale or misrouted
 * answer makes it report the row and exit with W3S_EXIT_CHECK.
 *
 * Environment, besides the shim's (w3s.h):
 *   W3N_CHECK=1          check every answer (default on)
 *   W3N_EPISODE_STEPS=N  steps per episode (default 100)
 *   W3N_ENTITIES=N       entities per observation (default 8 or the row's e_max if fewer, at most
 *                        e_max). The null game fills rows of any shape the run declares: every
 *                        global and feature, heads of up to 16 allowed choices (4 for head 0 in
 *                        learn mode), head 3 pointing at the entities where the row has them
 *   W3N_TYPES=N          entity type ids are drawn from 0..N-1 (default 8)
 *   W3N_EPISODES=N       exit 0 after N finished episodes, all lanes together (0: never)
 *   W3N_STEP_US=N        busy work per step, in microseconds of spinning (default 0)
 *   W3N_LEARN=1          a contextual bandit for learning tests: glob[2..5] show a target
 *                        0..3 one-hot and the reward is 1 when the last answer's head 0 was the
 *                        target shown with it (head 0 allows 4 choices); a random policy
 *                        earns 0.25 a step, a learned one up to 1
 *   W3N_ROGUE=mode       misbehave at step W3N_ROGUE_STEP (default 20) of the process:
 *                        nan, count, type, mask, seq, bytes, crash, exit, hang; and (Windows)
 *                        peek: opens every neighbour's segment and act FIFO by path
 *                        (Z:\dev\shm\<table>-<slot>-<start>, <bells>\<slot>\act-<slot>.fifo,
 *                        <bells>\act-<slot>.fifo), prints "null: peek opened N of M
 *                        neighbour paths", and steps on; terminate: lists the processes
 *                        Wine shows it (CreateToolhelp32Snapshot), ends every other
 *                        null_game.exe (OpenProcess, TerminateProcess), prints "null:
 *                        terminated N other games", and steps on; named: makes a named
 *                        mutex, event and pipe and says which another game already had
 *                        ("null: named mutex shared|own event ... pipe ..."), and steps on;
 *                        winsock: connects to 127.0.0.1:W3N_PORT through Winsock ("null:
 *                        winsock connect ok|failed N"), and steps on; rawkill: a raw
 *                        Linux kill(W3N_KILL_PID, 0) ("null: rawkill ok|failed ERRNO"), and
 *                        steps on; plant: writes system32\w3-planted.dll and a
 *                        DllOverrides value "w3planted" in its prefix ("null: plant file
 *                        ok|failed N registry ok|failed N"), and steps on;
 *                        burn (Linux): forks a helper that spins on the CPU for good, and
 *                        steps on; hog: takes W3N_HOG_MB (default 64) MiB, writes every
 *                        page, and steps on (accounting tests)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _WIN32
#include <winsock2.h> /* before windows.h, which w3s.h includes */
#endif
#include "w3s.h"

#ifdef _WIN32
#include <windows.h>
#include <tlhelp32.h>
static void null_sleep_forever(void) { for (;;) Sleep(1000); }

/* Connects to 127.0.0.1:W3N_PORT through Winsock (whose sockets Wine's wineserver
 * makes): "null: winsock connect ok" or "null: winsock connect failed <WSA error>". */
static void null_winsock(void)
{
    WSADATA wsa;
    const char *port = getenv("W3N_PORT");
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((u_short)atoi(port ? port : "0"));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = WSAStartup(MAKEWORD(2, 2), &wsa) == 0;
    SOCKET s = ok ? socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) : INVALID_SOCKET;
    ok = s != INVALID_SOCKET && connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (ok)
        fprintf(stderr, "null: winsock connect ok\n");
    else
        fprintf(stderr, "null: winsock connect failed %d\n", WSAGetLastError());
    if (s != INVALID_SOCKET)
        closesocket(s);
}

/* Tries to change its prefix for the next run's games: a file in system32 and a
 * DllOverrides value: "null: plant file ok|failed N registry ok|failed N". */
static void null_plant(void)
{
    char sys[MAX_PATH], path[MAX_PATH + 32];
    GetSystemDirectoryA(sys, sizeof sys);
    snprintf(path, sizeof path, "%s\\w3-planted.dll", sys);
    HANDLE f = CreateFileA(path, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, 0, NULL);
    DWORD file_err = f == INVALID_HANDLE_VALUE ? GetLastError() : 0;
    if (f != INVALID_HANDLE_VALUE) {
        DWORD n;
        WriteFile(f, "MZ", 2, &n, NULL);
        CloseHandle(f);
    }
    HKEY k;
    LONG reg = RegCreateKeyExA(HKEY_CURRENT_USER, "Software\\Wine\\DllOverrides", 0, NULL, 0, KEY_SET_VALUE, NULL, &k,
                               NULL);
    if (reg == ERROR_SUCCESS) {
        reg = RegSetValueExA(k, "w3planted", 0, REG_SZ, (const BYTE *)"native", 7);
        RegCloseKey(k);
    }
    fprintf(stderr, "null: plant file %s %lu registry %s %ld\n", file_err ? "failed" : "ok", (unsigned long)file_err,
            reg == ERROR_SUCCESS ? "ok" : "failed", (long)reg);
}

/* A raw Linux kill(W3N_KILL_PID, 0) system call, which Wine does not see: "null: rawkill
 * ok" when the process exists and may be signalled from here, else "null: rawkill
 * failed <errno>". Signal 0 only asks; nothing is sent. */
static void null_rawkill(void)
{
    const char *pid = getenv("W3N_KILL_PID");
    long rc = -1;
#if defined(__x86_64__)
    __asm__ volatile("syscall" : "=a"(rc) : "a"(62L), "D"((long)atol(pid ? pid : "0")), "S"(0L) : "rcx", "r11",
                     "memory");
#endif
    if (rc == 0)
        fprintf(stderr, "null: rawkill ok\n");
    else
        fprintf(stderr, "null: rawkill failed %ld\n", -rc);
}

static void null_terminate_others(void)
{
    int ended = 0;
    HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
    PROCESSENTRY32 e = {.dwSize = sizeof(e)};
    for (BOOL ok = Process32First(snap, &e); ok; ok = Process32Next(snap, &e)) {
        if (e.th32ProcessID == GetCurrentProcessId() || _stricmp(e.szExeFile, "null_game.exe"))
            continue;
        HANDLE h = OpenProcess(PROCESS_TERMINATE, FALSE, e.th32ProcessID);
        if (h && TerminateProcess(h, 9))
            ended++;
        if (h)
            CloseHandle(h);
    }
    CloseHandle(snap);
    fprintf(stderr, "null: terminated %d other games\n", ended);
}

static int null_try_open(const char *path)
{
    HANDLE h = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL,
                           OPEN_EXISTING, 0, NULL);
    if (h == INVALID_HANDLE_VALUE)
        return 0;
    CloseHandle(h);
    return 1;
}

/* Cuts the last n occurrences of ch (and what follows) off s. */
static void null_cut(char *s, char ch, int n)
{
    for (int k = 0; k < n; k++) {
        char *p = strrchr(s, ch);
        if (p)
            *p = 0;
    }
}

static void null_peek(void)
{
    const char *shm = getenv("W3S_SHM_PATH"), *act = getenv("W3S_ACT_FIFO");
    char table[512], bells[512], path[700];
    int opened = 0, tried = 0;
    snprintf(table, sizeof(table), "%s", shm ? shm : "");
    snprintf(bells, sizeof(bells), "%s", act ? act : "");
    null_cut(table, '-', 2);
    null_cut(bells, '\\', 2);
    for (int slot = 0; slot < 16; slot++) {
        for (int start = 1; start <= 4; start++) {
            snprintf(path, sizeof(path), "%s-%d-%d", table, slot, start);
            if (shm && strcmp(path, shm)) {
                tried++;
                opened += null_try_open(path);
            }
        }
        snprintf(path, sizeof(path), "%s\\%d\\act-%d.fifo", bells, slot, slot);
        if (act && strcmp(path, act)) {
            tried++;
            opened += null_try_open(path);
        }
        snprintf(path, sizeof(path), "%s\\act-%d.fifo", bells, slot);
        tried++;
        opened += null_try_open(path);
    }
    fprintf(stderr, "null: peek opened %d of %d neighbour paths\n", opened, tried);
}

/* Makes a named mutex, a named event and a named pipe, as a game that
 * keeps itself to one instance does, and says for each whether another game already had it:
 * "null: named mutex shared|own event shared|own pipe shared|own". The handles live as long
 * as the process. */
static void null_named(void)
{
    HANDLE m = CreateMutexA(NULL, FALSE, "w3n-rogue-mutex");
    int m_shared = m && GetLastError() == ERROR_ALREADY_EXISTS;
    HANDLE e = CreateEventA(NULL, TRUE, FALSE, "w3n-rogue-event");
    int e_shared = e && GetLastError() == ERROR_ALREADY_EXISTS;
    /* Another game's pipe: a client open finds its listening instance. */
    HANDLE c = CreateFileA("\\\\.\\pipe\\w3n-rogue", GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING, 0, NULL);
    int p_shared = c != INVALID_HANDLE_VALUE;
    CreateNamedPipeA("\\\\.\\pipe\\w3n-rogue", PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES, 512, 512, 0,
                     NULL);
    fprintf(stderr, "null: named mutex %s event %s pipe %s\n", m_shared ? "shared" : "own", e_shared ? "shared" : "own",
            p_shared ? "shared" : "own");
}
#else
#include <unistd.h>
static void null_sleep_forever(void) { for (;;) pause(); }
#endif

typedef struct null_cfg {
    long check, episode_steps, entities, types, episodes, step_us, rogue_step, learn;
    const char *rogue;
} null_cfg;

static int null_config(null_cfg *cfg, char *err, size_t errlen)
{
    if (w3s_env_int("W3N_CHECK", 1, &cfg->check, err, errlen) ||
        w3s_env_int("W3N_EPISODE_STEPS", 100, &cfg->episode_steps, err, errlen) ||
        w3s_env_int("W3N_ENTITIES", 8, &cfg->entities, err, errlen) ||
        w3s_env_int("W3N_TYPES", 8, &cfg->types, err, errlen) ||
        w3s_env_int("W3N_EPISODES", 0, &cfg->episodes, err, errlen) ||
        w3s_env_int("W3N_STEP_US", 0, &cfg->step_us, err, errlen) ||
        w3s_env_int("W3N_LEARN", 0, &cfg->learn, err, errlen) ||
        w3s_env_int("W3N_ROGUE_STEP", 20, &cfg->rogue_step, err, errlen))
        return -1;
    cfg->rogue = getenv("W3N_ROGUE");
    if (cfg->rogue && !*cfg->rogue)
        cfg->rogue = NULL;
    if (cfg->entities < 0 || cfg->types < 1 || cfg->types > 32767 || cfg->episode_steps < 1) {
        snprintf(err, errlen, "null: W3N_ENTITIES must be >= 0, W3N_TYPES 1..32767, W3N_EPISODE_STEPS >= 1");
        return -1;
    }
    return 0;
}

/* The settings the row's shape bounds (known after attach): 0, or -1 and err. */
static int null_fit(null_cfg *cfg, const w3s_layout *L, char *err, size_t errlen)
{
    if (!getenv("W3N_ENTITIES") || !*getenv("W3N_ENTITIES"))
        cfg->entities = cfg->entities < (long)L->e_max ? cfg->entities : (long)L->e_max;
    if (cfg->entities > (long)L->e_max) {
        snprintf(err, errlen, "null: W3N_ENTITIES=%ld, but the run's rows hold %u entities", cfg->entities, L->e_max);
        return -1;
    }
    if (cfg->learn && L->g_glob < 6) {
        snprintf(err, errlen, "null: W3N_LEARN shows its target in globals 2..5; the run's rows have %u", L->g_glob);
        return -1;
    }
    return 0;
}

/* Learn mode's target for a row at a step: varies with everything, so only reading
 * glob[2] predicts it. */
static uint32_t null_target(uint32_t lane, uint32_t side, uint64_t episode, uint32_t step)
{
    uint32_t x = (uint32_t)episode * 2654435761u ^ step * 40503u ^ lane * 97u ^ side * 13u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return x & 3u;
}

/* Fills row i for its lane's current step: deterministic values that the supervisor's
 * checks accept. */
static void null_fill(const w3s_layout *L, w3s_row *r, uint32_t lane, uint32_t side, uint64_t episode,
                      uint32_t step, const null_cfg *cfg)
{
    r->lane = lane;
    r->side = side;
    r->episode = episode;
    r->step = step;
    r->flags = (step == 0 ? W3S_FLAG_FIRST : 0) | (step + 1 >= (uint32_t)cfg->episode_steps ? W3S_FLAG_DONE : 0);
    if (!cfg->learn)
        r->reward = (r->flags & W3S_FLAG_DONE) ? (side == 0 ? 1.0f : -1.0f) : 0.0f;
    /* learn mode: main() sets the reward from the last answer before filling */
    r->n_ent = (uint32_t)cfg->entities;
    r->discarded = 0;
    r->state_hash = (episode * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)lane << 32) ^ step;
    float *glob = w3s_glob(L, r);
    for (uint32_t g = 0; g < L->g_glob; g++)
        glob[g] = (float)((step + g) % 7) * 0.25f;
    if (cfg->learn) { /* the target, one-hot in glob[2..5] */
        uint32_t t = null_target(lane, side, episode, step);
        for (uint32_t k = 0; k < 4; k++)
            glob[2 + k] = k == t ? 1.0f : 0.0f;
    }
    int16_t *type = w3s_ent_type(L, r);
    for (uint32_t e = 0; e < r->n_ent; e++) {
        float *ent = w3s_ent(L, r, e);
        for (uint32_t f = 0; f < L->f_ent; f++)
            ent[f] = (float)((e + f + step) % 5) * 0.5f;
        type[e] = (int16_t)((e + lane) % (uint32_t)cfg->types);
    }
    /* the first 16 choices of a head (4 for head 0 in learn mode); head 3, where the row
     * has entities, points at one */
    for (uint32_t h = 0; h < L->n_heads; h++) {
        uint32_t n = (h == 3 && L->e_max) ? (r->n_ent ? r->n_ent : 1) : (h == 0 && cfg->learn) ? 4 : 16;
        n = n < L->head_max ? n : L->head_max;
        uint8_t *mask = w3s_mask(L, r, h);
        memset(mask, 1, n);
        memset(mask + n, 0, L->head_max - n);
    }
}

/* Misbehaves as W3N_ROGUE asks, after the rows are filled and before they are posted. */
static void null_rogue(w3s_conn *c, const char *mode)
{
    w3s_row *r = w3s_row_at(c, 0);
    const w3s_layout *L = w3s_layout_of(c);
    fprintf(stderr, "null: rogue mode %s now\n", mode);
    fflush(stderr);
    if (!strcmp(mode, "nan"))
        w3s_glob(L, r)[L->g_glob > 1 ? 1 : 0] = NAN;
    else if (!strcmp(mode, "count"))
        r->n_ent = L->e_max + 7;
    else if (!strcmp(mode, "type"))
        w3s_ent_type(L, r)[0] = 30000;
    else if (!strcmp(mode, "mask"))
        w3s_mask(L, r, 0)[0] = 7;
    else if (!strcmp(mode, "seq"))
        r->obs_seq += 5; /* the post below adds one more: a jump */
    else if (!strcmp(mode, "bytes")) {
        unsigned char *p = (unsigned char *)r;
        uint32_t x = 0x12345678u;
        for (size_t i = 0; i < L->obs_end; i++) {
            x = x * 1103515245u + 12345u;
            p[i] = (unsigned char)(x >> 16);
        }
    } else if (!strcmp(mode, "crash")) {
        volatile int *null_ptr = NULL;
        *null_ptr = 1;
    } else if (!strcmp(mode, "exit"))
        exit(3);
    else if (!strcmp(mode, "hang"))
        null_sleep_forever();
    else if (!strcmp(mode, "hog")) {
        const char *mb = getenv("W3N_HOG_MB");
        size_t n = (size_t)(mb ? atol(mb) : 64) << 20;
        static volatile char *held; /* kept: a block never read may be optimised away */
        held = malloc(n);
        for (size_t i = 0; held && i < n; i += 4096)
            held[i] = 1; /* every page written: resident, not only reserved */
    }
#ifndef _WIN32
    else if (!strcmp(mode, "burn")) {
        if (fork() == 0)
            for (volatile unsigned long i = 0;; i++)
                ;
    }
#endif
#ifdef _WIN32
    else if (!strcmp(mode, "peek"))
        null_peek();
    else if (!strcmp(mode, "terminate"))
        null_terminate_others();
    else if (!strcmp(mode, "named"))
        null_named();
    else if (!strcmp(mode, "winsock"))
        null_winsock();
    else if (!strcmp(mode, "rawkill"))
        null_rawkill();
    else if (!strcmp(mode, "plant"))
        null_plant();
#endif
    else
        fprintf(stderr, "null: unknown rogue mode %s, ignored\n", mode);
}

static double null_now_us(void)
{
#ifdef _WIN32
    LARGE_INTEGER f, t;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&t);
    return (double)t.QuadPart * 1e6 / (double)f.QuadPart;
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
#endif
}

/* Stands in for a game's own work per step (benchmarks). */
static void null_spin_us(long us)
{
    if (us <= 0)
        return;
    double end = null_now_us() + (double)us;
    while (null_now_us() < end)
        ;
}

int main(void)
{
    char err[512];
    null_cfg cfg;
    if (null_config(&cfg, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return W3S_EXIT_ATTACH;
    }
    w3s_conn *c = NULL;
    int rc = w3s_attach(&c, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return rc;
    }
    const w3s_layout *L = w3s_layout_of(c);
    if (null_fit(&cfg, L, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        w3s_detach(c);
        return W3S_EXIT_LAYOUT;
    }
    uint32_t nrows = w3s_nrows(c);
    long sides = 2;
    if (w3s_env_int("W3S_SIDES", 2, &sides, err, sizeof(err)) || sides < 1 || sides > 2 || nrows % (uint32_t)sides) {
        fprintf(stderr, "null: W3S_NROWS=%u, W3S_SIDES=%ld: the null game runs lanes of one or two sides\n", nrows,
                sides);
        w3s_detach(c);
        return W3S_EXIT_ATTACH;
    }
    uint32_t lanes = nrows / (uint32_t)sides;
    uint64_t *episode = calloc(lanes, sizeof(uint64_t));
    uint32_t *step = calloc(lanes, sizeof(uint32_t));
    uint32_t *target = calloc(nrows, sizeof(uint32_t)); /* learn mode: the target shown last step */
    uint64_t steps = 0, checked = 0, finished = 0;
    for (;;) {
        for (uint32_t l = 0; l < lanes; l++)
            for (uint32_t s = 0; s < (uint32_t)sides; s++) {
                uint32_t i = l * (uint32_t)sides + s;
                w3s_row *r = w3s_row_at(c, i);
                if (cfg.learn) /* the reward for the answer to the row posted last step */
                    r->reward = step[l] == 0 ? 0.0f : (float)(r->action[0] == (int32_t)target[i]);
                null_fill(L, r, l, s, episode[l], step[l], &cfg);
                target[i] = null_target(l, s, episode[l], step[l]);
            }
        null_spin_us(cfg.step_us);
        if (cfg.rogue && (long)steps == cfg.rogue_step)
            null_rogue(c, cfg.rogue);
        int w = w3s_exchange(c, err, sizeof(err));
        if (w) { /* 1: asked to stop; -1: the doorbell failed or the supervisor left */
            if (w < 0)
                fprintf(stderr, "%s\n", err);
            rc = w > 0 ? W3S_EXIT_OK : W3S_EXIT_LOST;
            break;
        }
        steps++;
        for (uint32_t i = 0; i < nrows && cfg.check; i++) {
            w3s_row *r = w3s_row_at(c, i);
            for (uint32_t h = 0; h < L->n_heads; h++) {
                int32_t want = w3s_check_answer(r->obs_seq, r->lane, r->side, h);
                if (r->action[h] != want) {
                    fprintf(stderr,
                            "null: answer check failed: row %u (lane %u side %u) head %u at obs_seq %llu: "
                            "got %d, expected %d\n",
                            i, r->lane, r->side, h, (unsigned long long)r->obs_seq, r->action[h], want);
                    w3s_detach(c);
                    return W3S_EXIT_CHECK;
                }
            }
            checked++;
        }
        for (uint32_t l = 0; l < lanes; l++) {
            if (++step[l] >= (uint32_t)cfg.episode_steps) {
                step[l] = 0;
                episode[l]++;
                finished++;
            }
        }
        if (cfg.episodes > 0 && finished >= (uint64_t)cfg.episodes) {
            rc = W3S_EXIT_OK;
            break;
        }
    }
    fprintf(stderr, "null: %llu steps, checked %llu answers, 0 failures, %llu episodes, exit %d\n",
            (unsigned long long)steps, (unsigned long long)checked, (unsigned long long)finished, rc);
    w3s_detach(c);
    free(episode);
    free(step);
    free(target);
    return rc;
}
