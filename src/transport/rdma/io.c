/* io.c - the data path of a connection that may have moved to RDMA.
 *
 * Each direction is on TCP until its sender switches it (SWITCH carries the
 * stream offset of the first byte on RDMA); the receiver reads TCP up to
 * there, then its ring (proto.h). A send completes once its bytes are in
 * the send copy and their write is posted; close waits (bounded) until the
 * writes are placed in the peer's memory, so it loses nothing. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "config/config.h"
#include "config/log.h"
#include "core/clock.h"
#include "core/reason.h"
#include "base/real.h"
#include "base/syscall.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/rdma.h"
#include "transport/stream_io.h"
#include "core/spin.h"

/* How long close and shutdown wait for the peer to acknowledge what was
 * written: long enough for a slow peer, bounded for a dead one. */
#define FLUSH_NS 5000000000L

uint64_t vs_rdma_readable(struct vs_rdma_conn *c)
{
    return vs_rdma_rx_avail(c);
}

bool vs_rdma_rx_eof(struct vs_rdma_conn *c)
{
    return atomic_load_explicit(&c->rx_shut_known, memory_order_acquire) &&
           c->rx_tail >= c->rx_shut_at;
}

uint64_t vs_rdma_writable(struct vs_rdma_conn *c)
{
    return vs_rdma_tx_room_ready(c);
}

/* A sender that waits for space asks once; if no answer came in
 * ASK_AGAIN_NS (an answer lost to a full send queue at the peer, say) it
 * asks again, later each time, at most ASKS_MAX times until the credit
 * moves: a peer that does not read (nor poll its completions) for minutes
 * must not run out of receive buffers, whose lack would break the queue
 * pair (the peer answers its next read anyway: peer_waits). */
#define ASK_AGAIN_NS 20000000L
#define ASKS_MAX 4
/* ... after which, while still waiting, a plain write of our credit word
 * (no receive buffer taken) goes out this often: its acknowledgement is all
 * that tells a live peer from a dead host (retry exceeded in seconds). */
#define LIVENESS_NS 1000000000L

void vs_rdma_ask_credit(struct vs_rdma_conn *c)
{
    long now = vs_now_ns();
    uint64_t tail = vs_rdma_peer_tail(c);
    if (tail != c->asked_at_tail) {
        c->asked_at_tail = tail;
        atomic_store(&c->asks_unanswered, 0);
    }
    unsigned asks = atomic_load(&c->asks_unanswered);
    if (atomic_exchange(&c->credit_asked, true) &&
        (asks >= ASKS_MAX || now - c->credit_asked_ns < ASK_AGAIN_NS << asks)) {
        if (asks >= ASKS_MAX && now - c->credit_asked_ns >= LIVENESS_NS) {
            c->credit_asked_ns = now;
            vs_rdma_post_credit(c, false);
        }
        return;
    }
    c->credit_asked_ns = now;
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_CREDIT_REQ, .a = tail};
    if (vs_rdma_post_msg(c, &m) < 0)
        atomic_store(&c->credit_asked, false);
    else
        atomic_fetch_add(&c->asks_unanswered, 1);
}

/* ------------------------------------------------------------------ waits */

/* Whether the CQ brought news since the marks in ARG2 (busy-polling). */
static bool cq_news(void *arg, const void *arg2)
{
    struct vs_rdma_conn *c = arg;
    const uint64_t *mark = arg2;
    vs_rdma_poll(c);
    return mark[0] != atomic_load(&c->rx_head) || mark[1] != vs_rdma_peer_tail(c) ||
           mark[2] != atomic_load(&c->gen) ||
           mark[3] != __atomic_load_n(&c->sq_done, __ATOMIC_RELAXED);
}

/* Sleeps until the CQ, the set-up or the TCP socket may have news, after a
 * bounded busy-poll of the CQ (VSOCKET_POLL_US) while on RDMA. 0, -EINTR
 * or -ETIMEDOUT. */
