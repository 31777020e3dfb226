/* io.c - the data path of a connection that may have moved to the rings.
 *
 * Each direction is on TCP until its sender switches it (SWITCH carries the
 * stream offset S of the first ring byte); the receiver reads TCP up to S,
 * then the ring. A send completes once its bytes are in the ring, so close
 * never loses anything: the peer still maps the ring and reads it out. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "core/clock.h"
#include "config/log.h"
#include "base/real.h"
#include "base/signals.h"
#include "core/spin.h"
#include "base/syscall.h"
#include "transport/shm/conn.h"
#include "transport/shm/proto.h"
#include "transport/shm/reclaim.h"
#include "transport/shm/shm.h"
#include "transport/shm/shm_internal.h"
#include "transport/shm/sizing.h"
#include "transport/stream_io.h"

#define NO_LIMIT VS_STREAM_NO_LIMIT

/* Sleeps until the ring of our role may have changed, the side channel has
 * news or the TCP socket an event. 0, -EINTR or -ETIMEDOUT. */
static int sleep_on(struct vs_shm_conn *c, int fd, struct vs_ring *ring, short tcp_events,
                    struct vs_blocking *b)
{
    vs_blocking_start(b, fd);
    bool want_data = ring && ring->role == VS_RING_CONSUMER;
    long asked = vs_blocking_take_busy(b); /* once a call, as the kernel's */
    if (ring && vs_shm_spin(ring, want_data, asked))
        return 0;
    struct pollfd p[2] = {{.fd = fd, .events = tcp_events},
                          {.fd = vs_shm_event_fd(c), .events = POLLIN}};
    long left = -1;
    if (b->deadline >= 0 && (left = b->deadline - vs_now_ns()) <= 0)
        return -ETIMEDOUT;
    /* Two threads asleep on one side channel (a sender and a receiver):
     * the one that wakes first reads the messages, and the other's ppoll
     * may then not see the wake-up meant for it. Short naps bound that. */
    bool shared = atomic_fetch_add(&c->sleepers, 1) > 0, nap;
    left = vs_wait_sleep_ns(left, shared, &nap);
    struct timespec ts, *tsp = NULL;
    if (left >= 0) {
        ts.tv_sec = left / 1000000000L;
        ts.tv_nsec = left % 1000000000L;
        tsp = &ts;
    }
    if (ring) {
        vs_ring_arm(ring, 1);
        if (vs_shm_ring_ready(ring, want_data)) {
            vs_ring_arm(ring, -1);
            atomic_fetch_sub(&c->sleepers, 1);
            return 0;
        }
    }
    struct vs_sleep_guard g;
    vs_blocking_sleep_begin(b, &tsp, &g);
    int n = (int)vs_syscall(SYS_ppoll, p, p[1].fd >= 0 ? 2 : 1, tsp, NULL, _NSIG / 8);
    int err = errno;
    bool interrupted = vs_blocking_sleep_end(b, &g);
    vs_spin_woke();
    atomic_fetch_sub(&c->sleepers, 1);
    if (ring)
        vs_ring_arm(ring, -1);
    if (n < 0)
        return err == EINTR ? -EINTR : 0;
    if (n == 0 && !interrupted)
        vs_shm_idle(c, ring); /* a quiet slice: memory may go back */
    if (n == 0 && tsp && !nap && !interrupted)
        return -ETIMEDOUT;
    if (n > 0 && p[0].revents)
        atomic_store(&c->tcp_event, true);
    if (n > 0 && p[1].revents)
        vs_shm_progress(c, fd);
    /* Woken by news: the caller looks first (its next sleep ends at once). */
    return interrupted && n == 0 ? -EINTR : 0;
}

/* Receive side, ring phase, nothing in the ring: the peer's end of stream,
 * its death, or its return to TCP. 1 read TCP now, 0 end of stream,
 * -EAGAIN nothing, -errno. */
