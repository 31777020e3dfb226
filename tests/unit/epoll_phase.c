/* epoll_phase.c - run under `vsocket run` (ctest epoll_phase_kernel, _shm).
 *
 * Issue 19: gRPC's poller thread sleeps in epoll_wait while its other
 * threads read and write, and so move the connection from the kernel to
 * shm. The sleeping wait must hear of data that arrives after the move,
 * though its kernel registrations were made for the old phase (no side
 * channel yet). Here a poller thread only waits (edge-triggered) and hands
 * each wake-up to the main thread, which alone reads, writes and so moves
 * the connection: round after round it asks the peer (a child process, under
 * vsocket too) for 64 KiB and waits for the poller to say they are there;
 * after the first round, the poller asleep, it moves the connection with
 * calls of its own. 8 connections, one after the other (the poller's record
 * is hot at the move most of the time, not always). A round not seen within
 * 20 s fails the test: a lost wake-up, not a slow one. Exit 0 if all rounds
 * came through, on the rings under shm. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ring_use.h"

#define CONNS 8
#define ROUNDS 20 /* per connection */
#define CHUNK (64 << 10)

static int ep, conn;
static sem_t woken;

/* The peer: for each 'x' it reads, it sends CHUNK bytes. */
static void peer(int l)
{
    static char buf[CHUNK];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char b;
    for (int c; (c = accept(l, NULL, NULL)) >= 0; close(c))
        while (recv(c, &b, 1, 0) == 1)
            for (size_t off = 0; b == 'x' && off < sizeof(buf);) {
                ssize_t n = send(c, buf + off, sizeof(buf) - off, MSG_NOSIGNAL);
                if (n <= 0)
                    _exit(1);
                off += (size_t)n;
            }
    _exit(0);
}

/* Waits only: every wake-up goes to the main thread, which reads. */
static void *poller(void *arg)
{
    (void)arg;
    for (;;) {
        struct epoll_event ev;
        int n = epoll_wait(ep, &ev, 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != 1 || ev.data.ptr != &conn) {
            fprintf(stderr, "epoll_phase: epoll_wait %d, data %p\n", n, ev.data.ptr);
            exit(1);
        }
        /* Straight back to sleep, its record hot: as gRPC's poller does,
         * while its other threads read. */
        sem_post(&woken);
    }
    return NULL;
}

/* Reads what is there (edge-triggered: up to EAGAIN). */
static long drain(void);

/* The poller went to sleep right after a wake-up (its record hot) while the
 * connection was young. The move to shm happens in this thread's calls
 * alone (no reply to them from the peer), until the rings are there. */
static int move_alone(void)
{
    for (int i = 0; i < 30; i++) {
        usleep(10000);
        if (send(conn, ".", 1, MSG_NOSIGNAL) != 1 || drain() != 0) {
            fprintf(stderr, "epoll_phase: send: %s\n", strerror(errno));
            return -1;
        }
    }
    return 0;
}

static long drain(void)
{
    static char buf[CHUNK];
    long got = 0;
    for (;;) {
        ssize_t n = recv(conn, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            got += n;
            continue;
        }
        if (n < 0 && errno == EAGAIN)
            return got;
        fprintf(stderr, "epoll_phase: recv: %s\n", n ? strerror(errno) : "end of stream");
        exit(1);
    }
}

/* Connection K: a first round young, then the move, then the rest. */
static int one_conn(const struct sockaddr_in *a, int k, long *got)
{
    conn = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(conn, (const struct sockaddr *)a, sizeof(*a)) < 0) {
        perror("epoll_phase: connect");
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = &conn};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, conn, &ev) < 0) {
        perror("epoll_phase: epoll_ctl");
        return -1;
    }
    long want = *got;
    for (int round = 0; round < ROUNDS; round++) {
        want += CHUNK;
        if (round == 1 && move_alone() < 0)
            return -1;
        if (send(conn, "x", 1, MSG_NOSIGNAL) != 1) {
            perror("epoll_phase: send");
            return -1;
        }
        while (*got < want) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 20;
            if (sem_timedwait(&woken, &until) < 0) {
                fprintf(stderr,
                        "epoll_phase: connection %d, round %d: %ld of %ld bytes read, and "
                        "the poller heard of no more for 20 s\n",
                        k, round, *got, want);
                return -1;
            }
            *got += drain();
        }
    }
    return 0;
}

int main(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0) {
        perror("epoll_phase: listener");
        return 2;
    }
    pid_t child = fork();
    if (child == 0)
        peer(l);
    close(l);
    sem_init(&woken, 0, 0);
    ep = epoll_create1(EPOLL_CLOEXEC);
    pthread_t t;
    pthread_create(&t, NULL, poller, NULL);
    long got = 0;
    int on_rings = 0;
    for (int k = 0; k < CONNS; k++) {
        if (one_conn(&a, k, &got) < 0)
            return 1;
        struct ring_use u;
        on_rings += ring_use_of(getpid(), &u) == 0 && u.rings > 0;
        epoll_ctl(ep, EPOLL_CTL_DEL, conn, NULL);
        close(conn);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    printf("epoll_phase: %d connections of %d rounds, %ld bytes, %d on the rings\n", CONNS, ROUNDS,
           got, on_rings);
    if (shm_expected() && on_rings < CONNS) {
        fprintf(stderr, "epoll_phase: connections not moved to the rings\n");
        return 1;
    }
    return 0;
}
