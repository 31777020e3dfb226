/* ring_prog.c - see ring_prog.h. */
#include "ring_prog.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define CANARY 0xa5
#define MAX_STEPS 1024

/* The stream's content: byte OFF is pattern[OFF % PATTERN], pseudo-random,
 * so a lost, repeated or misplaced byte shows (a shift by a multiple of
 * PATTERN would not, and no ring here is that large). A table, not a
 * function per byte, so that filling and checking are memcpy and memcmp. */
#define PATTERN (1u << 20)
static uint8_t pattern[PATTERN];

static void pattern_init(void)
{
    if (pattern[0] | pattern[1])
        return;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < PATTERN; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pattern[i] = (uint8_t)(x >> 24);
    }
}

static uint8_t stream_byte(uint64_t off)
{
    return pattern[off % PATTERN];
}

static uint64_t cap_of(const struct ring_prog *p)
{
    return p->prod ? p->prod->capacity : p->cons->capacity;
}

static uint64_t unread(const struct ring_prog *p)
{
    return p->written - p->read;
}

/* What the producer may still write: its limit less the unread bytes (a
 * limit lowered below them leaves none). */
static uint64_t room(const struct ring_prog *p)
{
    return p->limit > unread(p) ? p->limit - unread(p) : 0;
}

/* --- the caller's buffers --- */

/* Up to three pieces, each its own exact-size allocation (NULL when empty),
 * so that a copy past one is an ASan report. */
struct bufs {
    struct iovec iov[3];
    int cnt;
    size_t len;
};

static void bufs_make(struct bufs *b, struct fz_in *in, size_t len)
{
    uint8_t shape = fz_u8(in);
    size_t cut1 = fz_u16(in) % (len + 1), cut2 = fz_u16(in) % (len + 1);
    if (cut1 > cut2) {
        size_t t = cut1;
        cut1 = cut2;
        cut2 = t;
    }
    b->cnt = shape % 4;
    size_t ends[3] = {len, len, len};
    if (b->cnt == 0)
        len = 0;
    if (b->cnt == 2)
        ends[0] = cut1;
    if (b->cnt == 3) {
        ends[0] = cut1;
        ends[1] = cut2;
    }
    b->len = len;
    size_t at = 0;
    for (int i = 0; i < b->cnt; i++) {
        size_t n = ends[i] - at;
        b->iov[i].iov_len = n;
        b->iov[i].iov_base = n ? malloc(n) : NULL;
        if (n)
            memset(b->iov[i].iov_base, CANARY, n);
        at = ends[i];
    }
}

static void bufs_free(struct bufs *b)
{
    for (int i = 0; i < b->cnt; i++)
        free(b->iov[i].iov_base);
}

static void stream_fill(uint8_t *dst, uint64_t from, size_t n)
{
    while (n > 0) {
        size_t at = from % PATTERN, k = n < PATTERN - at ? n : PATTERN - at;
        memcpy(dst, pattern + at, k);
        dst += k;
        from += k;
        n -= k;
    }
}

/* The first of N bytes at BUF that is not the stream from FROM; N if none. */
static size_t first_wrong(const uint8_t *buf, uint64_t from, size_t n)
{
    size_t done = 0;
    while (done < n) {
        size_t at = (from + done) % PATTERN, k = n - done < PATTERN - at ? n - done : PATTERN - at;
        if (memcmp(buf + done, pattern + at, k) != 0)
            break;
        done += k;
    }
    for (; done < n; done++)
        if (buf[done] != stream_byte(from + done))
            break;
    return done;
}

/* The first of N bytes at BUF that is not the canary; N if none. */
static size_t first_not_canary(const uint8_t *buf, size_t n)
{
    static uint8_t canary[1 << 17];
    if (!canary[0])
        memset(canary, CANARY, sizeof(canary));
    for (size_t done = 0; done < n;) {
        size_t k = n - done < sizeof(canary) ? n - done : sizeof(canary);
        if (memcmp(buf + done, canary, k) != 0) {
            while (buf[done] == CANARY)
                done++;
            return done;
        }
        done += k;
    }
    return n;
}

