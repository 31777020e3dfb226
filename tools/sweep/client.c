/* vsocket-sweep client: one measurement per message size. */
#include "sweep.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_PINGPONG_ITERS 10000
#define UDP_WAIT_MS 1000 /* an echo later than this counts as lost */

/* Every measurement is bounded by an alarm: a peer that stops answering must
 * not hang a benchmark script. (SO_RCVTIMEO is avoided: rsocket lacks it.) */
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "vsocket-sweep: time-out: the server stopped answering\n";
    if (write(2, msg, sizeof(msg) - 1) < 0) {
        /* nothing more to do */
    }
    _exit(EXIT_CONNECT);
}

static void arm_alarm(double seconds)
{
    alarm((unsigned)(seconds * 2) + 10);
}

static int connect_to(const struct client_opts *o, int socktype)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(o->host, o->port, socktype, false, &ss, &len) < 0)
        return -1;
    int fd = socket(ss.ss_family, socktype, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0) {
        fprintf(stderr, "vsocket-sweep: cannot connect to %s port %u: %s\n", o->host, o->port,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Open a TCP connection and tell the server which test and size follow. */
static int open_test(const struct client_opts *o, enum test t, size_t size, uint64_t warm)
{
    int fd = connect_to(o, SOCK_STREAM);
    if (fd < 0)
        return -1;
    set_nodelay(fd);
    uint8_t req[8 * REQ_WORDS], ack[8];
    put_u64(req, REQ_MAGIC);
    put_u64(req + 8, (uint64_t)t | warm << 8);
    put_u64(req + 16, size);
    if (write_full(fd, req, sizeof(req)) < 0 || read_full(fd, ack, sizeof(ack)) != 1 ||
        get_u64(ack) != REQ_MAGIC) {
        fprintf(stderr, "vsocket-sweep: the server refused the %s test of size %zu\n",
                t == TEST_PINGPONG ? "pingpong" : "stream", size);
        close(fd);
        return -1;
    }
    return fd;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void print_latency(const struct client_opts *o, size_t size, uint64_t *rtt, uint64_t n,
                          uint64_t lost)
{
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += (double)rtt[i];
    qsort(rtt, n, sizeof(*rtt), cmp_u64);
    double avg = n ? sum / (double)n / 1e3 : 0;
    double p50 = n ? (double)rtt[n / 2] / 1e3 : 0;
    double p99 = n ? (double)rtt[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e3 : 0;
    if (o->json)
        printf("{\"test\":\"pingpong\",\"proto\":\"%s\",\"size\":%zu,\"iters\":%llu,"
               "\"avg_us\":%.2f,\"p50_us\":%.2f,\"p99_us\":%.2f%s",
               o->udp ? "udp" : "tcp", size, (unsigned long long)n, avg, p50, p99,
               o->udp ? "" : "}\n");
    else
        printf("pingpong size=%zu iters=%llu avg_us=%.2f p50_us=%.2f p99_us=%.2f", size,
               (unsigned long long)n, avg, p50, p99);
    if (o->udp)
        printf(o->json ? ",\"lost\":%llu}\n" : " lost=%llu\n", (unsigned long long)lost);
    else if (!o->json)
        printf("\n");
    fflush(stdout);
}

/* Run warm-up then measured round trips until `iters` or `seconds`, whichever first. */
static int tcp_pingpong(const struct client_opts *o, size_t size, char *buf, uint64_t *rtt,
                        uint64_t iters)
{
    int fd = open_test(o, TEST_PINGPONG, size, 0);
    if (fd < 0)
        return EXIT_CONNECT;
    uint64_t n = 0, stop = 0;
    for (uint64_t i = 0; i < o->warmup + iters; i++) {
        uint64_t t0 = now_ns();
        if (write_full(fd, buf, size) < 0 || read_full(fd, buf, size) != 1) {
            fprintf(stderr, "vsocket-sweep: connection lost during pingpong size %zu\n", size);
            close(fd);
            return EXIT_CONNECT;
        }
        uint64_t t1 = now_ns();
        if (i == o->warmup)
            stop = t1 + (uint64_t)(o->seconds * 1e9);
        if (i >= o->warmup)
            rtt[n++] = t1 - t0;
        if (stop && t1 >= stop)
            break;
    }
    close(fd);
    print_latency(o, size, rtt, n, 0);
    return EXIT_OK;
}

/* Sequence number in the first bytes of each datagram, so a late echo of an
 * earlier datagram is not mistaken for the current one. */
static void stamp(char *buf, size_t size, uint64_t seq)
{
    uint8_t s[8];
    put_u64(s, seq);
    memcpy(buf, s, size < 8 ? size : 8);
}

static bool wait_echo(int fd, char *buf, size_t size, uint64_t seq)
{
    char want[8];
    stamp(want, 8, seq);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, UDP_WAIT_MS) <= 0)
            return false;
        ssize_t k = recv(fd, buf, size, 0);
        if (k == (ssize_t)size && !memcmp(buf, want, size < 8 ? size : 8))
            return true;
        if (k < 0 && errno != EINTR) /* incl. ECONNREFUSED: nobody listens */
            return false;
    }
}

static int udp_pingpong(const struct client_opts *o, size_t size, char *buf, uint64_t *rtt,
                        uint64_t iters)
{
    int fd = connect_to(o, SOCK_DGRAM);
    if (fd < 0)
        return EXIT_CONNECT;
    uint64_t n = 0, lost = 0, stop = 0, answered = 0, fails_in_row = 0;
    for (uint64_t i = 0; i < o->warmup + iters; i++) {
        stamp(buf, size, i);
        uint64_t t0 = now_ns();
        bool ok = send(fd, buf, size, 0) == (ssize_t)size && wait_echo(fd, buf, size, i);
        uint64_t t1 = now_ns();
        answered += ok;
        fails_in_row = ok ? 0 : fails_in_row + 1;
        if (i == o->warmup)
            stop = t1 + (uint64_t)(o->seconds * 1e9);
        if (i >= o->warmup) {
            if (ok)
                rtt[n++] = t1 - t0;
            else
                lost++;
        }
        if (stop && t1 >= stop)
            break;
        /* Three losses before any echo at all: no server, not a lossy path. */
        if (fails_in_row >= 3 && answered == 0) {
            fprintf(stderr, "vsocket-sweep: no UDP echo from %s port %u\n", o->host, o->port);
            close(fd);
            return EXIT_CONNECT;
        }
    }
    close(fd);
    print_latency(o, size, rtt, n, lost);
    return EXIT_OK;
}

static int tcp_stream(const struct client_opts *o, size_t size, char *buf)
{
    int fd = open_test(o, TEST_STREAM, size, o->stream_warmup);
    if (fd < 0)
        return EXIT_CONNECT;
    for (uint64_t i = 0; i < o->stream_warmup; i++) {
        uint8_t w[8] = {0};
        if (write_full(fd, w, sizeof(w)) < 0 || read_full(fd, w, sizeof(w)) != 1) {
            fprintf(stderr, "vsocket-sweep: connection lost during the stream warm-up\n");
            close(fd);
            return EXIT_CONNECT;
        }
    }
    uint64_t sent = 0, writes = 0, stop = now_ns() + (uint64_t)(o->seconds * 1e9);
    for (;;) {
        if (o->iters ? writes >= o->iters : now_ns() >= stop)
            break;
        if (write_full(fd, buf, size) < 0) {
            fprintf(stderr, "vsocket-sweep: connection lost during stream size %zu\n", size);
            close(fd);
            return EXIT_CONNECT;
        }
        sent += size;
        writes++;
    }
    uint8_t reply[8 * STREAM_REPLY_WORDS];
    if (shutdown(fd, SHUT_WR) < 0 || read_full(fd, reply, sizeof(reply)) != 1) {
        fprintf(stderr, "vsocket-sweep: no byte count from the server (size %zu)\n", size);
        close(fd);
        return EXIT_CONNECT;
    }
    close(fd);
    uint64_t got = get_u64(reply), ns = get_u64(reply + 8);
    if (got != sent)
        fprintf(stderr, "vsocket-sweep: warning: sent %llu bytes, server counted %llu\n",
                (unsigned long long)sent, (unsigned long long)got);
    double secs = (double)ns / 1e9, gbps = ns ? (double)got * 8 / (double)ns : 0;
    if (o->json)
        printf("{\"test\":\"stream\",\"proto\":\"tcp\",\"size\":%zu,\"seconds\":%.3f,"
               "\"bytes\":%llu,\"gbps\":%.3f}\n",
               size, secs, (unsigned long long)got, gbps);
    else
        printf("stream size=%zu seconds=%.3f bytes=%llu gbps=%.3f\n", size, secs,
               (unsigned long long)got, gbps);
    fflush(stdout);
    return EXIT_OK;
}

static int run_size(const struct client_opts *o, size_t size, char *buf, uint64_t *rtt,
                    uint64_t iters)
{
    arm_alarm(o->seconds);
    if (o->test == TEST_STREAM)
        return tcp_stream(o, size, buf);
    if (o->udp)
        return udp_pingpong(o, size, buf, rtt, iters);
    return tcp_pingpong(o, size, buf, rtt, iters);
}

int client_main(const struct client_opts *o)
{
    signal(SIGALRM, on_alarm);
    size_t maxsize = 8;
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] > maxsize)
            maxsize = o->sizes[i];
    uint64_t iters = o->iters ? o->iters : DEFAULT_PINGPONG_ITERS;
    char *buf = calloc(1, maxsize);
    uint64_t *rtt = calloc(o->test == TEST_PINGPONG ? iters : 1, sizeof(*rtt));
    if (!buf || !rtt) {
        fprintf(stderr, "vsocket-sweep: out of memory\n");
        return EXIT_USAGE;
    }
    if (o->json)
        printf("{\"tool\":\"vsocket-sweep\",\"test\":\"%s\",\"proto\":\"%s\",\"host\":\"%s\","
               "\"port\":%u}\n",
               o->test == TEST_PINGPONG ? "pingpong" : "stream", o->udp ? "udp" : "tcp", o->host,
               o->port);
    else
        printf("# vsocket-sweep test=%s proto=%s host=%s port=%u\n",
               o->test == TEST_PINGPONG ? "pingpong" : "stream", o->udp ? "udp" : "tcp", o->host,
               o->port);
    fflush(stdout);
    int rc = EXIT_OK;
    for (int i = 0; i < o->nsizes && rc == EXIT_OK; i++)
        rc = run_size(o, o->sizes[i], buf, rtt, iters);
    alarm(0);
    free(buf);
    free(rtt);
    return rc;
}
