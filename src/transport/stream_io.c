/* stream_io.c - the data path's shared pieces (stream_io.h). */
#include "transport/stream_io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/clock.h"
#include "base/real.h"
#include "base/signals.h"
#include "base/syscall.h"
#include "config/log.h"
#include "transport/stream.h"

size_t vs_iov_total(const struct iovec *iov, size_t cnt)
{
    size_t t = 0;
    for (size_t i = 0; i < cnt; i++)
        t += iov[i].iov_len;
    return t;
}

/* OUT = the part of IN after SKIP bytes, at most LIMIT long. */
int vs_iov_window(const struct iovec *in, int cnt, size_t skip, uint64_t limit, struct iovec *out)
{
    int n = 0;
    for (int i = 0; i < cnt && limit > 0; i++) {
        size_t len = in[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        size_t take = len - skip;
        if (take > limit)
            take = (size_t)limit;
        out[n].iov_base = (char *)in[i].iov_base + skip;
        out[n].iov_len = take;
        n++;
        limit -= take;
        skip = 0;
    }
    return n;
}

bool vs_fd_nonblocking(int fd)
{
    long fl = vs_syscall(SYS_fcntl, fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

bool vs_call_nonblocking(int *cache, int flags, int fd)
{
    if (*cache < 0)
        *cache = (flags & MSG_DONTWAIT) || vs_fd_nonblocking(fd);
    return *cache;
}

/* A timeout option as nanoseconds; -1 when none. */
long vs_sock_timeout_ns(int fd, int opt)
{
    struct timeval tv = {0, 0};
    socklen_t len = sizeof(tv);
    if (vs_real.getsockopt(fd, SOL_SOCKET, opt, &tv, &len) < 0 || (!tv.tv_sec && !tv.tv_usec))
        return -1;
    return tv.tv_sec * 1000000000L + tv.tv_usec * 1000L;
}

void vs_blocking_start(struct vs_blocking *b, int fd)
{
    if (!b->started) {
        b->started = true;
        b->timeout_ns = vs_sock_timeout_ns(fd, b->opt);
        b->deadline = b->timeout_ns < 0 ? -1 : vs_now_ns() + b->timeout_ns;
    }
}

long vs_blocking_left(struct vs_blocking *b, int fd)
{
    vs_blocking_start(b, fd);
    return b->deadline < 0 ? -1 : b->deadline - vs_now_ns();
}

void vs_blocking_sleep_begin(const struct vs_blocking *b, struct timespec **ts,
                             struct vs_sleep_guard *g)
{
    if (!b->to_the_end)
        vs_signals_sleep_begin(b->signals, ts, g);
}

bool vs_blocking_sleep_end(const struct vs_blocking *b, const struct vs_sleep_guard *g)
{
    return !b->to_the_end && vs_signals_sleep_end(b->signals, g);
}

void vs_raise_sigpipe(int flags)
{
    if (!(flags & MSG_NOSIGNAL))
        vs_syscall(SYS_tgkill, getpid(), (pid_t)vs_syscall(SYS_gettid), SIGPIPE);
}

/* What the kernel says of the TCP socket once the data moved to the rings:
 * 1 bytes waiting (REVERT, or a protocol violation), 0 end of stream (the
 * peer is gone), -errno (reset), -EAGAIN nothing. */
int vs_tcp_peek(int fd)
{
    char b;
    ssize_t n = vs_real.recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 ? 1 : n == 0 ? 0 : -errno;
}

/* After a wait failed: whether the call goes on (a signal whose handler
 * asked for restarts, as the kernel would), else the errno to return. */
int vs_wait_failed(int rc, const struct vs_blocking *b)
{
    if (rc == -ETIMEDOUT)
        return EAGAIN;
    /* A handler without SA_RESTART ran during the call: interrupted, even
     * if the program has since put a restarting one in its place (else
     * each later sleep would end at once, a busy loop). */
    if (!b->to_the_end && vs_signals_ran(b->signals))
        return EINTR;
    if (b->timeout_ns < 0 && vs_signals_restart())
        return 0;
    return EINTR;
}

/* Receive side, TCP phase: reads at most LIMIT bytes without blocking. */
ssize_t vs_tcp_read(int fd, struct msghdr *msg, socklen_t namelen, size_t skip, uint64_t limit,
                    int flags)
{
    struct iovec win[msg->msg_iovlen ? msg->msg_iovlen : 1];
    struct msghdr m = *msg;
    m.msg_namelen = namelen;
    m.msg_iov = win;
    m.msg_iovlen = (size_t)vs_iov_window(msg->msg_iov, (int)msg->msg_iovlen, skip, limit, win);
    ssize_t n = vs_real.recvmsg(fd, &m, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
    msg->msg_flags = m.msg_flags;
    msg->msg_namelen = m.msg_namelen;
    msg->msg_controllen = m.msg_controllen; /* what the kernel wrote there */
    return n;
}

ssize_t vs_stream_tcp_recv(struct vs_stream *st, int fd, struct msghdr *msg, socklen_t namelen,
                           size_t skip, uint64_t limit, int flags)
{
    ssize_t n = vs_tcp_read(fd, msg, namelen, skip, limit, flags);
    if (n > 0 && !(flags & MSG_PEEK))
        st->tcp_rx += (uint64_t)n;
    if (n == 0)
        atomic_store(&st->tcp_eof, true);
    return n;
}

int vs_stream_tcp_rx_step(struct vs_stream *st, int fd, struct msghdr *msg, socklen_t namelen,
                          size_t *total, int flags, const struct vs_stream_rx_hooks *hooks,
                          void *conn)
{
    uint64_t limit = vs_stream_tcp_rx_limit(st);
    if (atomic_load(&st->violated))
        return -ECONNRESET;
    if (limit == 0)
        return 1; /* the switch point: the transport from now on */
    ssize_t n = vs_stream_tcp_recv(st, fd, msg, namelen, *total, limit, flags);
    if (n > 0) {
        if (hooks->got)
            hooks->got(conn, msg, *total, (size_t)n, flags);
        *total += (size_t)n;
        return 1;
    }
    if (n < 0 && errno != EAGAIN)
        return -errno;
    /* Empty or end of stream: the peer may have switched meanwhile. */
    bool knew = atomic_load(&st->rx_switch_known);
    hooks->progress(conn, fd);
    if (!knew && atomic_load(&st->rx_switch_known))
        return 1;
    if (n == 0) {
        vs_debug("recv fd %d: TCP EOF at %lu (switch known %d at %lu)", fd,
                 (unsigned long)st->tcp_rx, atomic_load(&st->rx_switch_known),
                 (unsigned long)st->rx_switch_at);
        return 0;
    }
    return -EAGAIN;
}

ssize_t vs_stream_tcp_send(struct vs_stream *st, int fd, const struct msghdr *msg, int flags)
{
    ssize_t n = vs_real.sendmsg(fd, msg, flags);
    if (n < 0)
        return -errno;
    st->tcp_tx += (uint64_t)n;
    return n;
}