static int ring_empty(struct vs_shm_conn *c, int fd)
{
    /* Bytes published since we found the ring empty come first (the REVERT
     * that made us look may have followed them). */
    if (atomic_load(&c->st.rx_reverted) && vs_ring_readable(&c->rx) != 0)
        return -EAGAIN;
    if (vs_stream_rx_revert_reached(&c->st, c->rx.pos))
        return 1;
    if (atomic_load(&c->st.violated))
        return -ECONNRESET;
    if (!atomic_exchange(&c->tcp_event, false))
        return -EAGAIN;
    int t = vs_tcp_peek(fd);
    if (t == -EAGAIN)
        return -EAGAIN;
    atomic_store(&c->tcp_event, true); /* still true next time */
    if (t > 0) {
        /* Bytes on TCP after the switch: legal only after REVERT. */
        vs_shm_progress(c, fd);
        if (atomic_load(&c->st.rx_reverted))
            return -EAGAIN; /* read the ring up to the revert point first */
        return -ECONNRESET;
    }
    if (t < 0)
        return t;
    /* The peer is gone. What it published before it went comes first. */
    if (vs_ring_readable(&c->rx) != 0 || vs_ring_peer_closed(&c->rx))
        return 1;
    /* It died without closing its ring. Like the kernel, which resets a
     * connection closed with unread data: reset if it left our bytes
     * unread, else end of stream. */
    if (atomic_load(&c->tx_ready) && vs_ring_readable(&c->tx) > 0)
        return -ECONNRESET;
    return 0;
}

/* Bytes read from the ring: the control messages are ours to write, as
 * the kernel would have. None, but TCP_INQ's when the program asked for it
 * (gRPC): the bytes left, or 1 at the end of the stream (the kernel's hint
 * to read once more). A stale length there would make the program parse
 * its buffer's old contents: gRPC took a TCP read's old "0 left" for the
 * truth, waited for an edge that could not come (the sender waits for its
 * window) and hung. */
static void ring_control(struct vs_sock *s, struct vs_shm_conn *c, struct msghdr *msg, size_t cap)
{
    msg->msg_controllen = 0;
    if (!atomic_load(&s->tcp_inq))
        return;
    if (!msg->msg_control || cap < CMSG_SPACE(sizeof(int))) {
        msg->msg_flags |= MSG_CTRUNC;
        return;
    }
    ssize_t left = vs_ring_readable(&c->rx);
    int inq = left > INT_MAX ? INT_MAX : left > 0 ? (int)left : vs_ring_peer_closed(&c->rx) ? 1 : 0;
    msg->msg_controllen = cap;
    struct cmsghdr *cm = CMSG_FIRSTHDR(msg);
    cm->cmsg_level = IPPROTO_TCP;
    cm->cmsg_type = TCP_CM_INQ;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &inq, sizeof(inq));
    msg->msg_controllen = CMSG_SPACE(sizeof(int));
}

static void tcp_rx_progress(void *c, int fd)
{
    vs_shm_progress(c, fd);
}

static const struct vs_stream_rx_hooks tcp_rx = {.progress = tcp_rx_progress};

ssize_t vs_shm_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags)
{
    struct vs_shm_conn *c = s->conn;
    vs_shm_sync(s, fd);
    if (!vs_shm_active(c))
        return vs_real.recvmsg(fd, msg, flags);
    vs_shm_revert_if_asked(c, fd);
    size_t want = vs_iov_total(msg->msg_iov, msg->msg_iovlen);
    if (want == 0 || (flags & MSG_OOB))
        return vs_real.recvmsg(fd, msg, flags);
    bool nonblock = (flags & MSG_DONTWAIT) != 0;
    size_t target = (flags & MSG_WAITALL) && !(flags & MSG_PEEK) ? want : 1;
    struct vs_blocking b = VS_BLOCKING_RECV(s);
    size_t total = 0, cap = msg->msg_controllen;
    bool from_ring = false;
    int err = 0;
    msg->msg_flags = 0;
    /* A connected stream socket names no source address: the kernel sets
     * the length to 0, and so do we for bytes from the ring. */
    socklen_t namelen = msg->msg_namelen;
    msg->msg_namelen = 0;
    vs_plock_lock(&c->rx_lock);
    for (;;) {
        ssize_t n;
        if (!vs_shm_rx_on_ring(c)) {
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
            struct iovec win[msg->msg_iovlen];
            int cnt = vs_iov_window(msg->msg_iov, (int)msg->msg_iovlen, total, NO_LIMIT, win);
            n = vs_ring_read(&c->rx, win, cnt, (flags & MSG_PEEK) ? VS_RING_PEEK : 0);
            if (n > 0) {
                from_ring = true;
                if (!(flags & MSG_PEEK) && vs_ring_producer_sleeping(&c->rx))
                    vs_shm_send_msg(c, VS_MSG_WAKE, 0, 0);
                total += (size_t)n;
                if (total >= target)
                    break;
                continue;
            }
            if (n == 0) {
                vs_debug("recv fd %d: ring EOF at %lu", fd, (unsigned long)c->rx.pos);
                break;
            }
            if (n == -EPROTO || n == -ECONNRESET) {
                err = ECONNRESET;
                break;
            }
            int e = ring_empty(c, fd);
            if (e == 1)
                continue;
            if (e == 0) {
                vs_debug("recv fd %d: peer gone at %lu", fd, (unsigned long)c->rx.pos);
                break;
            }
            if (e != -EAGAIN) {
                err = -e;
                break;
            }
        }
        /* Nothing more for now. */
        if (total > 0 && total >= target)
            break;
        if (nonblock || vs_fd_nonblocking(fd)) {
            err = total ? 0 : EAGAIN;
            break;
        }
        bool ring = vs_shm_rx_on_ring(c);
        int rc = sleep_on(c, fd, ring ? &c->rx : NULL, POLLIN | POLLRDHUP, &b);
        if (rc < 0 && (err = vs_wait_failed(rc, &b)) != 0)
            break;
    }
    if (from_ring)
        ring_control(s, c, msg, cap);
    vs_plock_unlock(&c->rx_lock);
    return vs_stream_result(total, err);
}

