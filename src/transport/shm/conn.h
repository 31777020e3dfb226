/* conn.h - one connection's shared-memory transport state (internal to
 * transport/shm and readiness).
 *
 * The state lives in its own MAP_SHARED anonymous page, never given to the
 * peer: processes that share the socket after fork share it too. Fields
 * marked (ctl) change under ctl_lock, (tx) under tx_lock, (rx) under rx_lock;
 * the lock order is tx/rx before ctl. */
#ifndef VSOCKET_SHM_CONN_H
#define VSOCKET_SHM_CONN_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/ownfd.h"
#include "core/sock.h"
#include "memory/plock.h"
#include "memory/ring.h"
#include "transport/wake.h"
#include "transport/stream.h"
#include "transport/upgrade.h"

enum vs_shm_hs {
    VS_HS_YOUNG,      /* not started: the connection has not yet shown it will live */
    VS_HS_LISTEN,     /* connector: waiting for the accepter on the rendezvous */
    VS_HS_WAIT_HELLO, /* connector: side channel open, HELLO not yet read */
    VS_HS_WAIT_READY, /* connector: sent HELLO_ACK */
    VS_HS_CONNECT,    /* accepter: the connector's rendezvous not reached yet */
    VS_HS_WAIT_ACK,   /* accepter: sent HELLO */
    VS_HS_DONE,       /* both rings in place */
    VS_HS_FAILED,     /* stays on the kernel for good */
};

/* Holders whose pids a connection can track (holders.c). */
#define VS_SHM_HOLDERS 8

struct vs_shm_conn {
    vs_plock ctl_lock, tx_lock, rx_lock;
    _Atomic int holders; /* processes holding the socket */
    /* Their pids (holders.c): who may still use the set-up's resources. */
    _Atomic int holder_pid[VS_SHM_HOLDERS];
    _Atomic bool crowded;       /* more holders than entries: never alone again */
    _Atomic long next_alone_ns; /* a holder waiting to be alone looks again then */
    _Atomic int hs;             /* enum vs_shm_hs (ctl) */
    /* Bumped whenever what a poll set must watch changes (event fd, switch). */
    _Atomic uint32_t gen;
    bool accepter;
    const char *fail_reason; /* (ctl) a static string */
    /* Connector: why the last caller was turned away (a user the policy
     * refuses, its DECLINE): the reason if no caller ever gets through. */
    const char *refusal; /* (ctl) */
    int chan;            /* side channel, -1 until open (ctl) */
    int rendezvous;      /* connector's listening socket, -1 when closed (ctl) */
    /* The numbers chan and rendezvous were last opened under, kept when
     * they go to -1: another holder (fork) closes its own copies at release. */
    int chan_no, rendezvous_no;
    struct vs_upgrade up;    /* when the set-up starts and gives up (transport/upgrade.h) */
    long next_try_ns;        /* accepter: the next call on the rendezvous (ctl) */
    long caller_deadline_ns; /* connector: the current caller must say HELLO by then (ctl) */
    struct sockaddr_storage local, peer; /* as this side sees the TCP connection */

    struct vs_ring rx; /* we consume: created by us (valid when rx_ready) */
    struct vs_ring tx; /* we produce: the peer's receive ring (valid when tx_ready) */
    _Atomic bool rx_ready, tx_ready;

    /* Where each direction of the byte stream is: TCP or the rings
     * (transport/stream.h). */
    struct vs_stream st;
    /* The kernel reported the TCP socket readable or hung up after the switch:
     * look at it before reporting an empty ring (peer death, REVERT data). */
    _Atomic bool tcp_event;
    /* Threads (of every holder) asleep in a blocking call on this connection. */
    _Atomic int sleepers;
    /* The one epoll record (epoll.c) that hears of this connection only
     * through the side channel, or NULL. Only while one process holds the
     * connection: whoever else reads the channel must pass the news on. */
    void *_Atomic cold_rec;
    /* Nothing here may point into one process's private memory (a list
     * link, a mapping made after a fork): the page is shared by fork. The
     * rings are the exception that holders.c makes safe. */
};

/* conn.c */
/* PEER: the address connect() was given (the kernel may not know the peer
 * yet), or NULL to ask the kernel. */
struct vs_shm_conn *vs_shm_conn_new(struct vs_sock *s, bool accepter, int fd,
                                    const struct sockaddr *peer, socklen_t len);
void vs_shm_conn_free(struct vs_shm_conn *c); /* one never attached to a socket */
/* Calls FN on every connection this process holds, under the list's lock
 * (FN must not block, nor create or release a connection); while it runs,
 * none of them can be released. */