int vs_rdma_wait(struct vs_rdma_conn *c, int fd, short tcp_events, struct vs_blocking *b)
{
    long left = vs_blocking_left(b, fd);
    if (b->deadline >= 0 && left <= 0)
        return -ETIMEDOUT;
    if (vs_rdma_done(c) && c->cq) {
        uint64_t mark[4] = {atomic_load(&c->rx_head), vs_rdma_peer_tail(c), atomic_load(&c->gen),
                            __atomic_load_n(&c->sq_done, __ATOMIC_RELAXED)};
        long asked = vs_blocking_take_busy(b); /* once a call, as the kernel's */
        if (vs_spin_until(cq_news, c, mark, asked))
            return 0;
    }
    struct pollfd p[4] = {{.fd = fd, .events = tcp_events}};
    int n = 1, wake = -1, wake_i = -1, chan = -1;
    struct vs_rdma_cqg *g = c->cqg;
    /* Counted before the CQ is armed (cq.c arms it again for sleepers). */
    bool shared = atomic_fetch_add(&c->sleepers, 1) > 0;
    if (g) {
        /* The channel is the thread's connections': whoever reads an
         * event of ours wakes us by this eventfd (cq.h). */
        if ((wake = vs_rdma_cq_sleep_begin(g)) >= 0)
            p[wake_i = n++] = (struct pollfd){.fd = wake, .events = POLLIN};
        vs_rdma_notify(c);
        p[chan = n++] = (struct pollfd){.fd = vs_rdma_cq_fd(c), .events = POLLIN};
    }
    /* rdma_cm events: the set-up's, and after it the peer's disconnection
     * (its process died: its kernel tore its queue pair down). */
    const char *why;
    struct rdma_event_channel *ch = vs_rdma_active(c) && atomic_load(&c->hs) != VS_RDMA_YOUNG
                                        ? vs_rdma_dev_channel(&why)
                                        : NULL;
    int cm = -1;
    if (ch)
        p[cm = n++] = (struct pollfd){.fd = ch->fd, .events = POLLIN};
    /* Completions that came before the notification was armed. */
    uint64_t mark[4] = {atomic_load(&c->rx_head), vs_rdma_peer_tail(c), atomic_load(&c->gen),
                        __atomic_load_n(&c->sq_done, __ATOMIC_RELAXED)};
    if (cq_news(c, mark)) {
        atomic_fetch_sub(&c->sleepers, 1);
        vs_rdma_cq_sleep_end(g, wake, false);
        return 0;
    }
    bool nap;
    left = vs_wait_sleep_ns(left, shared, &nap);
    struct timespec ts = {.tv_sec = left / 1000000000L, .tv_nsec = left % 1000000000L};
    struct timespec *tsp = &ts;
    struct vs_sleep_guard guard;
    vs_blocking_sleep_begin(b, &tsp, &guard);
    int rc = (int)vs_syscall(SYS_ppoll, p, n, tsp, NULL, _NSIG / 8);
    int err = errno;
    bool interrupted = vs_blocking_sleep_end(b, &guard);
    vs_spin_woke();
    atomic_fetch_sub(&c->sleepers, 1);
    vs_rdma_cq_sleep_end(g, wake, rc > 0 && wake_i >= 0 && p[wake_i].revents);
    if (rc < 0)
        return err == EINTR ? -EINTR : 0;
    if (rc == 0 && !nap && !interrupted)
        return -ETIMEDOUT;
    if (p[0].revents & ~POLLOUT) /* room only matters to a resend */
        atomic_store(&c->tcp_event, true);
    /* The channel is read only when it rang, or was not watched (the
     * queue pair came meanwhile), or the sleep ended unheard (a slice: an
     * event another process's epoll took must not keep the CQ counted as
     * armed, cq.c): an empty read is a system call. An event that comes
     * later keeps it readable for the next ppoll. */
    if (c->cqg && (chan < 0 || rc == 0 || p[chan].revents))
        vs_rdma_channel_drain(c);
    if (cm >= 0 && p[cm].revents)
        vs_rdma_dev_events();
    vs_rdma_progress(c, fd);
    /* Woken by news: the caller looks first (its next sleep ends at once). */
    return interrupted && rc == 0 ? -EINTR : 0;
}

/* --------------------------------------------------------------- receive */

/* Tells the peer how far we read: at a quarter of the ring, or at once
 * when it waits for space or for an offer to be consumed. */
/* Writes our credit; WAITS: the peer waits for it (a write with immediate
 * wakes it). A post that fails leaves the wait to the next read. */
static void send_credit(struct vs_rdma_conn *c, bool waits)
{
    if (waits)
        atomic_store(&c->peer_waits, false);
    if (vs_rdma_post_credit(c, waits) < 0 && waits)
        atomic_store(&c->peer_waits, true);
}

void vs_rdma_credit_read(struct vs_rdma_conn *c)
{
    vs_rdma_offers_consumed(c);
    uint64_t unsent = c->rx_tail - atomic_load(&c->rx_credited);
    pthread_mutex_lock(&c->qp_lock);
    /* A sender moves to another ring only where we read everything: a ring
     * read to its end is credited at once while a grant is open (with a
     * wake-up: the sender may wait for it) or while grown (a plain write:
     * for the move back after a pause). */
    bool drained = c->rx_tail == atomic_load(&c->rx_head);
    bool open = drained && atomic_load(&c->grant_open);
    bool waits = atomic_load(&c->peer_waits) || c->offer_done || open;
    drained = drained && c->rx_first.mem;
    c->offer_done = false;
    pthread_mutex_unlock(&c->qp_lock);
    if (unsent == 0 || (unsent < c->rx_size / 4 && !waits && !drained))
        return;
    send_credit(c, waits);
}

/* Copies up to the readable bytes into the window. (rx) */
static size_t ring_read(struct vs_rdma_conn *c, const struct iovec *iov, int cnt, bool peek)
{
    uint64_t avail = vs_rdma_readable(c);
    /* After the head: the ring the bytes are in (grow.c moves rings). */
    uint64_t size = __atomic_load_n(&c->rx_size, __ATOMIC_ACQUIRE);
    char *ring = __atomic_load_n(&c->rx.mem, __ATOMIC_ACQUIRE);
    uint64_t pos = c->rx_tail;
    size_t done = 0;
    for (int i = 0; i < cnt && avail > 0; i++) {
        size_t want = iov[i].iov_len < avail ? iov[i].iov_len : (size_t)avail;
        size_t got = 0;
        while (got < want) {
            uint64_t off = pos & (size - 1);
            size_t run = want - got;
            if (run > size - off)
                run = (size_t)(size - off);
            memcpy((char *)iov[i].iov_base + got, ring + off, run);
            got += run;
            pos += run;
        }
        done += want;
        avail -= want;
    }
    if (!peek) {
        __atomic_store_n(&c->rx_tail, pos, __ATOMIC_SEQ_CST);
        vs_rdma_credit_read(c);
    }
    return done;
}

