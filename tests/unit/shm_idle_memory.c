/* shm_idle_memory.c - run under `vsocket run` (ctest shm_idle_memory_*).
 *
 * Issue 9: idle connections give their ring memory back, as the kernel
 * frees an idle socket's buffers. 200 connections each echo 512 KiB (the
 * client writes it all, then reads the echo: the rings grow), then go
 * quiet. Then each connection must hold at most 64 KiB of shared
 * memory (its rings' resident pages, headers included) in the client and
 * in the server, as /proc/PID/smaps counts them. The server waits in
 * epoll_wait; the client first in poll on every connection, then (after a
 * second round of traffic) in a blocking recv on one connection while the
 * others sit unwatched, then (after a third) in nanosleep, never calling
 * into vsocket: a pool of keep-alive connections in a program busy with
 * something else (issue 24). Its transmit rings must then go back through
 * the server, their reader. Last, the server is stopped (SIGSTOP: a writer
 * that never calls again) while the client waits in a blocking recv: the
 * client, their reader, gives back the server's rings, the one it is
 * blocked on included. No ring may keep more than IDLE_MAX either (an
 * average would hide one). Under the shm transport the connections must
 * really be on the rings (their mappings exist). Exit 0 if all passed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ring_use.h"

#define CONNS 200
#define BYTES (512 << 10)
#define IDLE_MAX (64 << 10) /* per connection */
#define PING 0x50494e47u
/* The rings give their memory back after an idle second or so; a wait this
 * long for it means they never do. */
#define SETTLE_MAX_S 60

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "shm_idle_memory: FAILED: stuck for 600 s\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(1);
}

/* The server: one epoll loop echoing every connection (blocking writes). */
static void server(int l)
{
    static char buf[65536];
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l}, out[64];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    for (;;) {
        int n = epoll_wait(ep, out, 64, -1);
        for (int i = 0; i < n; i++) {
            int fd = out[i].data.fd;
            if (fd == l) {
                int c = accept(l, NULL, NULL);
                ev = (struct epoll_event){.events = EPOLLIN, .data.fd = c};
                if (c >= 0)
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                continue;
            }
            ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN)) {
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
            }
            for (ssize_t w = 0, k; r > 0 && w < r; w += k)
                if ((k = send(fd, buf + w, (size_t)(r - w), MSG_NOSIGNAL)) <= 0)
                    break;
        }
    }
}

static pid_t server_start(struct sockaddr_in *a)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t al = sizeof(*a);
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (l < 0 || bind(l, (struct sockaddr *)a, al) < 0 || listen(l, CONNS) < 0 ||
        getsockname(l, (struct sockaddr *)a, &al) < 0) {
        perror("shm_idle_memory: listener");
        exit(2);
    }
    pid_t pid = fork();
    if (pid == 0)
        server(l);
    close(l);
    return pid;
}

static int ping(int fd)
{
    uint32_t rec = PING, back = 0;
    return send(fd, &rec, sizeof(rec), MSG_NOSIGNAL) == sizeof(rec) &&
                   recv(fd, &back, sizeof(back), MSG_WAITALL) == sizeof(back) && back == PING
               ? 0
               : -1;
}

/* Connects and ping-pongs until this process maps WANT rings (the
 * handshake may take up to about a second), then once more, so that both
 * ends send on the rings. */
static int connect_warm(const struct sockaddr_in *a, long want)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0)
        return -1;
    struct ring_use u;
    for (int i = 0; i < 6000; i++) {
        if (ping(fd) < 0)
            return -1;
        if (!shm_expected() || (ring_use_of(getpid(), &u) == 0 && u.rings >= want))
            return ping(fd) < 0 ? -1 : fd;
        usleep(10000);
    }
    fprintf(stderr, "shm_idle_memory: connection not upgraded after 6000 ping-pongs (60 s)\n");
    return -1;
}

static int traffic(const int *fds, unsigned round)
{
    for (int i = 0; i < CONNS; i++) {
        unsigned seed = round * CONNS + (unsigned)i;
        int rc = send_stream(fds[i], seed, BYTES, 64 << 10);
        if (rc == 0)
            rc = recv_stream(fds[i], seed, BYTES, 64 << 10);
        if (rc < 0) {
            fprintf(stderr, "shm_idle_memory: connection %d: %s\n", i, strerror(-rc));
            return -1;
        }
    }
    return 0;
}

