/* leave.c - a connection leaving RDMA for TCP, for good (proto.h: CUT).
 *
 * Either end may leave: a send stalled on a peer that does not read (a
 * spill), or a process event the connection cannot follow (exec,
 * fork, stdio, seccomp: vs_rdma_revert). The leaving end says CUT: "I read
 * a of yours; my transport data ends where you credited me, b". It resends
 * on TCP what the peer had not credited, from its send copy; the peer drops
 * from TCP what it had read on its ring past b, and resends its own from a.
 * So every byte that was only in a ring goes again on TCP, and neither end
 * reads its ring after a CUT.
 *
 * Crossing: both ends may leave at once (two writers stalled on each
 * other), each sending its CUT before the other's arrives. Each then
 * resends from the other's credit, not from where the other read, so each
 * must drop what it read past that. An end that left therefore reads no
 * TCP byte before it knows whether the peer's CUT crossed its own. The
 * peer's CUT is placed before any byte it resends, so the first TCP byte
 * past the switch point with no CUT in our CQ settles it (vs_rdma_settle).
 * An end that leaves for good in a process event settles before the event
 * goes on (settle_now), bounded. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "config/log.h"
#include "core/clock.h"
#include "core/reason.h"
#include "base/real.h"
#include "base/syscall.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/rdma.h"
#include "transport/stream_io.h"

/* How long a step of leaving waits for the peer's memory or bytes: long
 * enough for a slow peer, bounded for a dead one. */
#define LEAVE_NS 5000000000L
/* A blocking send that found the peer's ring full VSOCKET_RDMA_SPILL_MS
 * leaves RDMA for TCP: the peer is not reading, and the program may rely on
 * the kernel's buffers (megabytes) where the ring holds VSOCKET_RDMA_RING. */
static long spill_ns(void)
{
    return (long)vs_config.rdma_spill_ms * 1000000L;
}

/* How long an end leaving for good waits for a CUT that may cross its own,
 * when the peer may be a writer stalled on us (then its spill time is up
 * any moment: that, and 800 ms for its CUT to come, as the peer's setting
 * is ours); otherwise twice its own CUT's round trip, at least this. */
#define CROSS_MARGIN_NS 800000000L
#define CROSS_MIN_NS 1000000L

/* ---------------------------------------------------------------- resend */

/* Sends LEN bytes at BUF on TCP, waiting for room as a blocking send.
 * 0 or -errno. */
static int tcp_send_all(struct vs_rdma_conn *c, int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = vs_real.send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                return -errno;
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            vs_real.poll(&p, 1, 100);
            continue;
        }
        buf += n;
        len -= (size_t)n;
        c->st.tcp_tx += (uint64_t)n;
    }
    return 0;
}

/* Sends what TCP takes now of the resend, from the send copy. 1 all of
 * it, 0 TCP is full, -errno. (tx) */
static int push(struct vs_rdma_conn *c, int fd)
{
    while (c->resend_at < c->resend_end) {
        uint64_t off = c->resend_at & (c->tx_size - 1);
        size_t run = (size_t)(c->resend_end - c->resend_at);
        if (run > c->tx_size - off)
            run = (size_t)(c->tx_size - off);
        ssize_t n = vs_real.send(fd, (char *)c->tx.mem + off, run, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? 0 : -errno;
        }
        c->resend_at += (uint64_t)n;
        c->st.tcp_tx += (uint64_t)n;
    }
    return 1;
}

/* Sends the resend, waiting for room, for as long as it takes. 1 or
 * -errno. (tx) */
static int push_all(struct vs_rdma_conn *c, int fd)
{
    int rc;
    while ((rc = push(c, fd)) == 0) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        vs_real.poll(&p, 1, 100);
    }
    return rc;
}

/* What the peer sent to a socket nobody reads any more (closed, or its
 * process exiting) is dropped, as the kernel would drop it (with a reset):
 * a peer closing too, with a resend of its own, is never waited for. */
