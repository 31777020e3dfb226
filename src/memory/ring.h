/* ring.h - a single-producer/single-consumer byte ring in shared memory
 * that grows when its writer fills it and gives its memory back when idle.
 *
 * One ring carries one direction of one connection. It lives in a sealed
 * memfd that its creator passes to exactly one peer (SCM_RIGHTS); one side
 * is the producer, the other the consumer. The data path takes no lock:
 * the producer copies bytes in and publishes them with a release store of
 * its cursor; the consumer copies them out and frees the space with a
 * release store of its own.
 *
 * Growth: the memfd is a large sparse *span* (shmem allocates a page only
 * when it is touched), laid out as a ladder of regions of 1, 2, 4 ... times
 * the first one (the *window*), one after the other. The producer writes in
 * one region at a time; when it is full and the producer's limit allows, it
 * starts an *epoch* in a larger region, and when the ring is empty it goes
 * back to the window. An epoch table in the shared header says where each
 * stream position lives; entries are published before the bytes they
 * cover. Regions with unread bytes never overlap: since the last return to
 * the window the producer only moved up the ladder.
 *
 * Reclaim: pages go back (MADV_REMOVE) when no byte in them is wanted. The
 * producer frees them from its own calls; the consumer too, once the ring
 * is empty and its producer quiet, through a handshake that tells it no
 * write is in flight (a writer whose program never calls again would keep
 * them otherwise). The file's size never changes, so the peer's mapping
 * stays valid and just reads zeros where a hole was punched.
 *
 * The peer is not trusted. Everything in the shared header is validated on
 * attach, sizes are taken from the file itself, every read of the peer's
 * cursor is bounds-checked and every epoch entry is read once and checked
 * before use: a corrupt ring makes an operation return -EPROTO (the
 * connection layer turns it into ECONNRESET) or read garbage inside the
 * ring, never a crash or an access outside the mapping. Each side keeps its
 * own cursor and its own current epoch privately and only publishes them,
 * so scribbling on them changes nothing for their owner.
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

/* Bounds of the window (the first and smallest region). */
#define VS_RING_MIN_CAPACITY (4u << 10)
#define VS_RING_MAX_CAPACITY (64u << 20)
/* The most bytes a ring may be sized to hold, and the largest span: the
 * ladder's top region is the first power of two >= the most it may hold,
 * and the regions below it add up to less than the top. */
#define VS_RING_MAX_MOST (256ull << 20)
#define VS_RING_MAX_SPAN (1ull << 30)
/* Epoch table entries: more than the ladder has regions (a window of 4 KiB
 * doubled up to 256 MiB is 17 of them), so that an entry the consumer may
 * still need is never reused. */
#define VS_RING_EPOCHS 32

enum vs_ring_role { VS_RING_PRODUCER, VS_RING_CONSUMER };

/* vs_ring_read() flags. */
#define VS_RING_PEEK 1 /* copy out but leave the bytes in the ring (MSG_PEEK) */
/* vs_ring_write() flags. */
#define VS_RING_NO_GROW 1 /* a full window returns -ENOSPC instead of growing */

/* A ring's geometry, chosen by its creator. */
struct vs_ring_size {
    uint64_t window; /* the first region: a power of two */
    uint64_t most;   /* the most it may hold: sizes the ladder's top region */
    uint64_t rcv;    /* the consumer's share of MOST (its receive buffer), for the producer */
};

/* Where a run of stream positions lives: byte p (start <= p) of epoch seq
 * is at offset off + ((p - start) & (size - 1)) of the data area. */
struct vs_ring_epoch {
    uint64_t seq, start, off, size;
};

struct vs_ring_shared;

/* One side's private view of a ring. */
struct vs_ring {
    struct vs_ring_shared *sh;
    unsigned char *data;
    uint64_t capacity; /* the span: validated copy, never re-read from shared memory */
    uint64_t window;
    uint64_t pos; /* our own cursor: head if producer, tail if consumer */
    size_t map_size;
    int fd; /* the memfd, -1 once closed */
    enum vs_ring_role role;
    /* Wake a vs_ring_wait() sleeper with FUTEX_WAKE after each operation
     * (default). The socket layer sleeps in the kernel on its side channel
     * instead and sets this to false: see vs_ring_arm(). */
    bool futex_signal;
    unsigned levels; /* regions in the span */
    uint64_t rcv;    /* producer: the consumer's share, as published at attach */
    /* Producer: the epoch being written. Consumer: the epoch of pos, and
     * the one after it once published (next.size != 0). */
    struct vs_ring_epoch ep, next;
    /* Producer only. */
    uint64_t limit;     /* the most it holds: growth stops there */
    unsigned level;     /* ep's region */
    unsigned warm;      /* the highest region that may hold pages */
    uint64_t clean_pos; /* pos when the window's pages were last given back */
    uint64_t mark_pos, mark_seq;
    long mark_pos_ns, mark_seq_ns; /* since when pos and ep have not changed */
    /* Both: the consumer's reclaims, as counted in the header. Consumer:
     * clean_pos, mark_pos and mark_pos_ns above are its own (the head). */
    uint64_t reclaims;
    uint32_t reclaim_seq; /* consumer: its handshakes' word, kept privately */
};

