/* test_ring.c - the shared-memory byte ring and its waits: data integrity
 * across wrap-around, threads and processes; partial writes, peek, end of
 * stream, EPIPE; timeouts, wake-ups, signals, peer death; and a hostile
 * peer: malformed regions refused at attach, wild cursors refused later. */
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

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* The shared header's layout, version 1, as a peer sees it. */
#define OFF_MAGIC 0
#define OFF_VERSION 4
#define OFF_CAPACITY 8
#define OFF_DATA 16
#define OFF_HEAD 64
#define OFF_TAIL 128
#define HDR 4096
#define MAGIC 0x67727376u

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
    return vs_ring_write(r, &iov, 1);
}

static ssize_t read1(struct vs_ring *r, void *p, size_t n, int flags)
{
    struct iovec iov = {p, n};
    return vs_ring_read(r, &iov, 1, flags);
}

/* A producer and a consumer on one ring, in this process. */
static int pair(struct vs_ring *p, struct vs_ring *c, uint64_t capacity)
{
    if (vs_ring_create(p, capacity, VS_RING_PRODUCER) != 0)
        return -1;
    int fd = dup(p->fd);
    if (vs_ring_attach(c, fd, VS_RING_CONSUMER) != 0) {
        close(fd);
        vs_ring_destroy(p);
        return -1;
    }
    return 0;
}

static void test_create(void)
{
    struct vs_ring r;
    CHECK_EQ(vs_ring_create(&r, 4096 + 1, VS_RING_PRODUCER), -EINVAL);
    CHECK_EQ(vs_ring_create(&r, 2048, VS_RING_PRODUCER), -EINVAL);
    CHECK_EQ(vs_ring_create(&r, 128u << 20, VS_RING_PRODUCER), -EINVAL);
    CHECK_EQ(vs_ring_capacity_for(0), VS_RING_MIN_CAPACITY);
    CHECK_EQ(vs_ring_capacity_for(5000), 8192);
    CHECK_EQ(vs_ring_capacity_for(1ull << 40), VS_RING_MAX_CAPACITY);
    CHECK_EQ(vs_ring_create(&r, 4096, VS_RING_PRODUCER), 0);
    CHECK_EQ(fcntl(r.fd, F_GET_SEALS), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    CHECK(fcntl(r.fd, F_GETFD) & FD_CLOEXEC);
    CHECK(ftruncate(r.fd, 100) < 0);
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
        ssize_t w = vs_ring_write(&p, wv, 2);
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
    vs_ring_close_writer(&p);
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
    vs_ring_close_writer(s->ring);
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
            s->errors++;
            break;
        }
        s->bytes += (uint64_t)r;
    }
    free(buf);
    free(scratch);
    return NULL;
}

static void stream_threads(uint64_t capacity, uint64_t limit, long spin_ns, const char *what)
{
    struct vs_ring p, c;
    if (pair(&p, &c, capacity) != 0) {
        CHECK(0);
        return;
    }
    struct vs_wait_opts w = {.spin_ns = spin_ns, .timeout_ns = 1000000000L, .watch_fd = -1};
    struct stream tx = {&p, w, limit, 0, 128 << 10, 1, 0};
    struct stream rx = {&c, w, 0, 0, 128 << 10, 2, 0};
    double t0 = now_s();
    pthread_t a, b;
    pthread_create(&a, NULL, produce, &tx);
    pthread_create(&b, NULL, consume, &rx);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    double dt = now_s() - t0;
    printf("threads %s: %llu MiB in %.2f s (%.0f MiB/s), %d errors\n", what,
           (unsigned long long)(rx.bytes >> 20), dt, (rx.bytes >> 20) / dt, tx.errors + rx.errors);
    CHECK_EQ(tx.errors, 0);
    CHECK_EQ(rx.errors, 0);
    CHECK_EQ(rx.bytes, tx.bytes);
    CHECK(rx.bytes >= (limit < (64u << 20) ? limit : 64u << 20));
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

static void test_stream_threads(void)
{
    stream_threads(256 << 10, stream_bytes(), VS_WAIT_SPIN_NS_DEFAULT, "256 KiB ring");
    /* A small ring and no spinning: nearly every wait sleeps. */
    stream_threads(4096, stream_bytes() / 64, 0, "small ring, sleeping");
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
    struct stream rx = {&c, {VS_WAIT_SPIN_NS_DEFAULT, 1000000000L, -1, 0}, 0, 0, 128 << 10, 3, 0};
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
    CHECK_EQ(vs_ring_create(&p, 1 << 20, VS_RING_PRODUCER), 0);
    CHECK_EQ(send_fd(sv[0], p.fd), 0);
    vs_ring_close_fd(&p);
    struct stream tx = {
        &p, {VS_WAIT_SPIN_NS_DEFAULT, 1000000000L, -1, 0}, stream_bytes(), 0, 128 << 10, 4, 0};
    double t0 = now_s();
    produce(&tx);
    uint64_t report[2] = {0, 1};
    CHECK_EQ(read(sv[0], report, sizeof(report)), sizeof(report));
    int status = -1;
    waitpid(pid, &status, 0);
    double dt = now_s() - t0;
    printf("processes: %llu MiB in %.2f s (%.0f MiB/s)\n", (unsigned long long)(report[0] >> 20),
           dt, (report[0] >> 20) / dt);
    CHECK_EQ(status, 0);
    CHECK_EQ(tx.errors, 0);
    CHECK_EQ(report[1], 0);
    CHECK_EQ(report[0], tx.bytes);
    close(sv[0]);
    vs_ring_destroy(&p);
}

/* --- waits ---------------------------------------------------------- */

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
    CHECK(dt >= 0.095 && dt < 0.6);
    static unsigned char buf[4096];
    CHECK_EQ(write1(&p, buf, sizeof(buf)), 4096);
    w.timeout_ns = 50000000L;
    t0 = now_s();
    CHECK_EQ(vs_ring_wait(&p, &w), -ETIMEDOUT);
    dt = now_s() - t0;
    CHECK(dt >= 0.045 && dt < 0.5);
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
 * the futex), and by a signal, which it reports even under SA_RESTART. */