static void drop_incoming(int fd)
{
    char junk[16384];
    while (vs_real.recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
        ;
}

/* Our transport data from FROM to END goes again on TCP, from the send
 * copy; a spill's connection fails with REASON once it is sent. (tx) */
static int resend_begin(struct vs_rdma_conn *c, uint64_t from, uint64_t end, const char *reason)
{
    vs_debug("rdma: resending on TCP %lu bytes the peer did not read (%lu to %lu)",
             (unsigned long)(end - from), (unsigned long)from, (unsigned long)end);
    c->resend_reason = reason;
    if (from > end || end - from > c->tx_size) {
        atomic_store(&c->st.violated, true);
        return -ECONNRESET;
    }
    c->resend_at = from;
    c->resend_end = end;
    atomic_store(&c->resending, true);
    /* Readiness: TCP's room matters now, to a sleeper of another thread
     * too (its wait may watch nothing that would wake it). */
    vs_rdma_bump(c);
    vs_wake_phase_changed();
    return 0;
}

/* The resend is over: sent (RC >= 0), or not (-errno): then the stream
 * has a gap the peer must not read past, and it ends with a reset. Our
 * sends are TCP's from now on. (tx) */
static void resend_over(struct vs_rdma_conn *c, int fd, int rc)
{
    atomic_store(&c->resending, false);
    atomic_store(&c->st.tx_back_on_tcp, true);
    if (rc < 0 && fd >= 0) {
        vs_warn("rdma: what the peer did not read could not be resent on TCP (%s): "
                "resetting the connection",
                strerror(-rc));
        struct linger now = {.l_onoff = 1, .l_linger = 0};
        vs_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
        vs_real.shutdown(fd, SHUT_RDWR);
    } else if (c->fin_after_resend && fd >= 0) {
        vs_real.shutdown(fd, SHUT_WR);
    }
    c->fin_after_resend = false;
    if (c->resend_reason) {
        pthread_mutex_lock(&c->ctl_lock);
        vs_rdma_conn_fail(c, c->resend_reason);
        pthread_mutex_unlock(&c->ctl_lock);
        c->resend_reason = NULL;
    }
    vs_rdma_bump(c);
}

/* Resends at once, from FROM: the send copy up to ZPOS, then the offer's
 * bytes [ZPOS, ZPOS + ZLEN) from ZBUF, the program's buffer until its
 * blocking send returns. (tx) */
static int resend_offer(struct vs_rdma_conn *c, int fd, uint64_t from, uint64_t zpos,
                        const void *zbuf, size_t zlen, const char *reason)
{
    int rc = 0;
    if (from < zpos)
        rc = resend_begin(c, from, zpos, reason);
    if (rc == 0 && from < zpos)
        rc = push_all(c, fd);
    if (rc >= 0 && from < zpos + zlen) {
        uint64_t at = from > zpos ? from : zpos;
        rc = tcp_send_all(c, fd, (const char *)zbuf + (at - zpos), (size_t)(zpos + zlen - at));
    }
    c->resend_reason = reason;
    resend_over(c, fd, rc);
    return rc < 0 ? rc : 0;
}

int vs_rdma_answer_cut(struct vs_rdma_conn *c, int fd, uint64_t zpos, const void *zbuf, size_t zlen)
{
    if (!atomic_load(&c->st.tx_revert_pending) || atomic_load(&c->st.tx_back_on_tcp))
        return 0;
    if (!atomic_load(&c->st.tx_switched)) {
        atomic_store(&c->st.tx_back_on_tcp, true);
        return 0;
    }
    return resend_offer(c, fd, c->st.tx_revert_consumed, zpos, zbuf, zlen, NULL);
}

/* The peer's CUT asks for a resend not begun yet: begin it. 1 nothing to
 * resend, 0 begun, -errno (ended). (tx) */
static int answer_begin(struct vs_rdma_conn *c, int fd)
{
    if (atomic_load(&c->resending))
        return 0;
    if (!vs_rdma_resend_due(c))
        return 1;
    if (!atomic_load(&c->st.tx_switched)) {
        atomic_store(&c->st.tx_back_on_tcp, true);
        return 1;
    }
    int rc = resend_begin(c, c->st.tx_revert_consumed, c->tx_head, NULL);
    if (rc < 0)
        resend_over(c, fd, rc);
    return rc;
}

int vs_rdma_resend_step(struct vs_rdma_conn *c, int fd, bool block)
{
    int rc = answer_begin(c, fd);
    if (rc != 0)
        return rc;
    rc = block ? push_all(c, fd) : push(c, fd);
    if (rc != 0)
        resend_over(c, fd, rc);
    return rc;
}

/* The peer left: what it had not read goes on TCP at once, as far as TCP
 * takes it, not at our next send (which may never come: a program done
 * sending waits to read). Called from every call on the connection. */
void vs_rdma_revert_if_asked(struct vs_rdma_conn *c, int fd)
{
    if (!vs_rdma_resend_due(c) || pthread_mutex_trylock(&c->tx_lock) != 0)
        return;
    vs_rdma_resend_step(c, fd, false);
    pthread_mutex_unlock(&c->tx_lock);
}

bool vs_rdma_resend_closed(struct vs_rdma_conn *c, long until_ns)
{
    int fd = c->hold_fd;
    if (fd < 0 || answer_begin(c, fd) != 0)
        return true;
    int rc = push(c, fd);
    drop_incoming(fd);
    if (rc == 0 && vs_now_ns() < until_ns)
        return false;
    resend_over(c, fd, rc == 0 ? -ETIMEDOUT : rc);
    return true;
}

/* At exit, as a closed socket's, waiting for TCP's room until UNTIL. */
static void resend_at_exit(struct vs_rdma_conn *c, void *until)
{
    if (!vs_rdma_resend_due(c) || c->hold_fd < 0 || pthread_mutex_trylock(&c->tx_lock) != 0)
        return;
    while (!vs_rdma_resend_closed(c, *(long *)until)) {
        struct pollfd p = {.fd = c->hold_fd, .events = POLLOUT | POLLIN};
        vs_real.poll(&p, 1, 100);
    }
    pthread_mutex_unlock(&c->tx_lock);
}

void vs_rdma_resend_at_exit(void)
{
    long until = vs_now_ns() + VS_RDMA_CLOSE_RESEND_NS; /* for all of them together */
    vs_rdma_conn_each(resend_at_exit, &until);
}

/* ----------------------------------------------------------------- leave */

/* Says CUT and waits until it is placed: the peer sees it before any READ
 * of an offer's buffer the program may reuse, and before any byte we
 * resend (from *FROM, what the peer credited; a crossing CUT of the peer's
 * does not change it). 0, -EAGAIN not said, -ECONNRESET the queue pair
 * failed (the peer's host or device is gone: TCP would only wait for it a
 * quarter of an hour). (tx, rx, ctl) */
static int say_cut(struct vs_rdma_conn *c, uint64_t *from)
{
    uint64_t credited = vs_rdma_peer_tail(c);
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_CUT, .a = c->rx_tail, .b = credited};
    /* Without the CUT the peer would go on reading its ring while we send
     * on TCP. */
    int rc = vs_rdma_post_msg_waiting(c, &m, LEAVE_NS);
    if (rc < 0) {
        vs_debug("rdma: CUT not posted: %s", strerror(-rc));
        return -EAGAIN;
    }
    vs_debug("rdma: CUT: we read %lu, resending ours from %lu", (unsigned long)m.a,
             (unsigned long)m.b);
    if (!vs_rdma_wait_placed(c, LEAVE_NS) && atomic_load(&c->broken))
        return -ECONNRESET;
    *from = credited;
    atomic_store(&c->rx_unsettled, true);
    atomic_store(&c->st.rx_back_on_tcp, true);
    return 0;
}

