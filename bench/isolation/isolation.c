/* bench/isolation/isolation.c - does a bulk flow delay small messages on
 * another connection of the same processes? (issue 24, goal 4)
 *
 * Plain sockets (no libvsocket calls): run both ends under the preload to
 * carry the connections over vsocket, or without it for kernel TCP.
 *
 *   isolation server --port P [--bind A]
 *       a thread per connection: the first byte a client sends says what
 *       the connection is for: 'p' echoes 64-byte messages back, 'b' reads
 *       and discards everything (a bulk sink).
 *   isolation client --host H --port P [--seconds S] [--size B]
 *       phase "alone": 64-byte ping-pongs on one connection for S seconds
 *       (default 5); phase "bulk": the same while a second connection of
 *       this process, on its own thread, writes B-byte writes (default
 *       4 MiB) as fast as it can. One line per phase:
 *         phase=alone rtts=N p50_us=... p99_us=... avg_us=...
 *         phase=bulk rtts=N p50_us=... p99_us=... avg_us=... bulk_gbps=...
 *       then "p99_ratio=X" (bulk p99 / alone p99).
 *   isolation pingers --host H --port P [--threads N] [--seconds S]
 *       N connections (default 8), each ping-ponging 64-byte messages on a
 *       thread of its own for S seconds after a warm-up that all finish
 *       first (issue 24 goal 3: a thread-per-connection server and client).
 *       One line: "threads=N rtts=TOTAL rtts_per_s=R min_thread=M", M the
 *       fewest round trips one thread made.
 *
 * Exit 0 when both phases ran, 1 on any error. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "toolutil.h"

#define MSG 64
#define MAX_RTTS 2000000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- server */

static void *serve(void *arg)
{
    int fd = (int)(long)arg;
    char kind, buf[1 << 16];
    if (read_full(fd, &kind, 1) == 1) {
        if (kind == 'p')
            while (read_full(fd, buf, MSG) == 1 && write_full(fd, buf, MSG) == 0)
                ;
        else
            while (read(fd, buf, sizeof(buf)) > 0)
                ;
    }
    close(fd);
    return NULL;
}

static int server(const char *bind_addr, uint16_t port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (tool_resolve("isolation", bind_addr, port, AF_UNSPEC, SOCK_STREAM, true, &ss, &len) < 0)
        return 1;
    int l = socket(ss.ss_family, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (l < 0 || bind(l, (struct sockaddr *)&ss, len) < 0 || listen(l, 64) < 0) {
        perror("isolation: listen");
        return 1;
    }
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            perror("isolation: accept");
            return 1;
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(long)c) != 0) {
            close(c);
            continue;
        }
        pthread_detach(t);
    }
}

/* ---------------------------------------------------------------- client */

static int dial(const char *host, uint16_t port, char kind)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (tool_resolve("isolation", host, port, AF_UNSPEC, SOCK_STREAM, false, &ss, &len) < 0)
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM, 0), one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0) {
        perror("isolation: connect");
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (write_full(fd, &kind, 1) < 0)
        return -1;
    return fd;
}

struct bulk {
    int fd;
    size_t size;
    atomic_bool stop;
    unsigned long long bytes;
    double secs;
    int err;
};

