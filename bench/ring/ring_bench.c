/* ring_bench.c - the shared-memory ring against kernel loopback TCP, and
 * the floor this machine allows, in one run.
 *
 *   ring_bench [REPEATS]   (default 5; every figure is printed as min/median/max)
 *
 * Floor: a cache line bounced between two threads on two cores (the best
 * possible round trip through shared memory) and single-core memcpy
 * bandwidth (a ring moves every byte with one copy in and one copy out).
 * Ring: 64 B ping-pong between two processes, spinning without bound, with
 * the default spin budget, and sleeping at once; streaming in 64 KiB chunks
 * through a 1 MiB ring, and through one that grows from there. Kernel: the
 * same over loopback TCP. Both sides of every two-party test are pinned to
 * different CPUs when the machine has two. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memory/copy.h"
#include "memory/ring.h"

#define MSG 64
#define CHUNK (64 << 10)
#define RING_CAP (1u << 20)
#define STREAM_NS 500000000L /* each streaming run lasts this long */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % sysconf(_SC_NPROCESSORS_ONLN), &set);
    sched_setaffinity(0, sizeof(set), &set);
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

/* --- the floor ---------------------------------------------------------- */

static _Alignas(64) _Atomic long line;
#define BOUNCES 500000L

static void *bounce(void *arg)
{
    (void)arg;
    pin(1);
    for (long i = 1; i < 2 * BOUNCES; i += 2) {
        while (atomic_load_explicit(&line, memory_order_acquire) != i)
            ;
        atomic_store_explicit(&line, i + 1, memory_order_release);
    }
    return NULL;
}

/* ns per round trip of one cache line between two cores. */
static double cacheline_rtt(void)
{
    pthread_t t;
    atomic_store(&line, 0);
    pin(0);
    pthread_create(&t, NULL, bounce, NULL);
    double t0 = now_ns();
    for (long i = 0; i < 2 * BOUNCES; i += 2) {
        atomic_store_explicit(&line, i + 1, memory_order_release);
        while (atomic_load_explicit(&line, memory_order_acquire) != i + 2)
            ;
    }
    double dt = now_ns() - t0;
    pthread_join(t, NULL);
    return dt / BOUNCES;
}

static void libc_copy(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}

/* GB/s copying size bytes at a time with COPY, the destination DISTANCE
 * bytes past a page boundary, the source on one. Page-aligned buffers: two
 * malloc'd ones lie 16 bytes apart modulo 4 KiB, and on some CPUs (AMD with
 * FSRM: glibc's rep movsb) that distance cuts a copy to a tenth, which is
 * what vs_copy (src/memory/copy.c) avoids on the rings' data path. */
static double copy_bw(void (*copy)(void *, const void *, size_t), size_t size, size_t distance)
{
    char *a = aligned_alloc(4096, size), *b = aligned_alloc(4096, size + 4096);
    memset(a, 1, size);
    memset(b, 2, size + 4096);
    size_t total = 0;
    double t0 = now_ns(), dt;
    do {
        for (int i = 0; i < 16; i++) {
            copy(b + distance, a, size);
            __asm__ volatile("" : : "r"(b) : "memory");
            total += size;
        }
        dt = now_ns() - t0;
    } while (dt < 2e8);
    free(a);
    free(b);
    return total / dt;
}

/* --- ring --------------------------------------------------------------- */

struct duplex {
    struct vs_ring a_tx, a_rx; /* the parent's ends */
    struct vs_ring b_tx, b_rx; /* the child's ends */
};

/* Two rings, each mapped by both ends; the child keeps its ends after fork.
 * They start at CAP bytes and may grow to hold MOST. */
static void duplex_open(struct duplex *d, uint64_t cap, uint64_t most)
{
    struct vs_ring_size size = vs_ring_size_for(cap, most, 0);
    if (vs_ring_create(&d->a_tx, size, VS_RING_PRODUCER) ||
        vs_ring_attach(&d->b_rx, dup(d->a_tx.fd), VS_RING_CONSUMER) ||
        vs_ring_create(&d->b_tx, size, VS_RING_PRODUCER) ||
        vs_ring_attach(&d->a_rx, dup(d->b_tx.fd), VS_RING_CONSUMER))
        die("ring");
}

static void duplex_close(struct duplex *d)
{
    vs_ring_destroy(&d->a_tx);
    vs_ring_destroy(&d->a_rx);
    vs_ring_destroy(&d->b_tx);
    vs_ring_destroy(&d->b_rx);
}

