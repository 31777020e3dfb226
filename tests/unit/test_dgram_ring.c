/* test_dgram_ring.c - datagrams over the byte ring (memory/dgram_ring.c):
 * boundaries kept, whole or nothing, truncation and peek as UDP's, the
 * ring's growth under large datagrams, end of stream, a hostile
 * producer's heads refused without a read past the record, and a consumer
 * that gives the pages back while the producer writes. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "memory/dgram_ring.h"
#include "ring_pair.h"

static int pair(struct vs_ring *p, struct vs_ring *c, uint64_t window, uint64_t most)
{
    return pair_sized(p, c, vs_ring_size_for(window, most, 0));
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seed * 31 + i * 7);
}

static int put(struct vs_ring *p, size_t len, unsigned seed)
{
    static uint8_t buf[VS_DGRAM_MAX + 1];
    fill(buf, len, seed);
    struct vs_dgram_meta m = {.tag = seed, .stamp = 1000u + seed};
    /* Two pieces, as sendmsg gives them. */
    struct iovec iov[2] = {{buf, len / 3}, {buf + len / 3, len - len / 3}};
    return vs_dgram_put(p, &m, iov, 2);
}

/* Takes the next datagram into a buffer of ROOM bytes: whether it is the
 * LEN-byte datagram of SEED, truncated to ROOM. */
static bool took(struct vs_ring *c, size_t len, unsigned seed, size_t room, int flags)
{
    static uint8_t got[VS_DGRAM_MAX], want[VS_DGRAM_MAX];
    struct vs_dgram_meta m;
    struct iovec iov = {got, room};
    ssize_t n = vs_dgram_take(c, &m, &iov, 1, flags);
    size_t expect = len < room ? len : room;
    fill(want, len, seed);
    return n == (ssize_t)expect && m.len == len && m.tag == seed && m.stamp == 1000u + seed &&
           memcmp(got, want, expect) == 0;
}

static void test_boundaries(void)
{
    struct vs_ring p, c;
    CHECK(pair(&p, &c, 4096, 4096) == 0);
    size_t sizes[] = {0, 1, 7, 8, 9, 100, 1000};
    for (unsigned i = 0; i < 7; i++)
        CHECK_EQ(put(&p, sizes[i], i), 0);
    CHECK_EQ(vs_dgram_next_len(&c), 0);
    for (unsigned i = 0; i < 7; i++) {
        CHECK_EQ(vs_dgram_next_len(&c), (long long)sizes[i]);
        CHECK(took(&c, sizes[i], i, sizeof(uint8_t[2000]), 0));
    }
    CHECK_EQ(vs_dgram_next_len(&c), -EAGAIN);
    CHECK_EQ(vs_ring_readable(&c), 0);

    /* Truncated: the rest is dropped, the next datagram is whole. Peek
     * leaves a datagram where it is. */
    CHECK_EQ(put(&p, 100, 1), 0);
    CHECK_EQ(put(&p, 50, 2), 0);
    CHECK(took(&c, 100, 1, 10, VS_RING_PEEK));
    CHECK(took(&c, 100, 1, 200, VS_RING_PEEK));
    CHECK(took(&c, 100, 1, 10, 0));
    CHECK(took(&c, 50, 2, 50, 0));
    CHECK_EQ(vs_ring_readable(&c), 0);

    /* Full: whole datagrams or nothing. */
    size_t charge = vs_dgram_charge(100), n = 0;
    CHECK_EQ(charge, 16 + 104);
    while (put(&p, 100, 3) == 0)
        n++;
    CHECK_EQ(n, 4096 / charge);
    CHECK_EQ(vs_ring_readable(&c), (long long)(n * charge));
    CHECK_EQ(put(&p, 100, 3), -EAGAIN);
    CHECK(took(&c, 100, 3, 100, 0));
    CHECK_EQ(put(&p, 100, 4), 0);
    for (size_t i = 1; i < n; i++)
        CHECK(took(&c, 100, 3, 100, 0));
    CHECK(took(&c, 100, 4, 100, 0));

    /* Around the ring many times, sizes that do not divide it. */
    bool all = true;
    for (unsigned i = 0; i < 2000; i++) {
        size_t len = (i * 37) % 700;
        all = all && put(&p, len, i) == 0 && put(&p, len / 2, i + 1) == 0;
        all = all && took(&c, len, i, 700, 0) && took(&c, len / 2, i + 1, 700, 0);
    }
    CHECK(all);

    CHECK_EQ(put(&p, VS_DGRAM_MAX + 1, 0), -EMSGSIZE);
    vs_ring_close_writer(&p, false);
    CHECK_EQ(vs_dgram_next_len(&c), -EPIPE);
    vs_ring_destroy(&p);
    vs_ring_destroy(&c);
}