static void test_wait_wakeups(void)
{
    struct vs_ring p, c;
    if (pair(&p, &c, 4096) != 0) {
        CHECK(0);
        return;
    }
    struct vs_wait_opts w = {.spin_ns = 0, .timeout_ns = 5000000000L, .watch_fd = -1};
    pthread_t t;
    struct later l = {&p, pthread_self(), 0};
    double t0 = now_s();
    pthread_create(&t, NULL, act_later, &l);
    CHECK_EQ(vs_ring_wait(&c, &w), 0);
    CHECK(now_s() - t0 < 1.0);
    CHECK_EQ(vs_ring_readable(&c), 1);
    pthread_join(t, NULL);

    static unsigned char buf[4096];
    CHECK_EQ(write1(&p, buf, 4095), 4095);
    l = (struct later){&c, pthread_self(), 2};
    t0 = now_s();
    pthread_create(&t, NULL, act_later, &l);
    CHECK_EQ(vs_ring_wait(&p, &w), 0);
    CHECK(now_s() - t0 < 1.0);
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
    CHECK(now_s() - t0 < 1.0);
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
    struct vs_wait_opts w = {.timeout_ns = 5000000000L, .watch_fd = sv[0], .slice_ns = 20000000L};
    CHECK_EQ(vs_ring_wait(&c, &(struct vs_wait_opts){.timeout_ns = 50000000L, .watch_fd = sv[0]}),
             -ETIMEDOUT);
    close(sv[1]);
    double t0 = now_s();
    CHECK_EQ(vs_ring_wait(&c, &w), VS_WAIT_WATCHED);
    CHECK(now_s() - t0 < 0.5);
    close(sv[0]);
    vs_ring_destroy(&c);
    vs_ring_destroy(&p);
}

/* --- a hostile peer ------------------------------------------------- */

struct forged {
    size_t size;
    uint32_t magic, version;
    uint64_t capacity, data_offset, head, tail;
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
    memcpy(hdr + OFF_HEAD, &f->head, 8);
    memcpy(hdr + OFF_TAIL, &f->tail, 8);
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
static int attach_forged(const struct forged *f)
{
    struct vs_ring r;
    int fd = forge(f);
    if (fd < 0)
        return -999;
    int rc = vs_ring_attach(&r, fd, VS_RING_CONSUMER);
    if (rc == 0)
        vs_ring_destroy(&r);
    else
        close(fd);
    return rc;
}

static void test_attach_refusals(void)
{
    const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    const struct forged good = {HDR + 8192, MAGIC, 1, 8192, HDR, 0, 0, seals};
    struct forged f = good;
    CHECK_EQ(attach_forged(&f), 0);

    f = good, f.size = HDR + 4096; /* truncated: capacity larger than the file */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR / 2; /* not even a header */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR + 16384; /* file larger than the ring it claims */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.magic = 0x12345678;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.version = 2;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR + 6000, f.capacity = 6000; /* not a power of two */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.size = HDR + 2048, f.capacity = 2048; /* below the bound */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.data_offset = 64;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.seals = 0; /* could shrink under our mapping: SIGBUS */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.seals = F_SEAL_GROW | F_SEAL_SEAL;
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.head = 8193; /* more unread than the capacity */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.tail = 1; /* consumer ahead of the producer */
    CHECK_EQ(attach_forged(&f), -EPROTO);
    f = good, f.head = 1ull << 63, f.tail = (1ull << 63) - 8192; /* far along, still valid */
    CHECK_EQ(attach_forged(&f), 0);

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
    test_stream_threads();
    test_stream_processes();
    return check_finish("test_ring");
}