static void ring_send(struct vs_ring *r, const char *p, size_t n, const struct vs_wait_opts *w)
{
    while (n) {
        struct iovec iov = {(void *)p, n};
        ssize_t k = vs_ring_write(r, &iov, 1, 0);
        if (k == -EAGAIN) {
            vs_ring_wait(r, w);
            continue;
        }
        if (k < 0)
            die("ring write");
        p += k;
        n -= (size_t)k;
    }
}

/* Reads up to n bytes (all of them if all is set); 0 at end of stream. */
static size_t ring_recv(struct vs_ring *r, char *p, size_t n, int all, const struct vs_wait_opts *w)
{
    size_t got = 0;
    while (got < n) {
        struct iovec iov = {p + got, n - got};
        ssize_t k = vs_ring_read(r, &iov, 1, 0);
        if (k == -EAGAIN) {
            vs_ring_wait(r, w);
            continue;
        }
        if (k < 0)
            die("ring read");
        if (k == 0)
            break;
        got += (size_t)k;
        if (!all)
            break;
    }
    return got;
}

/* µs per 64 B round trip between two processes. */
static double ring_pingpong(long spin_ns, long iters)
{
    struct duplex d;
    struct vs_wait_opts w = {.spin_ns = spin_ns, .timeout_ns = -1, .watch_fd = -1};
    char msg[MSG] = {0};
    duplex_open(&d, 4096, 4096);
    pid_t pid = fork();
    if (pid == 0) {
        pin(1);
        for (long i = 0; i < iters; i++) {
            ring_recv(&d.b_rx, msg, MSG, 1, &w);
            ring_send(&d.b_tx, msg, MSG, &w);
        }
        _exit(0);
    }
    pin(0);
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        ring_send(&d.a_tx, msg, MSG, &w);
        ring_recv(&d.a_rx, msg, MSG, 1, &w);
    }
    double dt = now_ns() - t0;
    waitpid(pid, NULL, 0);
    duplex_close(&d);
    return dt / iters / 1e3;
}

/* GB/s streaming 64 KiB chunks from a child to the parent for STREAM_NS,
 * through a ring of RING_CAP bytes that may grow to hold MOST (the writer
 * grows it whenever it finds it full). */
static double ring_stream(uint64_t most)
{
    struct duplex d;
    struct vs_wait_opts w = {.spin_ns = VS_WAIT_SPIN_NS_DEFAULT, .timeout_ns = -1, .watch_fd = -1};
    char *buf = malloc(CHUNK);
    memset(buf, 3, CHUNK);
    duplex_open(&d, RING_CAP, most);
    pid_t pid = fork();
    if (pid == 0) {
        pin(1);
        double end = now_ns() + STREAM_NS;
        while (now_ns() < end)
            ring_send(&d.b_tx, buf, CHUNK, &w);
        vs_ring_close_writer(&d.b_tx, false);
        _exit(0);
    }
    pin(0);
    double t0 = now_ns(), total = 0;
    size_t n;
    while ((n = ring_recv(&d.a_rx, buf, CHUNK, 0, &w)) > 0)
        total += n;
    double dt = now_ns() - t0;
    waitpid(pid, NULL, 0);
    duplex_close(&d);
    free(buf);
    return total / dt;
}

/* --- kernel loopback TCP ------------------------------------------------- */

static void tcp_pair(int *a, int *b)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    if (bind(l, (void *)&sin, sizeof(sin)) || listen(l, 1) || getsockname(l, (void *)&sin, &len))
        die("listen");
    *a = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(*a, (void *)&sin, sizeof(sin)) || (*b = accept(l, NULL, NULL)) < 0)
        die("connect");
    setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    close(l);
}

static size_t tcp_recv(int fd, char *p, size_t n, int all)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, p + got, n - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
        if (!all)
            break;
    }
    return got;
}

static double tcp_pingpong(long iters)
{
    int a, b;
    char msg[MSG] = {0};
    tcp_pair(&a, &b);
    pid_t pid = fork();
    if (pid == 0) {
        pin(1);
        close(a);
        for (long i = 0; i < iters; i++)
            if (tcp_recv(b, msg, MSG, 1) != MSG || send(b, msg, MSG, 0) != MSG)
                _exit(1);
        _exit(0);
    }
    pin(0);
    close(b);
    double t0 = now_ns();
    for (long i = 0; i < iters; i++)
        if (send(a, msg, MSG, 0) != MSG || tcp_recv(a, msg, MSG, 1) != MSG)
            die("tcp ping-pong");
    double dt = now_ns() - t0;
    waitpid(pid, NULL, 0);
    close(a);
    return dt / iters / 1e3;
}

