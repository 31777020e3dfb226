/* sock.h - the state vsocket keeps for one socket (one open file
 * description: dup'd fds share it). */
#ifndef VSOCKET_SOCK_H
#define VSOCKET_SOCK_H

#include <sys/socket.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config/stats.h"
#include "core/transport_ops.h"

#define VS_SOCK_SNDBUF_SET 1u
#define VS_SOCK_RCVBUF_SET 2u

struct vs_sock {
    /* One reference per fd that names the socket, one per call in progress. */
    _Atomic unsigned refs;
    int family; /* AF_INET or AF_INET6 */
    int type;   /* SOCK_STREAM, SOCK_DGRAM, ... without the creation flags */
    int protocol;
    enum vs_transport transport;
    /* enum vs_sock_state; read on the data path to notice a completed
     * non-blocking connect. */
    _Atomic int state;
    struct vs_stats_record *stat;
    /* The transport trying or carrying this connection and its private
     * state (core/transport_ops.h); NULL: the kernel alone. Set once, by
     * connect or accept, and kept after a fall back to TCP. */
    const struct vs_transport_ops *ops;
    void *conn;
    /* Put into an epoll set before it could be upgraded: never upgrade it,
     * the kernel registration would not follow. */
    _Atomic bool in_epoll_plain;
    /* One of its fds was closed: no epoll record of it goes cold any more
     * (readiness/epoll.c; its record could outlive the number). */
    _Atomic bool no_cold;
    int conn_shown; /* the transport's: what the statistics show of the connection */
    /* The addresses as last read from the kernel (vs_sock_refresh_addrs),
     * valid when have_addrs: a transport set up right after needs no
     * second look. */
    bool have_addrs;
    bool have_local; /* local alone (a listener's) */
    struct sockaddr_storage local, peer;
    /* VS_SOCK_SNDBUF_SET | VS_SOCK_RCVBUF_SET: the program sized those
     * buffers itself (setsockopt), so the kernel would not autotune them. */
    _Atomic unsigned bufs_set;
    /* SO_LINGER {1, 0}: the program's close resets the connection. */
    _Atomic bool linger0;
    /* TCP_INQ on: each recvmsg tells in a control message how many bytes
     * are left to read (gRPC reads again, or waits for an edge, by it). */
    _Atomic bool tcp_inq;
    /* SO_BUSY_POLL in microseconds, as the kernel holds it (0: off): a
     * blocking receive spins this long before it sleeps (core/spin.h). */
    _Atomic int busy_poll_us;
    /* Unique per socket ever created in this process: tells a socket from a
     * later one that reuses this object (readiness keeps fd -> socket
     * records that may outlive the socket). */
    uint64_t serial;
    void *pool_next; /* free-list link while the object is unused */
};

/* The busy-poll the program asked of S for receives (SO_BUSY_POLL), in ns. */
static inline long vs_sock_busy_ns(struct vs_sock *s)
{
    return atomic_load_explicit(&s->busy_poll_us, memory_order_relaxed) * 1000L;
}

/* A new socket with one reference, or NULL (out of memory: the caller then
 * passes the fd through untracked). */
struct vs_sock *vs_sock_new(int fd, int family, int type, int protocol, const char *reason);

/* A socket for FD found open without our having seen it created; NULL when
 * FD is not an internet socket. */
struct vs_sock *vs_sock_adopt(int fd);
/* HOOK is called with each socket vs_sock_adopt makes, before anyone else
 * sees it: the datagram layer takes inherited UDP sockets this way
 * (transport/transport.h, vs_transports_offer_dgram). Set at load. */
void vs_sock_set_adopt_hook(void (*hook)(struct vs_sock *s, int fd));

/* Takes a reference unless the count already reached zero (the object is
 * being freed or was reused: see memory/pool.h). */
static inline bool vs_sock_tryref(struct vs_sock *s)
{
    unsigned n = atomic_load_explicit(&s->refs, memory_order_relaxed);
    while (n != 0)
        if (atomic_compare_exchange_weak_explicit(&s->refs, &n, n + 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return true;
    return false;
}

void vs_sock_release(struct vs_sock *s);

static inline void vs_sock_put(struct vs_sock *s)
{
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        vs_sock_release(s);
}

static inline void vs_sock_ref(struct vs_sock *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

/* State changes, reflected in the statistics together with the local and
 * peer addresses read from the kernel socket FD. */
void vs_sock_set_state(struct vs_sock *s, int fd, enum vs_sock_state state);
void vs_sock_refresh_addrs(struct vs_sock *s, int fd);
/* connect() to PEER (LEN bytes) succeeded or is under way (STATE): only the
 * local address is asked of the kernel. */
void vs_sock_connecting(struct vs_sock *s, int fd, enum vs_sock_state state,
                        const struct sockaddr *peer, socklen_t len);
/* A connection accepted on LISTENER, from PEER (accept's address, LEN
 * bytes, or NULL): connected, its addresses known without asking the
 * kernel when the listener's own address says which it is. */
void vs_sock_accepted(struct vs_sock *s, int fd, const struct vs_sock *listener,
                      const struct sockaddr *peer, socklen_t len);

/* connect(AF_UNSPEC) dissolved a datagram socket's association. */
void vs_sock_disconnected(struct vs_sock *s, int fd);

/* Counting after a data call returned N; the first bytes to move also
 * complete a non-blocking connect. A datagram socket's call that returned
 * 0 moved one datagram of length 0 (a stream's is its end). */
void vs_sock_connected_late(struct vs_sock *s, int fd);
static inline bool vs_sock_moved(struct vs_sock *s, int fd, long n)
{
    if (n <= 0)
        return false;
    if (atomic_load_explicit(&s->state, memory_order_relaxed) == VS_STATE_CONNECTING)
        vs_sock_connected_late(s, fd);
    return true;
}
static inline bool vs_sock_counts(struct vs_sock *s, int fd, long n)
{
    return vs_sock_moved(s, fd, n) || (n == 0 && s->type == SOCK_DGRAM);
}
static inline void vs_sock_count_tx(struct vs_sock *s, int fd, long n, unsigned msgs)
{
    if (vs_sock_counts(s, fd, n))
        vs_stats_count_tx(s->stat, (size_t)n, msgs);
}
static inline void vs_sock_count_rx(struct vs_sock *s, int fd, long n, unsigned msgs)
{
    if (vs_sock_counts(s, fd, n))
        vs_stats_count_rx(s->stat, (size_t)n, msgs);
}

/* Whether the socket's readiness is its transport's, not the kernel's. */
static inline bool vs_sock_translated(struct vs_sock *s)
{
    return s->ops && s->ops->translated(s);
}

/* The epoll record that hears of the connection only through its transport
 * (readiness/epoll.c), or NULL. */
static inline void *vs_sock_cold_rec(struct vs_sock *s)
{
    return s->ops ? s->ops->cold_rec(s) : NULL;
}

/* Whether vsocket tracks sockets of this domain and type at all. */
bool vs_sock_tracked_family(int family);

void vs_sock_fork_prepare(void);
void vs_sock_fork_parent(void);
void vs_sock_fork_child(void);

#endif