void vs_rdma_stall(struct vs_rdma_conn *c, bool full)
{
    /* Called at every send: no store when there is nothing to clear. */
    if (!full) {
        if (atomic_load_explicit(&c->tx_stall_ns, memory_order_relaxed))
            atomic_store(&c->tx_stall_ns, 0);
        return;
    }
    uint64_t tail = vs_rdma_peer_tail(c);
    bool began = !atomic_load(&c->tx_stall_ns);
    if (began || tail != atomic_load(&c->tx_stall_tail)) {
        atomic_store(&c->tx_stall_tail, tail);
        atomic_store(&c->tx_stall_ns, vs_now_ns());
        vs_rdma_stall_mark(c);
    }
    /* The stall ends in a spill at a time, not at an event: a cold epoll
     * record would not look (cold_attach refuses a stalled sender). */
    if (began)
        vs_rdma_pass_news_on(c);
}

/* How long the clock waits for what was sent before the stall to be
 * placed: several ACK timeouts. Longer, and the bytes are not arriving
 * because the peer posts no receive buffers (it does not poll: RNR), which
 * is a peer that does not read. */
#define PLACE_MAX_NS 2000000000L

/* Whether the peer has had all we sent before the stall in its memory for
 * LIMIT_NS and read none of it. Bytes still on their way cannot have been
 * read: a slow link, or an adapter waiting out an ACK timeout (0.5 s) to
 * resend a lost packet, is not a peer that does not read. (tx, readiness) */
