/* conn.h - one connection's RDMA transport state (internal to
 * transport/rdma).
 *
 * Unlike shm's, this state is private to the process: registered memory and
 * queue pairs stay the parent's at a fork (the child's copy is forgotten:
 * forked.c says what a child's use of the connection does). Each field's
 * fate at a fork is listed in docs/design/rdma-transport.md ("fork and
 * exec").
 * Fields marked (ctl) change under ctl_lock, (tx) under tx_lock, (rx) under
 * rx_lock; the lock order is tx, rx, ctl, then the process's cm lock. */
#ifndef VSOCKET_RDMA_CONN_H
#define VSOCKET_RDMA_CONN_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "core/sock.h"
#include "transport/wake.h"
#include "transport/rdma/cq.h"
#include "transport/rdma/proof.h"
#include "transport/rdma/proto.h"
#include "transport/stream.h"
#include "transport/upgrade.h"

/* A large send the peer offered us to pull (zcopy.c). */
struct vs_rdma_offer {
    uint64_t pos, len; /* its place in the stream (transport positions) */
    uint64_t addr;     /* in the peer's memory */
    uint32_t rkey;
    uint64_t pulled;  /* bytes of it landed in our ring (or read straight) */
    uint64_t pulling; /* bytes of it in RDMA READs in flight to the ring */
    bool direct;      /* a reader pulls it into its own buffer: not into the ring */
};

#define VS_RDMA_OFFERS 8
/* RDMA READs a connection keeps in flight (and asks the peer to serve). */
#define VS_RDMA_READS 4

enum vs_rdma_hs {
    VS_RDMA_YOUNG,     /* not started: the connection has not yet shown it will live */
    VS_RDMA_LISTEN,    /* connector: listening for the accepter on rdma_cm */
    VS_RDMA_RESOLVE,   /* accepter: resolving the connector's address and route */
    VS_RDMA_RETRY,     /* accepter: the connector did not answer yet, call again later;
                          connector: its address was still taken, listen again later */
    VS_RDMA_CONNECT,   /* accepter: connect request sent */
    VS_RDMA_ACCEPT,    /* connector: accepted a caller, waiting for its proof */
    VS_RDMA_WAIT_RING, /* accepter: proof and ring sent, waiting for the connector's ring */
    VS_RDMA_DONE,      /* both rings in place */
    VS_RDMA_FAILED,    /* stays on the kernel for good */
};

/* One registered area: memory, its region and its size. */
struct vs_rdma_area {
    void *mem;
    size_t size;
    struct ibv_mr *mr;
};

struct vs_rdma_conn {
    pthread_mutex_t ctl_lock, tx_lock, rx_lock;
    /* Serialises posting and polling the queue pair and its CQ. */
    pthread_mutex_t qp_lock;
    _Atomic int hs;       /* enum vs_rdma_hs (ctl) */
    _Atomic uint32_t gen; /* bumped whenever the watch fd or the phase changes */
    bool accepter;
    const char *fail_reason; /* (ctl) a static string */
    struct vs_upgrade up;
    long next_try_ns;                    /* accepter: the next call on the connector (ctl) */
    unsigned bad_proofs;                 /* connector: callers whose proof failed (ctl) */
    struct sockaddr_storage local, peer; /* as this side sees the TCP connection */
    char device[32];                     /* the RDMA device carrying it */

    /* Set-up. */
    struct rdma_cm_id *listen_id; /* connector (ctl) */
    struct rdma_cm_id *id;        /* the connected id (ctl) */
    struct vs_rdma_proof proof;   /* prefixes of the stream and nonces */
    /* The peer's PROOF or RING, kept for the set-up (qp_lock, then ctl). */
    struct vs_rdma_msg setup_msg;
    _Atomic bool setup_msg_in;