/* Fills the pieces with the stream from FROM. */
static void bufs_fill(struct bufs *b, uint64_t from)
{
    for (int i = 0; i < b->cnt; i++) {
        stream_fill(b->iov[i].iov_base, from, b->iov[i].iov_len);
        from += b->iov[i].iov_len;
    }
}

/* Bytes [0, got) are the stream from FROM (when the model holds); bytes
 * past GOT, up to b->len, are untouched. */
static void bufs_check(struct bufs *b, const struct ring_prog *p, uint64_t from, size_t got)
{
    size_t at = 0;
    for (int i = 0; i < b->cnt && at < b->len; i++) {
        const uint8_t *buf = b->iov[i].iov_base;
        size_t n = b->iov[i].iov_len < b->len - at ? b->iov[i].iov_len : b->len - at;
        if (n == 0)
            continue; /* an empty piece may have no buffer */
        size_t data = got > at ? (got - at < n ? got - at : n) : 0;
        size_t k = p->poisoned ? data : first_wrong(buf, from + at, data);
        FZ_CHECK(k == data, "stream byte %lu: got %#x want %#x", (unsigned long)(from + at + k),
                 buf[k], stream_byte(from + at + k));
        k = first_not_canary(buf + data, n - data);
        FZ_CHECK(k == n - data, "byte %zu written past the count %zu", at + data + k, got);
        at += n;
    }
}

/* The bytes of the caller's buffer an operation that returned N may have
 * written. An error after a hostile peer's write may come after part of a
 * copy (a read across epochs checks each epoch as it reaches it): the
 * bytes within the request are then garbage, as after any corruption, but
 * none outside it (ASan). Otherwise the count exactly. */
static size_t touched(const struct ring_prog *p, ssize_t n, size_t len)
{
    if (n > 0)
        return (size_t)n;
    return n < 0 && p->poisoned ? len : 0;
}

static size_t pick_len(const struct ring_prog *p, struct fz_in *in)
{
    return fz_u16(in) % (2 * cap_of(p) + 1);
}

/* --- the operations --- */

/* A byte count from a ring holding at most its capacity: within the
 * request and within the capacity (more would be stale or foreign bytes). */
static bool count_ok(const struct ring_prog *p, ssize_t n, size_t len)
{
    return n >= 0 && (size_t)n <= len && (uint64_t)n <= cap_of(p);
}

static ssize_t expect_write(const struct ring_prog *p, size_t len)
{
    if (p->writer_closed || p->reader_closed)
        return -EPIPE;
    if (room(p) == 0)
        return -EAGAIN;
    return (ssize_t)(len < room(p) ? len : room(p));
}

/* A ring that can grow writes up to the end of its current region, then
 * grows on the next write: any count from 1 up to what the exact model
 * allows (the bytes are checked when read), or -ENOSPC with
 * VS_RING_NO_GROW. A fixed ring's counts are exact. */
static bool write_ok(const struct ring_prog *p, ssize_t n, size_t len, int flags)
{
    ssize_t want = expect_write(p, len);
    if (n == want || (len == 0 && n == 0))
        return true;
    if (!p->elastic || want <= 0)
        return false;
    return (n > 0 && n < want) || (n == -ENOSPC && (flags & VS_RING_NO_GROW));
}

static void op_write(struct ring_prog *p, struct fz_in *in, int flags)
{
    struct bufs b;
    bufs_make(&b, in, pick_len(p, in));
    bufs_fill(&b, p->written);
    ssize_t n = vs_ring_write(p->prod, b.iov, b.cnt, flags);
    bufs_free(&b);
    FZ_TRACE("write%s %zu in %d: %zd\n", flags ? " (no grow)" : "", b.len, b.cnt, n);
    if (p->poisoned)
        FZ_CHECK(count_ok(p, n, b.len) || n == -EAGAIN || n == -EPIPE || n == -EPROTO ||
                     n == -ENOSPC,
                 "write of %zu: %zd", b.len, n);
    else /* nothing to write into a full ring: nothing written, or "full" */
        FZ_CHECK(write_ok(p, n, b.len, flags), "write of %zu: %zd, expected %zd", b.len, n,
                 expect_write(p, b.len));
    if (n > 0)
        p->written += (uint64_t)n;
}

static ssize_t expect_read(const struct ring_prog *p, size_t len)
{
    if (unread(p) == 0)
        return !p->writer_closed ? -EAGAIN : p->writer_reset ? -ECONNRESET : 0;
    return (ssize_t)(len < unread(p) ? len : unread(p));
}

