/* shm.c - which connections try the shared-memory transport, what the
 * statistics say of them, and their readiness as poll and epoll see it. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "config/config.h"
#include "config/log.h"
#include "core/reason.h"
#include "base/real.h"
#include "core/spin.h"
#include "base/syscall.h"
#include "transport/addr.h"
#include "transport/shm/conn.h"
#include "transport/shm/ops.h"
#include "transport/shm/reclaim.h"
#include "transport/shm/shm.h"
#include "transport/shm/shm_internal.h"

/* Same host: a loopback peer, or one that has our own address. */
static bool peer_is_local(const struct vs_shm_conn *c)
{
    return vs_addr_loopback(&c->peer) ||
           vs_addr_same_ip((const struct sockaddr *)&c->local, (const struct sockaddr *)&c->peer);
}

static void attach(struct vs_sock *s, struct vs_shm_conn *c)
{
    s->ops = &vs_shm_ops;
    s->conn = c;
    s->conn_shown = -1;
    vs_stats_set_reason(s->stat, VS_REASON_DEFERRED);
}

void vs_shm_on_connect(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len)
{
    if (!vs_upgrade_eligible(s, VS_TRANSPORT_SHM))
        return;
    struct vs_shm_conn *c = vs_shm_conn_new(s, false, fd, peer, len);
    if (!c)
        return;
    if (!peer_is_local(c)) {
        vs_stats_set_reason(s->stat, VS_REASON_PEER_NOT_LOCAL);
        vs_shm_conn_free(c);
        return;
    }
    attach(s, c);
    vs_shm_sync(s, fd);
}

void vs_shm_on_accept(struct vs_sock *s, int fd)
{
    if (!vs_upgrade_eligible(s, VS_TRANSPORT_SHM))
        return;
    struct vs_shm_conn *c = vs_shm_conn_new(s, true, fd, NULL, 0);
    if (!c)
        return;
    if (!peer_is_local(c)) {
        vs_stats_set_reason(s->stat, VS_REASON_PEER_NOT_LOCAL);
        vs_shm_conn_free(c);
        return;
    }
    attach(s, c);
    vs_shm_sync(s, fd);
}

void vs_shm_sync(struct vs_sock *s, int fd)
{
    struct vs_shm_conn *c = s->conn;
    int hs = atomic_load_explicit(&c->hs, memory_order_acquire);
    if (hs == s->conn_shown && (hs == VS_HS_DONE || hs == VS_HS_FAILED)) {
        /* The peer left the rings (exec, stdio, splice): say so once. */
        if (hs == VS_HS_DONE)
            vs_upgrade_show_peer_left(s, VS_TRANSPORT_SHM, &c->st);
        return;
    }
    if (hs != VS_HS_DONE && hs != VS_HS_FAILED) {
        if (hs == VS_HS_YOUNG)
            atomic_fetch_add_explicit(&c->up.young_calls, 1, memory_order_relaxed);
        vs_shm_progress(c, fd);
        hs = atomic_load_explicit(&c->hs, memory_order_acquire);
    }
    if (hs != VS_HS_DONE && hs != VS_HS_FAILED) {
        /* Under way: say so once, with the time by which it ends. */
        if (hs != VS_HS_YOUNG)
            vs_upgrade_show_pending(s, &c->up, VS_HS_LISTEN);
        return;
    }
    s->conn_shown = hs;
    if (hs == VS_HS_DONE) {
        s->transport = VS_TRANSPORT_SHM;
        vs_stats_set_transport(s->stat, VS_TRANSPORT_SHM, "");
        vs_info("fd %d: upgraded to shm (rings of %lu and %lu bytes)", fd,
                (unsigned long)c->rx.capacity, (unsigned long)c->tx.capacity);
    } else {
        const char *why = c->fail_reason ? c->fail_reason : VS_REASON_PEER_NOT_VSOCKET;
        /* Also after it was shown on shm: it left the rings (exec, stdio, splice). */
        s->transport = VS_TRANSPORT_KERNEL;
        vs_stats_set_transport(s->stat, VS_TRANSPORT_KERNEL, why);
        vs_info("fd %d: stays on the kernel: %s", fd, why);
    }
}

bool vs_shm_ring_ready(struct vs_ring *ring, bool want_data)
{
    ssize_t n = want_data ? vs_ring_readable(ring) : vs_ring_writable(ring);
    return n != 0 || vs_ring_peer_closed(ring);
}

static bool ring_data(void *ring, const void *unused)
{
    (void)unused;
    return vs_shm_ring_ready(ring, true);
}

static bool ring_space(void *ring, const void *unused)
{
    (void)unused;
    return vs_shm_ring_ready(ring, false);
}

bool vs_shm_spin(struct vs_ring *ring, bool want_data, long asked_ns)
{
    return vs_shm_ring_ready(ring, want_data) ||
           vs_spin_until(want_data ? ring_data : ring_space, ring, NULL, asked_ns);
}

/* --- readiness --- */