    /* Verbs resources (valid once the queue pair exists). */
    struct ibv_pd *pd;
    /* The thread that made its calls last while it was set up (cq.c). */
    _Atomic uint64_t home_thread;
    /* The CQ and channel of that thread's group (cq.c);
     * its completions, sorted there, wait in its inbox (group lock). */
    struct vs_rdma_cqg *cqg;
    struct vs_rdma_gcq *gcq; /* its CQ there */
    struct ibv_cq *cq;
    uint32_t cq_tag;
    struct vs_rdma_wc *inbox;
    unsigned inbox_size, inbox_head, inbox_tail;
    struct ibv_qp *qp;
    unsigned depth;      /* work requests per queue */
    uint32_t inline_max; /* the most a send may carry inline */

    /* Receive side: the ring the peer writes into, and message buffers. */
    struct vs_rdma_area rx, msgs;
    uint64_t rx_size;             /* a power of two */
    _Atomic uint64_t rx_head;     /* bytes the peer wrote, as its completions said (qp_lock) */
    uint64_t rx_tail;             /* bytes we consumed (rx) */
    _Atomic uint64_t rx_credited; /* tail as last written to the peer */
    _Atomic bool peer_waits;      /* the peer asked for credit and has not had it */
    /* A credit with a wake-up met a full send queue: posted once a poll
     * freed room, not left to a next read that may never come (a reader
     * that emptied the ring waits for the very bytes behind it). (qp_lock) */
    bool wake_owed;
    /* Offers not yet consumed, oldest first (qp_lock). */
    struct vs_rdma_offer offers[VS_RDMA_OFFERS];
    unsigned offer_first, offer_count;
    bool offer_done;                  /* one was consumed: credit with a wake-up (qp_lock) */
    uint64_t read_len[VS_RDMA_READS]; /* READs in flight, oldest first (qp_lock) */
    unsigned read_first, reads_in_flight;
    uint64_t direct_done;      /* bytes of READs into a reader's buffer landed (qp_lock) */
    _Atomic bool peer_reading; /* the peer sleeps in a large read (RX_WAIT) */
    _Atomic bool rx_wait_said; /* we sent RX_WAIT and no offer came since */
    _Atomic bool rx_cut;       /* the peer's CUT arrived: st.rx_revert_at is its b */
    bool cut_taken;            /* the receive side acted on it (rx) */
    uint64_t rx_skip;          /* TCP bytes to drop: read on the ring past the CUT (rx) */
    /* We left: whether the peer's CUT crossed ours is not known yet (leave.c). */
    _Atomic bool rx_unsettled;
    _Atomic bool rx_shut_known; /* the peer's SHUT arrived */
    uint64_t rx_shut_at;        /* stream end of the peer's transport data */
    /* Growth (grow.c), all (qp_lock): the first ring, kept while a larger
     * one is in use; a larger one granted to the peer, not yet written. */
    struct vs_rdma_area rx_first, rx_granted;
    _Atomic bool grant_open; /* the peer may wait to move: credit when all is read */
    unsigned grants;         /* GROWs answered since the last EPOCH */