static void op_read(struct ring_prog *p, struct fz_in *in, int flags)
{
    struct bufs b;
    bufs_make(&b, in, pick_len(p, in));
    ssize_t n = vs_ring_read(p->cons, b.iov, b.cnt, flags);
    FZ_TRACE("%s %zu in %d: %zd\n", flags & VS_RING_PEEK ? "peek" : "read", b.len, b.cnt, n);
    /* -ECONNRESET: the peer's close word says RESET, which is what an
     * honest producer's vs_ring_close_writer(reset) writes; a hostile peer
     * may always say it (docs/design/fuzzing.md, "Findings"). */
    if (p->poisoned)
        FZ_CHECK(count_ok(p, n, b.len) || n == -EAGAIN || n == -EPROTO || n == -ECONNRESET,
                 "read of %zu: %zd", b.len, n);
    else
        FZ_CHECK(n == expect_read(p, b.len), "read of %zu: %zd, expected %zd", b.len, n,
                 expect_read(p, b.len));
    bufs_check(&b, p, p->read, touched(p, n, b.len));
    bufs_free(&b);
    if (n > 0 && !(flags & VS_RING_PEEK))
        p->read += (uint64_t)n;
}

/* FIONREAD (either side) and the producer's room. */
static void op_counts(struct ring_prog *p)
{
    uint64_t cap = cap_of(p);
    struct vs_ring *sides[2] = {p->cons, p->prod};
    for (int i = 0; i < 2; i++) {
        if (!sides[i])
            continue;
        ssize_t n = vs_ring_readable(sides[i]);
        FZ_TRACE("readable (%s): %zd\n", i ? "producer" : "consumer", n);
        FZ_CHECK(p->poisoned ? (n >= 0 && (uint64_t)n <= cap) || n == -EPROTO
                             : n == (ssize_t)unread(p),
                 "readable (side %d): %zd, %lu unread", i, n, (unsigned long)unread(p));
    }
    if (!p->prod)
        return;
    ssize_t w = vs_ring_writable(p->prod);
    FZ_TRACE("writable: %zd\n", w);
    FZ_CHECK(p->poisoned ? (w >= 0 && (uint64_t)w <= cap) || w == -EPROTO : w == (ssize_t)room(p),
             "writable: %zd, %lu unread", w, (unsigned long)unread(p));
}

/* The producer's copy of what the peer left unread after a REVERT: the
 * start comes from the peer's message, so it is fuzzed around the model's. */
static void op_unread_copy(struct ring_prog *p, struct fz_in *in)
{
    uint8_t mode = fz_u8(in);
    uint64_t from = mode & 1 ? fz_u64(in) : p->read + (uint64_t)(int64_t)(int16_t)fz_u16(in);
    struct bufs b;
    bufs_make(&b, in, pick_len(p, in));
    /* Never a null buffer: finish_revert() always hands a real one. */
    unsigned char none;
    void *buf = b.cnt && b.iov[0].iov_base ? b.iov[0].iov_base : &none;
    size_t len = b.cnt ? b.iov[0].iov_len : 0;
    ssize_t n = vs_ring_unread_copy(p->prod, from, buf, len);
    FZ_TRACE("unread_copy from %lu, %zu: %zd\n", (unsigned long)from, len, n);
    bool in_range = from - p->read <= unread(p);
    uint64_t left = p->written - from;
    if (p->poisoned)
        FZ_CHECK(count_ok(p, n, len) || n == -EPROTO, "unread_copy: %zd", n);
    else
        FZ_CHECK(in_range ? n == (ssize_t)(len < left ? len : left) : n == -EPROTO,
                 "unread_copy from %lu (read %lu written %lu) of %zu: %zd", (unsigned long)from,
                 (unsigned long)p->read, (unsigned long)p->written, len, n);
    b.len = len; /* only the first piece was handed over */
    bufs_check(&b, p, from, touched(p, n, len));
    bufs_free(&b);
}

/* The producer's close, resetting or not. */
static void op_close_writer(struct ring_prog *p, bool reset)
{
    FZ_TRACE("close_writer%s\n", reset ? " (reset)" : "");
    vs_ring_close_writer(p->prod, reset);
    p->writer_closed = true;
    p->writer_reset = reset;
}