/* Sender: move to the ring at the next byte, once the peer's ring is ours.
 * From then on the ring may hold what the kernel would have (sizing.c). */
static void maybe_switch(struct vs_shm_conn *c, int fd)
{
    if (!vs_stream_tx_may_switch(&c->st) || !atomic_load(&c->tx_ready))
        return;
    vs_plock_lock(&c->ctl_lock);
    if (c->chan >= 0) {
        vs_ring_set_limit(&c->tx, vs_shm_tx_limit(fd, vs_ring_peer_rcv(&c->tx)));
        struct vs_shm_msg m = {.magic = VS_SHM_MAGIC,
                               .version = VS_SHM_VERSION,
                               .type = VS_MSG_SWITCH,
                               .arg = c->st.tcp_tx};
        struct iovec iov = {&m, sizeof(m)};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        /* Only once the receiver is sure to learn S may a byte go to the ring. */
        if (vs_real.sendmsg(vs_shm_fd(c, c->chan), &mh, MSG_DONTWAIT | MSG_NOSIGNAL) ==
            (ssize_t)sizeof(m)) {
            atomic_store(&c->st.tx_switched, true);
            vs_shm_bump(c);
        }
    }
    vs_plock_unlock(&c->ctl_lock);
}

/* The peer left the rings (exec): what it did not read of ours goes on TCP,
 * ahead of everything we send from now on. */
static int finish_revert(struct vs_shm_conn *c, int fd)
{
    char buf[16384];
    uint64_t at = c->st.tx_revert_consumed;
    for (;;) {
        ssize_t n = vs_ring_unread_copy(&c->tx, at, buf, sizeof(buf));
        if (n < 0)
            return -ECONNRESET;
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = vs_real.send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN) {
                    struct pollfd p = {.fd = fd, .events = POLLOUT};
                    vs_syscall(SYS_ppoll, &p, 1, NULL, NULL, _NSIG / 8);
                    continue;
                }
                return -errno;
            }
            off += w;
        }
        at += (uint64_t)n;
    }
    atomic_store(&c->st.tx_back_on_tcp, true);
    vs_shm_bump(c);
    return 0;
}

/* Whether the reader frees space in the ring's current region within the
 * busy-poll budget (or leaves, or the ring turns out corrupt: the next
 * write says so). */
static bool room_or_gone(void *ring, const void *unused)
{
    (void)unused;
    return vs_ring_room(ring) != 0 || vs_ring_peer_closed(ring);
}

static bool room_soon(struct vs_ring *r)
{
    return vs_spin_until(room_or_gone, r, NULL, 0);
}

/* Writes the whole of IOV into the ring, or as much as fits without
 * blocking. Bytes written, or -errno. */