    /* Send side: a copy of what the peer has not consumed (kept for a
     * revert), the peer's ring, and where the peer writes our credit. */
    struct vs_rdma_area tx, credit;
    uint64_t tx_size;
    uint64_t tx_head;        /* bytes we wrote (tx) */
    uint64_t peer_ring_addr; /* (ctl, fixed once DONE) */
    uint32_t peer_ring_rkey;
    uint64_t peer_credit_addr;
    uint32_t peer_credit_rkey;
    _Atomic bool credit_asked; /* we asked for credit and none came since */
    long credit_asked_ns;      /* when */
    /* CREDIT_REQs since the credit last moved: each takes a receive
     * buffer of a peer that may not poll for a long time. */
    _Atomic unsigned asks_unanswered;
    uint64_t asked_at_tail; /* the credit when we last asked (tx) */
    unsigned sq_posted;     /* send work requests posted (qp_lock) */
    unsigned sq_done;       /* ... of which completed, as signalled (qp_lock) */
    unsigned msg_slot;      /* the send slot of our next message (qp_lock) */
    /* Where our ring writes end: posted, at the last signalled send, and
     * known placed in the peer's ring (its adapter acknowledged them). */
    uint64_t data_head, sig_head, placed_head; /* (qp_lock) */
    unsigned sig_idx;                          /* the last signalled send (qp_lock) */
    unsigned since_signal;          /* unsignalled sends since the last signalled one (qp_lock) */
    bool polling;                   /* the CQ is being polled: not again from inside (qp_lock) */
    _Atomic long tx_stall_ns;       /* since when the sender waits for space, or 0 (tx) */
    _Atomic uint64_t tx_stall_tail; /* the peer's credit then (tx) */
    unsigned tx_stall_mark;         /* sends posted then: the clock waits for them (qp_lock) */
    long tx_placed_ns;              /* since when those are all placed, or 0 (qp_lock) */
    _Atomic bool tx_shut_sent;
    /* Leaving RDMA (leave.c): our bytes [resend_at, resend_end) of the send
     * copy go on TCP before any new one. A call that must not block sends
     * what TCP takes and leaves the rest to the next call, as the kernel's
     * buffers would hold it: two ends that left at once never wait on each
     * other's resend. A spill's connection fails (RESEND_REASON) once it is
     * done; a shutdown(SHUT_WR) meanwhile sends its FIN then. (tx) */
    _Atomic bool resending;
    uint64_t resend_at, resend_end;
    const char *resend_reason;
    bool fin_after_resend;
    /* Growth (grow.c), (tx) unless said: our first copy and where the
     * peer's first ring is, kept while we write a larger one; the copy made
     * for the ring asked for; the copy left, freed once the send queue
     * went past EPOCH (its index). */
    struct vs_rdma_area tx_first, tx_next, tx_old;
    uint64_t peer_first_addr;
    uint32_t peer_first_rkey;
    uint64_t peer_first_size;
    unsigned tx_old_idx;
    bool grow_asked;   /* GROW said, no REGION yet */
    uint32_t grow_seq; /* the number of our last GROW, which REGION echoes */
    long grow_asked_ns, grow_again_ns;
    uint64_t grow_mark; /* the peer's credit when the size last changed */
    uint64_t full_tail; /* the peer's credit when the ring was last full */
    long tx_last_ns;    /* the end of the last send call, while grown */
    bool shrink_wanted; /* paused while grown: back to the first ring */
    /* The peer's REGION (qp_lock), taken by the sender: */
    _Atomic bool region_in;
    uint64_t region_addr, region_size;
    uint32_t region_rkey, region_seq;
    /* Granted, not yet moved to: the size, or 0; MOVE_WAITS: the ring was
     * full since, so we write no more before the move (readiness reads
     * both). */
    _Atomic uint64_t tx_pending;
    _Atomic bool move_waits;
    uint64_t pending_addr;
    uint32_t pending_rkey;
    _Atomic bool broken;    /* a completion error: the QP is unusable */
    _Atomic bool peer_gone; /* rdma_cm said the peer disconnected */

    /* Where each direction of the byte stream is (transport/stream.h). */
    struct vs_stream st;
    /* The kernel reported the TCP socket readable or hung up after the
     * switch: look at it before reporting an empty ring. */
    _Atomic bool tcp_event;
    _Atomic int sleepers;
    /* The epoll record that hears of the connection only through its watch
     * fd (a cold one, readiness/epoll.c), or NULL. */
    void *_Atomic cold_rec;
    /* Threads leaving RDMA (fork, exec in another thread) waiting for the
     * send and receive locks: a call asleep with one lets go of it. */
    _Atomic int yield_asked;

