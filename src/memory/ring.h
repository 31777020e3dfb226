/* ring.h - a single-producer/single-consumer byte ring in shared memory.
 *
 * One ring carries one direction of one connection. It lives in a sealed
 * memfd that its creator passes to exactly one peer (SCM_RIGHTS); one side
 * is the producer, the other the consumer. The data path takes no lock:
 * the producer copies bytes in and publishes them with a release store of
 * its cursor; the consumer copies them out and frees the space with a
 * release store of its own.
 *
 * The peer is not trusted. Everything in the shared header is validated on
 * attach, sizes are taken from the file itself, and every read of the
 * peer's cursor is bounds-checked: a corrupt ring makes an operation return
 * -EPROTO (the connection layer turns it into ECONNRESET), never a crash or
 * an access outside the mapping. Each side keeps its own cursor privately
 * and only publishes it, so scribbling on it changes nothing for its owner.
 *
 * Results follow the socket calls they serve: a byte count, or a negative
 * errno (-EAGAIN, -EPIPE, -EPROTO...), 0 meaning end of stream on read. */
#ifndef VSOCKET_RING_H
#define VSOCKET_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "memory/wait.h"

#define VS_RING_MIN_CAPACITY (4u << 10)
#define VS_RING_MAX_CAPACITY (64u << 20)

enum vs_ring_role { VS_RING_PRODUCER, VS_RING_CONSUMER };

/* vs_ring_read() flags. */
#define VS_RING_PEEK 1 /* copy out but leave the bytes in the ring (MSG_PEEK) */

struct vs_ring_shared;

/* One side's private view of a ring. */
struct vs_ring {
    struct vs_ring_shared *sh;
    unsigned char *data;
    uint64_t capacity; /* validated copy: never re-read from shared memory */
    uint64_t pos;      /* our own cursor: head if producer, tail if consumer */
    size_t map_size;
    int fd; /* the memfd, -1 once closed */
    enum vs_ring_role role;
    /* Wake a vs_ring_wait() sleeper with FUTEX_WAKE after each operation
     * (default). The socket layer sleeps in the kernel on its side channel
     * instead and sets this to false: see vs_ring_arm(). */
    bool futex_signal;
};

/* The capacity to use for a requested buffer size: the next power of two,
 * clamped to the bounds. */
uint64_t vs_ring_capacity_for(uint64_t want);

/* Creates a ring (capacity: a power of two within the bounds) and maps it.
 * 0 or -errno. */
int vs_ring_create(struct vs_ring *r, uint64_t capacity, enum vs_ring_role role);

/* Maps a ring received from the peer, after validating it. Takes ownership
 * of fd only on success. 0, -EPROTO (not a valid ring) or -errno. */
int vs_ring_attach(struct vs_ring *r, int fd, enum vs_ring_role role);

/* Closes the memfd (after it was sent to the peer); the mapping stays. */
void vs_ring_close_fd(struct vs_ring *r);

/* Unmaps and closes. Does not tell the peer: close our side first. */
void vs_ring_destroy(struct vs_ring *r);

/* Producer: copies up to the free space from iov; bytes written, -EAGAIN
 * when full, -EPIPE when the reader is gone or we shut down, -EPROTO. */
ssize_t vs_ring_write(struct vs_ring *r, const struct iovec *iov, int iovcnt);

/* Consumer: copies up to the readable bytes into iov; bytes read, 0 at end
 * of stream (writer shut down and every byte read), -EAGAIN when empty,
 * -EPROTO. */
ssize_t vs_ring_read(struct vs_ring *r, const struct iovec *iov, int iovcnt, int flags);

/* Bytes the consumer may read now (FIONREAD), or -EPROTO. Either side. */
ssize_t vs_ring_readable(struct vs_ring *r);

/* Bytes the producer may write now, or -EPROTO. Producer only. */
ssize_t vs_ring_writable(struct vs_ring *r);

/* The producer shuts down: the consumer reads what is left, then 0. */
void vs_ring_close_writer(struct vs_ring *r);

/* The consumer is gone: the producer's writes fail with -EPIPE. */
void vs_ring_close_reader(struct vs_ring *r);

/* Whether the other side closed its end. */
int vs_ring_peer_closed(struct vs_ring *r);

/* Announces (DELTA 1) or withdraws (-1) a sleeper of our role: the peer
 * then wakes us through the side channel. Full fence after announcing:
 * look at the ring once more before sleeping. */
void vs_ring_arm(struct vs_ring *r, int delta);

/* For a sleeper that stays announced (a socket in an epoll set that is
 * itself watched by another epoll or poll): ask for the next wake-up too. */
void vs_ring_rearm(struct vs_ring *r);

/* After a write that started at HEAD_BEFORE (our cursor before it): whether
 * the consumer may sleep waiting for it, i.e. it had read everything and
 * announced a sleep. Full fence first, pairing with vs_ring_arm(). */
bool vs_ring_consumer_sleeping(struct vs_ring *r, uint64_t head_before);

/* After a read: whether the producer announced a sleep for space. */
bool vs_ring_producer_sleeping(struct vs_ring *r);

/* The producer's cursor (consumer side: how far the peer wrote) and the
 * consumer's (producer side: how far the peer read), as published. */
uint64_t vs_ring_head(struct vs_ring *r);
uint64_t vs_ring_tail(struct vs_ring *r);

/* Producer: copies the unread bytes from stream position FROM (a cursor
 * value in [tail, head]) into BUF, at most LEN; -EPROTO if out of range. */
ssize_t vs_ring_unread_copy(struct vs_ring *r, uint64_t from, void *buf, size_t len);

/* Waits until the operation of our role can make progress: something to
 * read or end of stream (consumer), space or reader gone (producer), or the
 * ring is corrupt. Results as vs_event_wait(). */
int vs_ring_wait(struct vs_ring *r, const struct vs_wait_opts *opts);

#endif
