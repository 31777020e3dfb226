/* shm_path.c - datagrams on a pair's rings (udp_shm.h; docs/design/udp.md
 * §7): one record per datagram (memory/dgram_ring.h), written whole or
 * dropped when the receiver is full, as UDP drops; read whole, or cut as
 * recvmsg cuts. The peer is not trusted: a ring it broke takes the pair
 * back to the kernel, with a line in the log, and delivers nothing of it. */
#include <errno.h>
#include <arpa/inet.h>
#include <sched.h>
#include <string.h>

#include "base/syscall.h"
#include "config/log.h"
#include "core/clock.h"
#include "core/reason.h"
#include "transport/dgram/proto.h"
#include "transport/dgram/udp_shm.h"

/* After a record went in: ring the peer's eventfd if a thread of it
 * sleeps and we have not rung for that sleep yet. The fence pairs with the
 * one vs_udp_arm makes after announcing the sleep: either the sleeper sees
 * our record, or we see it asleep. */
static void wake_peer(struct vs_udp_pair *p)
{
    if (!p->peer_page || p->peer_event < 0)
        return;
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&p->peer_page->sleepers, memory_order_relaxed) == 0)
        return;
    uint32_t seq = atomic_load_explicit(&p->peer_page->seq, memory_order_relaxed);
    if (seq == p->rung)
        return;
    p->rung = seq;
    uint64_t one = 1;
    vs_syscall(SYS_write, p->peer_event, &one, sizeof(one));
}

/* How long a sender waits for a receiver's reclaim (a punch of its ring's
 * pages) to end. */
#define RECLAIM_WAIT_NS 10000000L

int vs_udp_ring_send(struct vs_udp_sock *u, int slot, const struct msghdr *msg)
{
    struct vs_udp_pair *p = vs_udp_pair_at(u, slot);
    if (!p || p->state != VS_PAIR_UP || !p->tx_ok)
        return -1;
    /* Another process than the peer's carrier receives on its socket:
     * only the kernel reaches every holder. */
    if (p->peer_page && atomic_load_explicit(&p->peer_page->left, memory_order_acquire)) {
        vs_udp_pair_down(u, slot, VS_REASON_LEFT_BY_FORK);
        return -1;
    }
    struct vs_dgram_meta m = {0};
    int rc = vs_dgram_put(&p->tx, &m, msg->msg_iov, (int)msg->msg_iovlen);
    /* The receiver is giving the pages of its empty ring back: a moment.
     * One that never ends it (a hostile peer) costs a drop, as full. */
    for (long until = 0; rc == -EBUSY;) {
        long now = vs_now_ns();
        if (!until)
            until = now + RECLAIM_WAIT_NS;
        else if (now > until)
            break;
        sched_yield();
        rc = vs_dgram_put(&p->tx, &m, msg->msg_iov, (int)msg->msg_iovlen);
    }
    if (rc == 0) {
        p->ring_tx++;
        wake_peer(p);
        return 0;
    }
    if (rc == -EAGAIN || rc == -EBUSY) {
        p->ring_full++;
        vs_stats_count_dgram_drop(u->stat);
        return 0; /* the receiver holds its capacity: dropped, as UDP does */
    }
    if (rc == -EMSGSIZE || rc == -EINVAL)
        return -1; /* the kernel says what is wrong with it */
    vs_udp_pair_down(u, slot, rc == -EPIPE ? VS_REASON_PEER_LEFT : "the peer broke its ring");
    return -1;
}

/* A ring that will deliver nothing more: freed, its bytes counted gone. */
static void free_rx(struct vs_udp_sock *u, struct vs_udp_pair *p)
{
    atomic_fetch_add(&u->rx_gone, vs_ring_head(&p->rx));
    vs_ring_destroy(&p->rx);
    p->rx_ok = false;
    p->draining = false;
    vs_udp_recount(u);
}

/* Whether SLOT's ring has a datagram to deliver now; rings that are done
 * or broken are dealt with on the way. */
static bool ready(struct vs_udp_sock *u, int slot)
{
    struct vs_udp_pair *p = u->pair[slot];
    if (!p || !p->rx_ok)
        return false;
    if (p->draining && p->rx.pos >= p->cut) {
        free_rx(u, p);
        return false;
    }
    ssize_t n = vs_dgram_next_len(&p->rx);
    if (n >= 0)
        return true;
    if (n == -EAGAIN && !p->draining)
        return false;
    if (n == -EPROTO) {
        /* Nothing of a broken ring is delivered, not even what came before
         * the break: its framing cannot be trusted any more. */
        vs_udp_pair_down(u, slot, "the peer wrote a malformed datagram ring");
        free_rx(u, p);
        return false;
    }
    /* The writer closed (-EPIPE) or a torn-down ring ran dry. */
    if (p->state == VS_PAIR_UP)
        vs_udp_pair_down(u, slot, VS_REASON_PEER_LEFT);
    if (n != -EAGAIN || p->draining)
        free_rx(u, p);
    return false;
}