static double tcp_stream(void)
{
    int a, b;
    char *buf = malloc(CHUNK);
    memset(buf, 3, CHUNK);
    tcp_pair(&a, &b);
    pid_t pid = fork();
    if (pid == 0) {
        pin(1);
        close(a);
        double end = now_ns() + STREAM_NS;
        while (now_ns() < end)
            if (send(b, buf, CHUNK, 0) < 0)
                _exit(1);
        _exit(0);
    }
    pin(0);
    close(b);
    double t0 = now_ns(), total = 0;
    size_t n;
    while ((n = tcp_recv(a, buf, CHUNK, 0)) > 0)
        total += n;
    double dt = now_ns() - t0;
    waitpid(pid, NULL, 0);
    close(a);
    free(buf);
    return total / dt;
}

/* --- report -------------------------------------------------------------- */

#define MAX_REPEATS 50
enum {
    CL,
    CPY_BIG,
    CPY_SMALL,
    R_SPIN,
    R_DEFAULT,
    R_SLEEP,
    R_STREAM,
    R_GROW,
    T_PP,
    T_STREAM,
    CPY_ALIASED,
    VS_CPY_ALIASED,
    N_FIG
};
static const char *const names[N_FIG] = {"floor: cache-line round trip, ns",
                                         "floor: memcpy 64 MiB, GB/s",
                                         "floor: memcpy 64 KiB, GB/s",
                                         "ring 64 B ping-pong, spinning, us",
                                         "ring 64 B ping-pong, default spin, us",
                                         "ring 64 B ping-pong, sleeping, us",
                                         "ring stream 64 KiB chunks, GB/s",
                                         "ring stream, growing to 16 MiB, GB/s",
                                         "tcp 64 B ping-pong, us",
                                         "tcp stream 64 KiB chunks, GB/s",
                                         "memcpy 64 KiB, dst 16 B off, GB/s",
                                         "vs_copy 64 KiB, dst 16 B off, GB/s"};
static double fig[N_FIG][MAX_REPEATS];

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(int f, int n)
{
    qsort(fig[f], n, sizeof(double), cmp);
    return fig[f][n / 2];
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 5;
    if (n < 1 || n > MAX_REPEATS)
        n = 5;
    for (int i = 0; i < n; i++) {
        fig[CL][i] = cacheline_rtt();
        fig[CPY_BIG][i] = copy_bw(libc_copy, 64 << 20, 0);
        fig[CPY_SMALL][i] = copy_bw(libc_copy, 64 << 10, 0);
        fig[CPY_ALIASED][i] = copy_bw(libc_copy, 64 << 10, 16);
        fig[VS_CPY_ALIASED][i] = copy_bw(vs_copy, 64 << 10, 16);
        fig[R_SPIN][i] = ring_pingpong(1000000000L, 200000);
        fig[R_DEFAULT][i] = ring_pingpong(VS_WAIT_SPIN_NS_DEFAULT, 100000);
        fig[R_SLEEP][i] = ring_pingpong(0, 20000);
        fig[R_STREAM][i] = ring_stream(RING_CAP);
        fig[R_GROW][i] = ring_stream(16 << 20);
        fig[T_PP][i] = tcp_pingpong(20000);
        fig[T_STREAM][i] = tcp_stream();
        fprintf(stderr, "repeat %d/%d done\n", i + 1, n);
    }
    printf("%-36s %10s %10s %10s   (%d repeats, %ld CPUs)\n", "figure", "min", "median", "max", n,
           sysconf(_SC_NPROCESSORS_ONLN));
    double med[N_FIG];
    for (int f = 0; f < N_FIG; f++) {
        med[f] = median(f, n);
        printf("%-36s %10.3f %10.3f %10.3f\n", names[f], fig[f][0], med[f], fig[f][n - 1]);
    }
    printf("ratios (medians):\n");
    printf("  tcp / ring ping-pong latency, spinning: %.1fx\n", med[T_PP] / med[R_SPIN]);
    printf("  tcp / ring ping-pong latency, default:  %.1fx\n", med[T_PP] / med[R_DEFAULT]);
    printf("  tcp / ring ping-pong latency, sleeping: %.1fx\n", med[T_PP] / med[R_SLEEP]);
    printf("  ring spinning RTT / cache-line RTT:     %.1fx\n", med[R_SPIN] * 1e3 / med[CL]);
    printf("  ring / tcp stream bandwidth:            %.1fx\n", med[R_STREAM] / med[T_STREAM]);
    printf("  ring stream / memcpy 64 KiB:            %.2f\n", med[R_STREAM] / med[CPY_SMALL]);
    printf("  vs_copy / memcpy, dst 16 B off:         %.1fx\n",
           med[VS_CPY_ALIASED] / med[CPY_ALIASED]);
    return 0;
}