    /* A descriptor of our own for the TCP socket while on RDMA: the
     * program's close must not send the FIN before the bytes it wrote are
     * placed in the peer's memory (conn.c: closing). */
    int hold_fd;
    /* The socket's statistics record while the socket lives (rdma.c):
     * process events (fork, exec) that move the connection say so there. */
    struct vs_stats_record *stat;
    bool closing; /* released, waiting for its writes (list lock) */
    long close_deadline_ns;
    /* Young at a fork: its slot of holders (forked.c), or -1. */
    _Atomic int share;
    long share_next_ns; /* the next look for the other holders (ctl) */
    bool share_said;    /* the wait was logged and shown (ctl) */
    bool share_born;    /* a fork under way wrote its child in (fork handlers) */
    /* On RDMA or in its set-up at a fork: its slot of holders (forked.c),
     * or -1. The process that carries it is the carrier; a child's copy
     * is unused until its first call, which makes the connection leave. */
    _Atomic int held;
    bool carrier;
    bool held_born;
    _Atomic bool copy_unused;
    bool exec_kept; /* an exec under way keeps a descriptor of it */

    struct vs_rdma_conn *next, *prev; /* this process's list (conn.c) */
};

/* conn.c */
/* PEER: the address connect() was given, or NULL to ask the kernel. */
struct vs_rdma_conn *vs_rdma_conn_new(struct vs_sock *s, bool accepter, int fd,
                                      const struct sockaddr *peer, socklen_t len);
void vs_rdma_conn_free(struct vs_rdma_conn *c);
void vs_rdma_conn_fail(struct vs_rdma_conn *c, const char *reason); /* (ctl) */
/* Calls FN on every connection of the process, under the list's lock. */
void vs_rdma_conn_each(void (*fn)(struct vs_rdma_conn *c, void *arg), void *arg);
/* The program let go of C with writes still in flight (on its ring, or
 * a resend on TCP): it is freed (and its TCP socket closed) once they are
 * placed or sent, or after LINGER_NS. */
void vs_rdma_conn_close_later(struct vs_rdma_conn *c, long linger_ns);
/* Frees the connections whose writes are placed; WAIT: at exit, waits for
 * them (bounded). */
void vs_rdma_reap(bool wait);
/* Whether every send posted on C completed. */
bool vs_rdma_sends_done(struct vs_rdma_conn *c);
/* Whether the send queue takes one more work request now. */
bool vs_rdma_sq_has_room(struct vs_rdma_conn *c);
/* Where our ring writes are known placed in the peer's memory (what the
 * kernel's SIOCOUTQ calls acknowledged), after a look at the CQ; when
 * writes after that wait for no signalled completion, one is asked for,
 * so that a caller who asks again sees them placed. */
uint64_t vs_rdma_placed_head(struct vs_rdma_conn *c);
/* A stall (re)starts: marks the send queue's position, and signals the
 * next send, so that its completion says when all sent before is placed.
 * Under the queue pair's lock, as the two below: readiness may look at
 * the same stall from another thread. (tx) */
void vs_rdma_stall_mark(struct vs_rdma_conn *c);
/* Since when all sent before the mark is placed (as of NOW if it is found
 * so now), or 0. */
long vs_rdma_stall_placed(struct vs_rdma_conn *c, long now);
/* A spill not made now: the clock starts again at NOW, if it ran. (tx) */
void vs_rdma_stall_replaced(struct vs_rdma_conn *c, long now);
/* fork: the child's copies are not its own (rdma.c). */
void vs_rdma_conn_fork_child(void);
/* Frees the verbs and rdma_cm resources (not the state). */
void vs_rdma_conn_teardown(struct vs_rdma_conn *c);

/* verbs.c: queue pair, CQ and registered memory of a connection. */
int vs_rdma_verbs_setup(struct vs_rdma_conn *c, struct rdma_cm_id *id);
/* An area of SIZE bytes registered with ACCESS in C's protection domain;
 * 0 or -errno. */
