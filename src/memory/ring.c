/* ring.c - single-producer/single-consumer byte ring in a sealed memfd. */
#include "memory/ring.h"
#include "memory/copy.h"
#include "base/syscall.h"

#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define RING_MAGIC 0x67727376u /* "vsrg" */
#define RING_VERSION 3u        /* 3: the reclaim handshake (writing, reclaiming, reclaimed) */
#define HEADER_SIZE 4096u      /* the data starts on its own page */
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define GUARD_SIZE 4096u
#define PAGE 4096u

/* An epoch as the producer publishes it. */
struct shared_epoch {
    _Atomic uint64_t seq, start, off, size;
};

/* The shared header. Each side writes only its own cache lines, so a write
 * by one never invalidates a line the other is polling, apart from the
 * cursor it waits for. Cursors run freely on 64 bits: head - tail is the
 * number of unread bytes, without wrap ambiguity. */
/* writer_closed: the producer's close reset the connection (the reader
 * gets ECONNRESET once the ring is empty, as from a TCP reset). */
#define RESET 2u

struct vs_ring_shared {
    /* Written once by the creator. */
    alignas(64) uint32_t magic;
    uint32_t version;
    uint64_t capacity; /* the span */
    uint64_t data_offset;
    uint64_t window;
    uint64_t rcv;
    /* Written by the producer. */
    alignas(64) _Atomic uint64_t head; /* bytes ever published */
    _Atomic uint32_t writer_closed;    /* 1 closed, RESET closed with a reset */
    _Atomic uint32_t writing;          /* 1 while a write is in flight (the handshake) */
    _Atomic uint64_t epochs; /* epochs ever started; epoch n is in epoch[n % VS_RING_EPOCHS] */
    /* Written by the consumer. */
    alignas(64) _Atomic uint64_t tail; /* bytes ever consumed */
    _Atomic uint32_t reader_closed;
    /* Odd while it gives the data pages back; one more at each start and
     * end, so that its count of both tells an edge-triggered writer that
     * room came back (vs_ring_space_mark). */
    _Atomic uint32_t reclaiming;
    _Atomic uint64_t reclaimed; /* how many times it did */
    /* The consumer sleeps on data, the producer on space. */
    alignas(64) struct vs_event data;
    alignas(64) struct vs_event space;
    /* Written by the producer (the creator fills in epoch 0). */
    alignas(64) struct shared_epoch epoch[VS_RING_EPOCHS];
};

_Static_assert(sizeof(struct vs_ring_shared) <= HEADER_SIZE, "ring header too large");

static int is_pow2(uint64_t x)
{
    return x && (x & (x - 1)) == 0;
}