static bool stalled_for(struct vs_rdma_conn *c, long limit_ns)
{
    long since = atomic_load(&c->tx_stall_ns);
    if (!since || vs_rdma_peer_tail(c) != atomic_load(&c->tx_stall_tail))
        return false;
    long now = vs_now_ns(), placed = vs_rdma_stall_placed(c, now);
    if (!placed)
        placed = since + PLACE_MAX_NS;
    return now - placed > limit_ns;
}

bool vs_rdma_stalled(struct vs_rdma_conn *c)
{
    return stalled_for(c, spill_ns());
}

/* An offer goes only to a peer that said it sleeps in a read: it pulls the
 * offer at once, in READs of up to 1 MiB each (zcopy.c), which its adapter
 * may have to resend after its ACK timeout (0.5 s each). Spilling then would
 * move a reading peer to TCP for good; a peer that left its read and reads
 * no more is rare, and pays this once. */
#define OFFER_SPILL_MIN_NS 2000000000L

bool vs_rdma_offer_stalled(struct vs_rdma_conn *c)
{
    return stalled_for(c, spill_ns() > OFFER_SPILL_MIN_NS ? spill_ns() : OFFER_SPILL_MIN_NS);
}

int vs_rdma_spill(struct vs_rdma_conn *c, int fd, uint64_t zpos, const void *zbuf, size_t zlen)
{
    /* Not now: again after another stall, not at every wake-up (nor in a
     * loop of a non-blocking writer told it may write). */
    long now = vs_now_ns();
    atomic_store(&c->tx_stall_ns, now);
    vs_rdma_stall_replaced(c, now);
    if (pthread_mutex_trylock(&c->rx_lock) != 0)
        return 0; /* a reader is busy (and drains the peer) */
    pthread_mutex_lock(&c->ctl_lock);
    vs_rdma_poll(c);
    /* The peer left first: the caller answers its CUT. */
    uint64_t from = 0;
    int rc = atomic_load(&c->st.tx_revert_pending) ? -EAGAIN : say_cut(c, &from);
    pthread_mutex_unlock(&c->ctl_lock);
    pthread_mutex_unlock(&c->rx_lock);
    if (rc == -EAGAIN)
        return 0;
    if (rc < 0)
        return rc;
    vs_info("rdma: the peer has not read for %lu ms: the rest of this connection goes on TCP",
            vs_config.rdma_spill_ms);
    /* The connection is marked gone once the resend is sent: until then
     * every sender sends the resend first instead of overtaking it. */
    if (zbuf)
        return (rc = resend_offer(c, fd, from, zpos, zbuf, zlen, VS_REASON_SPILLED)) < 0 ? rc : 1;
    if ((rc = resend_begin(c, from, c->tx_head, VS_REASON_SPILLED)) < 0)
        resend_over(c, fd, rc);
    return rc < 0 ? rc : 1;
}

