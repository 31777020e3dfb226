/* test_ring.c - the shared-memory byte ring and its waits: data integrity
 * across wrap-around, threads and processes; partial writes, peek, end of
 * stream, EPIPE; timeouts, wake-ups, signals, peer death; growth and both
 * ends' reclaim (the consumer's handshake with the producer, issue 24); and
 * a hostile peer: malformed regions refused at attach, wild cursors refused
 * later. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "memory/copy.h"
#include "memory/ring.h"
#include "ring_pair.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* The shared header's layout, version 3, as a peer sees it. */
#define OFF_MAGIC 0
#define OFF_VERSION 4
#define OFF_CAPACITY 8
#define OFF_DATA 16
#define OFF_WINDOW 24
#define OFF_RCV 32
#define OFF_HEAD 64
#define OFF_WRITING 76 /* uint32: the producer's half of the reclaim handshake */
#define OFF_EPOCHS 80
#define OFF_TAIL 128
#define OFF_RECLAIMING 140 /* uint32: the consumer's half (odd: reclaiming) */
#define OFF_RECLAIMED 144  /* the consumer's reclaims */
#define OFF_TABLE 320      /* VS_RING_EPOCHS entries of {seq, start, off, size} */
#define HDR 4096
#define MAGIC 0x67727376u
#define VERSION 3

/* Streams are cut short at this many seconds, whatever their volume. */
#define STREAM_SECONDS 6

static uint64_t stream_bytes(void)
{
    const char *env = getenv("TEST_RING_MB");
    if (env)
        return strtoull(env, NULL, 10) << 20;
    return RUNNING_ON_VALGRIND ? 8u << 20 : 1u << 30;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The stream's content: every byte is a function of its offset, so a lost,
 * duplicated, reordered or corrupt byte shows wherever it lands. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void fill(unsigned char *buf, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len;) {
        uint64_t o = off + i, w = mix(o >> 3);
        size_t s = o & 7, k = 8 - s < len - i ? 8 - s : len - i;
        memcpy(buf + i, (unsigned char *)&w + s, k);
        i += k;
    }
}

static int verify(const unsigned char *buf, uint64_t off, size_t len, unsigned char *scratch)
{
    fill(scratch, off, len);
    return memcmp(buf, scratch, len) == 0;
}

static ssize_t write1(struct vs_ring *r, const void *p, size_t n)
{
    struct iovec iov = {(void *)p, n};
    return vs_ring_write(r, &iov, 1, 0);
}

static ssize_t read1(struct vs_ring *r, void *p, size_t n, int flags)
{
    struct iovec iov = {p, n};
    return vs_ring_read(r, &iov, 1, flags);
}

/* A ring that never grows: one region of CAPACITY bytes. */
static struct vs_ring_size fixed(uint64_t capacity)
{
    return vs_ring_size_for(capacity, capacity, 0);
}

static int pair(struct vs_ring *p, struct vs_ring *c, uint64_t capacity)
{
    return pair_sized(p, c, fixed(capacity));
}

static uint64_t peek64(const struct vs_ring *r, size_t off)
{
    uint64_t v;
    memcpy(&v, (const unsigned char *)r->sh + off, 8);
    return v;
}