/* The receive side reads the ring now, or will at its next call. */
static bool rx_ring_phase(struct vs_shm_conn *c)
{
    if (!atomic_load(&c->rx_ready) || atomic_load(&c->st.rx_back_on_tcp))
        return false;
    return atomic_load(&c->st.rx_switched) ||
           (atomic_load(&c->st.rx_switch_known) && c->st.tcp_rx == c->st.rx_switch_at);
}

/* The send side can go on: room in the tx ring, its reader gone, or the
 * peer dead (writable like a kernel socket, so that the next write learns
 * it: EPIPE). */
static bool tx_ring_room(struct vs_shm_conn *c)
{
    return vs_shm_ring_ready(&c->tx, false) || vs_shm_peer_gone(c);
}

bool vs_shm_translated(struct vs_sock *s)
{
    return s->conn && vs_shm_active(s->conn);
}

unsigned vs_shm_tcp_interest(struct vs_sock *s, unsigned user)
{
    struct vs_shm_conn *c = s->conn;
    unsigned m = user & (POLLIN | POLLPRI | POLLOUT | POLLRDHUP);
    /* Left the rings (exec, stdio, splice): TCP says everything again. */
    if (!vs_shm_active(c))
        return m;
    if (rx_ring_phase(c))
        m |= POLLIN | POLLRDHUP; /* end of stream, reset or REVERT */
    if (vs_shm_tx_on_ring(c))
        m = (m & ~(unsigned)POLLOUT) | POLLRDHUP;
    return m;
}

int vs_shm_watch_fd(struct vs_sock *s)
{
    return vs_shm_active(s->conn) ? vs_shm_event_fd(s->conn) : -1;
}

unsigned vs_shm_generation(struct vs_sock *s)
{
    struct vs_shm_conn *c = s->conn;
    return atomic_load(&c->gen) * 8u + (unsigned)atomic_load(&c->hs);
}

static int tcp_revents_now(int fd, unsigned events)
{
    struct pollfd p = {.fd = fd, .events = (short)events};
    struct timespec zero = {0, 0};
    if (vs_syscall(SYS_ppoll, &p, 1, &zero, NULL, _NSIG / 8) < 0)
        return 0;
    return p.revents;
}

unsigned vs_shm_poll(struct vs_sock *s, int fd, unsigned interest, int tcp_revents,
                     bool watch_fired)
{
    struct vs_shm_conn *c = s->conn;
    vs_shm_sync(s, fd);
    if (watch_fired && vs_shm_done(c)) {
        vs_shm_progress(c, fd);
        vs_shm_revert_if_asked(c, fd);
    }
    const unsigned always = POLLERR | POLLHUP | POLLNVAL;
    bool rx_ring = vs_shm_active(c) && rx_ring_phase(c);
    bool tx_ring = vs_shm_active(c) && vs_shm_tx_on_ring(c);
    if (tcp_revents == VS_TCP_UNKNOWN) {
        bool need = !rx_ring || (!tx_ring && (interest & POLLOUT));
        tcp_revents = need ? tcp_revents_now(fd, vs_shm_active(c) ? vs_shm_tcp_interest(s, interest)
                                                                  : interest)
                           : 0;
    }
    unsigned tcp = (unsigned)tcp_revents;
    if (!vs_shm_active(c))
        return tcp & (interest | always);
    unsigned m = tcp & always;
    if (rx_ring) {
        ssize_t r = vs_ring_readable(&c->rx);
        bool closed = vs_ring_peer_closed(&c->rx);
        if (r != 0 || closed || atomic_load(&c->st.rx_reverted))
            m |= POLLIN;
        if (closed)
            m |= POLLRDHUP;
        if (tcp & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
            atomic_store(&c->tcp_event, true);
            m |= POLLIN | (tcp & POLLRDHUP);
        }
    } else {
        m |= tcp & (POLLIN | POLLPRI | POLLRDHUP);
    }
    if (atomic_load(&c->st.violated)) /* the next receive says ECONNRESET */
        m |= POLLIN;
    if (tx_ring) {
        if (tx_ring_room(c) || atomic_load(&c->st.tx_revert_pending))
            m |= POLLOUT;
        if (tcp & (POLLRDHUP | POLLHUP | POLLERR))
            atomic_store(&c->tcp_event, true);
    } else {
        m |= tcp & POLLOUT;
    }
    return m & (interest | always);
}

unsigned vs_shm_poll_rings(struct vs_sock *s, unsigned interest)
{
    struct vs_shm_conn *c = s->conn;
    if (!vs_shm_active(c))
        return 0;
    unsigned m = 0;
    if ((interest & POLLIN) && rx_ring_phase(c)) {
        if (vs_ring_peer_closed(&c->rx))
            m |= POLLIN | POLLRDHUP;
        else if (vs_ring_readable(&c->rx) != 0)
            m |= POLLIN;
    }
    if ((interest & POLLOUT) && vs_shm_tx_on_ring(c) && tx_ring_room(c))
        m |= POLLOUT;
    return m & interest;
}