/* ---------------------------------------------------------------- settle */

/* The peer's CUT, once: it resends from what we credited, so the TCP
 * bytes up to our tail are ones we read already. (rx) */
static int take_cut(struct vs_rdma_conn *c)
{
    if (!atomic_load_explicit(&c->rx_cut, memory_order_acquire) || c->cut_taken)
        return 0;
    c->cut_taken = true;
    uint64_t from = c->st.rx_revert_at;
    if (c->rx_tail < from) {
        atomic_store(&c->st.violated, true);
        return -ECONNRESET;
    }
    c->rx_skip = c->rx_tail - from;
    vs_debug("rdma: the peer's CUT: it resends from %lu, we read %lu: dropping %lu",
             (unsigned long)from, (unsigned long)c->rx_tail, (unsigned long)c->rx_skip);
    atomic_store(&c->st.rx_back_on_tcp, true);
    return 0;
}

/* Drops the TCP bytes we had read on the ring already. 1 done, 0 more to
 * come, -errno. (rx) */
static int skip_tcp(struct vs_rdma_conn *c, int fd)
{
    char junk[4096];
    while (c->rx_skip > 0) {
        size_t want = c->rx_skip < sizeof(junk) ? (size_t)c->rx_skip : sizeof(junk);
        ssize_t n = vs_real.recv(fd, junk, want, MSG_DONTWAIT);
        if (n == 0)
            return -ECONNRESET; /* the peer promised these bytes */
        if (n < 0)
            return errno == EAGAIN ? 0 : -errno;
        c->rx_skip -= (uint64_t)n;
        c->st.tcp_rx += (uint64_t)n;
    }
    return 1;
}

/* Whether the peer's TCP bytes (or end) past its switch point are here:
 * it sends them only after its CUT, if any, is placed in our memory. */
static bool peer_spoke_on_tcp(struct vs_rdma_conn *c, int fd)
{
    /* A peer that never switched has nothing on our ring to cut. */
    if (!atomic_load(&c->st.rx_switch_known))
        return true;
    uint64_t before_switch = vs_stream_tcp_before_switch(&c->st);
    int queued = 0;
    if (vs_syscall(SYS_ioctl, fd, FIONREAD, &queued) == 0 && (uint64_t)queued > before_switch)
        return true;
    return before_switch == 0 && vs_tcp_peek(fd) != -EAGAIN; /* its end, or an error */
}

int vs_rdma_settle(struct vs_rdma_conn *c, int fd)
{
    for (;;) {
        if (atomic_load(&c->rx_unsettled) && atomic_load(&c->rx_cut) && !c->cut_taken)
            vs_info("rdma: the peer left rdma when we did: dropping the %lu bytes it resends "
                    "that we had read",
                    (unsigned long)(c->rx_tail - c->st.rx_revert_at));
        int rc = take_cut(c);
        if (rc < 0)
            return rc;
        if (c->cut_taken)
            atomic_store(&c->rx_unsettled, false); /* the peer's CUT says it all */
        if (c->rx_skip && (rc = skip_tcp(c, fd)) <= 0)
            return rc;
        if (!atomic_load(&c->rx_unsettled))
            return 1;
        if (!peer_spoke_on_tcp(c, fd))
            return 0;
        vs_rdma_poll(c);
        if (!atomic_load_explicit(&c->rx_cut, memory_order_acquire)) {
            atomic_store(&c->rx_unsettled, false); /* no crossing */
            return 1;
        }
    }
}

/* Whether the peer may be a writer stalled on our ring (or on an offer we
 * hold), about to leave by itself. */
static bool peer_may_leave(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    bool offers = c->offer_count > 0;
    pthread_mutex_unlock(&c->qp_lock);
    return atomic_load(&c->rx_head) - atomic_load(&c->rx_credited) >= c->rx_size ||
           atomic_load(&c->peer_waits) || offers;
}