static ssize_t ring_send(struct vs_shm_conn *c, int fd, const struct iovec *iov, int iovcnt,
                         int flags)
{
    size_t want = vs_iov_total(iov, (size_t)iovcnt), total = 0;
    bool nonblock = (flags & MSG_DONTWAIT) != 0, grow = false;
    struct vs_blocking b = VS_BLOCKING(SO_SNDTIMEO);
    struct iovec win[iovcnt ? iovcnt : 1];
    while (total < want) {
        int cnt = vs_iov_window(iov, iovcnt, total, NO_LIMIT, win);
        uint64_t head_before = c->tx.pos;
        ssize_t n = vs_ring_write(&c->tx, win, cnt, grow ? 0 : VS_RING_NO_GROW);
        grow = false;
        if (n == -ENOSPC) {
            /* The region is full and the ring may grow. A reader that
             * keeps up frees space within the spin: the ring stays small
             * (less memory, and what it has stays in the caches). One that
             * does not may be waiting for us (a client that writes all
             * before it reads): grow, as the kernel's buffers would have
             * taken the bytes. Growing is not blocking: non-blocking
             * senders grow too, and readiness counts it as room. */
            if (room_soon(&c->tx))
                continue;
            /* Not for a peer that died (SIGKILL) or is leaving the rings:
             * a full ring tells the sender, as before. */
            vs_shm_progress(c, fd);
            if (c->chan >= 0 && !atomic_load(&c->st.tx_revert_pending)) {
                grow = true;
                continue;
            }
            n = -EAGAIN;
        }
        if (n > 0) {
            if (vs_ring_consumer_sleeping(&c->tx, head_before))
                vs_shm_send_msg(c, VS_MSG_WAKE, 0, 0);
            total += (size_t)n;
            continue;
        }
        if (n == -EPIPE) {
            vs_debug("ring_send: EPIPE from ring (reader_closed=%d)", vs_ring_peer_closed(&c->tx));
            if (total)
                break;
            vs_raise_sigpipe(flags);
            return -EPIPE;
        }
        if (n == -EPROTO)
            return total ? (ssize_t)total : -ECONNRESET;
        if (atomic_load(&c->st.tx_revert_pending))
            return total ? (ssize_t)total : -ESTALE; /* continue on TCP */
        /* Full. A peer that died (SIGKILL) never drains it, and only its
         * side channel's hang-up says so: a blocking sender hears it in
         * sleep_on(), a non-blocking one must look. */
        bool nonblocking = nonblock || vs_fd_nonblocking(fd);
        if (nonblocking)
            vs_shm_progress(c, fd);
        /* The peer's end of TCP may be shut for writing since before our
         * switch: that is no sign of death. Its side channel closing is (a
         * clean close marks the ring, so vs_ring_write says EPIPE), and so
         * is a reset. */
        if (c->chan < 0) {
            vs_debug("ring_send: side channel gone");
            if (total)
                break;
            vs_raise_sigpipe(flags);
            return -EPIPE;
        }
        if (nonblocking)
            return total ? (ssize_t)total : -EAGAIN;
        int rc = sleep_on(c, fd, &c->tx, 0, &b);
        if (rc < 0) {
            int e = vs_wait_failed(rc, &b);
            if (e)
                return total ? (ssize_t)total : -e;
        }
        if (atomic_exchange(&c->tcp_event, false)) {
            int err = 0;
            socklen_t len = sizeof(err);
            vs_real.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err) {
                if (total)
                    break;
                vs_raise_sigpipe(flags);
                return -err;
            }
        }
    }
    return (ssize_t)total;
}

void vs_shm_revert_if_asked(struct vs_shm_conn *c, int fd)
{
    if (!atomic_load(&c->st.tx_revert_pending) || atomic_load(&c->st.tx_back_on_tcp) ||
        !vs_plock_trylock(&c->tx_lock))
        return;
    if (atomic_load(&c->st.tx_switched) && !atomic_load(&c->st.tx_back_on_tcp))
        finish_revert(c, fd);
    atomic_store(&c->st.tx_back_on_tcp, true);
    vs_plock_unlock(&c->tx_lock);
}

