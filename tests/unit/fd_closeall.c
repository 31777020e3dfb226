/* fd_closeall.c - run under `vsocket run` (ctest fd_closeall_*).
 *
 * Issue 11, the daemon pattern: a process with a live (under shm: upgraded)
 * connection closes every descriptor from 3 up, behind vsocket's back as far
 * as its own side channel is concerned, then opens new ones, which take the
 * numbers vsocket used. Whatever vsocket still does with its old numbers
 * (messages to the peer, closes, wake-ups) must not land in the program's
 * new pipes, file or connection. Variants: close_range(3, ~0U, 0) and a
 * close() loop up to 1023, each in a forked "daemon" while the echo peer
 * keeps running. The daemon then checks for ~2.5 s that pipe writes round-
 * trip exactly with nothing extra, that a file holds exactly its bytes, and
 * that a new connection (upgraded in turn) echoes checksummed data. Exit 0
 * if both variants passed. */
#include <sys/epoll.h>
#include <sys/wait.h>

#include "live_conn.h"

#define FILE_BYTES 4096

static int fail(const char *variant, const char *what, const int *mine, int nmine)
{
    fprintf(stderr, "fd_closeall %s: FAILED: %s\n", variant, what);
    fd_dump("fd_closeall", mine, nmine);
    return 1;
}

/* Writes a line into pipe P and reads it back: exactly it, nothing more. */
static int pipe_round_trip(int p[2], int round)
{
    char out[64], in[128];
    int len = snprintf(out, sizeof(out), "pipe %d round %d\n", p[0], round);
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    if (write(p[1], out, (size_t)len) != len || read(p[0], in, sizeof(in)) != len ||
        memcmp(in, out, (size_t)len) != 0)
        return -1;
    return poll(&pf, 1, 0) == 0 ? 0 : -1; /* nothing else arrived */
}

static int file_intact(int f)
{
    unsigned char buf[FILE_BYTES + 1];
    struct stat st;
    if (fstat(f, &st) < 0 || st.st_size != FILE_BYTES ||
        pread(f, buf, sizeof(buf), 0) != FILE_BYTES)
        return -1;
    for (size_t i = 0; i < FILE_BYTES; i++)
        if (buf[i] != pattern(7, i))
            return -1;
    return 0;
}

static int daemon_run(const struct sockaddr_in *a, int loop)
{
    const char *variant = loop ? "close() loop" : "close_range";
    int before[LC_MAX_FDS], nbefore = fd_list(before, LC_MAX_FDS - 2);
    int c = echo_connect(a), ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN};
    char err[200], what[300];
    unsigned char buf[FILE_BYTES];

    e.data.fd = c;
    if (c < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &e) < 0 || warm_up(c, 1500) < 0)
        return fail(variant, "cannot set up the first connection", NULL, 0);
    epoll_wait(ep, &e, 1, 0);
    before[nbefore++] = c, before[nbefore++] = ep;
    fd_dump(loop ? "fd_closeall close() loop: before" : "fd_closeall close_range: before", before,
            nbefore);

    if (loop) {
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
    } else if (close_range(3, ~0U, 0) < 0) {
        return fail(variant, "close_range failed", NULL, 0);
    }

    /* New descriptors, on the numbers just freed. */
    int p1[2], p2[2], f, c2, ep2;
    char path[] = "/tmp/fd_closeall.XXXXXX";
    if (pipe(p1) < 0 || pipe(p2) < 0 || (f = mkstemp(path)) < 0)
        return fail(variant, "cannot open pipes and a file", NULL, 0);
    unlink(path);
    if ((c2 = echo_connect(a)) < 0 || (ep2 = epoll_create1(0)) < 0)
        return fail(variant, "cannot open a new connection", NULL, 0);
    e.data.fd = c2;
    epoll_ctl(ep2, EPOLL_CTL_ADD, c2, &e);
    int mine[] = {0, 1, 2, p1[0], p1[1], p2[0], p2[1], f, c2, ep2}, nmine = 10;
    for (size_t i = 0; i < FILE_BYTES; i++)
        buf[i] = pattern(7, i);
    if (write(f, buf, FILE_BYTES) != FILE_BYTES)
        return fail(variant, "cannot write the file", mine, nmine);

    /* ~1.5 s for the new connection to upgrade, then ~1 s more. */
    for (int round = 0; round < 50; round++) {
        size_t bytes = round == 35 ? 262144 : 512;
        err[0] = '\0';
        if (pipe_round_trip(p1, round) < 0 || pipe_round_trip(p2, round) < 0) {
            snprintf(what, sizeof(what), "round %d: a pipe lost, gained or changed bytes", round);
            return fail(variant, what, mine, nmine);
        }
        if (file_intact(f) < 0) {
            snprintf(what, sizeof(what), "round %d: the file no longer holds exactly its bytes",
                     round);
            return fail(variant, what, mine, nmine);
        }
        if (echo_check(c2, c2, bytes, (unsigned)round, err, sizeof(err)) < 0 ||
            epoll_wait(ep2, &e, 1, 0) != 0) {
            snprintf(what, sizeof(what), "round %d: the new connection: %s", round,
                     err[0] ? err : "bytes beyond the echo");
            return fail(variant, what, mine, nmine);
        }
        for (int i = 3; i < nmine; i++) {
            if (fcntl(mine[i], F_GETFD) < 0) {
                snprintf(what, sizeof(what), "round %d: fd %d was closed under the program", round,
                         mine[i]);
                return fail(variant, what, mine, nmine);
            }
        }
        pause_ms(50);
    }
    fd_dump(loop ? "fd_closeall close() loop: after" : "fd_closeall close_range: after", mine,
            nmine);
    close(c2);
    return 0;
}

int main(void)
{
    struct sockaddr_in a;
    int failed = 0, status;
    pid_t peer = echo_peer_start(&a);

    for (int loop = 0; loop <= 1; loop++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(daemon_run(&a, loop));
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status))
            fprintf(stderr, "fd_closeall %s: FAILED: killed by signal %d (%s)\n",
                    loop ? "close() loop" : "close_range", WTERMSIG(status),
                    strsignal(WTERMSIG(status)));
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (waitpid(peer, &status, WNOHANG) != 0) {
        fprintf(stderr, "fd_closeall: FAILED: the echo peer died\n");
        failed++;
    }
    kill(peer, SIGKILL);
    waitpid(peer, NULL, 0);
    if (failed)
        return 1;
    printf("fd_closeall: ok\n");
    return 0;
}
