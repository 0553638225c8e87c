/* breakout.c: a game that tries to leave its sandbox (tests/runtime/test_boundary.py).
 *
 * At its start it tries each step a hostile game as root would take to leave a sandbox,
 * and prints one line a step, "breakout: <step> ok" or "breakout: <step> denied: <why>":
 *   caps       has it any effective capability (CapEff of /proc/self/status)
 *   userns     make a user namespace of its own (to get capabilities back in it)
 *   umount     unmount the tmpfs that hides the run folder (W3R_RUN_DIR), then read
 *              W3R_RUN_DIR/recipe.json
 *   remount    remount / read-write, then create W3R_RUN_DIR/planted
 *   procmem    unmount its /proc, then open the supervisor's (W3R_SUP_PID) memory for
 *              writing, or else for reading
 *   signal     signal 0 to the supervisor (it may signal it)
 *   setns      enter the supervisor's network namespace, then connect to 127.0.0.1:W3R_PORT
 *   hostshm    unmount its private /dev/shm, then open the host's segments of its run's
 *              table (its own segment's name, W3S_SHM, less "-<game>-<start>") and write
 *              0xff over each but its own
 *   env        W3R_SECRET names a variable of the supervisor's environment: is it here
 *   unixsock   connect to each unix socket path in W3R_SOCKS (colon-separated)
 * Then it execs W3R_THEN (an honest game) with its arguments, or exits 0.
 * A step runs only where the variable it names is set (hostshm: W3S_SHM). Never start it
 * outside a sandbox with W3R_RUN_DIR, W3R_SUP_PID or W3S_SHM set: as root it would
 * unmount the host's /proc and /dev/shm.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void said(const char *step, int ok, const char *why)
{
    if (ok)
        printf("breakout: %s ok\n", step);
    else
        printf("breakout: %s denied: %s\n", step, why);
    fflush(stdout);
}

static void result(const char *step, int rc)
{
    said(step, rc == 0, strerror(errno));
}

static const char *env(const char *k)
{
    const char *v = getenv(k);
    return v ? v : "";
}

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&a, sizeof a);
    if (fd >= 0)
        close(fd);
    return rc;
}

static void caps(void)
{
    char line[256];
    unsigned long long eff = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "CapEff:", 7))
            eff = strtoull(line + 7, NULL, 16);
    if (f)
        fclose(f);
    said("caps", eff != 0, "CapEff is 0");
}

static void userns(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
    int st = 0;
    waitpid(pid, &st, 0);
    errno = WEXITSTATUS(st);
    result("userns", WEXITSTATUS(st) == 0 ? 0 : -1);
}

static void umount_run(const char *run)
{
    char p[4096];
    if (umount2(run, MNT_DETACH) != 0) {
        result("umount", -1);
        return;
    }
    snprintf(p, sizeof p, "%s/recipe.json", run);
    int fd = open(p, O_RDONLY);
    result("umount", fd < 0 ? -1 : 0);
    if (fd >= 0)
        close(fd);
}

static void remount(const char *run)
{
    char p[4096];
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL) != 0) {
        result("remount", -1);
        return;
    }
    snprintf(p, sizeof p, "%s/planted", run);
    int fd = open(p, O_CREAT | O_WRONLY, 0644);
    result("remount", fd < 0 ? -1 : 0);
    if (fd >= 0)
        close(fd);
}

static void procmem(const char *sup)
{
    char p[64];
    umount2("/proc", MNT_DETACH); /* where it may: the host's /proc was under it */
    snprintf(p, sizeof p, "/proc/%s/mem", sup);
    int fd = open(p, O_RDWR);
    if (fd < 0)
        fd = open(p, O_RDONLY); /* reading it is enough: the run's secrets, its weights */
    result("procmem", fd < 0 ? -1 : 0);
    if (fd >= 0)
        close(fd);
}

static void enter_net(const char *sup, int port)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%s/ns/net", sup);
    int fd = open(p, O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        result("setns", -1);
        if (fd >= 0)
            close(fd);
        return;
    }
    close(fd);
    result("setns", tcp_connect(port));
}

static void hostshm(const char *own)
{
    char table[256];
    int n = 0;
    snprintf(table, sizeof table, "%s", own[0] == '/' ? own + 1 : own);
    for (int cut = 0; cut < 2; cut++) {
        char *dash = strrchr(table, '-');
        if (dash)
            *dash = 0;
    }
    umount2("/dev/shm", MNT_DETACH);
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[512];
        struct stat st;
        if (!*table || strncmp(e->d_name, table, strlen(table)) || (own[0] == '/' && !strcmp(e->d_name, own + 1)))
            continue;
        snprintf(p, sizeof p, "/dev/shm/%s", e->d_name);
        int fd = open(p, O_RDWR);
        if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            continue;
        memset(m, 0xff, (size_t)st.st_size);
        munmap(m, (size_t)st.st_size);
        n++;
    }
    if (d)
        closedir(d);
    printf("breakout: hostshm opened %d\n", n);
    said("hostshm", n > 0, "no neighbour segment reachable");
}

static void unixsocks(const char *list)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *p = strtok(buf, ":"); p; p = strtok(NULL, ":")) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", p);
        int rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&a, sizeof a);
        char step[300];
        snprintf(step, sizeof step, "unixsock %s", p);
        result(step, rc);
        if (fd >= 0)
            close(fd);
    }
}

int main(int argc, char **argv)
{
    const char *sup = env("W3R_SUP_PID"), *run = env("W3R_RUN_DIR");
    caps();
    userns();
    if (*run)
        umount_run(run);
    if (*run)
        remount(run);
    if (*sup)
        procmem(sup);
    if (*sup)
        result("signal", kill(atoi(sup), 0));
    if (*sup)
        enter_net(sup, atoi(env("W3R_PORT")));
    if (*env("W3S_SHM"))
        hostshm(env("W3S_SHM"));
    said("env", *env("W3R_SECRET") && getenv(env("W3R_SECRET")) != NULL, "not in its environment");
    unixsocks(env("W3R_SOCKS"));
    if (*env("W3R_THEN")) {
        argv[0] = (char *)env("W3R_THEN");
        execv(argv[0], argv);
        perror("breakout: exec");
        return 1;
    }
    (void)argc;
    return 0;
}