static int capacity_ok(uint64_t c)
{
    return is_pow2(c) && c >= VS_RING_MIN_CAPACITY && c <= VS_RING_MAX_CAPACITY;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* The ladder: region i is WINDOW << i bytes, right after region i - 1. */
static uint64_t level_off(uint64_t window, unsigned i)
{
    return window * ((1ull << i) - 1);
}

static uint64_t level_size(uint64_t window, unsigned i)
{
    return window << i;
}

/* Regions that fit in SPAN (window <= span <= VS_RING_MAX_SPAN). */
static unsigned levels_in(uint64_t window, uint64_t span)
{
    unsigned n = 0;
    while (n < 30 && level_off(window, n + 1) <= span)
        n++;
    return n;
}

static uint64_t top_size(const struct vs_ring *r)
{
    return level_size(r->window, r->levels - 1);
}

uint64_t vs_ring_capacity_for(uint64_t want)
{
    uint64_t c = VS_RING_MIN_CAPACITY;
    while (c < want && c < VS_RING_MAX_CAPACITY)
        c <<= 1;
    return c;
}

struct vs_ring_size vs_ring_size_for(uint64_t window, uint64_t most, uint64_t rcv)
{
    struct vs_ring_size s = {.window = vs_ring_capacity_for(window)};
    s.most = most < s.window ? s.window : most > VS_RING_MAX_MOST ? VS_RING_MAX_MOST : most;
    s.rcv = min_u64(rcv, s.most);
    return s;
}

/* The span of a ladder whose top region holds MOST. */
static uint64_t span_for(const struct vs_ring_size *s)
{
    unsigned top = 0;
    while (level_size(s->window, top) < s->most)
        top++;
    return level_off(s->window, top + 1);
}

/* Raw syscalls: close() and fcntl() are interposed inside libvsocket. */
static void close_fd(int fd)
{
    vs_syscall(SYS_close, fd);
}

/* The ring is mapped in front of an inaccessible guard page: should a bug
 * ever let a copy run past the end of the ring, it faults at once instead of
 * reading or writing whatever mapping happens to follow. */
static int map_ring(struct vs_ring *r, int fd, size_t size, enum vs_ring_role role)
{
    void *p = mmap(NULL, size + GUARD_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    if (mmap(p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        int err = errno;
        munmap(p, size + GUARD_SIZE);
        return -err;
    }
    /* Small pages only, whatever the system's shmem huge page policy: an
     * idle ring must hold just the pages it touched, and a hole punched in
     * a huge page would split it or keep it. */
    madvise(p, size, MADV_NOHUGEPAGE);
    r->sh = p;
    r->data = (unsigned char *)p + HEADER_SIZE;
    r->map_size = size;
    r->fd = fd;
    r->role = role;
    return 0;
}

/* Our private state for a validated geometry, at cursor POS; epoch 0 is
 * implicit (the window, from position 0). */
static void init_private(struct vs_ring *r, uint64_t span, uint64_t window, uint64_t rcv,
                         uint64_t pos)
{
    r->capacity = span;
    r->window = window;
    r->levels = levels_in(window, span);
    r->rcv = rcv;
    r->pos = pos;
    r->futex_signal = true;
    r->ep = (struct vs_ring_epoch){0, 0, 0, window};
    r->next = (struct vs_ring_epoch){0, 0, 0, 0};
    r->limit = top_size(r);
    r->level = r->warm = 0;
    r->clean_pos = r->mark_pos = pos;
    r->mark_seq = 0;
    r->mark_pos_ns = r->mark_seq_ns = 0;
    r->reclaims = 0;
    r->reclaim_seq = 0;
}

/* A file larger than RLIMIT_FSIZE would get us SIGXFSZ from ftruncate. */
static bool size_allowed(uint64_t size)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= size;
}

int vs_ring_create(struct vs_ring *r, struct vs_ring_size size, enum vs_ring_role role)
{
    if (!capacity_ok(size.window) || size.most < size.window || size.most > VS_RING_MAX_MOST ||
        size.rcv > size.most)
        return -EINVAL;
    uint64_t span = span_for(&size);
    size_t bytes = HEADER_SIZE + span;
    if (!size_allowed(bytes))
        return -EFBIG;
    int fd = memfd_create("vsocket-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (ftruncate(fd, (off_t)bytes) < 0 || vs_syscall(SYS_fcntl, fd, F_ADD_SEALS, RING_SEALS) < 0)
        rc = -errno;
    if (rc == 0)
        rc = map_ring(r, fd, bytes, role);
    if (rc < 0) {
        close_fd(fd);
        return rc;
    }
    struct vs_ring_shared *sh = r->sh;
    sh->version = RING_VERSION;
    sh->capacity = span;
    sh->data_offset = HEADER_SIZE;
    sh->window = size.window;
    sh->rcv = size.rcv;
    vs_event_init(&sh->data);
    vs_event_init(&sh->space);
    /* A new memfd is zero: both cursors and flags start at 0, and so does
     * epoch 0 but for its size. */
    atomic_store_explicit(&sh->epoch[0].size, size.window, memory_order_relaxed);
    atomic_store_explicit(&sh->epochs, 1, memory_order_relaxed);
    atomic_store_explicit((_Atomic uint32_t *)&sh->magic, RING_MAGIC, memory_order_release);
    init_private(r, span, size.window, size.rcv, 0);
    return 0;
}

/* The file must not be able to shrink under our mapping: a peer that
 * truncated it would make our next access fault (SIGBUS). */
static int check_file(int fd, size_t *size)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)(HEADER_SIZE + VS_RING_MIN_CAPACITY) ||
        st.st_size > (off_t)(HEADER_SIZE + VS_RING_MAX_SPAN) || st.st_size % PAGE)
        return -EPROTO;
    long seals = vs_syscall(SYS_fcntl, fd, F_GET_SEALS);
    if (seals < 0 || (seals & RING_SEALS) != RING_SEALS)
        return -EPROTO;
    *size = (size_t)st.st_size;
    return 0;
}