/* The producer lowers or raises the most the ring may hold (as the socket
 * layer does from the peer's receive buffer): kept within [window, top]. */
static void op_set_limit(struct ring_prog *p, struct fz_in *in)
{
    uint64_t most = fz_le(in, 3);
    vs_ring_set_limit(p->prod, most);
    p->limit = most < p->window ? p->window : most < p->top ? most : p->top;
    FZ_TRACE("set_limit %lu: %lu\n", (unsigned long)most, (unsigned long)p->limit);
}

/* The producer gives pages back after the clock moved on: never a byte
 * still unread (the exact model checks every byte read afterwards). */
static void op_reclaim(struct ring_prog *p, struct fz_in *in)
{
    p->now_ns += (long)fz_u16(in) * 1000000;
    long idle_ns = (long)fz_u8(in) * 1000000;
    bool more = vs_ring_reclaim(p->prod, p->now_ns, idle_ns);
    FZ_TRACE("reclaim at %ld ms, idle %ld ms: %d\n", p->now_ns / 1000000, idle_ns / 1000000, more);
}

/* The consumer gives the pages back once the ring is empty and its head
 * has not moved for the idle time (issue 24: the producer's program need
 * not call): never a byte still unread, and the producer goes on intact
 * (the exact model checks every byte read afterwards). Its handshake
 * words are in the header: the peer's pokes set them like any other. */
static void op_reclaim_consumed(struct ring_prog *p, struct fz_in *in)
{
    p->now_ns += (long)fz_u16(in) * 1000000;
    long idle_ns = (long)fz_u8(in) * 1000000;
    bool took = vs_ring_reclaim_consumed(p->cons, p->now_ns, idle_ns);
    FZ_TRACE("reclaim by the consumer at %ld ms, idle %ld ms: %d\n", p->now_ns / 1000000,
             idle_ns / 1000000, took);
    if (!p->poisoned && p->prod) /* no write in flight here: an empty, idle ring was taken */
        FZ_CHECK(!took || unread(p) == 0, "consumer reclaim with %lu unread",
                 (unsigned long)unread(p));
}

/* Opcode 9's operations, after a byte that picks one. */
static void step_more(struct ring_prog *p, struct fz_in *in)
{
    uint8_t op = fz_u8(in) % 6;
    if (op == 5) {
        if (p->cons)
            op_reclaim_consumed(p, in);
        return;
    }
    if (op != 0 && !p->prod)
        return;
    switch (op) {
    case 1:
        op_close_writer(p, true);
        break;
    case 2:
        op_reclaim(p, in);
        break;
    case 3:
        op_set_limit(p, in);
        break;
    case 4:
        op_write(p, in, VS_RING_NO_GROW);
        break;
    default:
        op_counts(p);
        break;
    }
}

/* --- the hostile peer --- */

/* Stores WIDTH bytes of V at AT, as the peer would; a change of any byte
 * ends the exact model. */
static void poke(struct ring_prog *p, unsigned char *at, int width, uint64_t v)
{
    unsigned char old[8];
    memcpy(old, at, (size_t)width);
    memcpy(at, &v, (size_t)width); /* little-endian host: the low bytes */
    FZ_TRACE("poke %d bytes at %+td: %#lx\n", width, at - p->view, (unsigned long)v);
    if (memcmp(old, at, (size_t)width) != 0)
        p->poisoned = true;
}

/* A value at a byte offset of the header. Aligned offsets (a small index
 * times the width) make the fields the fuzzer is after easy to reach
 * whatever the layout; "add" nudges what is there (a cursor by a few bytes),
 * which a raw value would almost never hit. */
static void op_poke_header(struct ring_prog *p, struct fz_in *in)
{
    uint8_t mode = fz_u8(in);
    int width = 1 << (mode & 3);
    size_t hdr = (size_t)(p->cons ? p->cons->data - (unsigned char *)p->cons->sh
                                  : p->prod->data - (unsigned char *)p->prod->sh);
    if (!p->view || hdr > p->view_size || hdr < (size_t)width)
        return;
    size_t off = mode & 4 ? (size_t)fz_u8(in) * (size_t)width : fz_u16(in);
    unsigned char *at = p->view + off % (hdr - (size_t)width + 1);
    uint64_t v;
    if (mode & 8) {
        memcpy(&v, at, (size_t)width);
        v += (uint64_t)(int64_t)(int8_t)fz_u8(in);
    } else {
        v = fz_le(in, width);
    }
    poke(p, at, width, v);
}