/* The window to use for a requested size: the next power of two, clamped
 * to the bounds. */
uint64_t vs_ring_capacity_for(uint64_t want);

/* A geometry: WINDOW rounded as above, MOST within [window, VS_RING_MAX_MOST],
 * RCV at most MOST. */
struct vs_ring_size vs_ring_size_for(uint64_t window, uint64_t most, uint64_t rcv);

/* Creates a ring of geometry SIZE (as vs_ring_size_for() makes it) and
 * maps it. 0 or -errno. */
int vs_ring_create(struct vs_ring *r, struct vs_ring_size size, enum vs_ring_role role);

/* Maps a ring received from the peer, after validating it. Takes ownership
 * of fd only on success. 0, -EPROTO (not a valid ring) or -errno. */
int vs_ring_attach(struct vs_ring *r, int fd, enum vs_ring_role role);

/* Closes the memfd (after it was sent to the peer); the mapping stays. */
void vs_ring_close_fd(struct vs_ring *r);

/* Unmaps and closes. Does not tell the peer: close our side first. */
void vs_ring_destroy(struct vs_ring *r);

/* Producer: the consumer's share of the ring (its receive buffer), as it
 * published it, at most what the span can hold. */
uint64_t vs_ring_peer_rcv(const struct vs_ring *r);

/* Producer: the most the ring may hold from now on, kept within [window,
 * top region]. Default: the top region. */
void vs_ring_set_limit(struct vs_ring *r, uint64_t most);

/* Producer: copies up to the free space of the current region from iov,
 * first growing into a larger region when that one is full and the limit
 * allows (unless VS_RING_NO_GROW: then -ENOSPC). Bytes written, -EAGAIN
 * when the ring holds its limit or while the consumer gives its pages back
 * (vs_ring_writable() then says 0 and the consumer wakes us after), -EPIPE
 * when the reader is gone or we shut down, -EPROTO. */
ssize_t vs_ring_write(struct vs_ring *r, const struct iovec *iov, int iovcnt, int flags);

/* Consumer: copies up to the readable bytes into iov; bytes read, 0 at end
 * of stream (writer shut down and every byte read), -ECONNRESET instead
 * when the writer's close reset (vs_ring_close_writer), -EAGAIN when empty,
 * -EPROTO (possibly after copying into iov: its bytes are then garbage). */
ssize_t vs_ring_read(struct vs_ring *r, const struct iovec *iov, int iovcnt, int flags);

/* Bytes the consumer may read now (FIONREAD), or -EPROTO. Either side. */
ssize_t vs_ring_readable(struct vs_ring *r);

/* Bytes the producer may still write, growing as needed (a full region
 * that can still grow counts), or -EPROTO. Producer only. */
ssize_t vs_ring_writable(struct vs_ring *r);

/* Producer: the consumer is giving the pages back at this moment
 * (vs_ring_reclaim_consumed): no room for a moment, not a full ring. */
bool vs_ring_reclaiming(struct vs_ring *r);

/* Bytes the producer may write into its current region without growing,
 * or -EPROTO. */
ssize_t vs_ring_room(struct vs_ring *r);

/* The producer shuts down: the consumer reads what is left, then 0 (end of
 * stream), or -ECONNRESET when RESET (a close that resets, as TCP's RST). */
void vs_ring_close_writer(struct vs_ring *r, bool reset);

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

/* Producer: a value that changes whenever room may have come back: the
 * consumer read, or ended a reclaim (during which writes said -EAGAIN).
 * Edge-triggered readiness reports EPOLLOUT only when it moved. */
uint64_t vs_ring_space_mark(struct vs_ring *r);

/* Producer: copies the unread bytes from stream position FROM (a cursor
 * value in [tail, head]) into BUF, at most LEN; -EPROTO if out of range. */
ssize_t vs_ring_unread_copy(struct vs_ring *r, uint64_t from, void *buf, size_t len);

/* Producer, with no write in flight (the caller holds the sending side):
 * gives back the pages the ring no longer needs. NOW_NS is the time, IDLE_NS
 * how long the ring must have been unchanged first. The regions above the
 * window go once the ring has been back in the window that long; every
 * data page goes once nothing was written for that long and the ring is
 * empty. Whether pages remain that a later call may give back. */
bool vs_ring_reclaim(struct vs_ring *r, long now_ns, long idle_ns);

/* Consumer, with no read in flight (the caller holds the receiving side):
 * gives back every data page once the ring has been empty and its head
 * unchanged for IDLE_NS, unless a write is in flight; the producer's
 * program need not call. Whether it took the ring for it (for a moment
 * the producer saw no room): the caller must then wake a producer asleep
 * on space (vs_ring_producer_sleeping), as after a read. */
bool vs_ring_reclaim_consumed(struct vs_ring *r, long now_ns, long idle_ns);

/* Waits until the operation of our role can make progress: something to
 * read or end of stream (consumer), space or reader gone (producer), or the
 * ring is corrupt. Results as vs_event_wait(). */
int vs_ring_wait(struct vs_ring *r, const struct vs_wait_opts *opts);

#endif