/* A producer takes over a ring nobody wrote to: one epoch, the creator's. */
static bool fresh_epochs(struct vs_ring *r, uint64_t window)
{
    struct shared_epoch *e = &r->sh->epoch[0];
    return atomic_load(&r->sh->epochs) == 1 && atomic_load(&e->seq) == 0 &&
           atomic_load(&e->start) == 0 && atomic_load(&e->off) == 0 &&
           atomic_load(&e->size) == window;
}

/* Every field is read once into a local: the peer may change it while we
 * look, and only what we checked may be used. */
static int check_header(struct vs_ring *r)
{
    volatile struct vs_ring_shared *sh = r->sh;
    uint32_t magic = sh->magic, version = sh->version;
    uint64_t span = sh->capacity, offset = sh->data_offset, window = sh->window, rcv = sh->rcv;
    if (magic != RING_MAGIC || version != RING_VERSION || offset != HEADER_SIZE)
        return -EPROTO;
    if (HEADER_SIZE + span != r->map_size || !capacity_ok(window) || window > span)
        return -EPROTO;
    uint64_t head = atomic_load(&r->sh->head), tail = atomic_load(&r->sh->tail);
    if (head - tail > span)
        return -EPROTO;
    if (r->role == VS_RING_PRODUCER ? !fresh_epochs(r, window) : atomic_load(&r->sh->epochs) == 0)
        return -EPROTO;
    init_private(r, span, window, rcv, r->role == VS_RING_PRODUCER ? head : tail);
    r->reclaims = atomic_load(&r->sh->reclaimed);
    r->reclaim_seq = atomic_load(&r->sh->reclaiming) & ~1u;
    return 0;
}

int vs_ring_attach(struct vs_ring *r, int fd, enum vs_ring_role role)
{
    size_t size = 0;
    int rc = check_file(fd, &size);
    if (rc < 0)
        return rc;
    rc = map_ring(r, fd, size, role);
    if (rc < 0)
        return rc;
    rc = check_header(r);
    if (rc < 0) {
        munmap(r->sh, r->map_size + GUARD_SIZE);
        r->sh = NULL;
    }
    return rc;
}

void vs_ring_close_fd(struct vs_ring *r)
{
    if (r->fd >= 0)
        close_fd(r->fd);
    r->fd = -1;
}

void vs_ring_destroy(struct vs_ring *r)
{
    vs_ring_close_fd(r);
    if (r->sh)
        munmap(r->sh, r->map_size + GUARD_SIZE);
    r->sh = NULL;
}

uint64_t vs_ring_peer_rcv(const struct vs_ring *r)
{
    return min_u64(r->rcv, top_size(r));
}

void vs_ring_set_limit(struct vs_ring *r, uint64_t most)
{
    r->limit = most < r->window ? r->window : min_u64(most, top_size(r));
}

/* --- copies ------------------------------------------------------------- */

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Byte AT of epoch E, and how many follow it before E's region ends. */
static unsigned char *at_in(struct vs_ring *r, const struct vs_ring_epoch *e, uint64_t at,
                            size_t *to_end)
{
    uint64_t in = (at - e->start) & (e->size - 1);
    *to_end = (size_t)(e->size - in);
    return r->data + e->off + in;
}

static void copy_in(struct vs_ring *r, uint64_t at, const unsigned char *src, size_t len)
{
    size_t to_end;
    unsigned char *p = at_in(r, &r->ep, at, &to_end);
    size_t first = min_size(len, to_end);
    vs_copy(p, src, first);
    if (len > first)
        vs_copy(r->data + r->ep.off, src + first, len - first);
}

/* LEN is at most E's size (span_at() checks it). */
static void copy_out(struct vs_ring *r, const struct vs_ring_epoch *e, uint64_t at,
                     unsigned char *dst, size_t len)
{
    size_t to_end;
    const unsigned char *p = at_in(r, e, at, &to_end);
    size_t first = min_size(len, to_end);
    vs_copy(dst, p, first);
    if (len > first)
        vs_copy(dst + first, r->data + e->off, len - first);
}

/* Copies at most max bytes into the current epoch; returns how many. */
static size_t iov_to_ring(struct vs_ring *r, const struct iovec *iov, int iovcnt, size_t max)
{
    size_t done = 0;
    for (int i = 0; i < iovcnt && done < max; i++) {
        size_t n = min_size(iov[i].iov_len, max - done);
        if (n)
            copy_in(r, r->pos + done, iov[i].iov_base, n);
        done += n;
    }
    return done;
}

