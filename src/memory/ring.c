/* ring.c - single-producer/single-consumer byte ring in a sealed memfd. */
#include "memory/ring.h"
#include "memory/copy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RING_MAGIC 0x67727376u /* "vsrg" */
#define RING_VERSION 1u
#define HEADER_SIZE 4096u /* the data starts on its own page */
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define GUARD_SIZE 4096u

/* The shared header. Each side writes only its own cache lines, so a write
 * by one never invalidates a line the other is polling, apart from the
 * cursor it waits for. Cursors run freely on 64 bits: head - tail is the
 * number of unread bytes, without wrap ambiguity. */
struct vs_ring_shared {
    /* Written once by the creator. */
    alignas(64) uint32_t magic;
    uint32_t version;
    uint64_t capacity;
    uint64_t data_offset;
    /* Written by the producer. */
    alignas(64) _Atomic uint64_t head; /* bytes ever published */
    _Atomic uint32_t writer_closed;
    /* Written by the consumer. */
    alignas(64) _Atomic uint64_t tail; /* bytes ever consumed */
    _Atomic uint32_t reader_closed;
    /* The consumer sleeps on data, the producer on space. */
    alignas(64) struct vs_event data;
    alignas(64) struct vs_event space;
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

uint64_t vs_ring_capacity_for(uint64_t want)
{
    uint64_t c = VS_RING_MIN_CAPACITY;
    while (c < want && c < VS_RING_MAX_CAPACITY)
        c <<= 1;
    return c;
}

/* Raw syscalls: close() and fcntl() are interposed inside libvsocket. */
static void close_fd(int fd)
{
    syscall(SYS_close, fd);
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
    r->sh = p;
    r->data = (unsigned char *)p + HEADER_SIZE;
    r->map_size = size;
    r->fd = fd;
    r->role = role;
    return 0;
}

int vs_ring_create(struct vs_ring *r, uint64_t capacity, enum vs_ring_role role)
{
    if (!capacity_ok(capacity))
        return -EINVAL;
    size_t size = HEADER_SIZE + capacity;
    int fd = memfd_create("vsocket-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (ftruncate(fd, (off_t)size) < 0 || syscall(SYS_fcntl, fd, F_ADD_SEALS, RING_SEALS) < 0)
        rc = -errno;
    if (rc == 0)
        rc = map_ring(r, fd, size, role);
    if (rc < 0) {
        close_fd(fd);
        return rc;
    }
    struct vs_ring_shared *sh = r->sh;
    sh->version = RING_VERSION;
    sh->capacity = capacity;
    sh->data_offset = HEADER_SIZE;
    vs_event_init(&sh->data);
    vs_event_init(&sh->space);
    /* A new memfd is zero: both cursors and flags start at 0. */
    atomic_store_explicit((_Atomic uint32_t *)&sh->magic, RING_MAGIC, memory_order_release);
    r->capacity = capacity;
    r->pos = 0;
    r->futex_signal = true;
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
        st.st_size > (off_t)(HEADER_SIZE + VS_RING_MAX_CAPACITY))
        return -EPROTO;
    long seals = syscall(SYS_fcntl, fd, F_GET_SEALS);
    if (seals < 0 || (seals & RING_SEALS) != RING_SEALS)
        return -EPROTO;
    *size = (size_t)st.st_size;
    return 0;
}

/* Every field is read once into a local: the peer may change it while we
 * look, and only what we checked may be used. */
static int check_header(struct vs_ring *r)
{
    volatile struct vs_ring_shared *sh = r->sh;
    uint32_t magic = sh->magic, version = sh->version;
    uint64_t capacity = sh->capacity, offset = sh->data_offset;
    if (magic != RING_MAGIC || version != RING_VERSION || offset != HEADER_SIZE)
        return -EPROTO;
    if (!capacity_ok(capacity) || HEADER_SIZE + capacity != r->map_size)
        return -EPROTO;
    r->capacity = capacity;
    uint64_t head = atomic_load(&r->sh->head), tail = atomic_load(&r->sh->tail);
    if (head - tail > capacity)
        return -EPROTO;
    r->pos = r->role == VS_RING_PRODUCER ? head : tail;
    r->futex_signal = true;
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

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static void copy_in(struct vs_ring *r, uint64_t at, const unsigned char *src, size_t len)
{
    size_t off = at & (r->capacity - 1);
    size_t first = min_size(len, r->capacity - off);
    vs_copy(r->data + off, src, first);
    if (len > first)
        vs_copy(r->data, src + first, len - first);
}

static void copy_out(struct vs_ring *r, uint64_t at, unsigned char *dst, size_t len)
{
    size_t off = at & (r->capacity - 1);
    size_t first = min_size(len, r->capacity - off);
    vs_copy(dst, r->data + off, first);
    if (len > first)
        vs_copy(dst + first, r->data, len - first);
}

/* Copies at most max bytes; returns how many. */
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

static size_t ring_to_iov(struct vs_ring *r, const struct iovec *iov, int iovcnt, size_t max)
{
    size_t done = 0;
    for (int i = 0; i < iovcnt && done < max; i++) {
        size_t n = min_size(iov[i].iov_len, max - done);
        if (n)
            copy_out(r, r->pos + done, iov[i].iov_base, n);
        done += n;
    }
    return done;
}

/* Unread bytes from the producer's side. The consumer's cursor comes from
 * the peer: a value outside [head - capacity, head] is corrupt. */
static int64_t producer_used(struct vs_ring *r)
{
    uint64_t tail = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
    uint64_t used = r->pos - tail;
    return used > r->capacity ? -EPROTO : (int64_t)used;
}

/* Unread bytes from the consumer's side; the producer's cursor must lie in
 * [tail, tail + capacity]. */
static int64_t consumer_avail(struct vs_ring *r)
{
    uint64_t head = atomic_load_explicit(&r->sh->head, memory_order_acquire);
    uint64_t avail = head - r->pos;
    return avail > r->capacity ? -EPROTO : (int64_t)avail;
}

ssize_t vs_ring_write(struct vs_ring *r, const struct iovec *iov, int iovcnt)
{
    struct vs_ring_shared *sh = r->sh;
    if (atomic_load_explicit(&sh->reader_closed, memory_order_acquire) ||
        atomic_load_explicit(&sh->writer_closed, memory_order_relaxed))
        return -EPIPE;
    int64_t used = producer_used(r);
    if (used < 0)
        return used;
    size_t n = iov_to_ring(r, iov, iovcnt, r->capacity - (uint64_t)used);
    if (n == 0)
        return (uint64_t)used == r->capacity ? -EAGAIN : 0;
    /* Release: the bytes are visible before the cursor that covers them. */
    r->pos += n;
    atomic_store_explicit(&sh->head, r->pos, memory_order_release);
    if (r->futex_signal)
        vs_event_signal(&sh->data);
    return (ssize_t)n;
}

ssize_t vs_ring_read(struct vs_ring *r, const struct iovec *iov, int iovcnt, int flags)
{
    struct vs_ring_shared *sh = r->sh;
    /* The flag before the cursor: the writer sets it after its last
     * publication, so seeing it guarantees we see every byte. */
    int closed = atomic_load_explicit(&sh->writer_closed, memory_order_acquire) != 0;
    int64_t avail = consumer_avail(r);
    if (avail <= 0)
        return avail < 0 ? avail : closed ? 0 : -EAGAIN;
    size_t n = ring_to_iov(r, iov, iovcnt, (size_t)avail);
    if (n == 0 || (flags & VS_RING_PEEK))
        return (ssize_t)n;
    /* Release: our copy is done before the producer may reuse the space. */
    r->pos += n;
    atomic_store_explicit(&sh->tail, r->pos, memory_order_release);
    if (r->futex_signal)
        vs_event_signal(&sh->space);
    return (ssize_t)n;
}

ssize_t vs_ring_readable(struct vs_ring *r)
{
    return r->role == VS_RING_CONSUMER ? consumer_avail(r) : producer_used(r);
}

ssize_t vs_ring_writable(struct vs_ring *r)
{
    int64_t used = producer_used(r);
    return used < 0 ? used : (ssize_t)(r->capacity - (uint64_t)used);
}

void vs_ring_close_writer(struct vs_ring *r)
{
    atomic_store_explicit(&r->sh->writer_closed, 1, memory_order_release);
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

ssize_t vs_ring_unread_copy(struct vs_ring *r, uint64_t from, void *buf, size_t len)
{
    uint64_t tail = vs_ring_tail(r);
    if (r->pos - tail > r->capacity || from - tail > r->pos - tail)
        return -EPROTO;
    size_t n = min_size(len, (size_t)(r->pos - from));
    copy_out(r, from, buf, n);
    return (ssize_t)n;
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
    uint64_t tail = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
    return r->pos - tail != r->capacity ||
           atomic_load_explicit(&r->sh->reader_closed, memory_order_acquire);
}

int vs_ring_wait(struct vs_ring *r, const struct vs_wait_opts *opts)
{
    if (r->role == VS_RING_CONSUMER)
        return vs_event_wait(&r->sh->data, consumer_ready, r, opts);
    return vs_event_wait(&r->sh->space, producer_ready, r, opts);
}
