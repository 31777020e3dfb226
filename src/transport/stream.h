/* stream.h - the upgrade protocol every transport shares: how a TCP byte
 * stream moves onto a transport and back without losing or reordering a
 * byte. The transport brings the set-up (rendezvous, proof), the memory the
 * bytes travel through, and the messages that carry the offsets below; the
 * rules are here, once.
 *
 * TCP first. Every connection starts on the kernel socket, which stays the
 * program's fd for the connection's life (options, names, liveness) and is
 * where it falls back to. A set-up that does not finish within its time
 * limits leaves the connection on TCP with a reason (core/reason.h).
 *
 * Switch, per direction. Once the peer's memory is ours, the sender
 * announces the offset of its first byte on the transport, which is tcp_tx,
 * the bytes the kernel accepted so far (SWITCH at tcp_tx); from then on it
 * sends there. The receiver reads TCP until tcp_rx reaches that offset, then
 * the transport. A sender that shut TCP down for writing before its switch
 * never switches (its FIN is on TCP).
 *
 * Revert. A side that must leave (exec, stdio or splice on the socket, a
 * seccomp filter, the program taking the side channel's descriptor) tells the
 * peer how much of the peer's transport data it consumed and where its own
 * ends (REVERT consumed, end). The peer reads the leaving side's transport
 * data up to that end, then TCP; and resends on TCP what the leaving side had
 * not consumed, ahead of anything new. Both directions stay on TCP for good.
 *
 * Locks: fields marked (tx) change under the connection's send lock, (rx)
 * under its receive lock, (ctl) under its control lock. */
#ifndef VSOCKET_STREAM_H
#define VSOCKET_STREAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Time limits of the set-up, from its start (transports start it once the
 * connection has lived VSOCKET_UPGRADE_AFTER_US or moved
 * VSOCKET_UPGRADE_AFTER_BYTES, each side by its own count): the connector
 * waits for its caller longer than the accepter keeps calling; past the
 * limit (plus the grace below for a set-up already under way) the
 * connection stays on TCP. */
#define VS_UPGRADE_ACCEPTER_NS 500000000L
#define VS_UPGRADE_CONNECTOR_NS 1000000000L
/* Once the two ends talk, the messages of the set-up get this long. */
#define VS_UPGRADE_MESSAGES_NS 1000000000L
#define VS_UPGRADE_GRACE_NS 1000000000L
/* Past its deadline a set-up waits for the peer's part as long as the peer
 * has not been seen calling (it acts only at its calls), at most this long. */
#define VS_UPGRADE_GIVE_UP_NS 30000000000L

#define VS_STREAM_NO_LIMIT UINT64_MAX

struct vs_stream {
    /* Send side. */
    uint64_t tcp_tx;          /* (tx) bytes the kernel accepted */
    _Atomic bool tx_switched; /* (tx) bytes go to the transport from tcp_tx on */
    bool tx_shut;             /* (tx) SHUT_WR on TCP before the switch: never switch */
    /* The peer consumed tx_revert_consumed bytes of our transport data and
     * left: resend the rest on TCP, then send on TCP. */
    _Atomic bool tx_revert_pending;
    uint64_t tx_revert_consumed;
    _Atomic bool tx_back_on_tcp;

    /* Receive side. */
    uint64_t tcp_rx;              /* (rx) bytes read from TCP (peeks excluded) */
    _Atomic bool rx_switch_known; /* (ctl) the peer's SWITCH arrived */
    uint64_t rx_switch_at;        /* (ctl) */
    _Atomic bool rx_switched;     /* (rx) tcp_rx reached rx_switch_at: read the transport */
    /* The peer left (REVERT): its transport data ends at rx_revert_at, then TCP. */
    _Atomic bool rx_reverted;
    uint64_t rx_revert_at;
    _Atomic bool rx_back_on_tcp;