static bool iov_empty(const struct iovec *iov, int iovcnt)
{
    for (int i = 0; i < iovcnt; i++)
        if (iov[i].iov_len)
            return false;
    return true;
}

/* --- epochs as the reader sees them ---------------------------------------- */

/* Epoch SEQ's entry into *E, read once; -EPROTO unless it describes a
 * region inside the span. Its start is for the caller to judge. */
static int read_entry(const struct vs_ring *r, uint64_t seq, struct vs_ring_epoch *e)
{
    struct shared_epoch *s = &r->sh->epoch[seq % VS_RING_EPOCHS];
    e->seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    e->start = atomic_load_explicit(&s->start, memory_order_relaxed);
    e->off = atomic_load_explicit(&s->off, memory_order_relaxed);
    e->size = atomic_load_explicit(&s->size, memory_order_relaxed);
    if (e->seq != seq || !is_pow2(e->size) || e->size < VS_RING_MIN_CAPACITY ||
        e->size > r->capacity || e->off > r->capacity - e->size || e->off % PAGE)
        return -EPROTO;
    return 0;
}

/* A reader's place in the epochs: the epoch of the next byte, and the one
 * after it once known (next.size != 0). */
struct cursor {
    struct vs_ring_epoch ep, next;
};

/* Bytes from Q on (Q before END) that lie in the cursor's epoch, after
 * moving the cursor on if Q is where the next epoch starts. EPOCHS: the
 * count of epochs published, loaded after the head that made END. Nothing
 * read from the table is trusted: the next epoch must start at or after Q
 * and within the span's reach, and no region can hold more unread bytes
 * than its size. */
static int64_t span_at(const struct vs_ring *r, struct cursor *cu, uint64_t q, uint64_t end,
                       uint64_t epochs)
{
    for (int hops = 0; hops <= VS_RING_EPOCHS; hops++) {
        uint64_t after = epochs - cu->ep.seq - 1; /* epochs published after ours */
        if (!cu->next.size && after != 0) {
            if (after > VS_RING_EPOCHS || read_entry(r, cu->ep.seq + 1, &cu->next) < 0 ||
                cu->next.start - q > r->capacity)
                return -EPROTO;
        }
        uint64_t n = end - q;
        if (cu->next.size) {
            uint64_t to_next = cu->next.start - q;
            if (to_next == 0) {
                cu->ep = cu->next;
                cu->next.size = 0;
                continue;
            }
            n = min_u64(n, to_next);
        }
        return n > cu->ep.size ? -EPROTO : (int64_t)n;
    }
    return -EPROTO;
}

/* Copies [Q, END) (at most the iovecs' room) from the epochs CU starts at,
 * moving CU along. Bytes copied or -EPROTO. */
static ssize_t ring_to_iov(struct vs_ring *r, struct cursor *cu, uint64_t q, uint64_t end,
                           uint64_t epochs, const struct iovec *iov, int iovcnt)
{
    size_t done = 0;
    for (int i = 0; i < iovcnt && q != end; i++) {
        unsigned char *dst = iov[i].iov_base;
        size_t left = iov[i].iov_len;
        while (left && q != end) {
            int64_t span = span_at(r, cu, q, end, epochs);
            if (span < 0)
                return span;
            size_t n = min_size(left, (size_t)span);
            copy_out(r, &cu->ep, q, dst, n);
            dst += n;
            left -= n;
            q += n;
            done += n;
        }
    }
    return (ssize_t)done;
}

/* --- the producer's epochs -------------------------------------------------- */

/* Unread bytes from the producer's side. The consumer's cursor comes from
 * the peer: a value outside [head - span, head] is corrupt. */
static int64_t producer_used(struct vs_ring *r)
{
    uint64_t tail = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
    uint64_t used = r->pos - tail;
    return used > r->capacity ? -EPROTO : (int64_t)used;
}

/* Free bytes of the current region, of USED unread in all: the region's
 * own unread bytes are those written since it started, or all of them. */
static uint64_t region_room(const struct vs_ring *r, uint64_t used)
{
    uint64_t mine = min_u64(r->pos - r->ep.start, used);
    uint64_t room = mine >= r->ep.size ? 0 : r->ep.size - mine;
    return used >= r->limit ? 0 : min_u64(room, r->limit - used);
}