unsigned vs_shm_arm(struct vs_sock *s, unsigned interest)
{
    struct vs_shm_conn *c = s->conn;
    unsigned armed = 0;
    if (!vs_shm_active(c))
        return 0;
    if ((interest & POLLIN) && rx_ring_phase(c)) {
        vs_ring_arm(&c->rx, 1);
        armed |= POLLIN;
    }
    if ((interest & POLLOUT) && vs_shm_tx_on_ring(c)) {
        vs_ring_arm(&c->tx, 1);
        armed |= POLLOUT;
    }
    if (armed)
        atomic_fetch_add(&c->sleepers, 1);
    return armed;
}

bool vs_shm_shared_wait(struct vs_sock *s)
{
    return atomic_load(&conn_of(s)->sleepers) > 1;
}

bool vs_shm_cold_attach(struct vs_sock *s, void *rec)
{
    struct vs_shm_conn *c = s->conn;
    void *none = NULL;
    int hs = atomic_load(&c->hs);
    /* On TCP for good: nothing will change that a kernel event does not say. */
    if (hs == VS_HS_FAILED)
        return true;
    /* Before the rings, its set-up moves at calls of this process (which
     * kick the record: vs_shm_bump) or by messages on the watch fd: it must
     * be the only holder. */
    bool ours = hs != VS_HS_DONE || c->chan >= 0;
    return ours && atomic_load(&c->holders) == 1 &&
           atomic_compare_exchange_strong(&c->cold_rec, &none, rec);
}

void vs_shm_cold_detach(struct vs_sock *s, void *rec)
{
    atomic_compare_exchange_strong(&conn_of(s)->cold_rec, &rec, NULL);
}

void *vs_shm_cold_rec(struct vs_sock *s)
{
    return s->conn ? atomic_load(&conn_of(s)->cold_rec) : NULL;
}

bool vs_shm_spins(struct vs_sock *s)
{
    return vs_shm_done(s->conn);
}

bool vs_shm_rx_by_kernel(struct vs_sock *s)
{
    struct vs_shm_conn *c = s->conn;
    /* Not while TCP bytes before a known switch point remain: reading them
     * (a local act) puts the ring's bytes next. */
    return !rx_ring_phase(c) &&
           (!atomic_load(&c->st.rx_switch_known) || atomic_load(&c->st.rx_back_on_tcp));
}

void vs_shm_disarm(struct vs_sock *s, unsigned armed)
{
    struct vs_shm_conn *c = s->conn;
    if (armed)
        atomic_fetch_sub(&c->sleepers, 1);
    if (armed & POLLIN)
        vs_ring_arm(&c->rx, -1);
    if (armed & POLLOUT)
        vs_ring_arm(&c->tx, -1);
}

void vs_shm_rearm(struct vs_sock *s, unsigned armed)
{
    struct vs_shm_conn *c = s->conn;
    if (armed & POLLIN)
        vs_ring_rearm(&c->rx);
    if (armed & POLLOUT)
        vs_ring_rearm(&c->tx);
}

uint64_t vs_shm_rx_mark(struct vs_sock *s)
{
    struct vs_shm_conn *c = s->conn;
    return atomic_load(&c->rx_ready)
               ? vs_ring_head(&c->rx) + vs_ring_peer_closed(&c->rx) + vs_shm_peer_gone(c)
               : 0;
}

uint64_t vs_shm_tx_mark(struct vs_sock *s)
{
    struct vs_shm_conn *c = s->conn;
    return atomic_load(&c->tx_ready)
               ? vs_ring_space_mark(&c->tx) + vs_ring_peer_closed(&c->tx) + vs_shm_peer_gone(c)
               : 0;
}

const struct vs_transport_ops vs_shm_ops = {
    .id = VS_TRANSPORT_SHM,
    .on_connect = vs_shm_on_connect,
    .on_accept = vs_shm_on_accept,
    .recvmsg = vs_shm_recvmsg,
    .sendmsg = vs_shm_sendmsg,
    .sendfile = vs_shm_sendfile,
    .shutdown = vs_shm_shutdown,
    .ioctl = vs_shm_ioctl,
    .translated = vs_shm_translated,
    .tcp_interest = vs_shm_tcp_interest,
    .watch_fd = vs_shm_watch_fd,
    .poll = vs_shm_poll,
    .poll_fast = vs_shm_poll_rings,
    .spins = vs_shm_spins,
    .arm = vs_shm_arm,
    .disarm = vs_shm_disarm,
    .rearm = vs_shm_rearm,
    .shared_wait = vs_shm_shared_wait,
    .generation = vs_shm_generation,
    .rx_mark = vs_shm_rx_mark,
    .tx_mark = vs_shm_tx_mark,
    .rx_by_kernel = vs_shm_rx_by_kernel,
    .cold_attach = vs_shm_cold_attach,
    .cold_detach = vs_shm_cold_detach,
    .cold_rec = vs_shm_cold_rec,
    .idle = vs_shm_idle_sock,
    .leave = vs_shm_leave,
    .release = vs_shm_release,
    .fork_prepare = vs_shm_fork_prepare,
    .fork_parent = vs_shm_fork_parent,
    .fork_child = vs_shm_fork_child,
    .fork_failed = vs_shm_fork_failed,
    .before_exec = vs_shm_before_exec,
    .exec_failed = vs_shm_exec_failed,
    .leave_all = vs_shm_leave_all,
};