int vs_udp_ring_ready(struct vs_udp_sock *u)
{
    if (!u->live)
        return -1;
    for (uint32_t k = 0; k < u->nmade; k++) {
        uint32_t slot = u->made[(u->next_ring + k) % u->nmade];
        if (ready(u, (int)slot))
            return (int)slot;
    }
    return -1;
}

/* The source as the kernel would give it to this socket: IPv4, or
 * v4-mapped on an IPv6 socket. */
static socklen_t source_name(const struct vs_udp_sock *u, const struct vs_udp_pair *p,
                             struct sockaddr_storage *out)
{
    uint8_t a[16];
    uint16_t port;
    memset(out, 0, sizeof(*out));
    vs_udp_addr_key(&p->peer, a, &port);
    bool v4 = memcmp(a, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0;
    if (u->family == AF_INET && v4) {
        struct sockaddr_in *in = (void *)out;
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
        memcpy(&in->sin_addr, a + 12, 4);
        return sizeof(*in);
    }
    struct sockaddr_in6 *in6 = (void *)out;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    memcpy(&in6->sin6_addr, a, 16);
    return sizeof(*in6);
}

ssize_t vs_udp_ring_take(struct vs_udp_sock *u, int slot, struct msghdr *msg, int flags)
{
    struct vs_udp_pair *p = vs_udp_pair_at(u, slot);
    if (!p || !ready(u, slot))
        return -EAGAIN;
    struct vs_dgram_meta m;
    bool peek = flags & MSG_PEEK;
    ssize_t n =
        vs_dgram_take(&p->rx, &m, msg->msg_iov, (int)msg->msg_iovlen, peek ? VS_RING_PEEK : 0);
    if (n == -EINVAL)
        return -EMSGSIZE; /* more iovec entries than the kernel takes */
    if (n < 0) {
        ready(u, slot); /* -EPROTO: the pair goes down */
        return -EAGAIN;
    }
    if (msg->msg_name) {
        struct sockaddr_storage src;
        socklen_t len = source_name(u, p, &src);
        memcpy(msg->msg_name, &src, len < msg->msg_namelen ? len : msg->msg_namelen);
        msg->msg_namelen = len;
    }
    msg->msg_controllen = 0;
    msg->msg_flags = m.len > (size_t)n ? MSG_TRUNC : 0;
    if (!peek) {
        p->ring_rx++;
        p->fresh = false;
        u->next_ring = p->made_at + 1;
    }
    return (flags & MSG_TRUNC) ? (ssize_t)m.len : n;
}

void vs_udp_arm(struct vs_udp_sock *u)
{
    if (!u->page)
        return;
    atomic_fetch_add(&u->page->sleepers, 1);
    atomic_fetch_add(&u->page->seq, 1);
    atomic_thread_fence(memory_order_seq_cst);
}

void vs_udp_disarm(struct vs_udp_sock *u)
{
    if (u->page)
        atomic_fetch_sub(&u->page->sleepers, 1);
}

uint64_t vs_udp_rx_mark(struct vs_udp_sock *u)
{
    uint64_t mark = atomic_load(&u->rx_gone);
    for (uint32_t k = 0; u->live && k < u->nmade; k++) {
        struct vs_udp_pair *p = u->pair[u->made[k]];
        if (p->rx_ok)
            mark += vs_ring_head(&p->rx);
    }
    return mark;
}

void vs_udp_rings_idle(struct vs_udp_sock *u, long now)
{
    if (now < u->next_reclaim_ns)
        return;
    u->next_reclaim_ns = now + VS_UDP_RECLAIM_NS;
    for (uint32_t k = 0; k < u->nmade; k++) {
        struct vs_udp_pair *p = u->pair[u->made[k]];
        /* A producer never sleeps for room here (a full receiver drops), so
         * a reclaim that held our receive ring for a moment wakes nobody. */
        if (p->tx_ok)
            vs_ring_reclaim(&p->tx, now, VS_UDP_IDLE_NS);
        if (p->rx_ok && !p->draining)
            vs_ring_reclaim_consumed(&p->rx, now, VS_UDP_IDLE_NS);
    }
}