/* Waits (with WAIT, up to SETTLE_MAX_S) until the client and the server hold at most
 * IDLE_MAX per connection; 0 if they did. */
static int settles(const char *how, pid_t srv, void (*wait)(const int *), const int *fds)
{
    struct ring_use mine, theirs;
    double t0 = now_s();
    ring_use_of(getpid(), &mine);
    ring_use_of(srv, &theirs);
    printf("shm_idle_memory: %s: after the traffic: client %ld KiB, server %ld KiB per "
           "connection\n",
           how, mine.rss / CONNS >> 10, theirs.rss / CONNS >> 10);
    for (;;) {
        wait(fds);
        ring_use_of(getpid(), &mine);
        ring_use_of(srv, &theirs);
        long largest = ring_largest_of(getpid());
        bool ok = mine.rss <= (long)CONNS * IDLE_MAX && theirs.rss <= (long)CONNS * IDLE_MAX &&
                  largest <= IDLE_MAX;
        if (ok || now_s() - t0 > SETTLE_MAX_S) {
            printf("shm_idle_memory: %s: after %.1f s idle: client %ld KiB, server %ld KiB per "
                   "connection (%ld and %ld rings, the largest %ld KiB): %s\n",
                   how, now_s() - t0, mine.rss / CONNS >> 10, theirs.rss / CONNS >> 10, mine.rings,
                   theirs.rings, largest >> 10, ok ? "ok" : "FAILED");
            fflush(stdout);
            if (ok && shm_expected() && (mine.rings < 2 * CONNS || theirs.rings < 2 * CONNS)) {
                fprintf(stderr, "shm_idle_memory: not on shm\n");
                return -1;
            }
            return ok ? 0 : -1;
        }
    }
}

/* The client waits in poll on every connection for half a second. */
static void wait_poll(const int *fds)
{
    struct pollfd p[CONNS];
    for (int i = 0; i < CONNS; i++)
        p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    poll(p, CONNS, 500);
}

/* The client waits in a blocking recv on the first connection only. */
static void wait_recv(const int *fds)
{
    struct timeval tv = {0, 500000};
    char b;
    setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)!recv(fds[0], &b, 1, 0);
}

/* The client sleeps: no call into vsocket at all. */
static void wait_sleep(const int *fds)
{
    (void)fds;
    struct timespec ts = {0, 500000000};
    nanosleep(&ts, NULL);
}

/* Stops the server once it sleeps in the kernel (state S): then it is in
 * no write, whose end (the handshake word) a stop in its middle would hold
 * up forever; nothing arrives to wake it before the stop. */
static void stop_server(pid_t srv)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)srv);
    for (;;) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = 0;
        const char *paren = strrchr(buf, ')');
        if (paren && paren[1] == ' ' && paren[2] == 'S')
            break;
        usleep(1000);
    }
    kill(srv, SIGSTOP);
}

int main(void)
{
    struct sockaddr_in a;
    int fds[CONNS], failed = 0;
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    alarm(600); /* a hang only: valgrind on a loaded machine takes minutes */
    pid_t srv = server_start(&a);
    for (int i = 0; i < CONNS && !failed; i++)
        failed |= (fds[i] = connect_warm(&a, 2L * (i + 1))) < 0;
    if (!failed)
        failed |= traffic(fds, 0) < 0 || settles("poll", srv, wait_poll, fds) < 0;
    if (!failed)
        failed |= traffic(fds, 1) < 0 || settles("blocking recv", srv, wait_recv, fds) < 0;
    if (!failed)
        failed |= traffic(fds, 2) < 0 || settles("sleep", srv, wait_sleep, fds) < 0;
    if (!failed) {
        failed |= traffic(fds, 3) < 0;
        if (!failed) {
            stop_server(srv);
            failed |= settles("server stopped, blocking recv", srv, wait_recv, fds) < 0;
        }
    }
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    return failed;
}