int vs_rdma_area_new(struct vs_rdma_conn *c, struct vs_rdma_area *a, size_t size, int access);
void vs_rdma_area_free(struct vs_rdma_area *a);
/* Registers the ring and credit word the peer may write (once its proof checked). */
int vs_rdma_expose(struct vs_rdma_conn *c);
/* The send copy, of c->tx_size (the peer's ring size). */
int vs_rdma_alloc_tx(struct vs_rdma_conn *c);
void vs_rdma_verbs_teardown(struct vs_rdma_conn *c);
/* Posts the message M (SEND). 0 or -errno. (takes qp_lock) */
int vs_rdma_post_msg(struct vs_rdma_conn *c, const struct vs_rdma_msg *m);
/* The same (qp_lock); *IDX: its index among the sends, when posted. */
int vs_rdma_post_msg_locked(struct vs_rdma_conn *c, const struct vs_rdma_msg *m, unsigned *idx);
/* Whether the send queue went past the send of index IDX. (qp_lock) */
bool vs_rdma_sent_past(struct vs_rdma_conn *c, unsigned idx);
/* Drains the CQ, acting on what arrived. (takes qp_lock) */
void vs_rdma_poll(struct vs_rdma_conn *c);
/* Arms the CQ's notification: the next completion rings the channel. */
void vs_rdma_notify(struct vs_rdma_conn *c);
/* Reads the channel's events without blocking. */
void vs_rdma_channel_drain(struct vs_rdma_conn *c);
/* Writes our consumed position into the peer's credit word; WAKE: with an
 * immediate, so that a peer waiting for space wakes. (takes qp_lock) */
int vs_rdma_post_credit(struct vs_rdma_conn *c, bool wake);
int vs_rdma_post_credit_locked(struct vs_rdma_conn *c, bool wake); /* (qp_lock) */
/* Writes LEN bytes of the send copy at stream position POS into the peer's
 * ring. (takes qp_lock) */
int vs_rdma_post_data(struct vs_rdma_conn *c, uint64_t pos, size_t len);
/* io.c: asks the peer for a credit immediate (once until one comes). */
void vs_rdma_ask_credit(struct vs_rdma_conn *c);
/* Pulls LEN bytes at REMOTE into LOCAL (registered with LKEY). (qp_lock held) */
int vs_rdma_post_read(struct vs_rdma_conn *c, void *local, uint32_t lkey, uint64_t remote,
                      uint32_t rkey, uint64_t len);
/* io.c: waits for news on the connection (a blocking call's sleep). */
struct vs_blocking;
int vs_rdma_wait(struct vs_rdma_conn *c, int fd, short tcp_events, struct vs_blocking *b);
/* io.c: waits until every send posted is acknowledged by the peer (then
 * the bytes are in its memory), at most LIMIT_NS. Whether they are. */
bool vs_rdma_wait_placed(struct vs_rdma_conn *c, long limit_ns);
/* io.c: posts M; a full send queue is waited for (until what it holds is
 * placed, at most LIMIT_NS) and M posted again. 0 or -errno. */
int vs_rdma_post_msg_waiting(struct vs_rdma_conn *c, const struct vs_rdma_msg *m, long limit_ns);

/* leave.c: leaving RDMA for TCP (CUT). */
/* The peer left, in a blocking send of an offer: resends on TCP, once,
 * what it did not read, all of it; bytes at positions [ZPOS, ZPOS + ZLEN)
 * are at ZBUF (the offer), not in the send copy. 0 or -errno. (tx) */
int vs_rdma_answer_cut(struct vs_rdma_conn *c, int fd, uint64_t zpos, const void *zbuf,
                       size_t zlen);
/* Sends on TCP what is left to resend (the peer left, or we spilled): all
 * of it when BLOCK, else what TCP takes now. 1 our sends are TCP's now (or
 * nothing was to resend), 0 more is left, -errno. (tx) */
int vs_rdma_resend_step(struct vs_rdma_conn *c, int fd, bool block);
/* Whether a resend is under way or due (the peer's CUT, unanswered). */
static inline bool vs_rdma_resend_due(struct vs_rdma_conn *c)
{
    return atomic_load(&c->resending) ||
           (atomic_load(&c->st.tx_revert_pending) && !atomic_load(&c->st.tx_back_on_tcp));
}
/* How long a closed socket, or a process that exits, waits for TCP to take
 * what is left to resend: the kernel would go on sending it; a peer that
 * takes none of it for this long gets a reset instead. */
