/* fdtable.c - the fd table: a two-level array of atomic slots. */
#include "core/fdtable.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>

#include "config/stats.h"
#include "base/real.h"

#define SLOTS_PER_CHUNK 1024
#define CHUNKS 16384 /* 16 Mi fds; fds beyond pass through untracked */

#define FOREIGN ((struct vs_sock *)1)
#define CLOSING ((struct vs_sock *)2)

typedef _Atomic(struct vs_sock *) slot_t;

static _Atomic(slot_t *) chunks[CHUNKS];
static _Atomic unsigned chunks_used; /* highest chunk index + 1 ever created */

static bool is_sock(struct vs_sock *s)
{
    return (uintptr_t)s > (uintptr_t)CLOSING;
}

/* Chunks are created on first use and never freed. */
static slot_t *slot_of(int fd, bool create)
{
    if (fd < 0 || (unsigned)fd >= (unsigned)CHUNKS * SLOTS_PER_CHUNK)
        return NULL;
    unsigned c = (unsigned)fd / SLOTS_PER_CHUNK;
    slot_t *chunk = atomic_load_explicit(&chunks[c], memory_order_acquire);
    if (!chunk) {
        if (!create)
            return NULL;
        int saved_errno = errno;
        void *p = mmap(NULL, SLOTS_PER_CHUNK * sizeof(slot_t), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        errno = saved_errno;
        if (p == MAP_FAILED)
            return NULL;
        slot_t *expected = NULL;
        if (atomic_compare_exchange_strong(&chunks[c], &expected, (slot_t *)p)) {
            chunk = p;
            unsigned used = atomic_load(&chunks_used);
            while (used < c + 1 && !atomic_compare_exchange_weak(&chunks_used, &used, c + 1))
                ;
        } else {
            munmap(p, SLOTS_PER_CHUNK * sizeof(slot_t));
            chunk = expected;
        }
    }
    return &chunk[(unsigned)fd % SLOTS_PER_CHUNK];
}

/* Another fd that names S, or -1. Only needed when a dup'd socket loses the
 * fd its statistics show, which is rare enough for a scan. */
static int other_fd_of(struct vs_sock *s, int except)
{
    unsigned used = atomic_load(&chunks_used);
    for (unsigned c = 0; c < used; c++) {
        slot_t *chunk = atomic_load(&chunks[c]);
        for (unsigned i = 0; chunk && i < SLOTS_PER_CHUNK; i++) {
            int fd = (int)(c * SLOTS_PER_CHUNK + i);
            if (fd != except && atomic_load_explicit(&chunk[i], memory_order_relaxed) == s)
                return fd;
        }
    }
    return -1;
}

/* FD stops naming S. */
static void detach(struct vs_sock *s, int fd)
{
    if (atomic_load(&s->refs) > 1 && s->stat->fd == fd) {
        int other = other_fd_of(s, fd);
        if (other >= 0)
            vs_stats_set_fd(s->stat, other);
    }
    vs_sock_put(s);
}

static struct vs_sock *adopt(int fd, slot_t *slot)
{
    int saved_errno = errno;
    struct vs_sock *s = vs_sock_adopt(fd);
    errno = saved_errno;
    struct vs_sock *expected = NULL;
    if (!s) {
        /* Not ours. Only cache that for an fd that exists, so that a call on
         * a bad fd does not hide a socket created later under that number. */
        if (vs_real.fcntl(fd, F_GETFD) >= 0)
            atomic_compare_exchange_strong(slot, &expected, FOREIGN);
        errno = saved_errno;
        return NULL;
    }
    vs_sock_ref(s); /* one for the slot, one for the caller */
    if (!atomic_compare_exchange_strong(slot, &expected, s)) {
        /* Someone else filled the slot meanwhile: theirs wins. */
        vs_sock_put(s);
        vs_sock_put(s);
        return vs_fd_get(fd);
    }
    return s;
}

/* A reference on the socket SLOT names, or NULL (*EMPTY: nothing yet). */
static struct vs_sock *slot_ref(slot_t *slot, bool *empty)
{
    for (;;) {
        struct vs_sock *s = atomic_load_explicit(slot, memory_order_acquire);
        *empty = !s;
        if (!is_sock(s))
            return NULL;
        if (vs_sock_tryref(s)) {
            if (atomic_load_explicit(slot, memory_order_acquire) == s)
                return s;
            vs_sock_put(s);
        }
    }
}

struct vs_sock *vs_fd_get(int fd)
{
    slot_t *slot = slot_of(fd, true);
    bool empty;
    struct vs_sock *s = slot ? slot_ref(slot, &empty) : NULL;
    return slot && empty ? adopt(fd, slot) : s;
}

struct vs_sock *vs_fd_peek(int fd)
{
    slot_t *slot = slot_of(fd, false);
    bool empty;
    return slot ? slot_ref(slot, &empty) : NULL;
}

void vs_fd_set(int fd, struct vs_sock *s)
{
    slot_t *slot = slot_of(fd, true);
    if (!slot) {
        if (s)
            vs_sock_put(s);
        return;
    }
    struct vs_sock *old = atomic_exchange(slot, s ? s : FOREIGN);
    if (is_sock(old))
        detach(old, fd);
}

struct vs_sock *vs_fd_close_begin(int fd)
{
    slot_t *slot = slot_of(fd, false);
    if (!slot)
        return NULL;
    struct vs_sock *old = atomic_exchange(slot, CLOSING);
    return is_sock(old) ? old : NULL;
}

void vs_fd_close_end(int fd, struct vs_sock *s)
{
    slot_t *slot = slot_of(fd, false);
    if (slot) {
        /* A socket created under this number after the real close owns the
         * slot now; leave it. */
        struct vs_sock *expected = CLOSING;
        atomic_compare_exchange_strong(slot, &expected, NULL);
    }
    if (s)
        detach(s, fd);
}

void vs_fd_forget_range(unsigned first, unsigned last)
{
    unsigned end = atomic_load(&chunks_used) * SLOTS_PER_CHUNK;
    if (last >= end)
        last = end - 1;
    for (unsigned fd = first; end && fd <= last; fd++) {
        slot_t *slot = slot_of((int)fd, false);
        if (!slot)
            continue;
        struct vs_sock *old = atomic_exchange(slot, NULL);
        if (is_sock(old))
            detach(old, (int)fd);
    }
}

/* A socket named by an fd in [FROM, TO] whose transport state is CONN,
 * with a reference, or NULL. */
static struct vs_sock *conn_named(const void *conn, unsigned from, unsigned to)
{
    for (unsigned fd = from; fd <= to; fd++) {
        slot_t *slot = slot_of((int)fd, false);
        struct vs_sock *s = slot ? atomic_load_explicit(slot, memory_order_acquire) : NULL;
        if (!is_sock(s) || !vs_sock_tryref(s))
            continue;
        if (s->conn == conn)
            return s;
        vs_sock_put(s);
    }
    return NULL;
}

struct vs_sock *vs_fd_conn_outside(const void *conn, unsigned first, unsigned last)
{
    unsigned end = atomic_load(&chunks_used) * SLOTS_PER_CHUNK;
    struct vs_sock *s = NULL;
    if (end == 0)
        return NULL;
    if (first > 0)
        s = conn_named(conn, 0, first - 1);
    if (!s && last < end - 1)
        s = conn_named(conn, last + 1, end - 1);
    return s;
}

void vs_fd_for_each(void (*fn)(int fd, struct vs_sock *s, void *arg), void *arg)
{
    unsigned used = atomic_load(&chunks_used);
    for (unsigned c = 0; c < used && c < CHUNKS; c++) {
        slot_t *chunk = atomic_load_explicit(&chunks[c], memory_order_acquire);
        if (!chunk)
            continue;
        for (unsigned i = 0; i < SLOTS_PER_CHUNK; i++) {
            struct vs_sock *s = atomic_load_explicit(&chunk[i], memory_order_acquire);
            if (!is_sock(s) || !vs_sock_tryref(s))
                continue;
            fn((int)(c * SLOTS_PER_CHUNK + i), s, arg);
            vs_sock_put(s);
        }
    }
}
