/* fuzz_dgram_ring.c - libFuzzer target: datagrams over the byte ring
 * (memory/dgram_ring.c), an honest producer mixed with a hostile one.
 *
 * The input is a program (fuzz_input.h): a geometry (window, most), then
 * steps: put a datagram (length, seed, split into two pieces), take one
 * (buffer room, peek or not), ask the next length, or write raw bytes into
 * the ring as a hostile producer would. A model queue holds what was put.
 * Checks:
 *   - until the first raw write, every take returns the model's next
 *     datagram (length, tag, stamp, bytes), truncated to the room, peek
 *     leaves it, next_len agrees, and a put fails only with -EAGAIN and
 *     then changes nothing readable;
 *   - after one, results are only a length within the room, -EAGAIN,
 *     -EPIPE or -EPROTO (never a crash, never a read past the ring);
 *   - no ASan or UBSan report. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "memory/dgram_ring.h"

#define QUEUE 512

struct dg {
    uint32_t len, seed;
};

static uint8_t buf[VS_DGRAM_MAX], got[VS_DGRAM_MAX];

static void fill(uint8_t *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed + i * 13);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_in in = {data, size};
    uint64_t window = 4096u << (fz_u8(&in) % 3);
    uint64_t most = window << (fz_u8(&in) % 6);
    struct vs_ring p, c;
    if (vs_ring_create(&p, vs_ring_size_for(window, most, 0), VS_RING_PRODUCER) != 0)
        return 0;
    int fd = dup(p.fd);
    if (vs_ring_attach(&c, fd, VS_RING_CONSUMER) != 0)
        FZ_FAIL("attach of our own ring failed");
    struct dg q[QUEUE];
    size_t head = 0, tail = 0;
    bool hostile = false;
    for (int step = 0; step < 200 && in.n > 0; step++) {
        uint8_t op = fz_u8(&in) % 4;
        if (op == 0) {
            /* Mostly small, sometimes up to the largest. */
            uint32_t len = fz_u8(&in) & 1 ? fz_u16(&in) % (VS_DGRAM_MAX + 2) : fz_u8(&in);
            uint32_t seed = fz_u8(&in);
            size_t cut = len ? fz_u16(&in) % (len + 1) : 0;
            fill(buf, len > VS_DGRAM_MAX ? VS_DGRAM_MAX : len, seed);
            struct iovec iov[2] = {{buf, cut}, {buf + cut, len - cut}};
            struct vs_dgram_meta m = {.tag = seed, .stamp = seed * 3u};
            ssize_t before = vs_ring_readable(&c);
            int rc = vs_dgram_put(&p, &m, iov, 2);
            FZ_TRACE("put %u: %d\n", len, rc);
            if (len > VS_DGRAM_MAX) {
                FZ_CHECK(rc == -EMSGSIZE, "put of %u: %d", len, rc);
            } else if (rc == 0) {
                if (tail - head < QUEUE)
                    q[tail++ % QUEUE] = (struct dg){len, seed};
                else
                    hostile = true; /* the model is full: stop comparing */
            } else if (!hostile) {
                FZ_CHECK(rc == -EAGAIN && vs_ring_readable(&c) == before,
                         "put of %u failed with %d and left %zd readable, not %zd", len, rc,
                         vs_ring_readable(&c), before);
            }
        } else if (op == 1) {
            size_t room = fz_u16(&in);
            int flags = fz_u8(&in) & 1 ? VS_RING_PEEK : 0;
            struct vs_dgram_meta m;
            struct iovec iov = {got, room < sizeof(got) ? room : sizeof(got)};
            ssize_t n = vs_dgram_take(&c, &m, &iov, 1, flags);
            FZ_TRACE("take room %zu flags %d: %zd\n", iov.iov_len, flags, n);
            if (hostile) {
                FZ_CHECK((n >= 0 && (size_t)n <= iov.iov_len) || n == -EAGAIN || n == -EPIPE ||
                             n == -EPROTO,
                         "take after a hostile write: %zd", n);
                continue;
            }
            if (head == tail) {
                FZ_CHECK(n == -EAGAIN, "take of an empty ring: %zd", n);
                continue;
            }
            struct dg d = q[head % QUEUE];
            size_t want = d.len < iov.iov_len ? d.len : iov.iov_len;
            fill(buf, d.len, d.seed);
            FZ_CHECK(n == (ssize_t)want && m.len == d.len && m.tag == d.seed &&
                         m.stamp == d.seed * 3u && memcmp(got, buf, want) == 0,
                     "take: %zd bytes of a %u-byte datagram (want %zu of %u)", n, m.len, want,
                     d.len);
            if (!flags)
                head++;
        } else if (op == 2) {
            ssize_t n = vs_dgram_next_len(&c);
            if (!hostile)
                FZ_CHECK(head == tail ? n == -EAGAIN : n == (ssize_t)q[head % QUEUE].len,
                         "next_len %zd", n);
        } else {
            /* A hostile producer's bytes, straight into the ring. */
            uint8_t raw[64];
            size_t len = fz_u8(&in) % sizeof(raw);
            for (size_t i = 0; i < len; i++)
                raw[i] = fz_u8(&in);
            struct iovec iov = {raw, len};
            if (vs_ring_write(&p, &iov, 1, 0) > 0)
                hostile = true;
        }
    }
    vs_ring_destroy(&p);
    vs_ring_destroy(&c);
    return 0;
}