/* On RDMA, nothing to read: the peer's end of stream, its death, or its
 * return to TCP. 1 read TCP now, 0 end of stream, -EAGAIN, -errno. */
static int ring_empty(struct vs_rdma_conn *c, int fd)
{
    if (atomic_load_explicit(&c->rx_cut, memory_order_acquire))
        return 1; /* recvmsg takes it: TCP from now on */
    if (vs_stream_rx_revert_reached(&c->st, c->rx_tail))
        return 1;
    if (atomic_load(&c->st.violated))
        return -ECONNRESET;
    if (vs_rdma_rx_eof(c))
        return 0;
    bool gone = atomic_load(&c->peer_gone) || atomic_load(&c->broken);
    if (!gone && !atomic_exchange(&c->tcp_event, false))
        return -EAGAIN;
    int t = vs_tcp_peek(fd);
    if (t == -EAGAIN && !gone)
        return -EAGAIN;
    atomic_store(&c->tcp_event, true); /* still true next time */
    /* What the peer wrote before it went comes first. */
    vs_rdma_poll(c);
    if (vs_rdma_readable(c) || vs_rdma_rx_eof(c) || atomic_load(&c->st.rx_reverted))
        return -EAGAIN;
    if (t > 0)
        return -ECONNRESET; /* bytes on TCP after the switch, without CUT */
    if (t < 0 && t != -EAGAIN)
        return t;
    if (t == 0)
        return 0;
    /* The queue pair failed while TCP says nothing: the peer's host or
     * device went away. */
    return atomic_load(&c->broken) ? -ECONNRESET : -EAGAIN;
}

static bool rx_on_rdma(struct vs_rdma_conn *c)
{
    return vs_stream_rx_on_transport(&c->st);
}

/* A call about to move bytes of a connection held with another process
 * since a fork (tx or rx held: fork_prepare shares only one without; ctl,
 * under which the slot is let go). */
static void forked_io(struct vs_rdma_conn *c)
{
    if (atomic_load(&c->share) < 0)
        return;
    pthread_mutex_lock(&c->ctl_lock);
    if (!vs_rdma_forked_io(c) && atomic_load(&c->hs) == VS_RDMA_YOUNG)
        vs_rdma_conn_fail(c, VS_REASON_LEFT_BY_FORK);
    pthread_mutex_unlock(&c->ctl_lock);
}

static void tcp_rx_progress(void *conn, int fd)
{
    struct vs_rdma_conn *c = conn;
    vs_rdma_poll(c);
    vs_rdma_progress(c, fd);
}

/* While the set-up is under way, the proof keeps the stream's first bytes:
 * those just read, after AT bytes of the buffers. */
static void tcp_rx_got(void *conn, const struct msghdr *msg, size_t at, size_t n, int flags)
{
    struct vs_rdma_conn *c = conn;
    if ((flags & MSG_PEEK) || !vs_rdma_active(c) || vs_rdma_done(c))
        return;
    struct iovec got[msg->msg_iovlen];
    int cnt = vs_iov_window(msg->msg_iov, (int)msg->msg_iovlen, at, (uint64_t)n, got);
    vs_rdma_proof_rcvd(&c->proof, c->st.tcp_rx - (uint64_t)n, got, cnt, n);
}

/* While unsettled: reads on TCP what the peer sent before its switch
 * point. Bytes read, 0 at the end of stream, -errno (-EAGAIN: nothing of
 * that kind waits). (rx) */
static ssize_t early_tcp_read(struct vs_rdma_conn *c, int fd, struct msghdr *msg, socklen_t namelen,
                              size_t total, int flags)
{
    uint64_t early = vs_stream_tcp_before_switch(&c->st);
    if (!early)
        return -EAGAIN;
    ssize_t n = vs_stream_tcp_recv(&c->st, fd, msg, namelen, total, early, flags);
    return n < 0 ? -errno : n;
}

static const struct vs_stream_rx_hooks tcp_rx = {.progress = tcp_rx_progress, .got = tcp_rx_got};