/* Datagrams larger than the window: the ring grows to take them whole. */
static void test_growth(void)
{
    struct vs_ring p, c;
    CHECK(pair(&p, &c, 4096, 256u << 10) == 0);
    CHECK_EQ(put(&p, 3000, 1), 0);
    CHECK_EQ(put(&p, VS_DGRAM_MAX, 2), 0);
    CHECK_EQ(put(&p, 10000, 3), 0);
    CHECK(took(&c, 3000, 1, VS_DGRAM_MAX, 0));
    CHECK(took(&c, VS_DGRAM_MAX, 2, VS_DGRAM_MAX, 0));
    CHECK(took(&c, 10000, 3, VS_DGRAM_MAX, 0));
    vs_ring_destroy(&p);
    vs_ring_destroy(&c);
}

/* Raw bytes as a hostile producer writes them. */
static void raw(struct vs_ring *p, const void *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};
    CHECK_EQ(vs_ring_write(p, &iov, 1, 0), (long long)len);
}

static void test_hostile(void)
{
    struct vs_ring p, c;
    uint8_t junk[64] = {0}, buf[64];
    struct vs_dgram_meta m;
    struct iovec iov = {buf, sizeof(buf)};

    /* A head that promises more than UDP carries. */
    CHECK(pair(&p, &c, 4096, 4096) == 0);
    uint32_t huge = VS_DGRAM_MAX + 1;
    memcpy(junk, &huge, 4);
    raw(&p, junk, 16);
    CHECK_EQ(vs_dgram_take(&c, &m, &iov, 1, 0), -EPROTO);
    vs_ring_destroy(&p);
    vs_ring_destroy(&c);

    /* A head whose datagram is not all there: nothing yet, and no read
     * past what was written. */
    CHECK(pair(&p, &c, 4096, 4096) == 0);
    uint32_t len = 40;
    memcpy(junk, &len, 4);
    raw(&p, junk, 16 + 20);
    CHECK_EQ(vs_dgram_take(&c, &m, &iov, 1, 0), -EAGAIN);
    CHECK_EQ(vs_dgram_next_len(&c), -EAGAIN);
    raw(&p, junk, 20);
    CHECK_EQ(vs_dgram_take(&c, &m, &iov, 1, 0), 40);
    /* Half a head. */
    raw(&p, junk, 8);
    CHECK_EQ(vs_dgram_next_len(&c), -EAGAIN);
    vs_ring_destroy(&p);
    vs_ring_destroy(&c);
}

/* A consumer that gives the pages back whenever its ring is empty (as a
 * quiet UDP receiver does, udp.md §7) while a producer writes: a put that
 * meets the reclaim says -EBUSY with nothing written, never breaks the
 * ring (-EPROTO), and every datagram arrives once, in order, intact. */
enum { RACE_COUNT = 5000 };

struct race {
    struct vs_ring p, c;
    _Atomic int put_error; /* the first error a put gave, other than -EAGAIN/-EBUSY */
    _Atomic long busy;     /* puts that met a reclaim */
    _Atomic unsigned got;  /* datagrams the consumer took */
};

static void *race_producer(void *arg)
{
    struct race *r = arg;
    for (unsigned i = 0; i < RACE_COUNT;) {
        int rc = put(&r->p, 8 + i % 200, i);
        if (rc == 0) {
            /* Every 8th: wait for the consumer to catch up, so that the
             * ring is often empty, and reclaimed, while we write. */
            if (++i % 8 == 0)
                while (r->got < i && !r->put_error)
                    sched_yield();
        } else if (rc == -EBUSY || rc == -EAGAIN) {
            r->busy += rc == -EBUSY;
            sched_yield();
        } else {
            r->put_error = rc;
            break;
        }
    }
    return NULL;
}

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void test_reclaim_while_writing(void)
{
    static struct race r;
    CHECK(pair(&r.p, &r.c, 4096, 64u << 10) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, race_producer, &r) == 0);
    unsigned got = 0, reclaims = 0, empty = 0;
    bool intact = true;
    while (got < RACE_COUNT && !r.put_error) {
        if (vs_dgram_next_len(&r.c) == -EAGAIN) {
            reclaims += vs_ring_reclaim_consumed(&r.c, now_ns(), 0);
            /* Under valgrind, whose threads take turns, a loop that never
             * yields kept the producer out for minutes (a fresh run's
             * memcheck: 8.5 min for this test, 8-15 s at other times); one
             * that yields often no longer meets the producer's writes (it
             * caught the bug 10 times in 10 without yielding, 1 in 10
             * yielding every 64th look, 9 in 10 yielding after 10,000 empty looks in a row). */
            if (++empty % 10000 == 0)
                sched_yield();
            continue;
        }
        if (!took(&r.c, 8 + got % 200, got, 256, 0))
            intact = false;
        r.got = ++got;
        empty = 0;
    }
    pthread_join(t, NULL);
    CHECK_EQ(r.put_error, 0);
    CHECK_EQ(got, RACE_COUNT);
    CHECK(intact);
    CHECK(reclaims > 0);
    vs_ring_destroy(&r.p);
    vs_ring_destroy(&r.c);
}

int main(void)
{
    test_boundaries();
    test_growth();
    test_hostile();
    test_reclaim_while_writing();
    return check_finish("test_dgram_ring");
}