#define VS_RDMA_CLOSE_RESEND_NS 30000000000L
/* A closed socket's resend (its hold descriptor), at close and at each run
 * of the reaper: what TCP takes now, what the peer sent dropped (nobody
 * reads it). Whether it is over: all sent, or past UNTIL_NS (a reset). (tx) */
bool vs_rdma_resend_closed(struct vs_rdma_conn *c, long until_ns);
/* At exit: what is left to resend goes on TCP, bounded (the kernel would
 * keep sending a gone process's buffered bytes). */
void vs_rdma_resend_at_exit(void);
/* The sender found no room in the peer's ring, or an offer not yet
 * consumed (FULL), or room: a stall lasts while the peer's credit does not
 * move. (tx) */
void vs_rdma_stall(struct vs_rdma_conn *c, bool full);
/* Whether the stall lasted long enough to leave RDMA for the kernel's
 * buffers (then a send leaves, and readiness says writable so that a
 * non-blocking writer's next send does). The time counts from when all
 * that was sent before the stall is placed in the peer's memory. */
bool vs_rdma_stalled(struct vs_rdma_conn *c);
/* The same for a sender whose offer the peer has not consumed: longer, as
 * the peer pulls it with READs it may have to resend. */
bool vs_rdma_offer_stalled(struct vs_rdma_conn *c);
/* ... and leaves (tx held): CUT, and resend on TCP what the peer did not
 * credit (an offer out: ZLEN bytes at ZPOS are at ZBUF, resent at once;
 * else the resend begins, vs_rdma_resend_step sends it). 1 left (the rest
 * goes on TCP), 0 not now, -errno. */
int vs_rdma_spill(struct vs_rdma_conn *c, int fd, uint64_t zpos, const void *zbuf, size_t zlen);
/* A call asleep holding LOCK lets go of it while a thread leaving RDMA
 * waits for it (the sleep is at most a slice, so it comes soon). Whether it
 * did: then the caller looks at the connection again. */
bool vs_rdma_yield(struct vs_rdma_conn *c, pthread_mutex_t *lock);
/* Before reading TCP after a CUT (the peer's or ours): drops what the peer
 * resends that we read on the ring already, once it is known. 1 go on, 0
 * wait for TCP, -errno. (rx) */
int vs_rdma_settle(struct vs_rdma_conn *c, int fd);
/* cm.c / zcopy.c: the peer's CUT arrived (qp_lock). */
void vs_rdma_cut_in(struct vs_rdma_conn *c, const struct vs_rdma_msg *m);
/* The credit word: how far the peer has consumed our data. */
uint64_t vs_rdma_peer_tail(struct vs_rdma_conn *c);

/* grow.c: rings that grow while the stream needs them, and shrink back. */
/* Sender, before it looks for room: takes the peer's answer, moves to the
 * ring granted (or back to the first after a pause) once the peer read
 * everything, frees a copy left. Whether to ask the peer for its credit
 * (a move waits for it). (tx) */
bool vs_rdma_grow_step(struct vs_rdma_conn *c);
/* A send call begins (a pause since the last one moves us back to the
 * first ring), and ends (a pause counts from there). (tx) */
void vs_rdma_grow_begin(struct vs_rdma_conn *c);
void vs_rdma_grow_sent(struct vs_rdma_conn *c);
/* Sender, finding no room: asks for a larger ring if the reader keeps up
 * (it consumed twice the ring since the size last changed). (tx) */