/* Starts an epoch in region LEVEL at our cursor. Its entry is published
 * (release) before the head that covers its first byte; the entry it
 * replaces is older than every epoch that still holds unread bytes, as
 * those are at most one per region since the last return to the window. */
static void start_epoch(struct vs_ring *r, unsigned level)
{
    struct vs_ring_epoch e = {r->ep.seq + 1, r->pos, level_off(r->window, level),
                              level_size(r->window, level)};
    struct shared_epoch *s = &r->sh->epoch[e.seq % VS_RING_EPOCHS];
    atomic_store_explicit(&s->seq, e.seq, memory_order_relaxed);
    atomic_store_explicit(&s->start, e.start, memory_order_relaxed);
    atomic_store_explicit(&s->off, e.off, memory_order_relaxed);
    atomic_store_explicit(&s->size, e.size, memory_order_relaxed);
    atomic_store_explicit(&r->sh->epochs, e.seq + 1, memory_order_release);
    r->ep = e;
    r->level = level;
    if (level > r->warm)
        r->warm = level;
}

static bool can_grow(const struct vs_ring *r, uint64_t used)
{
    return used < r->limit && r->level + 1 < r->levels;
}

/* Up the ladder: every region with unread bytes is below the new one. A
 * stream that dipped back into the window returns at once to the largest
 * region it used, while that one's pages are still there. */
static void grow(struct vs_ring *r)
{
    unsigned to = r->level + 1;
    if (r->warm > to)
        to = r->warm;
    start_epoch(r, to);
}

/* The handshake with a consumer that gives the pages back while we may be
 * asleep (vs_ring_reclaim_consumed): we say that we write, then look
 * whether it reclaims; it says that it reclaims, then looks whether we
 * write. Sequentially consistent on both sides (Dekker), so that at least
 * one of the two sees the other: it never punches a page that a write in
 * flight has filled, and we never write while it punches. Costs a locked
 * store per write. */
static bool begin_write(struct vs_ring_shared *sh)
{
    atomic_store_explicit(&sh->writing, 1, memory_order_seq_cst);
    if (!(atomic_load_explicit(&sh->reclaiming, memory_order_seq_cst) & 1))
        return true;
    atomic_store_explicit(&sh->writing, 0, memory_order_release);
    return false;
}

/* Release: a consumer that reads 0 here sees the head we published. */
static void end_write(struct vs_ring_shared *sh)
{
    atomic_store_explicit(&sh->writing, 0, memory_order_release);
}

/* The consumer gave every data page back since we last looked, which it
 * does only when the ring is empty: none above the window holds any now.
 * A count that moves while bytes are unread is a hostile peer's, and
 * changes nothing but what our own reclaim thinks it must punch. */
static void note_peer_reclaim(struct vs_ring *r, uint64_t used)
{
    uint64_t n = atomic_load_explicit(&r->sh->reclaimed, memory_order_relaxed);
    if (n == r->reclaims)
        return;
    r->reclaims = n;
    if (used == 0 && r->level == 0) {
        r->warm = 0;
        r->clean_pos = r->pos;
    }
}

/* vs_ring_write() inside the handshake. */
static ssize_t write_in(struct vs_ring *r, const struct iovec *iov, int iovcnt, int flags)
{
    int64_t used = producer_used(r);
    if (used < 0)
        return used;
    /* Empty: back to the window, so that the regions above it go cold and
     * can be given back (vs_ring_reclaim). */
    if (used == 0 && r->level != 0)
        start_epoch(r, 0);
    note_peer_reclaim(r, (uint64_t)used);
    uint64_t room = region_room(r, (uint64_t)used);
    if (room == 0) {
        if (iov_empty(iov, iovcnt))
            return 0;
        if (!can_grow(r, (uint64_t)used))
            return -EAGAIN;
        if (flags & VS_RING_NO_GROW)
            return -ENOSPC;
        grow(r);
        room = region_room(r, (uint64_t)used);
    }
    size_t n = iov_to_ring(r, iov, iovcnt, room);
    if (n == 0)
        return 0;
    /* Release: the bytes are visible before the cursor that covers them. */
    r->pos += n;
    atomic_store_explicit(&r->sh->head, r->pos, memory_order_release);
    return (ssize_t)n;
}