void vs_shm_conn_each(void (*fn)(struct vs_shm_conn *c, void *arg), void *arg);
void vs_shm_conn_fail(struct vs_shm_conn *c, const char *reason); /* (ctl) */
/* FD, just opened for C, becomes one of vsocket's own (core/ownfd.h): the
 * number to use from now on. */
int vs_shm_own_fd(struct vs_shm_conn *c, int fd);
/* Closes *FD unless the program took the number, and sets it to -1. */
void vs_shm_close_own(struct vs_shm_conn *c, int *fd);
/* holders.c: who holds C. NEW: this process made it; FORK_*: around a fork
 * (prepare and failed in the parent, child in the child); GONE: this
 * process no longer holds it (close, exec), BACK: it does again (the exec
 * failed). */
void vs_shm_holder_new(struct vs_shm_conn *c);
void vs_shm_holder_fork_prepare(struct vs_shm_conn *c);
void vs_shm_holder_fork_child(struct vs_shm_conn *c);
void vs_shm_holder_fork_failed(struct vs_shm_conn *c);
void vs_shm_holder_gone(struct vs_shm_conn *c);
void vs_shm_holder_back(struct vs_shm_conn *c);
/* A set-up step may run (creating rings and channels this process alone
 * will map): no other process holds C and no fork is under way. True:
 * call vs_shm_setup_end() after the step. */
bool vs_shm_setup_begin(struct vs_shm_conn *c);
void vs_shm_setup_end(void);
void vs_shm_setup_fork_prepare(void);
void vs_shm_setup_fork_parent(void);
void vs_shm_setup_fork_child(void);

/* sizing.c: the geometry of the receive ring of the connection on FD. */
struct vs_ring_size vs_shm_ring_capacity(int fd);

/* handshake.c: advance the handshake without blocking (takes ctl_lock if
 * free); reads and acts on every message waiting on the side channel. */
void vs_shm_progress(struct vs_shm_conn *c, int fd);
int vs_shm_rendezvous_listen(struct vs_shm_conn *c);
void vs_shm_send_msg(struct vs_shm_conn *c, uint16_t type, uint64_t arg, uint64_t arg2);
/* The fd whose readability means "look at the side channel", or -1. */
int vs_shm_event_fd(struct vs_shm_conn *c);

/* News of the connection reached this process other than through its cold
 * epoll record (readiness/epoll.c), if it has one: pass it on. Call it
 * after acting on the news: cooling checks the generation after it
 * publishes cold_rec, so one of the two sees the other. */
static inline void vs_shm_pass_news_on(struct vs_shm_conn *c)
{
    vs_wake_cold(&c->cold_rec);
}

/* The connection's phase or the peer's state changed (c->gen): readiness
 * must look again, a cold epoll record included. */
static inline void vs_shm_bump(struct vs_shm_conn *c)
{
    atomic_fetch_add(&c->gen, 1);
    vs_shm_pass_news_on(c);
    vs_wake_phase_changed();
}

/* A descriptor of C (chan, rendezvous, rx.fd) as this process may use it:
 * -1 where its program took the number (core/ownfd.h), whatever other
 * holders of the connection (fork) still have under it. */
static inline int vs_shm_fd(struct vs_shm_conn *c, int fd)
{
    return vs_ownfd_mine(fd, c) ? fd : -1;
}

static inline struct vs_shm_conn *conn_of(struct vs_sock *s)
{
    return s->conn;
}

static inline bool vs_shm_active(struct vs_shm_conn *c)
{
    return atomic_load_explicit(&c->hs, memory_order_acquire) != VS_HS_FAILED;
}

static inline bool vs_shm_done(struct vs_shm_conn *c)
{
    return atomic_load_explicit(&c->hs, memory_order_acquire) == VS_HS_DONE;
}

/* The peer hung up its side channel after the handshake: it died or closed
 * without marking its rings (SIGKILL). TCP says how; nothing it left
 * unread will ever be read. */
static inline bool vs_shm_peer_gone(struct vs_shm_conn *c)
{
    return vs_shm_done(c) && __atomic_load_n(&c->chan, __ATOMIC_RELAXED) < 0;
}

/* The receive side reads the ring now (switch point reached). */
static inline bool vs_shm_rx_on_ring(struct vs_shm_conn *c)
{
    return vs_stream_rx_on_transport(&c->st);
}

static inline bool vs_shm_tx_on_ring(struct vs_shm_conn *c)
{
    return vs_stream_tx_on_transport(&c->st);
}

#endif