static void op_poke_data(struct ring_prog *p, struct fz_in *in)
{
    uint8_t mode = fz_u8(in);
    int width = 1 << (mode & 3);
    size_t hdr = (size_t)(p->cons ? p->cons->data - (unsigned char *)p->cons->sh
                                  : p->prod->data - (unsigned char *)p->prod->sh);
    if (!p->view || hdr + (size_t)width > p->view_size)
        return;
    size_t room = p->view_size - hdr - (size_t)width + 1;
    size_t off = (size_t)fz_le(in, 4) % room;
    poke(p, p->view + hdr + off, width, fz_u64(in));
}

/* --- the program --- */

static void step(struct ring_prog *p, struct fz_in *in)
{
    uint8_t op = fz_u8(in) % 10;
    if ((op == 0 || op == 5 || op == 7) && !p->prod)
        return;
    if ((op == 1 || op == 2 || op == 6) && !p->cons)
        return;
    switch (op) {
    case 0:
        op_write(p, in, 0);
        break;
    case 1:
        op_read(p, in, 0);
        break;
    case 2:
        op_read(p, in, VS_RING_PEEK);
        break;
    case 3:
        op_counts(p);
        break;
    case 4:
        op_poke_header(p, in);
        break;
    case 5:
        op_close_writer(p, false);
        break;
    case 6:
        FZ_TRACE("close_reader\n");
        vs_ring_close_reader(p->cons);
        p->reader_closed = true;
        break;
    case 7:
        op_unread_copy(p, in);
        break;
    case 8:
        op_poke_data(p, in);
        break;
    default:
        step_more(p, in);
        break;
    }
}

void ring_prog_run(struct ring_prog *p, struct fz_in *in)
{
    pattern_init();
    if (p->prod) {
        /* A new or attached producer's limit is its top region (ring.h). */
        p->window = p->prod->window;
        p->top = p->limit = p->prod->limit;
        p->elastic = p->prod->capacity > p->prod->window;
    }
    p->now_ns = 1000000000;
    for (int i = 0; i < MAX_STEPS && in->n > 0; i++) {
        step(p, in);
        if (!p->poisoned)
            FZ_CHECK(unread(p) <= cap_of(p), "model: %lu unread", (unsigned long)unread(p));
    }
}

/* --- leaks --- */

/* Not instrumented for coverage: how often these loop depends on the
 * process's descriptors and mappings (libFuzzer's, the allocator's), not on
 * the input, and coverage that varies from run to run makes the gate's
 * fixed-seed search take a different path each time. */
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))

/* The lowest free descriptor number: it grows if one leaked. */
NO_COVERAGE static int lowest_free_fd(void)
{
    int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
    close(fd);
    return fd;
}

/* Mappings of a memfd left behind: /proc/self/maps names them "/memfd:". */
NO_COVERAGE static int memfd_mappings(void)
{
    static char buf[1 << 20];
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = 0;
    int count = 0;
    for (char *s = buf; (s = strstr(s, "/memfd:")) != NULL; s++)
        count++;
    return count;
}

static int fd_at_start = -1;

NO_COVERAGE void fz_leaks_begin(void)
{
    fd_at_start = lowest_free_fd();
}

/* libFuzzer opens files of its own between inputs, so the descriptor
 * baseline is taken per input. No memfd is mapped between inputs; reading
 * /proc/self/maps costs a quarter of a run if done every time, so it is
 * done for the first input (a reproducer) and every 16th. */
NO_COVERAGE void fz_leaks_end(void)
{
    static unsigned runs;
    int fd = lowest_free_fd();
    FZ_CHECK(fd == fd_at_start, "descriptor leak: lowest free fd %d, was %d", fd, fd_at_start);
    if (runs++ % 16)
        return;
    int maps = memfd_mappings();
    FZ_CHECK(maps == 0, "mapping leak: %d memfd mappings left by this input or the 15 before",
             maps);
}