ssize_t vs_ring_write(struct vs_ring *r, const struct iovec *iov, int iovcnt, int flags)
{
    struct vs_ring_shared *sh = r->sh;
    if (atomic_load_explicit(&sh->reader_closed, memory_order_acquire) ||
        atomic_load_explicit(&sh->writer_closed, memory_order_relaxed))
        return -EPIPE;
    /* The consumer is giving the pages back: no room for a moment. It
     * wakes a producer asleep on space when it is done, as a read does. */
    if (!begin_write(sh))
        return -EAGAIN;
    ssize_t n = write_in(r, iov, iovcnt, flags);
    end_write(sh);
    if (n > 0 && r->futex_signal)
        vs_event_signal(&sh->data);
    return n;
}

/* Unread bytes from the consumer's side; the producer's cursor must lie in
 * [tail, tail + span]. */
static int64_t consumer_avail(struct vs_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->sh->head, memory_order_acquire);
    uint64_t avail = head - r->pos;
    return avail > r->capacity ? -EPROTO : (int64_t)avail;
}

/* The common case: no epoch after ours, so the AVAIL unread bytes are all
 * in its region (unless the peer lies: then -EPROTO). */
static ssize_t read_in_epoch(struct vs_ring *r, uint64_t avail, const struct iovec *iov, int iovcnt)
{
    if (avail > r->ep.size)
        return -EPROTO;
    size_t done = 0;
    for (int i = 0; i < iovcnt && done < avail; i++) {
        size_t n = min_size(iov[i].iov_len, (size_t)avail - done);
        if (n)
            copy_out(r, &r->ep, r->pos + done, iov[i].iov_base, n);
        done += n;
    }
    return (ssize_t)done;
}

/* Across epochs; our place in them moves on unless we only peek. */
static ssize_t read_epochs(struct vs_ring *r, uint64_t avail, uint64_t epochs,
                           const struct iovec *iov, int iovcnt, int flags)
{
    struct cursor cu = {r->ep, r->next};
    ssize_t n = ring_to_iov(r, &cu, r->pos, r->pos + avail, epochs, iov, iovcnt);
    if (n > 0 && !(flags & VS_RING_PEEK)) {
        r->ep = cu.ep;
        r->next = cu.next;
    }
    return n;
}

ssize_t vs_ring_read(struct vs_ring *r, const struct iovec *iov, int iovcnt, int flags)
{
    struct vs_ring_shared *sh = r->sh;
    /* The flag before the cursor: the writer sets it after its last
     * publication, so seeing it guarantees we see every byte. */
    uint32_t closed = atomic_load_explicit(&sh->writer_closed, memory_order_acquire);
    int64_t avail = consumer_avail(r);
    if (avail <= 0)
        return avail < 0 ? avail : closed == RESET ? -ECONNRESET : closed ? 0 : -EAGAIN;
    /* After the head: every epoch below it is published. */
    uint64_t epochs = atomic_load_explicit(&sh->epochs, memory_order_acquire);
    ssize_t n = epochs == r->ep.seq + 1
                    ? read_in_epoch(r, (uint64_t)avail, iov, iovcnt)
                    : read_epochs(r, (uint64_t)avail, epochs, iov, iovcnt, flags);
    if (n <= 0 || (flags & VS_RING_PEEK))
        return n;
    /* Release: our copy is done before the producer may reuse the space. */
    r->pos += (uint64_t)n;
    atomic_store_explicit(&sh->tail, r->pos, memory_order_release);
    if (r->futex_signal)
        vs_event_signal(&sh->space);
    return n;
}

ssize_t vs_ring_readable(struct vs_ring *r)
{
    return r->role == VS_RING_CONSUMER ? consumer_avail(r) : producer_used(r);
}

ssize_t vs_ring_writable(struct vs_ring *r)
{
    int64_t used = producer_used(r);
    if (used < 0)
        return used;
    if (atomic_load_explicit(&r->sh->reclaiming, memory_order_acquire) & 1)
        return 0; /* for a moment: vs_ring_write() would say -EAGAIN */
    return (uint64_t)used >= r->limit ? 0 : (ssize_t)(r->limit - (uint64_t)used);
}

bool vs_ring_reclaiming(struct vs_ring *r)
{
    return atomic_load_explicit(&r->sh->reclaiming, memory_order_acquire) & 1;
}

ssize_t vs_ring_room(struct vs_ring *r)
{
    int64_t used = producer_used(r);
    return used < 0 ? used : (ssize_t)region_room(r, (uint64_t)used);
}