static void test_create(void)
{
    struct vs_ring r;
    CHECK_EQ(vs_ring_create(&r, (struct vs_ring_size){4097, 4097, 0}, VS_RING_PRODUCER), -EINVAL);
    CHECK_EQ(vs_ring_create(&r, (struct vs_ring_size){4097, 8192, 0}, VS_RING_PRODUCER), -EINVAL);
    CHECK_EQ(vs_ring_create(&r, (struct vs_ring_size){2048, 2048, 0}, VS_RING_PRODUCER), -EINVAL);
    CHECK_EQ(vs_ring_create(&r, (struct vs_ring_size){128u << 20, 128u << 20, 0}, VS_RING_PRODUCER),
             -EINVAL);
    CHECK_EQ(vs_ring_create(&r, (struct vs_ring_size){8192, 4096, 0}, VS_RING_PRODUCER), -EINVAL);
    CHECK_EQ(vs_ring_create(&r, (struct vs_ring_size){8192, 1ull << 40, 0}, VS_RING_PRODUCER),
             -EINVAL);
    CHECK_EQ(vs_ring_create(&r, (struct vs_ring_size){8192, 8192, 8193}, VS_RING_PRODUCER),
             -EINVAL);
    CHECK_EQ(vs_ring_capacity_for(0), VS_RING_MIN_CAPACITY);
    CHECK_EQ(vs_ring_capacity_for(5000), 8192);
    CHECK_EQ(vs_ring_capacity_for(1ull << 40), VS_RING_MAX_CAPACITY);
    struct vs_ring_size z = vs_ring_size_for(5000, 1ull << 40, 1ull << 41);
    CHECK_EQ(z.window, 8192);
    CHECK_EQ(z.most, VS_RING_MAX_MOST);
    CHECK_EQ(z.rcv, VS_RING_MAX_MOST);
    CHECK_EQ(vs_ring_create(&r, fixed(4096), VS_RING_PRODUCER), 0);
    CHECK_EQ(fcntl(r.fd, F_GET_SEALS), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    CHECK(fcntl(r.fd, F_GETFD) & FD_CLOEXEC);
    CHECK(ftruncate(r.fd, 100) < 0);
    CHECK_EQ(r.capacity, 4096);
    vs_ring_destroy(&r);
    /* A ladder of 4, 8, 16, 32 and 64 KiB: the top region holds 40 KiB. */
    CHECK_EQ(vs_ring_create(&r, vs_ring_size_for(4096, 40 << 10, 10 << 10), VS_RING_PRODUCER), 0);
    CHECK_EQ(r.capacity, 124 << 10);
    CHECK_EQ(r.levels, 5);
    CHECK_EQ(vs_ring_peer_rcv(&r), 10 << 10);
    CHECK_EQ(vs_ring_writable(&r), 64 << 10);
    /* The layout as a peer reads it. */
    CHECK_EQ(peek64(&r, OFF_CAPACITY), 124 << 10);
    CHECK_EQ(peek64(&r, OFF_DATA), HDR);
    CHECK_EQ(peek64(&r, OFF_WINDOW), 4096);
    CHECK_EQ(peek64(&r, OFF_RCV), 10 << 10);
    CHECK_EQ(peek64(&r, OFF_EPOCHS), 1);
    CHECK_EQ(peek64(&r, OFF_TABLE + 24), 4096);
    vs_ring_set_limit(&r, 1);
    CHECK_EQ(vs_ring_writable(&r), 4096);
    vs_ring_set_limit(&r, 1 << 30);
    CHECK_EQ(vs_ring_writable(&r), 64 << 10);
    vs_ring_destroy(&r);
}

/* Random sizes through iovecs of two parts, wrapping the ring thousands of
 * times; what comes out is exactly what went in. */
static void test_wrap_random(void)
{
    struct vs_ring p, c;
    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    unsigned char in[6000], out[6000], scratch[6000];
    uint64_t seed = 42, sent = 0, got = 0;
    int bad = 0, rounds = RUNNING_ON_VALGRIND ? 2000 : 20000;
    for (int i = 0; i < rounds; i++) {
        size_t n = rng_next(&seed) % sizeof(in), cut = n ? rng_next(&seed) % n : 0;
        fill(in, sent, n);
        struct iovec wv[2] = {{in, cut}, {in + cut, n - cut}};
        ssize_t w = vs_ring_write(&p, wv, 2, 0);
        if (w > 0)
            sent += (uint64_t)w;
        bad += vs_ring_readable(&c) != (ssize_t)(sent - got);
        bad += vs_ring_writable(&p) != (ssize_t)(4096 - (sent - got));
        size_t m = rng_next(&seed) % sizeof(out), mcut = m ? rng_next(&seed) % m : 0;
        struct iovec rv[2] = {{out, mcut}, {out + mcut, m - mcut}};
        ssize_t r = vs_ring_read(&c, rv, 2, 0);
        if (r > 0) {
            bad += !verify(out, got, (size_t)r, scratch);
            got += (uint64_t)r;
        }
    }
    CHECK_EQ(bad, 0);
    CHECK(sent > 4096 * 1000 / (RUNNING_ON_VALGRIND ? 10 : 1));
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

static void test_partial_and_peek(void)
{
    struct vs_ring p, c;
    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    static unsigned char big[5000], out[5000];
    fill(big, 0, sizeof(big));
    CHECK_EQ(write1(&p, big, sizeof(big)), 4096);
    CHECK_EQ(write1(&p, big, 1), -EAGAIN);
    CHECK_EQ(vs_ring_writable(&p), 0);
    CHECK_EQ(vs_ring_readable(&c), 4096);
    CHECK_EQ(read1(&c, out, 100, 0), 100);
    CHECK_EQ(write1(&p, big + 4096, 200), 100);
    /* Peek leaves the bytes; a later read returns the same ones. */
    CHECK_EQ(read1(&c, out, 10, VS_RING_PEEK), 10);
    CHECK(memcmp(out, big + 100, 10) == 0);
    CHECK_EQ(vs_ring_readable(&c), 4096);
    CHECK_EQ(read1(&c, out, sizeof(out), VS_RING_PEEK), 4096);
    CHECK(memcmp(out, big + 100, 4096) == 0);
    CHECK_EQ(read1(&c, out, sizeof(out), 0), 4096);
    CHECK(memcmp(out, big + 100, 4096) == 0);
    CHECK_EQ(read1(&c, out, 1, 0), -EAGAIN);
    CHECK_EQ(read1(&c, out, 1, VS_RING_PEEK), -EAGAIN);
    CHECK_EQ(write1(&p, big, 0), 0);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

static void test_eof_and_epipe(void)
{
    struct vs_ring p, c;
    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    unsigned char buf[4096] = {1, 2, 3};
    struct vs_wait_opts now = {.timeout_ns = 0, .watch_fd = -1};
    CHECK_EQ(write1(&p, buf, 3000), 3000);
    vs_ring_close_writer(&p, false);
    CHECK_EQ(write1(&p, buf, 1), -EPIPE);
    CHECK(vs_ring_peer_closed(&c));
    CHECK_EQ(vs_ring_wait(&c, &now), 0);
    /* Every byte before the end of stream, then 0, again and again. */
    CHECK_EQ(read1(&c, buf, 2000, 0), 2000);
    CHECK_EQ(read1(&c, buf, 2000, 0), 1000);
    CHECK_EQ(read1(&c, buf, 2000, 0), 0);
    CHECK_EQ(read1(&c, buf, 2000, VS_RING_PEEK), 0);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);

    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    CHECK_EQ(write1(&p, buf, 4096), 4096);
    CHECK_EQ(vs_ring_wait(&p, &now), -ETIMEDOUT);
    vs_ring_close_reader(&c);
    CHECK(vs_ring_peer_closed(&p));
    CHECK_EQ(vs_ring_wait(&p, &now), 0);
    CHECK_EQ(write1(&p, buf, 1), -EPIPE);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* --- streaming ------------------------------------------------------ */

struct stream {
    struct vs_ring *ring;
    struct vs_wait_opts wait;
    uint64_t limit, bytes;
    size_t max_chunk;
    uint64_t seed;
    int errors;
    int stall_every; /* consumer: sleep 1 ms after every this many reads (0: never) */
};

static int wait_or_fail(struct stream *s)
{
    int rc = vs_ring_wait(s->ring, &s->wait);
    if (rc != 0 && rc != -ETIMEDOUT) {
        fprintf(stderr, "wait: %d\n", rc);
        s->errors++;
        return -1;
    }
    return 0;
}

static void *produce(void *arg)
{
    struct stream *s = arg;
    unsigned char *buf = malloc(s->max_chunk);
    double end = now_s() + STREAM_SECONDS;
    while (s->bytes < s->limit && now_s() < end) {
        size_t n = 1 + rng_next(&s->seed) % s->max_chunk;
        fill(buf, s->bytes, n);
        for (size_t done = 0; done < n;) {
            ssize_t w = write1(s->ring, buf + done, n - done);
            if (w == -EAGAIN && wait_or_fail(s) == 0)
                continue;
            if (w < 0) {
                s->errors++;
                goto out;
            }
            done += (size_t)w;
            s->bytes += (uint64_t)w;
        }
    }
out:
    vs_ring_close_writer(s->ring, false);
    free(buf);
    return NULL;
}

static void *consume(void *arg)
{
    struct stream *s = arg;
    unsigned char *buf = malloc(s->max_chunk), *scratch = malloc(s->max_chunk);
    for (;;) {
        size_t n = 1 + rng_next(&s->seed) % s->max_chunk;
        ssize_t r = read1(s->ring, buf, n, 0);
        if (r == -EAGAIN && wait_or_fail(s) == 0)
            continue;
        if (r <= 0) {
            s->errors += r < 0;
            break;
        }
        if (!verify(buf, s->bytes, (size_t)r, scratch)) {
            fprintf(stderr, "consume: wrong bytes in [%llu, %llu)\n", (unsigned long long)s->bytes,
                    (unsigned long long)(s->bytes + (uint64_t)r));
            s->errors++;
            break;
        }
        s->bytes += (uint64_t)r;
        if (s->stall_every && rng_next(&s->seed) % (uint64_t)s->stall_every == 0)
            nanosleep(&(struct timespec){0, 1000000L}, NULL);
    }
    free(buf);
    free(scratch);
    return NULL;
}

static void stream_threads(struct vs_ring_size size, uint64_t limit, long spin_ns, int stall,
                           const char *what)
{
    struct vs_ring p, c;
    if (pair_sized(&p, &c, size) != 0) {
        CHECK(0);
        return;
    }
    struct vs_wait_opts w = {.spin_ns = spin_ns, .timeout_ns = 1000000000L, .watch_fd = -1};
    struct stream tx = {&p, w, limit, 0, 128 << 10, 1, 0, 0};
    struct stream rx = {&c, w, 0, 0, 128 << 10, 2, 0, stall};
    double t0 = now_s();
    pthread_t a, b;
    pthread_create(&a, NULL, produce, &tx);
    pthread_create(&b, NULL, consume, &rx);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    double dt = now_s() - t0;
    printf("threads %s: %llu MiB in %.2f s (%.0f MiB/s), %llu epochs, %d errors\n", what,
           (unsigned long long)(rx.bytes >> 20), dt, (rx.bytes >> 20) / dt,
           (unsigned long long)peek64(&p, OFF_EPOCHS), tx.errors + rx.errors);
    if (stall)
        /* It grew (the reader stalls): how often depends on the scheduling, and
         * a loaded machine under ASan saw 7, so no more than that is asked. */
        CHECK(peek64(&p, OFF_EPOCHS) > 2u);
    CHECK_EQ(tx.errors, 0);
    CHECK_EQ(rx.errors, 0);
    CHECK_EQ(rx.bytes, tx.bytes);
    CHECK(rx.bytes >= (limit < (64u << 20) ? limit : 64u << 20));
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

static void test_stream_threads(void)
{
    stream_threads(fixed(256 << 10), stream_bytes(), VS_WAIT_SPIN_NS_DEFAULT, 0, "256 KiB ring");
    /* A small ring and no spinning: nearly every wait sleeps. */
    stream_threads(fixed(4096), stream_bytes() / 64, 0, 0, "small ring, sleeping");
    /* A reader that stalls now and then: the ring grows while it sleeps and
     * goes back to its window when it catches up, under the writer's feet. */
    stream_threads(vs_ring_size_for(4096, 2 << 20, 0), stream_bytes() / 4, VS_WAIT_SPIN_NS_DEFAULT,
                   20, "growing ring, stalling reader");
}

static int send_fd(int sock, int fd)
{
    char c = 0;
    struct iovec iov = {&c, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u = {0}; /* the padding goes to the kernel too */
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof(int));
    return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
    char c;
    struct iovec iov = {&c, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    if (recvmsg(sock, &m, 0) != 1)
        return -1;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (h && h->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(h), sizeof(int));
    return fd;
}

/* The child attaches from a descriptor received over SCM_RIGHTS, as a peer
 * will, and reports what it read. */
static void child_consumer(int sock)
{
    struct vs_ring c;
    struct stream rx = {&c, {VS_WAIT_SPIN_NS_DEFAULT, 1000000000L, -1, 0}, 0, 0, 128 << 10, 3, 0,
                        100};
    int fd = recv_fd(sock);
    if (fd < 0 || vs_ring_attach(&c, fd, VS_RING_CONSUMER) != 0)
        _exit(2);
    consume(&rx);
    uint64_t report[2] = {rx.bytes, (uint64_t)rx.errors};
    _exit(write(sock, report, sizeof(report)) == sizeof(report) ? 0 : 3);
}

static void test_stream_processes(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fflush(stdout); /* or the child's copy of the buffer may print too */
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        child_consumer(sv[1]);
    }
    close(sv[1]);
    struct vs_ring p;
    CHECK_EQ(vs_ring_create(&p, vs_ring_size_for(64 << 10, 4 << 20, 0), VS_RING_PRODUCER), 0);
    CHECK_EQ(send_fd(sv[0], p.fd), 0);
    vs_ring_close_fd(&p);
    struct stream tx = {
        &p, {VS_WAIT_SPIN_NS_DEFAULT, 1000000000L, -1, 0}, stream_bytes(), 0, 128 << 10, 4, 0, 0};
    double t0 = now_s();
    produce(&tx);
    uint64_t report[2] = {0, 1};
    CHECK_EQ(read(sv[0], report, sizeof(report)), sizeof(report));
    int status = -1;
    waitpid(pid, &status, 0);
    double dt = now_s() - t0;
    printf("processes, growing ring, stalling reader: %llu MiB in %.2f s (%.0f MiB/s), %llu "
           "epochs\n",
           (unsigned long long)(report[0] >> 20), dt, (report[0] >> 20) / dt,
           (unsigned long long)peek64(&p, OFF_EPOCHS));
    /* It grew (the reader stalls): how often depends on the scheduling, and
     * a loaded machine under ASan saw 7, so no more than that is asked. */
    CHECK(peek64(&p, OFF_EPOCHS) > 2u);
    CHECK_EQ(status, 0);
    CHECK_EQ(tx.errors, 0);
    CHECK_EQ(report[1], 0);
    CHECK_EQ(report[0], tx.bytes);
    close(sv[0]);
    vs_ring_destroy(&p);
}

/* --- waits ---------------------------------------------------------- */

/* A bound on a wait that must end: only a hang (a wake-up that never
 * comes, so the sleep runs to the end of its slice) crosses it, however
 * slow the machine (valgrind, a loaded host). */
#define HANG_S 20.0

static void test_wait_timeout(void)
{
    struct vs_ring p, c;
    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    struct vs_wait_opts w = {
        .spin_ns = VS_WAIT_SPIN_NS_DEFAULT, .timeout_ns = 100000000L, .watch_fd = -1};
    double t0 = now_s();
    CHECK_EQ(vs_ring_wait(&c, &w), -ETIMEDOUT);
    double dt = now_s() - t0;
    CHECK(dt >= 0.095 && dt < HANG_S); /* not early: a timeout's own bound */
    static unsigned char buf[4096];
    CHECK_EQ(write1(&p, buf, sizeof(buf)), 4096);
    w.timeout_ns = 50000000L;
    t0 = now_s();
    CHECK_EQ(vs_ring_wait(&p, &w), -ETIMEDOUT);
    dt = now_s() - t0;
    CHECK(dt >= 0.045 && dt < HANG_S);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

struct later {
    struct vs_ring *ring;
    pthread_t target;
    int what; /* 0: write a byte, 1: signal the target, 2: read a byte */
};

static void *act_later(void *arg)
{
    struct later *l = arg;
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
    unsigned char b = 7;
    if (l->what == 0)
        write1(l->ring, &b, 1);
    else if (l->what == 1)
        pthread_kill(l->target, SIGUSR1);
    else
        read1(l->ring, &b, 1, 0);
    return NULL;
}

static void on_usr1(int sig)
{
    (void)sig;
}

/* A sleeper is woken by the other side's publication (no spin: it must be
 * the futex), and by a signal, which it reports even under SA_RESTART. The
 * sleep is one slice of three times HANG_S: a wake-up that never came
 * would show as a wait of that slice, not as a slow machine. */
static void test_wait_wakeups(void)
{
    struct vs_ring p, c;
    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    struct vs_wait_opts w = {.spin_ns = 0,
                             .timeout_ns = (long)(6 * HANG_S * 1e9),
                             .watch_fd = -1,
                             .slice_ns = (long)(3 * HANG_S * 1e9)};
    pthread_t t;
    struct later l = {&p, pthread_self(), 0};
    double t0 = now_s();
    pthread_create(&t, NULL, act_later, &l);
    CHECK_EQ(vs_ring_wait(&c, &w), 0);
    CHECK(now_s() - t0 < HANG_S);
    CHECK_EQ(vs_ring_readable(&c), 1);
    pthread_join(t, NULL);

    static unsigned char buf[4096];
    CHECK_EQ(write1(&p, buf, 4095), 4095);
    l = (struct later){&c, pthread_self(), 2};
    t0 = now_s();
    pthread_create(&t, NULL, act_later, &l);
    CHECK_EQ(vs_ring_wait(&p, &w), 0);
    CHECK(now_s() - t0 < HANG_S);
    CHECK_EQ(vs_ring_writable(&p), 1);
    pthread_join(t, NULL);

    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    CHECK_EQ(write1(&p, buf, 1), 1); /* full: the producer will sleep */
    l = (struct later){&p, pthread_self(), 1};
    t0 = now_s();
    pthread_create(&t, NULL, act_later, &l);
    CHECK_EQ(vs_ring_wait(&p, &w), -EINTR);
    CHECK(now_s() - t0 < HANG_S);
    pthread_join(t, NULL);
    sigaction(SIGUSR1, &old, NULL);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* The connection's kernel socket is the peer's liveness: its hang-up ends
 * a wait that the ring alone would never end. */
static void test_wait_watch_fd(void)
{
    struct vs_ring p, c;
    int sv[2];
    if (pair(&p, &c, 4096) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        CHECK(0);
        return;
    }
    /* The watched descriptor is looked at when a slice ends: the result
     * says it was, a timeout would say it was not. */
    struct vs_wait_opts w = {
        .timeout_ns = (long)(HANG_S * 1e9), .watch_fd = sv[0], .slice_ns = 20000000L};
    CHECK_EQ(vs_ring_wait(&c, &(struct vs_wait_opts){.timeout_ns = 50000000L, .watch_fd = sv[0]}),
             -ETIMEDOUT);
    close(sv[1]);
    CHECK_EQ(vs_ring_wait(&c, &w), VS_WAIT_WATCHED);
    close(sv[0]);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* --- a hostile peer ------------------------------------------------- */

struct forged {
    size_t size;
    uint32_t magic, version;
    uint64_t capacity, data_offset, window, head, tail, epochs;
    uint64_t entry0[4]; /* epoch 0: seq, start, off, size */
    int seals;
};

static int forge(const struct forged *f)
{
    int fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    unsigned char hdr[HDR] = {0};
    memcpy(hdr + OFF_MAGIC, &f->magic, 4);
    memcpy(hdr + OFF_VERSION, &f->version, 4);
    memcpy(hdr + OFF_CAPACITY, &f->capacity, 8);
    memcpy(hdr + OFF_DATA, &f->data_offset, 8);
    memcpy(hdr + OFF_WINDOW, &f->window, 8);
    memcpy(hdr + OFF_HEAD, &f->head, 8);
    memcpy(hdr + OFF_TAIL, &f->tail, 8);
    memcpy(hdr + OFF_EPOCHS, &f->epochs, 8);
    memcpy(hdr + OFF_TABLE, f->entry0, sizeof(f->entry0));
    if (ftruncate(fd, (off_t)f->size) != 0 ||
        pwrite(fd, hdr, f->size < HDR ? f->size : HDR, 0) < 0 ||
        (f->seals && fcntl(fd, F_ADD_SEALS, f->seals) != 0)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Attach outcome for a forged region; the descriptor is ours to close on
 * failure only. */
static int attach_forged_as(const struct forged *f, enum vs_ring_role role)
{
    struct vs_ring r;
    int fd = forge(f);
    if (fd < 0)
        return -999;
    int rc = vs_ring_attach(&r, fd, role);
    if (rc == 0)
        vs_ring_destroy(&r);
    else
        close(fd);
    return rc;
}

static int attach_forged(const struct forged *f)
{
    return attach_forged_as(f, VS_RING_CONSUMER);
}

static void test_attach_refusals(void)
{
    const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    const struct forged good = {HDR + 8192, MAGIC, VERSION,         8192, HDR, 8192, 0,
                                0,          1,     {0, 0, 0, 8192}, seals};
    struct forged f = good;
    CHECK_EQ(attach_forged(&f), 0);
    CHECK_EQ(attach_forged_as(&f, VS_RING_PRODUCER), 0);

    f = good, f.size = HDR + 4096; /* truncated: capacity larger than the file */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR / 2; /* not even a header */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR + 16384; /* file larger than the ring it claims */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.magic = 0x12345678;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.version = 1;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR + 8192, f.window = 6000; /* not a power of two */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.window = 2048; /* below the bound */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.window = 16384; /* larger than the span */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR + 6000, f.capacity = 6000; /* not whole pages */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR + 12288, f.capacity = 12288; /* a window and part of the next region */
    CHECK_EQ(attach_forged(&f), 0);
    f = good, f.data_offset = 64;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.seals = 0; /* could shrink under our mapping: SIGBUS */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.seals = F_SEAL_GROW | F_SEAL_SEAL;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.head = 8193; /* more unread than the span */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.tail = 1; /* consumer ahead of the producer */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.epochs = 0;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    /* A producer takes over only a ring nobody wrote epochs into. */
    f = good, f.epochs = 2;
    CHECK_EQ(attach_forged_as(&f, VS_RING_PRODUCER), -EPROTO);
    f = good, f.entry0[3] = 4096;
    CHECK_EQ(attach_forged_as(&f, VS_RING_PRODUCER), -EPROTO);
    f = good, f.entry0[2] = 4096;
    CHECK_EQ(attach_forged_as(&f, VS_RING_PRODUCER), -EPROTO);
    f = good, f.head = 1ull << 63, f.tail = (1ull << 63) - 8192; /* far along, still valid */
    CHECK_EQ(attach_forged(&f), 0);
    CHECK_EQ(attach_forged_as(&f, VS_RING_PRODUCER), 0);

    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    struct vs_ring r;
    CHECK_EQ(vs_ring_attach(&r, pfd[0], VS_RING_CONSUMER), -EPROTO);
    close(pfd[0]);
    close(pfd[1]);
}

static void scribble(struct vs_ring *r, size_t off, uint64_t v)
{
    memcpy((unsigned char *)r->sh + off, &v, 8);
}

/* The peer moves cursors at will after attach: every value out of bounds
 * is an error, and every value in bounds reads only inside the ring (ASan
 * checks the destination, the mapping's end the source). */
static void test_wild_cursors(void)
{
    struct vs_ring p, c;
    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    /* Larger than the ring: an unchecked cursor would copy past its end. */
    unsigned char *out = malloc(3 * 4096);
    struct vs_wait_opts now = {.timeout_ns = 0, .watch_fd = -1};
    CHECK_EQ(write1(&p, "0123456789", 10), 10);
    const uint64_t bad_heads[] = {10 + 4096 + 1, UINT64_MAX, 1ull << 40, (uint64_t)-4096};
    for (size_t i = 0; i < sizeof(bad_heads) / sizeof(bad_heads[0]); i++) {
        scribble(&p, OFF_HEAD, bad_heads[i]);
        CHECK_EQ(read1(&c, out, 3 * 4096, 0), -EPROTO);
        CHECK_EQ(read1(&c, out, 3 * 4096, VS_RING_PEEK), -EPROTO);
        CHECK_EQ(vs_ring_readable(&c), -EPROTO);
        CHECK_EQ(vs_ring_wait(&c, &now), 0); /* woken, to find the error */
    }
    /* In bounds but beyond what was written: garbage, not a fault. */
    scribble(&p, OFF_HEAD, 4096);
    CHECK_EQ(read1(&c, out, 3 * 4096, 0), 4096);
    scribble(&p, OFF_HEAD, 4096 + 4096);
    CHECK_EQ(read1(&c, out, 3 * 4096, 0), 4096);

    /* The consumer's cursor, seen by the producer. */
    p.pos = 8192;
    scribble(&c, OFF_TAIL, 8193);
    CHECK_EQ(write1(&p, "x", 1), -EPROTO);
    CHECK_EQ(vs_ring_writable(&p), -EPROTO);
    scribble(&c, OFF_TAIL, 8192 - 4097);
    CHECK_EQ(write1(&p, "x", 1), -EPROTO);
    CHECK_EQ(vs_ring_wait(&p, &now), 0);
    scribble(&c, OFF_TAIL, 8192 - 4096);
    CHECK_EQ(write1(&p, "x", 1), -EAGAIN);
    scribble(&c, OFF_TAIL, 8192);
    CHECK_EQ(write1(&p, out, 4096), 4096);
    free(out);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* --- growth and reclaim -------------------------------------------------- */

/* A writer that never sees its reader read fills the whole ladder, up to
 * the limit and not a byte more; every byte comes out in order. */
static void test_grow_fill(void)
{
    struct vs_ring p, c;
    if (pair_sized(&p, &c, vs_ring_size_for(4096, 256 << 10, 0)) != 0) {
        CHECK(0);
        return;
    }
    enum { LIMIT = 256 << 10 };
    unsigned char *in = malloc(LIMIT + 1), *out = malloc(LIMIT + 1), *scratch = malloc(LIMIT);
    fill(in, 0, LIMIT + 1);
    size_t sent = 0;
    ssize_t w;
    int calls = 0;
    /* Each call fills the current region; the next one grows first. */
    while ((w = write1(&p, in + sent, 3000)) > 0 && calls++ < 1000)
        sent += (size_t)w;
    CHECK_EQ(w, -EAGAIN);
    CHECK_EQ(sent, LIMIT);
    CHECK_EQ(vs_ring_writable(&p), 0);
    CHECK_EQ(vs_ring_room(&p), 0);
    CHECK_EQ(vs_ring_readable(&c), LIMIT);
    CHECK_EQ(p.level, 6); /* 4 KiB << 6: the top region */
    CHECK_EQ(peek64(&p, OFF_EPOCHS), 7);
    /* Peek and read across the seven epochs. */
    CHECK_EQ(read1(&c, out, LIMIT + 1, VS_RING_PEEK), LIMIT);
    CHECK(verify(out, 0, LIMIT, scratch));
    CHECK_EQ(read1(&c, out, 5000, 0), 5000);
    CHECK(verify(out, 0, 5000, scratch));
    CHECK_EQ(read1(&c, out, LIMIT, 0), LIMIT - 5000);
    CHECK(verify(out, 5000, LIMIT - 5000, scratch));
    /* Empty: the next write goes back to the window. */
    CHECK_EQ(write1(&p, in, 10), 10);
    CHECK_EQ(p.level, 0);
    CHECK_EQ(read1(&c, out, 100, 0), 10);
    CHECK(memcmp(out, in, 10) == 0);
    /* A lower limit stops growth there; NO_GROW asks first. */
    vs_ring_set_limit(&p, 10000);
    CHECK_EQ(vs_ring_writable(&p), 10000);
    sent = 0;
    struct iovec iov = {in, 4096};
    CHECK_EQ(vs_ring_write(&p, &iov, 1, VS_RING_NO_GROW), 4096);
    CHECK_EQ(vs_ring_write(&p, &iov, 1, VS_RING_NO_GROW), -ENOSPC);
    CHECK_EQ(vs_ring_room(&p), 0);
    CHECK_EQ(vs_ring_write(&p, &iov, 1, 0), 4096);
    CHECK_EQ(vs_ring_write(&p, &iov, 1, 0), 10000 - 8192);
    CHECK_EQ(vs_ring_write(&p, &iov, 1, 0), -EAGAIN);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
    free(in);
    free(out);
    free(scratch);
}

/* Random writes and reads, the reader sometimes idle for a while (the ring
 * grows) and sometimes reading everything (it goes back to the window),
 * through iovecs of two parts: the stream comes out intact, and readable
 * and writable agree with what went in and out. */
static void test_grow_random(void)
{
    struct vs_ring p, c;
    const uint64_t limit = 200 << 10;
    if (pair_sized(&p, &c, vs_ring_size_for(4096, limit, 0)) != 0) {
        CHECK(0);
        return;
    }
    vs_ring_set_limit(&p, limit);
    enum { MAXIO = 70000 };
    unsigned char *in = malloc(MAXIO), *out = malloc(MAXIO), *scratch = malloc(MAXIO);
    uint64_t seed = 7, sent = 0, got = 0, epochs_before = peek64(&p, OFF_EPOCHS);
    int bad = 0, rounds = RUNNING_ON_VALGRIND ? 3000 : 30000, idle = 0;
    for (int i = 0; i < rounds; i++) {
        size_t n = rng_next(&seed) % MAXIO, cut = n ? rng_next(&seed) % n : 0;
        fill(in, sent, n);
        struct iovec wv[2] = {{in, cut}, {in + cut, n - cut}};
        ssize_t w = vs_ring_write(&p, wv, 2, 0);
        bad += w < 0 && w != -EAGAIN;
        if (w > 0)
            sent += (uint64_t)w;
        bad += vs_ring_readable(&c) != (ssize_t)(sent - got);
        bad += vs_ring_writable(&p) != (ssize_t)(limit - (sent - got));
        if (idle > 0) {
            idle--;
            continue;
        }
        if (rng_next(&seed) % 50 == 0)
            idle = (int)(rng_next(&seed) % 20);
        size_t m = rng_next(&seed) % 8 == 0 ? MAXIO : rng_next(&seed) % (MAXIO / 2);
        size_t mcut = m ? rng_next(&seed) % m : 0;
        struct iovec rv[2] = {{out, mcut}, {out + mcut, m - mcut}};
        int peek = rng_next(&seed) % 10 == 0 ? VS_RING_PEEK : 0;
        bool drain = rng_next(&seed) % 8 == 0; /* read all: the ring empties */
        ssize_t r;
        do {
            r = vs_ring_read(&c, rv, 2, peek);
            bad += r < 0 && r != -EAGAIN;
            if (r > 0) {
                bad += !verify(out, got, (size_t)r, scratch);
                got += peek ? 0 : (uint64_t)r;
            }
        } while (drain && !peek && r > 0);
    }
    CHECK_EQ(bad, 0);
    printf("grow random: %llu bytes through %llu epochs\n", (unsigned long long)sent,
           (unsigned long long)(peek64(&p, OFF_EPOCHS) - epochs_before));
    CHECK(peek64(&p, OFF_EPOCHS) - epochs_before > 100);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
    free(in);
    free(out);
    free(scratch);
}

/* Pages of the data area in memory, of the region [FROM, TO). */
static long resident(const struct vs_ring *r, uint64_t from, uint64_t to)
{
    long page = sysconf(_SC_PAGESIZE), n = 0;
    size_t len = (size_t)(to - from);
    unsigned char *vec = malloc(len / (size_t)page + 1);
    if (mincore(r->data + from, len, vec) != 0) {
        free(vec);
        return -1;
    }
    for (size_t i = 0; i < len / (size_t)page; i++)
        n += vec[i] & 1;
    free(vec);
    return n;
}

/* Writes N bytes of the stream at *SENT and reads them back, checked. */
static int through(struct vs_ring *p, struct vs_ring *c, uint64_t *sent, size_t n)
{
    unsigned char *buf = malloc(n), *scratch = malloc(n);
    fill(buf, *sent, n);
    int ok = 1;
    for (size_t done = 0; done < n;) {
        ssize_t w = write1(p, buf + done, n - done);
        ok &= w > 0;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    ssize_t r = read1(c, buf, n, 0);
    ok &= r == (ssize_t)n && verify(buf, *sent, n, scratch);
    *sent += n;
    free(buf);
    free(scratch);
    return ok;
}

/* The pages go back once the ring was idle and empty for IDLE; the regions
 * above the window once it has been back in the window for IDLE, unread
 * bytes in the window staying intact. Nothing goes before that. */
static void test_reclaim(void)
{
    const long idle = 100000000L, t0 = 1000000000L;
    struct vs_ring p, c;
    if (pair_sized(&p, &c, vs_ring_size_for(64 << 10, 4 << 20, 0)) != 0) {
        CHECK(0);
        return;
    }
    uint64_t sent = 0, window = 64 << 10, span = p.capacity;
    long wpages = (long)(window / 4096);
    CHECK_EQ(resident(&p, 0, span), 0);
    CHECK(through(&p, &c, &sent, 2 << 20));
    long all = resident(&p, 0, span);
    CHECK(all >= (2 << 20) / 4096);
    CHECK(p.warm > 0);
    /* Empty, but not yet idle long enough. */
    CHECK(vs_ring_reclaim(&p, t0, idle));
    CHECK(vs_ring_reclaim(&p, t0 + idle - 1, idle));
    CHECK_EQ(resident(&p, 0, span), all);
    CHECK(!vs_ring_reclaim(&p, t0 + idle, idle));
    CHECK_EQ(resident(&p, 0, span), 0);
    CHECK_EQ(resident(&c, 0, span), 0);
    CHECK(!vs_ring_reclaim(&p, t0 + 5 * idle, idle)); /* clean: nothing to do */
    /* The stream goes on where it was, in the window again. */
    CHECK(through(&p, &c, &sent, 1000));
    CHECK_EQ(p.level, 0);
    CHECK_EQ(resident(&p, 0, span), 1);

    /* A burst, then a little traffic that stays unread in the window. */
    CHECK(through(&p, &c, &sent, 1 << 20));
    unsigned char small[3000], out[3000], scratch[3000];
    fill(small, sent, sizeof(small));
    CHECK_EQ(write1(&p, small, sizeof(small)), sizeof(small));
    CHECK_EQ(p.level, 0);
    long t1 = t0 + 10 * idle;
    CHECK(vs_ring_reclaim(&p, t1, idle));
    CHECK(vs_ring_reclaim(&p, t1 + idle, idle));
    CHECK_EQ(resident(&p, window, span), 0);
    CHECK(resident(&p, 0, window) > 0 && resident(&p, 0, window) <= wpages);
    CHECK_EQ(read1(&c, out, sizeof(out), 0), sizeof(out));
    CHECK(verify(out, sent, sizeof(out), scratch));
    sent += sizeof(out);
    /* Writing keeps a ring from being idle: the marks move on. */
    CHECK(through(&p, &c, &sent, 100));
    CHECK(vs_ring_reclaim(&p, t1 + 2 * idle, idle));
    CHECK(through(&p, &c, &sent, 100));
    CHECK(vs_ring_reclaim(&p, t1 + 3 * idle, idle));
    CHECK(resident(&p, 0, window) > 0);
    CHECK(!vs_ring_reclaim(&p, t1 + 4 * idle, idle));
    CHECK_EQ(resident(&p, 0, span), 0);
    /* And it climbs again after all that, intact. */
    CHECK(through(&p, &c, &sent, 3 << 20));
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

static void scribble(struct vs_ring *r, size_t off, uint64_t v);

static void scribble32(struct vs_ring *r, size_t off, uint32_t v)
{
    memcpy((unsigned char *)r->sh + off, &v, 4);
}

static uint32_t peek32(const struct vs_ring *r, size_t off)
{
    uint32_t v;
    memcpy(&v, (const unsigned char *)r->sh + off, 4);
    return v;
}

/* The reclaim tests' idle time and first clock reading (ns). */
#define RECLAIM_IDLE_NS 100000000L
#define RECLAIM_T0_NS 1000000000L

/* A pair whose stream grew the ring to 2 MiB and was read to the end;
 * false (a failed check) when it could not be made. */
static bool grown_pair(struct vs_ring *p, struct vs_ring *c, uint64_t *sent)
{
    *sent = 0;
    bool ok = pair_sized(p, c, vs_ring_size_for(64 << 10, 4 << 20, 0)) == 0;
    if (ok && !through(p, c, sent, 2 << 20)) {
        vs_ring_destroy(c);
        vs_ring_destroy(p);
        ok = false;
    }
    CHECK(ok);
    return ok;
}

/* Issue 24: the consumer gives every data page back once the ring is empty
 * and its head has not moved for IDLE, without the producer calling; not
 * while bytes are unread, not before IDLE, not twice for nothing. The
 * producer then goes on from the window, intact, and learns of it. */
static void test_reclaim_consumed(void)
{
    const long idle = RECLAIM_IDLE_NS, t0 = RECLAIM_T0_NS;
    struct vs_ring p, c;
    uint64_t sent;
    if (!grown_pair(&p, &c, &sent))
        return;
    uint64_t span = c.capacity;
    long all = resident(&c, 0, span);
    CHECK(all >= (2 << 20) / 4096);
    CHECK(p.warm > 0);
    CHECK(!vs_ring_reclaim_consumed(&p, t0, 0)); /* the producer's end: not this */
    /* Unread bytes are wanted however long they wait. */
    unsigned char small[3000], out[3000], scratch[3000];
    fill(small, sent, sizeof(small));
    CHECK_EQ(write1(&p, small, sizeof(small)), sizeof(small));
    CHECK(!vs_ring_reclaim_consumed(&c, t0, idle));
    CHECK(!vs_ring_reclaim_consumed(&c, t0 + 10 * idle, idle));
    CHECK_EQ(resident(&c, 0, span), all);
    CHECK_EQ(read1(&c, out, sizeof(out), 0), sizeof(out));
    CHECK(verify(out, sent, sizeof(out), scratch));
    sent += sizeof(out);
    /* Empty: IDLE after the head last moved, and not before. */
    long t1 = t0 + 20 * idle;
    CHECK(through(&p, &c, &sent, 1000));
    CHECK(!vs_ring_reclaim_consumed(&c, t1, idle));
    CHECK(!vs_ring_reclaim_consumed(&c, t1 + idle - 1, idle));
    CHECK_EQ(resident(&c, 0, span), all);
    CHECK(vs_ring_reclaim_consumed(&c, t1 + idle, idle));
    CHECK_EQ(resident(&c, 0, span), 0);
    CHECK_EQ(resident(&p, 0, span), 0);
    CHECK_EQ(peek64(&c, OFF_RECLAIMED), 1);
    CHECK_EQ(peek32(&c, OFF_RECLAIMING) & 1, 0);
    CHECK(!vs_ring_reclaim_consumed(&c, t1 + 5 * idle, idle)); /* clean: nothing to do */
    /* The producer knows once it looks: its own reclaim has nothing left. */
    CHECK(!vs_ring_reclaim(&p, t1 + 5 * idle, idle));
    CHECK_EQ(p.warm, 0);
    /* It goes on in the window, every byte intact, and climbs again. */
    CHECK(through(&p, &c, &sent, 1000));
    CHECK_EQ(p.level, 0);
    CHECK(resident(&c, 0, span) >= 1 && resident(&c, 0, span) <= 2); /* 1000 bytes: 1 or 2 pages */
    CHECK(through(&p, &c, &sent, 3 << 20));
    CHECK(p.level > 0);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* The handshake's orderings, with the other side's word set by hand (as
 * its process would have it): a write in flight (or a writer that died in
 * one) keeps the pages and never makes the consumer wait; a reclaim in
 * flight makes a write say -EAGAIN and the ring unwritable, publishing
 * nothing; each side's word is back to 0 after its own call. */
static void test_reclaim_handshake(void)
{
    const long idle = RECLAIM_IDLE_NS, t0 = RECLAIM_T0_NS;
    struct vs_ring p, c;
    uint64_t sent;
    if (!grown_pair(&p, &c, &sent))
        return;
    uint64_t span = c.capacity;
    long all = resident(&c, 0, span);
    /* The producer is mid-write, or died in one. Each handshake still
     * moves the space mark: a write it refused gets an edge-triggered
     * EPOLLOUT when it ends, though no byte was read. */
    scribble32(&c, OFF_WRITING, 1);
    CHECK(!vs_ring_reclaim_consumed(&c, t0, idle));
    for (int i = 1; i <= 3; i++) {
        uint64_t mark = vs_ring_space_mark(&p);
        CHECK(vs_ring_reclaim_consumed(&c, t0 + i * idle, idle));
        CHECK(vs_ring_space_mark(&p) != mark);
    }
    CHECK_EQ(resident(&c, 0, span), all);
    CHECK_EQ(peek64(&c, OFF_RECLAIMED), 0);
    CHECK_EQ(peek32(&c, OFF_RECLAIMING) & 1, 0);
    CHECK_EQ(peek32(&c, OFF_WRITING), 1);
    /* The consumer is mid-reclaim (or died in one): no write, no room. */
    scribble32(&c, OFF_WRITING, 0);
    scribble32(&c, OFF_RECLAIMING, 1);
    unsigned char small[3000], out[3000], scratch[3000];
    fill(small, sent, sizeof(small));
    uint64_t head = peek64(&c, OFF_HEAD);
    CHECK_EQ(write1(&p, small, sizeof(small)), -EAGAIN);
    CHECK_EQ(vs_ring_writable(&p), 0);
    CHECK_EQ(peek64(&c, OFF_HEAD), head);
    CHECK_EQ(peek32(&c, OFF_WRITING), 0);
    /* It is done: the write goes through. */
    scribble32(&c, OFF_RECLAIMING, 0);
    CHECK(vs_ring_writable(&p) > 0);
    CHECK_EQ(write1(&p, small, sizeof(small)), sizeof(small));
    CHECK_EQ(peek32(&c, OFF_WRITING), 0);
    CHECK_EQ(read1(&c, out, sizeof(out), 0), sizeof(out));
    CHECK(verify(out, sent, sizeof(out), scratch));
    sent += sizeof(out);
    /* With neither in flight, the pages go. */
    long t1 = t0 + 10 * idle;
    CHECK(!vs_ring_reclaim_consumed(&c, t1, idle));
    CHECK(vs_ring_reclaim_consumed(&c, t1 + idle, idle));
    CHECK_EQ(resident(&c, 0, span), 0);
    /* A hostile consumer's count moving while bytes are unread changes
     * nothing the producer writes. */
    fill(small, sent, sizeof(small));
    CHECK_EQ(write1(&p, small, sizeof(small)), sizeof(small));
    scribble(&c, OFF_RECLAIMED, 77);
    fill(small, sent + sizeof(small), sizeof(small));
    CHECK_EQ(write1(&p, small, sizeof(small)), sizeof(small));
    CHECK_EQ(read1(&c, out, sizeof(out), 0), sizeof(out));
    CHECK(verify(out, sent, sizeof(out), scratch));
    CHECK_EQ(read1(&c, out, sizeof(out), 0), sizeof(out));
    CHECK(verify(out, sent + sizeof(out), sizeof(out), scratch));
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* A producer asleep on space while the consumer reclaims (vs_ring_write
 * said -EAGAIN) is woken when the reclaim ends. */
struct space_waiter {
    struct vs_ring *p;
    const unsigned char *buf;
    size_t len;
    ssize_t got;
};

static void *wait_and_write(void *arg)
{
    struct space_waiter *w = arg;
    struct vs_wait_opts opts = {0, 600 * 1000000000L, -1, 0}; /* only a hang hits it */
    while ((w->got = write1(w->p, w->buf, w->len)) == -EAGAIN)
        if (vs_ring_wait(w->p, &opts) < 0)
            break;
    return NULL;
}

static void test_reclaim_wakes_writer(void)
{
    const long idle = RECLAIM_IDLE_NS, t0 = RECLAIM_T0_NS;
    struct vs_ring p, c;
    uint64_t sent;
    if (!grown_pair(&p, &c, &sent))
        return;
    unsigned char small[3000], out[3000], scratch[3000];
    fill(small, sent, sizeof(small));
    CHECK(!vs_ring_reclaim_consumed(&c, t0, idle));
    /* As if a reclaim had begun: the writer finds no room and sleeps;
     * the real reclaim below ends it and must wake it. */
    scribble32(&c, OFF_RECLAIMING, 1);
    struct space_waiter w = {&p, small, sizeof(small), 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, wait_and_write, &w), 0);
    CHECK(vs_ring_reclaim_consumed(&c, t0 + idle, idle));
    pthread_join(t, NULL);
    CHECK_EQ(w.got, sizeof(small));
    CHECK_EQ(read1(&c, out, sizeof(out), 0), sizeof(out));
    CHECK(verify(out, sent, sizeof(out), scratch));
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* The two sides at once: a writer with pauses of every length, a reader
 * that reclaims (with no idle time) whenever it emptied the ring. Without
 * the handshake a punch lands between a write's copy and its publication
 * and the reader gets zeros: every byte is checked. */
struct racer {
    struct vs_ring *r;
    uint64_t bytes, limit;
    long reclaims, refused;
    int errors;
    /* Reclaims the reader tried (it found the ring empty). The writer waits
     * for one every WAIT_EVERY writes: a reader that never finds the ring
     * empty (valgrind runs one thread at a time: 0 tries in 118,000 writes)
     * would test no reclaim at all. */
    _Atomic long tried;
};

#define WAIT_EVERY 512

static void *race_writer(void *arg)
{
    struct racer *w = arg;
    unsigned char buf[20000];
    uint64_t rng = 0x1234567;
    double t0 = now_s();
    unsigned long writes = 0;
    while (w->bytes < w->limit && now_s() - t0 < STREAM_SECONDS) {
        size_t n = 1 + rng_next(&rng) % sizeof(buf);
        fill(buf, w->bytes, n);
        ssize_t k = write1(w->r, buf, n);
        if (k > 0)
            w->bytes += (uint64_t)k;
        else if (k == -EAGAIN)
            w->refused++;
        else
            w->errors++;
        for (unsigned i = rng_next(&rng) % 2000; i > 0; i--)
            __asm__ volatile("" ::: "memory");
        if (++writes % WAIT_EVERY == 0) {
            long seen = atomic_load(&w->tried);
            while (atomic_load(&w->tried) == seen)
                sched_yield();
        }
    }
    vs_ring_close_writer(w->r, false);
    return NULL;
}

static void test_reclaim_race(void)
{
    struct vs_ring p, c;
    if (pair_sized(&p, &c, vs_ring_size_for(4096, 256 << 10, 0)) != 0) {
        CHECK(0);
        return;
    }
    struct racer w = {&p, 0, stream_bytes() / 8, 0, 0, 0, 0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, race_writer, &w), 0);
    unsigned char buf[65536], scratch[65536];
    uint64_t got = 0;
    long now = 0;
    int bad = 0;
    for (;;) {
        ssize_t n = read1(&c, buf, sizeof(buf), 0);
        if (n == 0)
            break;
        if (n > 0) {
            if (!verify(buf, got, (size_t)n, scratch) && bad++ < 3)
                fprintf(stderr, "reclaim race: wrong bytes in [%lu, %lu)\n", (unsigned long)got,
                        (unsigned long)(got + (uint64_t)n));
            got += (uint64_t)n;
            continue;
        }
        CHECK_EQ(n, -EAGAIN);
        if (n != -EAGAIN)
            break;
        /* Empty: reclaim at once (a clock that moves on, no idle time). */
        if (vs_ring_reclaim_consumed(&c, ++now, 0))
            w.reclaims++;
        atomic_fetch_add(&w.tried, 1);
    }
    pthread_join(t, NULL);
    printf("reclaim race: %lu bytes, %ld reclaims tried, %lu done, %ld writes found no room\n",
           (unsigned long)got, w.reclaims, (unsigned long)peek64(&c, OFF_RECLAIMED), w.refused);
    CHECK_EQ(bad, 0);
    CHECK_EQ(w.errors, 0);
    CHECK_EQ(got, w.bytes);
    CHECK(w.reclaims > 0);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* Epoch entry SLOT's fields, as the producer's peer sees them. */
static void scribble_entry(struct vs_ring *r, unsigned slot, const uint64_t e[4])
{
    for (int i = 0; i < 4; i++)
        scribble(r, OFF_TABLE + 32 * slot + 8 * (size_t)i, e[i]);
}

/* A producer that writes anything into the epoch table, the epoch count and
 * its cursor: every read returns -EPROTO or bytes from inside the ring,
 * never a fault (run it under AddressSanitizer, and the guard page ends the
 * mapping). The consumer's cursor is never moved by a failed read. */
static void test_hostile_epochs(void)
{
    struct vs_ring p, c;
    if (pair_sized(&p, &c, vs_ring_size_for(4096, 64 << 10, 0)) != 0) {
        CHECK(0);
        return;
    }
    uint64_t span = p.capacity;
    unsigned char *in = malloc(span), *out = malloc(2 * span);
    fill(in, 0, span);
    /* Three epochs: 4 KiB, 8 KiB, 16 KiB. */
    CHECK_EQ(write1(&p, in, 4096), 4096);
    CHECK_EQ(write1(&p, in + 4096, 8192), 8192);
    CHECK_EQ(write1(&p, in + 12288, 100), 100);
    CHECK_EQ(peek64(&p, OFF_EPOCHS), 3);
    CHECK_EQ(read1(&c, out, 100, 0), 100);
    const uint64_t good1[4] = {1, 4096, 4096, 8192}, good2[4] = {2, 12288, 12288, 16384};
    struct {
        unsigned slot;
        uint64_t e[4];
    } bad[] = {
        {1, {7, 4096, 4096, 8192}},              /* wrong seq */
        {1, {1, 4096, 4096, 6000}},              /* not a power of two */
        {1, {1, 4096, 4096, 2048}},              /* too small */
        {1, {1, 4096, 4096, 1ull << 40}},        /* larger than the span */
        {1, {1, 4096, span - 4096, 8192}},       /* past the end of the span */
        {1, {1, 4096, UINT64_MAX - 4095, 8192}}, /* wraps around */
        {1, {1, 4096, 100, 8192}},               /* not on a page */
        {1, {1, 50, 4096, 8192}},                /* starts before the reader */
        {1, {1, 1ull << 62, 4096, 8192}},        /* starts beyond any reach */
        {1, {1, 4096 + 1, 4096, 4096}},          /* epoch 0 would hold 4097 bytes */
        {2, {2, 12288 + 1, 12288, 16384}},       /* epoch 1 would hold 8193 bytes */
        {2, {2, 4000, 12288, 16384}},            /* before the epoch it follows */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        scribble_entry(&p, bad[i].slot, bad[i].e);
        c.next.size = 0; /* as if not read yet */
        CHECK_EQ(read1(&c, out, 2 * span, VS_RING_PEEK), -EPROTO);
        CHECK_EQ(c.pos, 100);
        scribble_entry(&p, 1, good1);
        scribble_entry(&p, 2, good2);
    }
    /* The epoch count: behind the reader, hiding epochs, or too far ahead. */
    c.next.size = 0;
    const uint64_t counts[] = {0, 1, 2, 3 + VS_RING_EPOCHS, UINT64_MAX};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        scribble(&p, OFF_EPOCHS, counts[i]);
        CHECK_EQ(read1(&c, out, 2 * span, VS_RING_PEEK), -EPROTO);
    }
    scribble(&p, OFF_EPOCHS, 3);
    CHECK_EQ(read1(&c, out, 2 * span, 0), 12288);
    CHECK(memcmp(out, in + 100, 12288) == 0);

    /* Random garbage everywhere, many times over. */
    uint64_t seed = 99;
    int faults = 0, rounds = RUNNING_ON_VALGRIND ? 2000 : 200000;
    for (int i = 0; i < rounds; i++) {
        uint64_t e[4];
        for (int k = 0; k < 4; k++) {
            uint64_t v = rng_next(&seed);
            /* Plausible values more often than not, to get past the first checks. */
            switch (rng_next(&seed) % 4) {
            case 0:
                v = v % (2 * span);
                break;
            case 1:
                v = 1ull << (v % 20);
                break;
            case 2:
                v = c.pos + (v % 70000) - 1000;
                break;
            default:
                break;
            }
            e[k] = v;
        }
        if (rng_next(&seed) % 2)
            e[0] = rng_next(&seed) % 6;
        scribble_entry(&p, (unsigned)(rng_next(&seed) % VS_RING_EPOCHS), e);
        if (rng_next(&seed) % 4 == 0)
            scribble(&p, OFF_EPOCHS, c.pos / 1000 + rng_next(&seed) % 8);
        if (rng_next(&seed) % 4 == 0)
            scribble(&p, OFF_HEAD, c.pos + rng_next(&seed) % (span + 2));
        size_t want = 1 + rng_next(&seed) % (2 * span);
        ssize_t r = read1(&c, out, want, rng_next(&seed) % 3 ? VS_RING_PEEK : 0);
        faults += !(r == -EPROTO || r == -EAGAIN || (r >= 0 && (size_t)r <= want));
        if (rng_next(&seed) % 64 == 0) {
            /* Now and then a clean table again, from the reader's epoch. */
            uint64_t e0[4] = {c.ep.seq, c.ep.start, c.ep.off, c.ep.size};
            scribble_entry(&p, (unsigned)(c.ep.seq % VS_RING_EPOCHS), e0);
            scribble(&p, OFF_EPOCHS, c.ep.seq + 1);
            c.next.size = 0;
        }
        CHECK(c.ep.off + c.ep.size <= span);
        CHECK(c.next.size == 0 || c.next.off + c.next.size <= span);
    }
    CHECK_EQ(faults, 0);

    /* The producer reads its own table back for unread_copy: garbage there
     * is refused or copied from inside the ring. */
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
    if (pair_sized(&p, &c, vs_ring_size_for(4096, 64 << 10, 0)) != 0) {
        CHECK(0);
        return;
    }
    CHECK_EQ(write1(&p, in, 4096), 4096);
    CHECK_EQ(write1(&p, in + 4096, 8192), 8192);
    CHECK_EQ(write1(&p, in + 12288, 100), 100);
    CHECK_EQ(vs_ring_unread_copy(&p, 10, out, span), 12378);
    CHECK(memcmp(out, in + 10, 12378) == 0);
    CHECK_EQ(vs_ring_unread_copy(&p, 12388 + 1, out, span), -EPROTO);
    for (int i = 0; i < (RUNNING_ON_VALGRIND ? 1000 : 50000); i++) {
        uint64_t e[4] = {rng_next(&seed) % 4, rng_next(&seed) % 20000, rng_next(&seed) % span,
                         1ull << (rng_next(&seed) % 20)};
        scribble_entry(&p, (unsigned)(rng_next(&seed) % 3), e);
        ssize_t r = vs_ring_unread_copy(&p, rng_next(&seed) % 12389, out, span);
        faults += !(r == -EPROTO || (r >= 0 && r <= 12388));
    }
    CHECK_EQ(faults, 0);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
    free(in);
    free(out);
}

/* vs_copy is memcpy at every size and every distance between the buffers,
 * the aliased ones it copies itself included; nothing outside is touched. */
static void test_copy(void)
{
    enum { AREA = 3 * 65536 };
    unsigned char *src = aligned_alloc(4096, AREA), *dst = aligned_alloc(4096, AREA);
    for (size_t i = 0; i < AREA; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    const size_t sizes[] = {0, 1, 63, 64, 65, 1023, 1024, 1025, 4096 + 7, 65536 + 5};
    const size_t offsets[] = {0, 1, 15, 16, 17, 31, 32, 63, 64, 100, 2048, 4095};
    int bad = 0;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
        for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++) {
            size_t n = sizes[si], from = 8192, to = 8192 + offsets[o];
            memset(dst, 0xee, AREA);
            vs_copy(dst + to, src + from, n);
            bool ok =
                memcmp(dst + to, src + from, n) == 0 && dst[to - 1] == 0xee && dst[to + n] == 0xee;
            if (!ok && bad++ < 3)
                fprintf(stderr, "vs_copy: size %zu, distance %zu: wrong\n", n, offsets[o]);
        }
    CHECK_EQ(bad, 0);
    free(src);
    free(dst);
}

int main(void)
{
    test_copy();
    test_create();
    test_wrap_random();
    test_partial_and_peek();
    test_eof_and_epipe();
    test_wait_timeout();
    test_wait_wakeups();
    test_wait_watch_fd();
    test_attach_refusals();
    test_wild_cursors();
    test_grow_fill();
    test_grow_random();
    test_reclaim();
    test_reclaim_consumed();
    test_reclaim_handshake();
    test_reclaim_wakes_writer();
    test_reclaim_race();
    test_hostile_epochs();
    test_stream_threads();
    test_stream_processes();
    return check_finish("test_ring");
}