static void *bulk_writer(void *arg)
{
    struct bulk *b = arg;
    char *buf = malloc(b->size);
    if (!buf) {
        b->err = 1;
        return NULL;
    }
    memset(buf, 'b', b->size);
    double start = now_s();
    while (!atomic_load(&b->stop)) {
        if (write_full(b->fd, buf, b->size) < 0) {
            b->err = 1;
            break;
        }
        b->bytes += b->size;
    }
    b->secs = now_s() - start;
    free(buf);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Ping-pongs on FD for SECONDS; the round trips in RTT (µs), their count
 * returned, or -1. */
static long pingpong(int fd, double seconds, double *rtt)
{
    char buf[MSG];
    memset(buf, 'p', sizeof(buf));
    long n = 0;
    double end = now_s() + seconds;
    while (n < MAX_RTTS) {
        double t0 = now_s();
        if (t0 >= end)
            break;
        if (write_full(fd, buf, MSG) < 0 || read_full(fd, buf, MSG) != 1)
            return -1;
        rtt[n++] = (now_s() - t0) * 1e6;
    }
    return n;
}

static double report(const char *phase, double *rtt, long n)
{
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += rtt[i];
    qsort(rtt, (size_t)n, sizeof(*rtt), cmp_double);
    double p99 = rtt[(n * 99) / 100];
    printf("phase=%s rtts=%ld p50_us=%.1f p99_us=%.1f avg_us=%.1f", phase, n, rtt[n / 2], p99,
           sum / (double)n);
    return p99;
}

static int client(const char *host, uint16_t port, double seconds, size_t size)
{
    double *rtt = malloc(sizeof(double) * MAX_RTTS);
    int pp = dial(host, port, 'p');
    if (!rtt || pp < 0)
        return 1;
    /* A warm-up, so that vsocket's upgrade is done before anything counts. */
    if (pingpong(pp, seconds / 5 + 0.5, rtt) < 0)
        return 1;
    long n = pingpong(pp, seconds, rtt);
    if (n <= 0)
        return 1;
    double alone = report("alone", rtt, n);
    printf("\n");
    struct bulk b = {.fd = dial(host, port, 'b'), .size = size};
    pthread_t t;
    if (b.fd < 0 || pthread_create(&t, NULL, bulk_writer, &b) != 0)
        return 1;
    /* The bulk connection is up and streaming before the phase counts. */
    if (pingpong(pp, seconds / 5 + 0.5, rtt) < 0)
        return 1;
    n = pingpong(pp, seconds, rtt);
    /* The writer ends after its current write (the server reads on). */
    atomic_store(&b.stop, true);
    pthread_join(t, NULL);
    if (n <= 0 || b.err)
        return 1;
    double bulk = report("bulk", rtt, n);
    printf(" bulk_gbps=%.3f\np99_ratio=%.2f\n", (double)b.bytes * 8 / b.secs / 1e9, bulk / alone);
    close(b.fd);
    close(pp);
    free(rtt);
    return 0;
}

struct pinger {
    int fd;
    double seconds;
    pthread_barrier_t *start;
    double *rtt;
    long rtts;
};

static void *pinger(void *arg)
{
    struct pinger *p = arg;
    /* The warm-up carries each connection's upgrade; the barrier makes the
     * counted phase start with every connection warm. */
    bool ok = pingpong(p->fd, p->seconds / 5 + 0.5, p->rtt) >= 0;
    pthread_barrier_wait(p->start);
    p->rtts = ok ? pingpong(p->fd, p->seconds, p->rtt) : -1;
    return NULL;
}

static int pingers(const char *host, uint16_t port, double seconds, int threads)
{
    struct pinger *p = calloc((size_t)threads, sizeof(*p));
    pthread_t *t = calloc((size_t)threads, sizeof(*t));
    pthread_barrier_t start;
    if (!p || !t || pthread_barrier_init(&start, NULL, (unsigned)threads) != 0)
        return 1;
    for (int i = 0; i < threads; i++) {
        p[i] = (struct pinger){.fd = dial(host, port, 'p'), .seconds = seconds, .start = &start};
        p[i].rtt = malloc(sizeof(double) * MAX_RTTS);
        if (p[i].fd < 0 || !p[i].rtt)
            return 1;
    }
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, pinger, &p[i]) != 0)
            return 1;
    long total = 0, fewest = -1;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        if (p[i].rtts <= 0)
            failed++;
        total += p[i].rtts > 0 ? p[i].rtts : 0;
        if (fewest < 0 || p[i].rtts < fewest)
            fewest = p[i].rtts;
        close(p[i].fd);
        free(p[i].rtt);
    }
    if (failed) {
        fprintf(stderr, "isolation: %d of %d pingers failed\n", failed, threads);
        return 1;
    }
    printf("threads=%d rtts=%ld rtts_per_s=%.0f min_thread=%ld\n", threads, total,
           (double)total / seconds, fewest);
    pthread_barrier_destroy(&start);
    free(p);
    free(t);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: isolation server --port P [--bind A]\n"
                    "       isolation client --host H --port P [--seconds S] [--size B]\n"
                    "       isolation pingers --host H --port P [--threads N] [--seconds S]\n");
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *host = NULL, *bind_addr = NULL;
    long port = 0;
    double seconds = 5;
    size_t size = 4u << 20;
    long threads = 8;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--host"))
            host = argv[i + 1];
        else if (!strcmp(argv[i], "--port"))
            port = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--bind"))
            bind_addr = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--size"))
            size = strtoull(argv[i + 1], NULL, 0);
        else
            usage();
    }
    if (port <= 0 || port > 65535 || seconds <= 0 || size == 0 || threads < 1 || threads > 256)
        usage();
    signal(SIGPIPE, SIG_IGN); /* a peer gone is an error return, reported */
    if (!strcmp(argv[1], "server"))
        return server(bind_addr, (uint16_t)port);
    if (!strcmp(argv[1], "client") && host)
        return client(host, (uint16_t)port, seconds, size);
    if (!strcmp(argv[1], "pingers") && host)
        return pingers(host, (uint16_t)port, seconds, (int)threads);
    usage();
}