ssize_t vs_shm_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags)
{
    struct vs_shm_conn *c = s->conn;
    vs_shm_sync(s, fd);
    if (!vs_shm_active(c) || (flags & MSG_OOB))
        return vs_real.sendmsg(fd, msg, flags);
    vs_plock_lock(&c->tx_lock);
    maybe_switch(c, fd);
    ssize_t n = 0;
    for (;;) {
        if (atomic_load(&c->st.tx_revert_pending) && !atomic_load(&c->st.tx_back_on_tcp)) {
            int rc = atomic_load(&c->st.tx_switched) ? finish_revert(c, fd) : 0;
            atomic_store(&c->st.tx_back_on_tcp, true);
            if (rc < 0) {
                n = rc;
                break;
            }
        }
        if (!vs_shm_tx_on_ring(c)) {
            n = vs_stream_tcp_send(&c->st, fd, msg, flags);
            break;
        }
        n = ring_send(c, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
        if (n == -ESTALE)
            continue; /* the peer left the rings: the rest goes on TCP */
        break;
    }
    vs_plock_unlock(&c->tx_lock);
    return vs_errno_result(n);
}

ssize_t vs_shm_sendfile(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count)
{
    struct vs_shm_conn *c = s->conn;
    vs_shm_sync(s, fd);
    if (vs_shm_active(c)) {
        vs_plock_lock(&c->tx_lock);
        maybe_switch(c, fd);
        vs_plock_unlock(&c->tx_lock);
    }
    if (!vs_shm_active(c) || !vs_shm_tx_on_ring(c)) {
        if (!vs_shm_active(c))
            return vs_real.sendfile(fd, in_fd, offset, count);
        vs_plock_lock(&c->tx_lock);
        ssize_t n = vs_real.sendfile(fd, in_fd, offset, count);
        if (n > 0)
            c->st.tcp_tx += (uint64_t)n;
        vs_plock_unlock(&c->tx_lock);
        return n;
    }
    /* The file's bytes pass through a buffer: read exactly what the ring
     * can take, so that nothing read is ever left over. */
    char buf[16384];
    size_t total = 0;
    ssize_t rc = 0;
    vs_plock_lock(&c->tx_lock);
    while (total < count) {
        ssize_t room = vs_ring_writable(&c->tx);
        size_t chunk = count - total < sizeof(buf) ? count - total : sizeof(buf);
        if (room > 0 && (size_t)room < chunk)
            chunk = (size_t)room;
        if (room <= 0 && vs_fd_nonblocking(fd)) {
            rc = total ? 0 : -EAGAIN;
            break;
        }
        ssize_t got = offset ? pread(in_fd, buf, chunk, *offset) : vs_real.read(in_fd, buf, chunk);
        if (got <= 0) {
            rc = got < 0 ? -errno : 0;
            break;
        }
        struct iovec iov = {buf, (size_t)got};
        ssize_t n = ring_send(c, fd, &iov, 1, MSG_NOSIGNAL);
        if (n < 0) {
            /* Nothing of it sent (a signal, the peer gone): the file's
             * position must not have moved past it. */
            if (!offset)
                lseek(in_fd, -got, SEEK_CUR);
            rc = n;
            break;
        }
        if (offset)
            *offset += n;
        total += (size_t)n;
        if (n < got) {
            /* Non-blocking and the ring filled up: give back what did not fit. */
            if (!offset)
                lseek(in_fd, n - got, SEEK_CUR);
            break;
        }
    }
    vs_plock_unlock(&c->tx_lock);
    if (total > 0)
        return (ssize_t)total;
    if (rc < 0) {
        if (rc == -EPIPE)
            vs_raise_sigpipe(0);
        errno = (int)-rc;
        return -1;
    }
    return 0;
}

int vs_shm_shutdown(struct vs_sock *s, int fd, int how)
{
    struct vs_shm_conn *c = s->conn;
    /* A FIN is news to the peer like a byte: the accepter calls first. */
    vs_shm_sync(s, fd);
    if (!vs_shm_active(c) || (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR))
        return vs_real.shutdown(fd, how);
    int r = 0;
    if (how != SHUT_RD) {
        vs_plock_lock(&c->tx_lock);
        if (vs_shm_tx_on_ring(c)) {
            vs_ring_close_writer(&c->tx, false);
            vs_shm_send_msg(c, VS_MSG_WAKE, 0, 0);
        } else {
            c->st.tx_shut = true;
            r = vs_real.shutdown(fd, SHUT_WR);
        }
        vs_plock_unlock(&c->tx_lock);
    }
    if (how != SHUT_WR) {
        int saved = errno;
        int rr = vs_real.shutdown(fd, SHUT_RD);
        if (atomic_load(&c->rx_ready)) {
            vs_ring_close_reader(&c->rx);
            vs_shm_send_msg(c, VS_MSG_WAKE, 0, 0);
        }
        if (r == 0 && rr < 0)
            r = rr;
        else
            errno = saved;
    }
    return r;
}

bool vs_shm_ioctl(struct vs_sock *s, int fd, unsigned long req, int *value)
{
    struct vs_shm_conn *c = s->conn;
    if (!vs_shm_active(c))
        return false;
    if (req == FIONREAD) {
        if (!vs_shm_rx_on_ring(c))
            return false;
        ssize_t n = vs_ring_readable(&c->rx);
        *value = n < 0 ? 0 : n > INT_MAX ? INT_MAX : (int)n;
        return true;
    }
    /* SIOCOUTQ: bytes in the ring are in the peer's receive buffer, as the
     * kernel's acknowledged ones are (loopback acknowledges at once): only
     * what went on TCP may be outstanding, which the kernel counts. */
    (void)fd;
    return false;
}