void vs_ring_close_writer(struct vs_ring *r, bool reset)
{
    atomic_store_explicit(&r->sh->writer_closed, reset ? RESET : 1, memory_order_release);
    vs_event_signal(&r->sh->data);
}

void vs_ring_close_reader(struct vs_ring *r)
{
    atomic_store_explicit(&r->sh->reader_closed, 1, memory_order_release);
    vs_event_signal(&r->sh->space);
}

int vs_ring_peer_closed(struct vs_ring *r)
{
    _Atomic uint32_t *flag =
        r->role == VS_RING_PRODUCER ? &r->sh->reader_closed : &r->sh->writer_closed;
    return atomic_load_explicit(flag, memory_order_acquire) != 0;
}

void vs_ring_arm(struct vs_ring *r, int delta)
{
    struct vs_event *ev = r->role == VS_RING_CONSUMER ? &r->sh->data : &r->sh->space;
    if (delta > 0) {
        /* seq is unused without futex signalling: it says "a wake-up is on
         * its way", so that the peer sends one per sleep, not one per write. */
        atomic_store_explicit(&ev->seq, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&ev->waiters, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
    } else {
        atomic_fetch_sub_explicit(&ev->waiters, 1, memory_order_relaxed);
    }
}

void vs_ring_rearm(struct vs_ring *r)
{
    struct vs_event *ev = r->role == VS_RING_CONSUMER ? &r->sh->data : &r->sh->space;
    atomic_store_explicit(&ev->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
}

bool vs_ring_consumer_sleeping(struct vs_ring *r, uint64_t head_before)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&r->sh->data.waiters, memory_order_relaxed) == 0 ||
        atomic_load_explicit(&r->sh->tail, memory_order_relaxed) != head_before)
        return false;
    return r->futex_signal ||
           atomic_exchange_explicit(&r->sh->data.seq, 1, memory_order_relaxed) == 0;
}

bool vs_ring_producer_sleeping(struct vs_ring *r)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&r->sh->space.waiters, memory_order_relaxed) == 0)
        return false;
    return r->futex_signal ||
           atomic_exchange_explicit(&r->sh->space.seq, 1, memory_order_relaxed) == 0;
}

uint64_t vs_ring_head(struct vs_ring *r)
{
    return atomic_load_explicit(&r->sh->head, memory_order_acquire);
}

uint64_t vs_ring_tail(struct vs_ring *r)
{
    return atomic_load_explicit(&r->sh->tail, memory_order_acquire);
}

uint64_t vs_ring_space_mark(struct vs_ring *r)
{
    return vs_ring_tail(r) + atomic_load_explicit(&r->sh->reclaiming, memory_order_acquire);
}

/* Producer: the epoch of stream position AT in [tail, head], from our own
 * current epoch back through the table (which the peer can scribble on:
 * entries are checked as the consumer checks them). */
static int find_epoch(struct vs_ring *r, uint64_t at, struct vs_ring_epoch *e)
{
    *e = r->ep;
    for (int back = 0; back < VS_RING_EPOCHS; back++) {
        if (back > 0 && read_entry(r, r->ep.seq - (uint64_t)back, e) < 0)
            return -EPROTO;
        if (at - e->start <= r->pos - e->start)
            return 0;
        if (e->seq == 0)
            break;
    }
    return -EPROTO;
}

ssize_t vs_ring_unread_copy(struct vs_ring *r, uint64_t from, void *buf, size_t len)
{
    uint64_t tail = vs_ring_tail(r);
    if (r->pos - tail > r->capacity || from - tail > r->pos - tail)
        return -EPROTO;
    struct cursor cu = {.next = {0, 0, 0, 0}};
    if (from == r->pos || len == 0)
        return 0;
    if (find_epoch(r, from, &cu.ep) < 0)
        return -EPROTO;
    size_t n = min_size(len, (size_t)(r->pos - from));
    struct iovec iov = {buf, n};
    return ring_to_iov(r, &cu, from, from + n, r->ep.seq + 1, &iov, 1);
}

/* --- reclaim ---------------------------------------------------------------- */

/* Frees the pages of [FROM, TO) of the data area. The file keeps its size:
 * the peer's mapping stays valid and reads zeros there. */
static void punch(struct vs_ring *r, uint64_t from, uint64_t to)
{
    if (to > from)
        madvise(r->data + from, (size_t)(to - from), MADV_REMOVE);
}