ssize_t vs_rdma_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags)
{
    struct vs_rdma_conn *c = s->conn;
    vs_rdma_copy_use(c, fd);
    vs_rdma_sync(s, fd);
    size_t want = vs_iov_total(msg->msg_iov, msg->msg_iovlen);
    if ((!vs_rdma_active(c) && !vs_rdma_unsettled(c)) || want == 0 || (flags & MSG_OOB))
        return vs_real.recvmsg(fd, msg, flags);
    vs_rdma_revert_if_asked(c, fd);
    int nonblock = -1;
    bool peek = (flags & MSG_PEEK) != 0;
    size_t target = (flags & MSG_WAITALL) && !peek ? want : 1;
    struct vs_blocking b = VS_BLOCKING_RECV(s);
    size_t total = 0;
    int err = 0;
    msg->msg_flags = 0;
    socklen_t namelen = msg->msg_namelen;
    msg->msg_namelen = 0;
    pthread_mutex_lock(&c->rx_lock);
    forked_io(c);
    for (;;) {
        /* A CUT that came while we slept: our unread bytes go on TCP now.
         * The peer may wait for them before it answers what we wait for
         * (found: a server that changed its credentials, and its client
         * asleep in recv for the echo of a request the server had not
         * read). */
        vs_rdma_revert_if_asked(c, fd);
        /* After a CUT, what the peer resends that we read already. */
        int settled = vs_rdma_settle(c, fd);
        if (settled < 0) {
            err = -settled;
            break;
        }
        if (settled == 0) {
            /* Waiting for the peer's TCP bytes past its switch point. Those
             * before it are never resent: read them meanwhile, or a full
             * TCP receive queue of them keeps out the very bytes we wait
             * for (found: both ends of a stress run waiting for good, after
             * one left while the other still read its TCP backlog). */
            ssize_t r = early_tcp_read(c, fd, msg, namelen, total, flags);
            if (r > 0) {
                total += (size_t)r;
                if (total >= target || peek)
                    break;
                continue;
            }
            if (r == 0)
                break;
            if (r != -EAGAIN) {
                err = (int)-r;
                break;
            }
        } else if (!rx_on_rdma(c)) {
            int r = vs_stream_tcp_rx_step(&c->st, fd, msg, namelen, &total, flags, &tcp_rx, c);
            if (r == 1) {
                if (total >= target)
                    break;
                continue;
            }
            if (r == 0)
                break;
            if (r != -EAGAIN) {
                err = -r;
                break;
            }
        } else {
            vs_rdma_poll(c);
            struct iovec win[msg->msg_iovlen];
            int cnt =
                vs_iov_window(msg->msg_iov, (int)msg->msg_iovlen, total, VS_STREAM_NO_LIMIT, win);
            /* A large send offered: straight into a blocking reader's buffer. */
            if (!peek && cnt > 0 && c->offer_count && !vs_call_nonblocking(&nonblock, flags, fd)) {
                ssize_t z = vs_rdma_zcopy_recv(c, fd, win[0].iov_base, win[0].iov_len);
                if (z > 0) {
                    total += (size_t)z;
                    if (total >= target)
                        break;
                    continue;
                }
            }
            /* Not past the end the peer announced (its CUT or SHUT). */
            size_t n = ring_read(c, win, cnt, peek);
            if (n > 0) {
                total += n;
                if (total >= target || peek)
                    break;
                continue;
            }
            int e = ring_empty(c, fd);
            if (e == 1)
                continue;
            if (e == 0)
                break;
            if (e != -EAGAIN) {
                err = -e;
                break;
            }
        }
        if (total > 0 && total >= target)
            break;
        if (vs_call_nonblocking(&nonblock, flags, fd)) {
            err = total ? 0 : EAGAIN;
            break;
        }
        if (rx_on_rdma(c) && vs_config.rdma_zcopy && want - total >= vs_config.rdma_zcopy &&
            !atomic_exchange(&c->rx_wait_said, true)) {
            /* A large read sleeps: the peer may offer its large sends. Said
             * once until an offer comes. */
            struct vs_rdma_msg m = {.type = VS_RDMA_MSG_RX_WAIT, .a = want - total};
            if (vs_rdma_post_msg(c, &m) < 0)
                atomic_store(&c->rx_wait_said, false);
        }
        /* Asleep with the lock: a writer thread of the process cannot
         * leave RDMA meanwhile, and need not (this reader drains the peer,
         * so no two programs wait on each other's writes). Only a thread
         * leaving for a process event (fork) takes it meanwhile. */
        /* Room on TCP wakes us too while a resend waits for it: the next
         * turn sends more of it. */
        short tcp = POLLIN | POLLRDHUP | (atomic_load(&c->resending) ? POLLOUT : 0);
        int rc = vs_rdma_wait(c, fd, tcp, &b);
        if (rc < 0 && (err = vs_wait_failed(rc, &b)) != 0)
            break;
        vs_rdma_yield(c, &c->rx_lock);
    }
    pthread_mutex_unlock(&c->rx_lock);
    return vs_stream_result(total, err);
}

/* ------------------------------------------------------------------ send */

/* Moves the send side to RDMA once the peer's ring is ours. (tx) */
static void maybe_switch(struct vs_rdma_conn *c)
{
    if (!vs_rdma_done(c) || !vs_stream_tx_may_switch(&c->st) || atomic_load(&c->broken))
        return;
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_SWITCH, .a = c->st.tcp_tx};
    if (vs_rdma_post_msg(c, &m) == 0)
        atomic_store_explicit(&c->st.tx_switched, true, memory_order_release);
}

/* Whether a send may take a buffer zero-copy: its size, and a blocking
 * call, asked of the fd only for a buffer of that size (a system call a
 * small send must not pay). */
struct zcopy_ask {
    int *nonblock; /* vs_call_nonblocking's cache */
    int flags;
    int fd;
};

static bool zcopy_candidate(const struct iovec *iov, struct zcopy_ask *z)
{
    return vs_config.rdma_zcopy && iov->iov_len >= vs_config.rdma_zcopy &&
           !vs_call_nonblocking(z->nonblock, z->flags, z->fd);
}

