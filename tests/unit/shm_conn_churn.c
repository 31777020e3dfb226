/* shm_conn_churn.c - run under `vsocket run` (ctest shm_conn_churn_*).
 *
 * Issue 19: a connection's shared state must stay mapped while anything
 * can still reach it. Ceph's monitor died in close() (vs_shm_release) when
 * a peer went away: its threads close connections while others wait on
 * them, its event loops sit in epoll_wait, and it forks children that
 * close every descriptor (fork_function).
 *
 * Here, in one process: WORKERS threads each open PER connections to a
 * peer process of their own, echo on them (checked byte by byte), then let
 * them go one of four ways, round after round:
 *   0. closed by us, the peer alive;
 *   1. shut for writing by us, closed by the peer first, then by us;
 *   2. a helper thread asleep in recv() on one of them while we drop its
 *      number (dup2 of /dev/null over it: the number stays taken, so no
 *      other thread can get it) and close the others, and the peer is
 *      killed: the helper's call is the last user, and lets go when the
 *      peer's death wakes it;
 *   3. the same, the peer closing instead of dying.
 * Meanwhile one thread waits in epoll_wait on a set holding every
 * connection, one keeps an idle connection in blocking recv and poll
 * (their quiet slices run the walk over all connections that gives idle
 * ring memory back), and one forks children that close every descriptor
 * one at a time and fork again, as Ceph's fork_function does.
 *
 * At the end, with the other threads gone, fresh connections (on shm,
 * under the shm transport) must survive three more such children and echo
 * intact. Exit 0 if nothing failed; a crash or a sanitizer report fails the
 * test by itself. The only time bounds are hang guards (alarm, receive
 * timeouts of 20 s). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "live_conn.h"
#include "ring_use.h"

#define WORKERS 4
#define ROUNDS 8
#define PER 6
#define FINAL 6
#define LISTENER_FD 3

extern char **environ;

static atomic_bool stop;
static atomic_int failures, forks, peers_killed;
static int epfd, devnull;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "shm_conn_churn: " __VA_ARGS__);                                           \
        atomic_fetch_add(&failures, 1);                                                            \
    } while (0)

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "shm_conn_churn: FAILED: stuck for 300 s\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

/* --- the peer: its own process, one thread per connection --- */

static void *peer_echo(void *arg)
{
    int fd = (int)(long)arg;
    static __thread char buf[65536];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0)
            break;
        for (ssize_t w = 0, k; w < r; w += k)
            if ((k = send(fd, buf + w, (size_t)(r - w), MSG_NOSIGNAL)) <= 0)
                goto out;
    }
out:
    close(fd);
    return NULL;
}

static int peer_main(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        int c = accept4(LISTENER_FD, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return 1;
        }
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, peer_echo, (void *)(long)c) != 0)
            close(c);
        pthread_attr_destroy(&at);
    }
}

/* A listener of our own (its number kept across peers), and the peer
 * process serving it, spawned (not forked: it must not hold our
 * connections). */
struct peer {
    int l;
    pid_t pid;
    struct sockaddr_in a;
};

static int peer_spawn(struct peer *p)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p->l, LISTENER_FD);
    char *argv[] = {"/proc/self/exe", "peer", NULL};
    int rc = posix_spawn(&p->pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        FAIL("spawning a peer: %s\n", strerror(rc));
    return rc ? -1 : 0;
}

static int peer_start(struct peer *p)
{
    socklen_t al = sizeof(p->a);
    p->a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    p->l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p->l < 0 || bind(p->l, (struct sockaddr *)&p->a, al) < 0 || listen(p->l, 128) < 0 ||
        getsockname(p->l, (struct sockaddr *)&p->a, &al) < 0) {
        perror("shm_conn_churn: listener");
        return -1;
    }
    return peer_spawn(p);
}

static void peer_kill(struct peer *p)
{
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    atomic_fetch_add(&peers_killed, 1);
}

/* --- connections --- */

static int conn_open(const struct peer *p)
{
    struct timeval tv = {.tv_sec = 20};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0 &&
        connect(s, (const struct sockaddr *)&p->a, sizeof(p->a)) == 0)
        return s;
    FAIL("connect: %s\n", strerror(errno));
    if (s >= 0)
        close(s);
    return -1;
}

static void watch(int fd)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.fd = fd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        FAIL("epoll_ctl ADD %d: %s\n", fd, strerror(errno));
}

static int echo(int fd, size_t bytes, unsigned seed, const char *what)
{
    char why[200];
    if (echo_check(fd, fd, bytes, seed, why, sizeof(why)) == 0)
        return 0;
    FAIL("%s: %s\n", what, why);
    return -1;
}

/* Reads what is left until end of stream or an error (the peer closed or
 * died). */
static void drain(int fd)
{
    char b[4096];
    while (recv(fd, b, sizeof(b), 0) > 0)
        ;
}

static void *recv_helper(void *arg)
{
    drain((int)(long)arg);
    return NULL;
}

/* --- the worker threads --- */

struct worker {
    int id;
    struct peer peer;
    pthread_t t;
};