/* The end of the highest region that may hold pages. */
static uint64_t warm_end(const struct vs_ring *r)
{
    return level_off(r->window, r->warm + 1);
}

bool vs_ring_reclaim(struct vs_ring *r, long now_ns, long idle_ns)
{
    if (r->role != VS_RING_PRODUCER || !r->sh || (r->pos == r->clean_pos && r->warm == 0))
        return false;
    /* Since when nothing was written, and since when the epoch is the same. */
    if (r->pos != r->mark_pos) {
        r->mark_pos = r->pos;
        r->mark_pos_ns = now_ns;
    }
    if (r->ep.seq != r->mark_seq) {
        r->mark_seq = r->ep.seq;
        r->mark_seq_ns = now_ns;
    }
    int64_t used = producer_used(r);
    if (used < 0)
        return false;
    note_peer_reclaim(r, (uint64_t)used);
    if (r->pos == r->clean_pos && r->warm == 0)
        return false; /* the consumer did it */
    if (used == 0 && now_ns - r->mark_pos_ns >= idle_ns) {
        /* Idle and read to the end: no byte anywhere is wanted any more. */
        if (r->level != 0)
            start_epoch(r, 0);
        punch(r, 0, warm_end(r));
        r->clean_pos = r->pos;
        r->warm = 0;
        return false;
    }
    if (r->level == 0 && r->warm > 0 && now_ns - r->mark_seq_ns >= idle_ns) {
        /* In the window since then: every byte above it was read before
         * the ring came back to it. */
        punch(r, r->window, warm_end(r));
        r->warm = 0;
    }
    return r->pos != r->clean_pos || r->warm > 0;
}

/* The consumer's side of the handshake (begin_write): with a producer
 * that went quiet and a ring read to its end, every data page may go,
 * whatever the producer's program does meanwhile. One that writes (or died
 * writing, or lies that it writes) keeps them: we never wait for it. */
bool vs_ring_reclaim_consumed(struct vs_ring *r, long now_ns, long idle_ns)
{
    struct vs_ring_shared *sh = r->sh;
    if (r->role != VS_RING_CONSUMER || !sh)
        return false;
    uint64_t head = atomic_load_explicit(&sh->head, memory_order_acquire);
    if (head != r->mark_pos) {
        r->mark_pos = head;
        r->mark_pos_ns = now_ns;
    }
    /* Bytes unread, nothing written since we gave the pages back, or not
     * quiet long enough. */
    if (head != r->pos || head == r->clean_pos || now_ns - r->mark_pos_ns < idle_ns)
        return false;
    atomic_store_explicit(&sh->reclaiming, ++r->reclaim_seq, memory_order_seq_cst); /* odd */
    bool quiet = atomic_load_explicit(&sh->writing, memory_order_seq_cst) == 0 &&
                 atomic_load_explicit(&sh->head, memory_order_acquire) == r->pos;
    if (quiet) {
        /* The whole span: holes cost nothing to punch again, and the
         * producer's private view of which regions hold pages is its own. */
        punch(r, 0, r->capacity);
        r->clean_pos = r->pos;
        atomic_store_explicit(&sh->reclaimed, ++r->reclaims, memory_order_relaxed);
    }
    /* Release: a producer that sees this (even) writes after the punch. */
    atomic_store_explicit(&sh->reclaiming, ++r->reclaim_seq, memory_order_release);
    if (r->futex_signal)
        vs_event_signal(&sh->space);
    return true;
}

/* Wake-up conditions; a corrupt cursor also ends the wait, so that the
 * retried operation reports it. */
static int consumer_ready(void *arg)
{
    struct vs_ring *r = arg;
    return atomic_load_explicit(&r->sh->head, memory_order_acquire) != r->pos ||
           atomic_load_explicit(&r->sh->writer_closed, memory_order_acquire);
}

static int producer_ready(void *arg)
{
    struct vs_ring *r = arg;
    return vs_ring_writable(r) != 0 ||
           atomic_load_explicit(&r->sh->reader_closed, memory_order_acquire);
}

int vs_ring_wait(struct vs_ring *r, const struct vs_wait_opts *opts)
{
    if (r->role == VS_RING_CONSUMER)
        return vs_event_wait(&r->sh->data, consumer_ready, r, opts);
    return vs_event_wait(&r->sh->space, producer_ready, r, opts);
}