/* Writes the send copy's bytes from c->tx_head to END to the peer. (tx) */
static int post_span(struct vs_rdma_conn *c, uint64_t end)
{
    if (end == c->tx_head)
        return 0;
    int rc = vs_rdma_post_data(c, c->tx_head, (size_t)(end - c->tx_head));
    if (rc == 0)
        c->tx_head = end;
    return rc;
}

/* Copies up to ROOM bytes of IOV (CNT buffers, the first from byte SKIP)
 * into the send copy and writes them to the peer, as few writes as the
 * ring allows: a write ends only at the ring's end or after a quarter of
 * it (the receiver reads and credits the first quarter while the rest
 * flies), never between buffers. A sendmsg of a header, a value and a
 * trailer is one message, as it is one TCP segment: a write per buffer
 * tripled memcached's frames, completions and wake-ups. It stops before
 * a later buffer the caller may send zero-copy (Z). Bytes written in
 * *DONE, even when a later write fails: those are sent. (tx) */
static int ring_write(struct vs_rdma_conn *c, const struct iovec *iov, int cnt, size_t skip,
                      uint64_t room, struct zcopy_ask *z, size_t *done)
{
    uint64_t start = c->tx_head, end = start, quarter = c->tx_size / 4;
    int rc = 0;
    for (int i = 0; i < cnt && end - start < room && rc == 0; i++, skip = 0) {
        if (i > 0 && zcopy_candidate(&iov[i], z))
            break;
        const char *buf = (const char *)iov[i].iov_base + skip;
        size_t len = iov[i].iov_len - skip;
        while (len > 0 && end - start < room) {
            uint64_t off = end & (c->tx_size - 1);
            /* At the ring's end or a quarter: the span so far goes first. */
            if ((off == 0 && end != c->tx_head) || end - c->tx_head == quarter) {
                if ((rc = post_span(c, end)) != 0)
                    break;
                continue;
            }
            uint64_t run = len;
            if (run > room - (end - start))
                run = room - (end - start);
            if (run > c->tx_size - off)
                run = c->tx_size - off;
            if (run > quarter - (end - c->tx_head))
                run = quarter - (end - c->tx_head);
            memcpy((char *)c->tx.mem + off, buf, (size_t)run);
            end += run;
            buf += run;
            len -= (size_t)run;
        }
    }
    if (rc == 0)
        rc = post_span(c, end);
    *done = (size_t)(c->tx_head - start);
    return rc;
}

/* Moves (*I, *IN_IOV) past N bytes of IOV and past empty buffers: it rests
 * on a byte to send, or at CNT (an empty buffer before a zero-copy one
 * would otherwise be a gather of nothing, for ever). */
static void iov_advance(const struct iovec *iov, int cnt, int *i, size_t *in_iov, size_t n)
{
    while (*i < cnt) {
        size_t left = iov[*i].iov_len - *in_iov;
        if (n < left) {
            *in_iov += n;
            return;
        }
        n -= left;
        (*i)++;
        *in_iov = 0;
    }
}