    /* End of stream came on TCP: too late to start a set-up. */
    _Atomic bool tcp_eof;
    /* The peer's offsets contradict what we hold (a SWITCH behind the bytes
     * read from TCP, a REVERT end other than where its transport data
     * stopped): the receive side fails with ECONNRESET, as for a corrupt ring. */
    _Atomic bool violated;
};

/* The receive side reads the transport now. */
static inline bool vs_stream_rx_on_transport(struct vs_stream *st)
{
    return atomic_load_explicit(&st->rx_switched, memory_order_acquire) &&
           !atomic_load_explicit(&st->rx_back_on_tcp, memory_order_acquire);
}

static inline bool vs_stream_tx_on_transport(struct vs_stream *st)
{
    return atomic_load_explicit(&st->tx_switched, memory_order_acquire) &&
           !atomic_load_explicit(&st->tx_back_on_tcp, memory_order_acquire);
}

/* Receive side, on TCP: how many bytes may still be read from TCP before
 * the peer's switch point (VS_STREAM_NO_LIMIT while it is unknown or after a
 * revert). At 0 the receive side moves to the transport. (rx) */
static inline uint64_t vs_stream_tcp_rx_limit(struct vs_stream *st)
{
    if (!atomic_load(&st->rx_switch_known) || atomic_load(&st->rx_back_on_tcp))
        return VS_STREAM_NO_LIMIT;
    if (st->rx_switch_at < st->tcp_rx) { /* read past already: see violated */
        atomic_store(&st->violated, true);
        return VS_STREAM_NO_LIMIT;
    }
    uint64_t limit = st->rx_switch_at - st->tcp_rx;
    if (limit == 0)
        atomic_store(&st->rx_switched, true);
    return limit;
}

/* Receive side: bytes the peer sent on TCP before its switch point that are
 * not read yet (0 when it never switched or they are read). A return to TCP
 * resends only what followed the switch, never these. (rx) */
static inline uint64_t vs_stream_tcp_before_switch(const struct vs_stream *st)
{
    if (!atomic_load(&st->rx_switch_known) || st->rx_switch_at <= st->tcp_rx)
        return 0;
    return st->rx_switch_at - st->tcp_rx;
}

/* Receive side, on the transport, which holds nothing more: whether the
 * peer reverted and everything it sent there before is read (then TCP).
 * The peer publishes its last byte before it sends REVERT, so an empty
 * transport short of (or past) the end it announced is a violation. */
static inline bool vs_stream_rx_revert_reached(struct vs_stream *st, uint64_t consumed)
{
    if (!atomic_load(&st->rx_reverted))
        return false;
    if (consumed != st->rx_revert_at) {
        atomic_store(&st->violated, true);
        return false;
    }
    atomic_store(&st->rx_back_on_tcp, true);
    return true;
}

/* Send side: whether it may switch now that the peer's memory is ours. */
static inline bool vs_stream_tx_may_switch(struct vs_stream *st)
{
    return !atomic_load(&st->tx_switched) && !st->tx_shut && !atomic_load(&st->tx_revert_pending);
}

/* The peer's SWITCH: its transport data starts at stream offset AT. Only
 * the first one counts: false for a repeat. (ctl) */
static inline bool vs_stream_peer_switched(struct vs_stream *st, uint64_t at)
{
    if (atomic_load(&st->rx_switch_known))
        return false;
    st->rx_switch_at = at;
    atomic_store_explicit(&st->rx_switch_known, true, memory_order_release);
    return true;
}

/* The peer's REVERT: it consumed CONSUMED bytes of ours, and its own
 * transport data ends at END. Only the first one counts. (ctl) */
static inline void vs_stream_peer_reverted(struct vs_stream *st, uint64_t consumed, uint64_t end)
{
    if (!atomic_load(&st->rx_reverted)) {
        st->rx_revert_at = end;
        atomic_store_explicit(&st->rx_reverted, true, memory_order_release);
    }
    if (!atomic_load(&st->tx_revert_pending)) {
        st->tx_revert_consumed = consumed;
        atomic_store_explicit(&st->tx_revert_pending, true, memory_order_release);
    }
}

#endif