void vs_rdma_grow_ask(struct vs_rdma_conn *c);
/* Room for a send now: none while a move waits for the peer's credit. */
uint64_t vs_rdma_tx_room(struct vs_rdma_conn *c);
/* The same for readiness: the room after the move, once it can be made. */
uint64_t vs_rdma_tx_room_ready(struct vs_rdma_conn *c);
/* Receiver: the peer's GROW and EPOCH (qp_lock). */
void vs_rdma_on_grow(struct vs_rdma_conn *c, const struct vs_rdma_msg *m);
void vs_rdma_on_region(struct vs_rdma_conn *c, const struct vs_rdma_msg *m);
void vs_rdma_on_epoch(struct vs_rdma_conn *c, const struct vs_rdma_msg *m);
/* Frees the areas of growth (teardown, after the queue pair). */
void vs_rdma_grow_teardown(struct vs_rdma_conn *c);
/* Registered bytes of growth in this process (all connections). */
uint64_t vs_rdma_grown_bytes(void);
/* fork, in the child: the parent's areas are not ours (not freed). */
void vs_rdma_grow_forget(struct vs_rdma_conn *c);

/* zcopy.c: large sends pulled by the receiver with RDMA READ. */
/* Sender: sends LEN bytes at BUF by offering them, when worth it; the
 * bytes sent, 0 when not worth it (the ring then), or -errno. (tx) */
ssize_t vs_rdma_zcopy_send(struct vs_rdma_conn *c, int fd, const void *buf, size_t len, int flags);
/* Receiver: an offer arrived (qp_lock). False: it contradicts the stream. */
bool vs_rdma_offer_in(struct vs_rdma_conn *c, const struct vs_rdma_msg *m);
/* A READ completed (qp_lock). */
void vs_rdma_pull_done(struct vs_rdma_conn *c);
/* Bytes readable from the ring at the tail (data, or pulled offer bytes);
 * starts the next pull when an offer is next. */
uint64_t vs_rdma_rx_avail(struct vs_rdma_conn *c);
/* After the tail moved: offers consumed go, and the sender hears of it. */
void vs_rdma_offers_consumed(struct vs_rdma_conn *c);
/* A blocking reader with LEN bytes of room at BUF: pulls the offer at the
 * tail straight there when it is worth it. Bytes read (the tail moved),
 * 0 not worth it (the ring then), or -errno. (rx) */
ssize_t vs_rdma_zcopy_recv(struct vs_rdma_conn *c, int fd, void *buf, size_t len);
/* io.c: tells the peer how far we read, when it is worth a write. (rx) */
void vs_rdma_credit_read(struct vs_rdma_conn *c);

/* forked.c: a young connection held by several processes after fork. Its
 * set-up waits until one process holds it alone and no other moved its
 * bytes since the fork. */
/* fork_prepare: the child will hold C too. False: no room to say so. */
bool vs_rdma_forked_share(struct vs_rdma_conn *c);
void vs_rdma_forked_born(struct vs_rdma_conn *c);   /* in the parent */
bool vs_rdma_forked_child(struct vs_rdma_conn *c);  /* in the child: false, not a holder */
void vs_rdma_forked_failed(struct vs_rdma_conn *c); /* the fork failed */
/* A call of the program moves bytes: false if another holder did since the
 * fork (then the connection stays on TCP). (ctl) */
bool vs_rdma_forked_io(struct vs_rdma_conn *c);
/* C's bytes move uncounted from now on (it failed): no holder upgrades. */
void vs_rdma_forked_taint(struct vs_rdma_conn *c);
/* 1 this process holds C alone (its set-up may start), 0 not yet, -1 never. (ctl) */
int vs_rdma_forked_alone(struct vs_rdma_conn *c);
/* This process lets go of C. */
void vs_rdma_forked_drop(struct vs_rdma_conn *c);

/* A connection on RDMA or in its set-up, carried by one process and
 * held by its children since a fork (forked.c). */
/* fork_prepare: the child will hold a copy (the carrier's, or ours if we
 * hold one unused). False: no room to say so (the connection leaves). */
bool vs_rdma_forked_carry(struct vs_rdma_conn *c);
void vs_rdma_forked_carry_born(struct vs_rdma_conn *c);   /* in the parent */
bool vs_rdma_forked_carry_child(struct vs_rdma_conn *c);  /* in the child: false, not a holder */
void vs_rdma_forked_carry_failed(struct vs_rdma_conn *c); /* the fork failed */
/* A child's first use: asks the carrier to leave RDMA and waits until it
 * did. 0 the connection is on TCP, settled; -1 the carrier died on RDMA. */