/* Settles before a process event: a crossing CUT comes within CROSS_NS,
 * the bytes it promises within LEAVE_NS. Past those the connection ends
 * (both ways shut down) rather than hand the program a byte twice. (rx) */
static void settle_now(struct vs_rdma_conn *c, int fd, long cross_ns)
{
    long start = vs_now_ns();
    int rc;
    while ((rc = vs_rdma_settle(c, fd)) == 0) {
        long waited = vs_now_ns() - start;
        if (!c->rx_skip && waited >= cross_ns) {
            atomic_store(&c->rx_unsettled, false);
            return;
        }
        if (waited >= LEAVE_NS)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        vs_real.poll(&p, 1, 1);
    }
    if (rc == 1)
        return;
    vs_warn("rdma: the peer did not resend what it promised on leaving rdma: ending the "
            "connection");
    vs_real.shutdown(fd, SHUT_RDWR);
    atomic_store(&c->rx_unsettled, false);
    c->rx_skip = 0;
}

bool vs_rdma_yield(struct vs_rdma_conn *c, pthread_mutex_t *lock)
{
    if (!atomic_load(&c->yield_asked))
        return false;
    pthread_mutex_unlock(lock);
    while (atomic_load(&c->yield_asked)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(lock);
    return true;
}

void vs_rdma_revert(struct vs_rdma_conn *c, int fd, const char *reason)
{
    if (fd < 0)
        fd = c->hold_fd;
    /* A thread may sleep in recv or send holding a lock (seen: a fork
     * waiting for a reader's data): it lets go at its next wake-up. */
    atomic_fetch_add(&c->yield_asked, 1);
    pthread_mutex_lock(&c->tx_lock);
    pthread_mutex_lock(&c->rx_lock);
    pthread_mutex_lock(&c->ctl_lock);
    vs_rdma_poll(c);
    long start = vs_now_ns(), took = 0;
    uint64_t from = 0;
    int said = -EAGAIN;
    /* A spill that is still resending said its CUT already. */
    bool must_say = vs_rdma_done(c) && !atomic_load(&c->broken) && fd >= 0 &&
                    !atomic_load(&c->st.tx_revert_pending) && !atomic_load(&c->resending);
    if (must_say) {
        said = say_cut(c, &from);
        took = vs_now_ns() - start;
    }
    pthread_mutex_unlock(&c->ctl_lock);
    if (said == 0) {
        int rc = resend_begin(c, from, c->tx_head, NULL);
        resend_over(c, fd, rc < 0 ? rc : push_all(c, fd));
    } else if (must_say && !atomic_load(&c->st.tx_revert_pending)) {
        /* Untold, the peer would go on writing into a ring nobody reads,
         * then resend on TCP what we had read: an end, not a wrong byte.
         * (Found: a program that changed its credentials, which the
         * device's files then refuse.) */
        vs_warn("rdma: cannot tell the peer that this connection leaves rdma: ending it");
        vs_real.shutdown(fd, SHUT_RDWR);
        fd = -1;
    } else if (fd >= 0) {
        vs_rdma_resend_step(c, fd, true);
    }
    if (atomic_load(&c->resending))
        resend_over(c, fd, -EBADF); /* no descriptor to send it on */
    if (fd >= 0) {
        long cross_ns = peer_may_leave(c) ? spill_ns() + CROSS_MARGIN_NS : 2 * took;
        settle_now(c, fd, cross_ns > CROSS_MIN_NS ? cross_ns : CROSS_MIN_NS);
    }
    pthread_mutex_lock(&c->ctl_lock);
    vs_rdma_conn_fail(c, reason);
    pthread_mutex_unlock(&c->ctl_lock);
    pthread_mutex_unlock(&c->rx_lock);
    pthread_mutex_unlock(&c->tx_lock);
    atomic_fetch_sub(&c->yield_asked, 1);
}