bool vs_rdma_wait_placed(struct vs_rdma_conn *c, long limit_ns)
{
    long until = vs_now_ns() + limit_ns;
    while (!atomic_load(&c->broken)) {
        if (vs_rdma_sends_done(c))
            return true;
        if (vs_now_ns() >= until)
            return false;
        vs_rdma_poll(c);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return false;
}

int vs_rdma_post_msg_waiting(struct vs_rdma_conn *c, const struct vs_rdma_msg *m, long limit_ns)
{
    int rc = vs_rdma_post_msg(c, m);
    /* A full send queue has room once what it holds is placed. */
    if (rc == -EAGAIN && vs_rdma_wait_placed(c, limit_ns))
        rc = vs_rdma_post_msg(c, m);
    return rc;
}

/* Sends on RDMA what the peer's ring can take now, up to the whole of IOV
 * when blocking. Bytes sent, or -errno. *MORE: a blocking send stopped
 * short only to let the caller decide (a full ring may mean leaving for
 * TCP, which must start where RDMA stopped): the caller sends the rest, as
 * the kernel's blocking send returns only once all of it is queued. (tx) */
static ssize_t rdma_send(struct vs_rdma_conn *c, int fd, const struct iovec *iov, int cnt,
                         int flags, bool *more)
{
    *more = false;
    int nonblock = -1;
    struct vs_blocking b = VS_BLOCKING(SO_SNDTIMEO);
    size_t total = 0, want = vs_iov_total(iov, (size_t)cnt);
    int i = 0;
    size_t in_iov = 0;
    struct zcopy_ask zc = {&nonblock, flags, fd};
    iov_advance(iov, cnt, &i, &in_iov, 0);
    while (total < want) {
        /* A CUT the peer sent before it went counts first. */
        vs_rdma_poll(c);
        if (atomic_load(&c->st.tx_revert_pending))
            return total ? (ssize_t)total : -ESTALE;
        if (atomic_load(&c->broken) || atomic_load(&c->peer_gone) ||
            atomic_load(&c->tx_shut_sent)) {
            if (total)
                break;
            vs_raise_sigpipe(flags);
            return -EPIPE;
        }
        if (in_iov == 0 && zcopy_candidate(&iov[i], &zc)) {
            ssize_t z = vs_rdma_zcopy_send(c, fd, iov[i].iov_base, iov[i].iov_len, flags);
            if (z < 0)
                return total ? (ssize_t)total : z;
            if (z > 0) {
                total += (size_t)z;
                i++;
                continue;
            }
        }
        if (vs_rdma_grow_step(c))
            vs_rdma_ask_credit(c);
        uint64_t room = vs_rdma_tx_room(c);
        /* A stall is a peer that does not read, not a busy one. */
        vs_rdma_stall(c, room == 0);
        if (room == 0) {
            vs_rdma_grow_ask(c);
            vs_rdma_ask_credit(c);
            if (total) {
                *more = !vs_call_nonblocking(&nonblock, flags, fd);
                break;
            }
            /* Non-blocking writers too: a program that writes a lot before
             * it reads relies on the kernel's buffers however it waits. */
            if (vs_rdma_stalled(c)) {
                int left = vs_rdma_spill(c, fd, 0, NULL, 0);
                if (left != 0)
                    return left > 0 ? -ESTALE : left; /* the rest goes on TCP */
            }
            if (vs_call_nonblocking(&nonblock, flags, fd))
                break;
            int rc = vs_rdma_wait(c, fd, 0, &b);
            int err = rc < 0 ? vs_wait_failed(rc, &b) : 0;
            if (err)
                return total ? (ssize_t)total : -err;
            if (atomic_load(&c->yield_asked))
                return -EINPROGRESS; /* the caller lets go of the send lock */
            continue;
        }
        size_t done;
        int rc = ring_write(c, iov + i, cnt - i, in_iov, room, &zc, &done);
        /* What went out counts whatever happened to the rest: the program
         * must not send it again. */
        total += done;
        iov_advance(iov, cnt, &i, &in_iov, done);
        if (rc == -EAGAIN) {
            /* The send queue is full: its completions free it. */
            if (vs_call_nonblocking(&nonblock, flags, fd))
                break;
            if (total) {
                *more = true;
                break;
            }
            int w = vs_rdma_wait(c, fd, 0, &b);
            int err = w < 0 ? vs_wait_failed(w, &b) : 0;
            if (err)
                return total ? (ssize_t)total : -err;
            if (atomic_load(&c->yield_asked))
                return -EINPROGRESS;
            continue;
        }
        if (rc < 0)
            return total ? (ssize_t)total : rc;
    }
    /* Our reads ride along with a send when they are worth a frame: the
     * peer waits for them, or they are a sixteenth of the ring. A credit
     * with every send doubled a ping-pong's frames (each write gets its own
     * RC ACK); where frames cost (an emulated link) that doubled its time. */
    uint64_t unsent = c->rx_tail - atomic_load(&c->rx_credited);
    bool waits = atomic_load(&c->peer_waits);
    if (unsent && (waits || unsent >= c->rx_size / 16))
        send_credit(c, waits);
    return total ? (ssize_t)total : -EAGAIN;
}

/* Before any new byte of ours on TCP: what the peer did not read (all of
 * it in a blocking send), and none after a shutdown whose FIN waits for
 * that. 1 go on, -errno. (tx) */
static int resend_first(struct vs_rdma_conn *c, int fd, int flags, int *nonblock)
{
    int rc;
    struct vs_blocking b = VS_BLOCKING(SO_SNDTIMEO);
    /* A blocking send waits for TCP's room as the kernel's would: a
     * signal or SO_SNDTIMEO ends the wait (found: a program whose signal
     * handler lets the peer read waited for ever). */
    for (;;) {
        if (c->fin_after_resend) {
            rc = -EPIPE;
            break;
        }
        if ((rc = vs_rdma_resend_step(c, fd, false)) != 0)
            break;
        if (vs_call_nonblocking(nonblock, flags, fd))
            return -EAGAIN;
        int w = vs_rdma_wait(c, fd, POLLOUT, &b);
        int err = w < 0 ? vs_wait_failed(w, &b) : 0;
        if (err)
            return -err;
        if (atomic_load(&c->yield_asked))
            return -EINPROGRESS; /* the caller lets go of the send lock */
    }
    if (rc == -EPIPE)
        vs_raise_sigpipe(flags);
    return rc;
}

ssize_t vs_rdma_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags)
{
    struct vs_rdma_conn *c = s->conn;
    vs_rdma_copy_use(c, fd);
    vs_rdma_sync(s, fd);
    int nonblock = -1;
    if ((flags & MSG_OOB) && vs_rdma_active(c) && (vs_rdma_resend_due(c) || c->fin_after_resend)) {
        /* An urgent byte comes after the resend too. */
        pthread_mutex_lock(&c->tx_lock);
        int rc;
        while ((rc = resend_first(c, fd, flags, &nonblock)) == -EINPROGRESS)
            vs_rdma_yield(c, &c->tx_lock);
        pthread_mutex_unlock(&c->tx_lock);
        if (rc < 0)
            return vs_errno_result(rc);
    }
    /* Nothing to send: the kernel's answer (0, or the socket's error), not
     * EAGAIN from a send of nothing on RDMA. */
    if (!vs_rdma_active(c) || (flags & MSG_OOB) || vs_iov_total(msg->msg_iov, msg->msg_iovlen) == 0)
        return vs_real.sendmsg(fd, msg, flags);
    pthread_mutex_lock(&c->tx_lock);
    forked_io(c);
    maybe_switch(c);
    vs_rdma_grow_begin(c);
    /* REST: what is left of the message after the DONE bytes sent. */
    size_t done = 0;
    struct iovec win[msg->msg_iovlen ? msg->msg_iovlen : 1];
    struct msghdr rest = *msg;
    ssize_t n;
    for (;;) {
        rest.msg_iov = win;
        rest.msg_iovlen = (size_t)vs_iov_window(msg->msg_iov, (int)msg->msg_iovlen, done,
                                                VS_STREAM_NO_LIMIT, win);
        int rc = vs_rdma_resend_due(c) || c->fin_after_resend
                     ? resend_first(c, fd, flags, &nonblock)
                     : 1;
        if (rc == -EINPROGRESS) {
            vs_rdma_yield(c, &c->tx_lock);
            continue;
        }
        if (rc < 0) {
            n = rc;
            break;
        }
        if (!vs_stream_tx_on_transport(&c->st)) {
            n = vs_stream_tcp_send(&c->st, fd, &rest, flags);
            if (n > 0 && !vs_rdma_done(c))
                vs_rdma_proof_sent(&c->proof, c->st.tcp_tx - (uint64_t)n, rest.msg_iov,
                                   (int)rest.msg_iovlen, (size_t)n);
            break;
        }
        bool more;
        n = rdma_send(c, fd, rest.msg_iov, (int)rest.msg_iovlen, flags, &more);
        if (n > 0 && more) {
            done += (size_t)n;
            continue; /* blocking: the rest follows */
        }
        if (n == -ESTALE)
            continue; /* the peer left RDMA: the rest goes on TCP */
        if (n == -EINPROGRESS) {
            /* Asleep while another thread leaves RDMA: look again after. */
            vs_rdma_yield(c, &c->tx_lock);
            continue;
        }
        break;
    }
    /* Bytes sent before an error or a stop count (the kernel says so). */
    if (done)
        n = n > 0 ? n + (ssize_t)done : (ssize_t)done;
    vs_rdma_grow_sent(c);
    pthread_mutex_unlock(&c->tx_lock);
    /* The peer's CUT came during the send: say so now, not at the next call. */
    if (atomic_load(&c->st.rx_reverted))
        vs_rdma_sync(s, fd);
    return vs_errno_result(n);
}