int vs_rdma_forked_ask(struct vs_rdma_conn *c);
/* The carrier: whether a holder asked; it left (holders go on on TCP). */
bool vs_rdma_forked_asked(struct vs_rdma_conn *c);
void vs_rdma_forked_left(struct vs_rdma_conn *c);
/* Whether another process may still hold C (alive, or being born). */
bool vs_rdma_forked_others(struct vs_rdma_conn *c);
/* The carrier's helper: the count of asks, and a wait for it to move. */
uint32_t vs_rdma_forked_asks(void);
void vs_rdma_forked_wait_asks(uint32_t seen);
/* This process lets go of its slot of C. */
void vs_rdma_forked_let_go(struct vs_rdma_conn *c);
/* rdma.c: a child's first use of its copy (FD, or -1): the carrier leaves
 * RDMA first; then the copy is plain TCP. Nothing for other copies. */
void vs_rdma_copy_use(struct vs_rdma_conn *c, int fd);

/* cm.c: the rendezvous over rdma_cm. */
/* A process event the set-up cannot follow: it ends, the peer told (a
 * queue pair the peer may already write through gets a CUT, the others a
 * disconnection). True: it ended on RDMA meanwhile (DONE): revert it. */
bool vs_rdma_setup_leave(struct vs_rdma_conn *c, const char *reason);
void vs_rdma_progress(struct vs_rdma_conn *c, int fd);
/* The program met its descriptor limit: no set-up starts for a while (a
 * set-up under way holds no descriptor of its own to give back). 0. */
unsigned vs_rdma_fds_short(void);
/* A message from the peer, during the set-up or after; a credit
 * immediate. Called while the CQ is polled (qp_lock): they only store. */
void vs_rdma_on_msg(struct vs_rdma_conn *c, const struct vs_rdma_msg *m);
void vs_rdma_on_credit(struct vs_rdma_conn *c);

/* peer_cache.c: the destination did not answer: later connections to it
 * stay on TCP for VSOCKET_RDMA_PEER_CACHE_S, once it did not answer twice
 * in a row. A connector's destination is
 * the peer's address and port (a service); an accepter's, its address. */
void vs_rdma_peer_cache_remember(bool accepter, const struct sockaddr_storage *peer);
bool vs_rdma_peer_cache_plain(bool accepter, const struct sockaddr_storage *peer);
/* An upgrade with the destination succeeded: whatever was said goes. */
void vs_rdma_peer_cache_forget(bool accepter, const struct sockaddr_storage *peer);

static inline bool vs_rdma_active(struct vs_rdma_conn *c)
{
    return atomic_load_explicit(&c->hs, memory_order_acquire) != VS_RDMA_FAILED;
}

static inline bool vs_rdma_done(struct vs_rdma_conn *c)
{
    return atomic_load_explicit(&c->hs, memory_order_acquire) == VS_RDMA_DONE;
}

/* A connection that left still has TCP bytes to drop, or a crossing to
 * settle, before its reads are the kernel's alone. */
static inline bool vs_rdma_unsettled(struct vs_rdma_conn *c)
{
    return atomic_load(&c->rx_unsettled) || c->rx_skip;
}

/* News of the connection reached this process other than through its cold
 * epoll record, if it has one: pass it on. Call it after acting on the
 * news: cooling publishes cold_rec before it looks, so one of the two sees
 * the other. */
static inline void vs_rdma_pass_news_on(struct vs_rdma_conn *c)
{
    vs_wake_cold(&c->cold_rec);
}

/* The connection's phase or readiness changed: readiness must look again,
 * a cold epoll record included. */
static inline void vs_rdma_bump(struct vs_rdma_conn *c)
{
    atomic_fetch_add(&c->gen, 1);
    vs_rdma_pass_news_on(c);
}

#endif