static void round_run(struct worker *w, int round)
{
    int fds[PER], n = 0;
    unsigned seed = (unsigned)(w->id * 1000 + round * PER);
    char what[64];
    for (; n < PER; n++) {
        if ((fds[n] = conn_open(&w->peer)) < 0)
            break;
        watch(fds[n]);
    }
    /* Enough bytes, spread over time, for each to start its upgrade
     * (VSOCKET_UPGRADE_AFTER_*); most are on the rings by the second. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            snprintf(what, sizeof(what), "worker %d round %d conn %d", w->id, round, i);
            echo(fds[i], 64 << 10, seed + (unsigned)(i + pass * PER), what);
        }
        pause_ms(5);
    }
    int mode = (w->id + round) % 4;
    pthread_t helper;
    bool helped = false;
    if (mode >= 2 && n > 0)
        helped = pthread_create(&helper, NULL, recv_helper, (void *)(long)fds[0]) == 0;
    if (mode == 1 || mode == 3)
        for (int i = 0; i < n; i++)
            shutdown(fds[i], SHUT_WR);
    if (mode == 1)
        for (int i = 0; i < n; i++)
            drain(fds[i]);
    /* The helper may or may not be in its call yet: either way the number
     * stays taken until it is back. */
    if (helped)
        dup2(devnull, fds[0]);
    for (int i = helped ? 1 : 0; i < n; i++) {
        close(fds[i]);
        if (mode == 2 && i == n / 2)
            peer_kill(&w->peer); /* while the others are being closed */
    }
    if (mode == 2 && n <= 1)
        peer_kill(&w->peer);
    if (helped) {
        pthread_join(helper, NULL);
        close(fds[0]);
    }
    if (mode == 2)
        peer_spawn(&w->peer);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int round = 0; round < ROUNDS; round++)
        round_run(w, round);
    return NULL;
}

/* --- the other threads --- */

static void *epoll_main(void *arg)
{
    (void)arg;
    struct epoll_event ev[64];
    while (!atomic_load(&stop))
        epoll_wait(epfd, ev, 64, 20);
    return NULL;
}

/* An idle connection in blocking recv and poll: their quiet slices walk
 * every connection of the process (transport/shm/reclaim.c). */
static void *idle_main(void *arg)
{
    int fd = (int)(long)arg;
    struct timeval tv = {0, 100000};
    char b;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (!atomic_load(&stop)) {
        (void)!recv(fd, &b, 1, 0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 60);
    }
    return NULL;
}

/* Ceph's fork_function: the child closes every descriptor one at a time,
 * forks the real worker and waits for it. */
static void closeall_child(void)
{
    for (int fd = 3; fd < 4096; fd++)
        close(fd);
    pid_t g = fork();
    if (g == 0)
        _exit(0);
    int status;
    _exit(g > 0 && waitpid(g, &status, 0) == g && WIFEXITED(status) ? 0 : 1);
}

static int fork_closeall(void)
{
    pid_t pid = fork();
    if (pid == 0)
        closeall_child();
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        FAIL("a forked child failed (status %d)\n", pid < 0 ? -1 : status);
        return -1;
    }
    atomic_fetch_add(&forks, 1);
    return 0;
}

static void *forker_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop) && fork_closeall() == 0)
        pause_ms(10);
    return NULL;
}

/* --- the end: fresh connections through more children --- */

/* Pings FD until this process maps WANT rings (under the shm transport),
 * 20 s at most. */
static int on_rings(int fd, long want, unsigned seed)
{
    struct ring_use u;
    for (int i = 0; i < 2000; i++) {
        if (echo(fd, 4096, seed + (unsigned)i, "final warm-up") < 0)
            return -1;
        if (!shm_expected() || (ring_use_of(getpid(), &u) == 0 && u.rings >= want))
            return 0;
        pause_ms(10);
    }
    FAIL("a final connection is not on the rings after 20 s\n");
    return -1;
}

static void final_check(struct peer *p)
{
    int fds[FINAL];
    char what[64];
    struct ring_use u = {0, 0, 0};
    ring_use_of(getpid(), &u);
    if (shm_expected() && u.rings != 0)
        FAIL("%ld rings still mapped with every connection closed\n", u.rings);
    for (int i = 0; i < FINAL; i++)
        if ((fds[i] = conn_open(p)) < 0 || on_rings(fds[i], 2L * (i + 1), 7000u * (unsigned)i))
            return;
    for (int round = 0; round < 3; round++) {
        if (fork_closeall() < 0)
            return;
        for (int i = 0; i < FINAL; i++) {
            snprintf(what, sizeof(what), "after child %d, final conn %d", round, i);
            if (echo(fds[i], 64 << 10, 9000u + (unsigned)(round * FINAL + i), what) < 0)
                return;
        }
    }
    for (int i = 0; i < FINAL; i++)
        close(fds[i]);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "peer") == 0)
        return peer_main();
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    alarm(300);
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    static struct worker w[WORKERS];
    struct peer idle_peer;
    if (devnull < 0 || epfd < 0 || peer_start(&idle_peer) < 0)
        return 2;
    for (int i = 0; i < WORKERS; i++) {
        w[i].id = i;
        if (peer_start(&w[i].peer) < 0)
            return 2;
    }
    int idle = conn_open(&idle_peer);
    if (idle < 0 || echo(idle, 300 << 10, 1, "idle connection") < 0)
        return 2;
    pthread_t ep, id, fk;
    pthread_create(&ep, NULL, epoll_main, NULL);
    pthread_create(&id, NULL, idle_main, (void *)(long)idle);
    pthread_create(&fk, NULL, forker_main, NULL);
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&w[i].t, NULL, worker_main, &w[i]);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i].t, NULL);
    atomic_store(&stop, true);
    pthread_join(ep, NULL);
    pthread_join(id, NULL);
    pthread_join(fk, NULL);
    close(idle);
    final_check(&idle_peer);
    for (int i = 0; i < WORKERS; i++)
        peer_kill(&w[i].peer);
    peer_kill(&idle_peer);
    int f = atomic_load(&failures);
    printf("shm_conn_churn: %d connections in %d threads, %d forked children, %d peers killed: "
           "%s\n",
           WORKERS * ROUNDS * PER, WORKERS, atomic_load(&forks), atomic_load(&peers_killed),
           f ? "FAILED" : "ok");
    return f ? 1 : 0;
}