ssize_t vs_rdma_sendfile(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count)
{
    struct vs_rdma_conn *c = s->conn;
    vs_rdma_copy_use(c, fd);
    vs_rdma_sync(s, fd);
    if (!vs_rdma_active(c) || !vs_stream_tx_on_transport(&c->st)) {
        if (!vs_rdma_active(c))
            return vs_real.sendfile(fd, in_fd, offset, count);
        pthread_mutex_lock(&c->tx_lock);
        forked_io(c);
        ssize_t n =
            vs_stream_tx_on_transport(&c->st) ? -1 : vs_real.sendfile(fd, in_fd, offset, count);
        if (n > 0)
            c->st.tcp_tx += (uint64_t)n;
        pthread_mutex_unlock(&c->tx_lock);
        if (n >= 0 || errno != 0)
            return n;
    }
    /* Through a buffer: read exactly what goes out, nothing left over. */
    char buf[65536];
    size_t total = 0;
    while (total < count) {
        size_t want = count - total < sizeof(buf) ? count - total : sizeof(buf);
        ssize_t r = offset ? pread(in_fd, buf, want, *offset) : vs_real.read(in_fd, buf, want);
        if (r <= 0)
            break;
        struct iovec iov = {buf, (size_t)r};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t w = vs_rdma_sendmsg(s, fd, &m, MSG_NOSIGNAL);
        if (w <= 0) {
            /* Nothing of it sent: the file's position must not move. */
            if (!offset)
                lseek(in_fd, -r, SEEK_CUR);
            return total ? (ssize_t)total : w;
        }
        if (offset)
            *offset += w;
        else if (w < r)
            lseek(in_fd, w - r, SEEK_CUR);
        total += (size_t)w;
        if (w < r)
            break;
    }
    return (ssize_t)total;
}

/* Sends SHUT (our transport data ends at tx_head) once, signalled; WAIT:
 * until it completes, then the peer holds everything before it. (tx) */
static void send_shut(struct vs_rdma_conn *c, bool wait)
{
    if (!vs_stream_tx_on_transport(&c->st) || atomic_exchange(&c->tx_shut_sent, true))
        return;
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_SHUT, .a = c->tx_head};
    /* Unsaid, the peer would wait for the end of the stream for ever
     * (found: a stress run on a loaded host, one connection of four never
     * ended). */
    int rc = vs_rdma_post_msg_waiting(c, &m, FLUSH_NS);
    if (rc < 0)
        vs_warn("rdma: the end of this connection's stream not said (%s): the peer learns it "
                "from TCP only",
                strerror(-rc));
    else if (wait)
        vs_rdma_wait_placed(c, FLUSH_NS);
}

int vs_rdma_shutdown(struct vs_sock *s, int fd, int how)
{
    struct vs_rdma_conn *c = s->conn;
    vs_rdma_copy_use(c, fd);
    if (how != SHUT_WR && how != SHUT_RDWR)
        return vs_real.shutdown(fd, how);
    vs_rdma_poll(c);
    pthread_mutex_lock(&c->tx_lock);
    /* The peer left (its CUT may have waited in the CQ): what it did not
     * read goes on TCP before our FIN, or its stream ends short (found by
     * cases/spill-backlog.sh: the peer's reads ended 64 KiB early). What
     * TCP cannot take now is left to the calls that follow, with the FIN
     * after it: shutdown never waits, on the kernel. */
    if (vs_rdma_resend_step(c, fd, false) == 0) {
        c->fin_after_resend = true;
        pthread_mutex_unlock(&c->tx_lock);
        return how == SHUT_RDWR ? vs_real.shutdown(fd, SHUT_RD) : 0;
    }
    if (vs_rdma_active(c)) {
        if (!atomic_load(&c->st.tx_switched))
            c->st.tx_shut = true; /* the FIN goes on TCP: never switch */
        else
            send_shut(c, true);
    }
    pthread_mutex_unlock(&c->tx_lock);
    return vs_real.shutdown(fd, how);
}

/* The program closed the socket: SHUT goes out, and the connection with
 * the TCP socket it holds goes once the writes are placed, so that the FIN
 * never overtakes them. Close waits for that a round trip's time (µs on
 * hardware) at most CLOSE_WAIT_NS; a slower peer leaves it to the reaper,
 * which runs at the process's next close and at its exit. */
#define CLOSE_WAIT_NS 100000000L
/* How long a closed connection waits for its writes to be placed. */
#define CLOSE_LINGER_NS 5000000000L

/* The kernel resets (RST, the peer gets ECONNRESET) instead of ending the
 * stream when the program set SO_LINGER 0, or closes with received bytes
 * unread: its receive queue is the ring here, so the kernel cannot see
 * them, and is told with SO_LINGER 0. What we wrote and the peer has not
 * read may be lost, as on the kernel. */
static bool close_resets(struct vs_rdma_conn *c)
{
    if (c->hold_fd < 0)
        return false;
    struct linger l = {0};
    socklen_t len = sizeof(l);
    if (vs_real.getsockopt(c->hold_fd, SOL_SOCKET, SO_LINGER, &l, &len) == 0 && l.l_onoff &&
        l.l_linger == 0)
        return true;
    if (!rx_on_rdma(c) || vs_rdma_readable(c) == 0)
        return false;
    struct linger now = {.l_onoff = 1, .l_linger = 0};
    vs_real.setsockopt(c->hold_fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    return true;
}

void vs_rdma_close(struct vs_rdma_conn *c)
{
    vs_rdma_poll(c);
    if (close_resets(c)) {
        vs_rdma_conn_free(c); /* no SHUT: the RST ends it */
        return;
    }
    pthread_mutex_lock(&c->tx_lock);
    /* What the peer did not read goes on TCP before the FIN: what TCP
     * takes now, the rest at the reaper's runs (close never waits, on the
     * kernel). */
    if (!vs_rdma_resend_closed(c, vs_now_ns() + VS_RDMA_CLOSE_RESEND_NS)) {
        pthread_mutex_unlock(&c->tx_lock);
        vs_rdma_conn_close_later(c, VS_RDMA_CLOSE_RESEND_NS);
        return;
    }
    /* Nothing of ours on the ring (never switched, or back on TCP): the
     * FIN can overtake nothing, and must not wait for the reaper. */
    bool on_rdma = vs_stream_tx_on_transport(&c->st);
    send_shut(c, false);
    pthread_mutex_unlock(&c->tx_lock);
    if (!on_rdma || vs_rdma_wait_placed(c, CLOSE_WAIT_NS) || atomic_load(&c->broken))
        vs_rdma_conn_free(c);
    else
        vs_rdma_conn_close_later(c, CLOSE_LINGER_NS);
}

bool vs_rdma_ioctl(struct vs_sock *s, int fd, unsigned long req, int *value)
{
    struct vs_rdma_conn *c = s->conn;
    vs_rdma_copy_use(c, fd);
    if (req == FIONREAD && c->rx_skip) {
        int q = 0; /* the kernel's count holds bytes we read on the ring */
        vs_syscall(SYS_ioctl, fd, FIONREAD, &q);
        *value = (uint64_t)q > c->rx_skip ? q - (int)c->rx_skip : 0;
        return true;
    }
    if (!vs_rdma_active(c))
        return false;
    if (req == FIONREAD && rx_on_rdma(c)) {
        vs_rdma_poll(c);
        uint64_t n = vs_rdma_readable(c);
        *value = n > INT32_MAX ? INT32_MAX : (int)n;
        return true;
    }
    if (req == SIOCOUTQ && vs_stream_tx_on_transport(&c->st)) {
        /* The kernel counts bytes its peer has not acknowledged, read or
         * not: ours are those not known placed nor credited (a peer that
         * read them may credit them much later). */
        uint64_t n = c->tx_head - vs_rdma_peer_tail(c);
        uint64_t unplaced = c->tx_head - vs_rdma_placed_head(c);
        if (unplaced < n)
            n = unplaced;
        int q = 0;
        vs_syscall(SYS_ioctl, fd, SIOCOUTQ, &q);
        *value = (int)(n > INT32_MAX ? INT32_MAX : n) + q;
        return true;
    }
    return false;
}
