/* io_api.c - the data path: read/write, send/recv families, sendfile.
 *
 * Each wrapper looks the fd up (lock-free), lets the socket's transport move
 * the bytes (the kernel, or the transport that took the connection over:
 * s->ops) and counts what moved. An fd that is not a tracked
 * socket costs one table lookup. Every call reaches a transport as a msghdr
 * (or a vector of them); a datagram socket's keeps the program's address
 * (the destination of sendto, where recvfrom reports the source). */
#include <errno.h>
#include <limits.h>
#include <sys/sendfile.h>

#include "core/fdtable.h"
#include "base/real.h"
#include "base/sandbox.h"
#include "base/signals.h"
#include "transport/transport.h"

/* The kernel leaves errno alone when a call succeeds, and programs rely on
 * it: ntirpc (nfs-ganesha) sets errno to 0, sends, and took the EAGAIN a
 * transport's inner attempt had left for a full socket, then waited for
 * room that was never short. Every call a transport served keeps, when it
 * succeeds, the errno it came in with (BEFORE). */
static ssize_t keep_errno(ssize_t n, int before)
{
    if (n >= 0)
        errno = before;
    return n;
}

/* Counting after the call; preserves errno. MSG_PEEK reads nothing. */
static ssize_t done_rx(struct vs_sock *s, int fd, ssize_t n, int flags)
{
    if (!(flags & MSG_PEEK))
        vs_sock_count_rx(s, fd, n, 1);
    vs_sock_put(s);
    return n;
}

static ssize_t done_tx(struct vs_sock *s, int fd, ssize_t n)
{
    vs_sock_count_tx(s, fd, n, 1);
    vs_sock_put(s);
    return n;
}

/* A transport takes every call as a msghdr. recvfrom's address is written
 * as the kernel writes it: the source's full length in *ADDRLEN, at most
 * the buffer's bytes of it. The kernel takes the datagram before it looks
 * at ADDRLEN: a missing or negative one fails the call (EFAULT, EINVAL)
 * with the datagram gone, and so here. */
static ssize_t conn_recv(struct vs_sock *s, int fd, const struct iovec *iov, size_t iovcnt,
                         int flags, struct sockaddr *addr, socklen_t *addrlen)
{
    int bad = addr && !addrlen ? EFAULT : addr && (int)*addrlen < 0 ? EINVAL : 0;
    struct msghdr m = {.msg_name = bad ? NULL : addr,
                       .msg_namelen = addr && !bad ? *addrlen : 0,
                       .msg_iov = (struct iovec *)iov,
                       .msg_iovlen = iovcnt};
    int before = errno;
    unsigned outer = vs_signals_call_begin();
    ssize_t n = keep_errno(s->ops->recvmsg(s, fd, &m, flags), before);
    vs_signals_call_end(outer);
    if (n >= 0 && bad) {
        errno = bad;
        return -1;
    }
    if (n >= 0 && addr)
        *addrlen = m.msg_namelen;
    return n;
}

/* ADDR: sendto's destination, for a datagram socket; a connected stream
 * socket ignores it, as the kernel does (no Fast Open through a
 * transport). */
static ssize_t conn_send(struct vs_sock *s, int fd, const struct iovec *iov, size_t iovcnt,
                         int flags, const struct sockaddr *addr, socklen_t addrlen)
{
    bool named = addr && s->type == SOCK_DGRAM;
    struct msghdr m = {.msg_name = named ? (void *)addr : NULL,
                       .msg_namelen = named ? addrlen : 0,
                       .msg_iov = (struct iovec *)iov,
                       .msg_iovlen = iovcnt};
    int before = errno;
    unsigned outer = vs_signals_call_begin();
    ssize_t n = keep_errno(s->ops->sendmsg(s, fd, &m, flags), before);
    vs_signals_call_end(outer);
    return n;
}

/* Whether a read of LEN bytes goes to the transport. The kernel answers a
 * read(2) of nothing with 0 before it looks at the socket (a datagram stays
 * queued, where recv(2) of nothing takes it): such a read is its. */
static bool conn_reads(const struct vs_sock *s, size_t len)
{
    return s && s->ops && len > 0;
}

static size_t iov_bytes(const struct iovec *iov, int iovcnt)
{
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    return total;
}

VS_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.read(fd, buf, len));
    struct vs_sock *s = vs_fd_get(fd);
    if (conn_reads(s, len)) {
        struct iovec iov = {buf, len};
        return done_rx(s, fd, conn_recv(s, fd, &iov, 1, 0, NULL, NULL), 0);
    }
    ssize_t n = vs_real.read(fd, buf, len);
    if (s && len == 0) {
        vs_sock_put(s); /* nothing moved */
        return n;
    }
    return s ? done_rx(s, fd, n, 0) : n;
}

VS_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.write(fd, buf, len));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops) {
        struct iovec iov = {(void *)buf, len};
        return done_tx(s, fd, conn_send(s, fd, &iov, 1, 0, NULL, 0));
    }
    ssize_t n = vs_real.write(fd, buf, len);
    return s ? done_tx(s, fd, n) : n;
}

VS_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.readv(fd, iov, iovcnt));
    struct vs_sock *s = vs_fd_get(fd);
    /* A bad count or a missing vector is the kernel's to refuse. */
    bool valid = iov && iovcnt > 0 && iovcnt <= IOV_MAX;
    if (s && s->ops && valid && conn_reads(s, iov_bytes(iov, iovcnt)))
        return done_rx(s, fd, conn_recv(s, fd, iov, (size_t)iovcnt, 0, NULL, NULL), 0);
    ssize_t n = vs_real.readv(fd, iov, iovcnt);
    if (s && n == 0 && (!valid || iov_bytes(iov, iovcnt) == 0)) {
        vs_sock_put(s); /* nothing moved */
        return n;
    }
    return s ? done_rx(s, fd, n, 0) : n;
}

VS_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.writev(fd, iov, iovcnt));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops && iovcnt >= 0)
        return done_tx(s, fd, conn_send(s, fd, iov, (size_t)iovcnt, 0, NULL, 0));
    ssize_t n = vs_real.writev(fd, iov, iovcnt);
    return s ? done_tx(s, fd, n) : n;
}

VS_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.recv(fd, buf, len, flags));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops) {
        struct iovec iov = {buf, len};
        return done_rx(s, fd, conn_recv(s, fd, &iov, 1, flags, NULL, NULL), flags);
    }
    ssize_t n = vs_real.recv(fd, buf, len, flags);
    return s ? done_rx(s, fd, n, flags) : n;
}

VS_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
                           socklen_t *addrlen)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.recvfrom(fd, buf, len, flags, addr, addrlen));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops) {
        struct iovec iov = {buf, len};
        return done_rx(s, fd, conn_recv(s, fd, &iov, 1, flags, addr, addrlen), flags);
    }
    ssize_t n = vs_real.recvfrom(fd, buf, len, flags, addr, addrlen);
    return s ? done_rx(s, fd, n, flags) : n;
}

VS_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.recvmsg(fd, msg, flags));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops) {
        int before = errno;
        return done_rx(s, fd, keep_errno(s->ops->recvmsg(s, fd, msg, flags), before), flags);
    }
    ssize_t n = vs_real.recvmsg(fd, msg, flags);
    return s ? done_rx(s, fd, n, flags) : n;
}

/* Total bytes of the first N messages of a sendmmsg/recvmmsg vector. */
static size_t mmsg_bytes(const struct mmsghdr *v, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += v[i].msg_len;
    return total;
}

/* A transport without recvmmsg/sendmmsg of its own carries streams, which
 * have no message boundaries: each entry takes what a recvmsg would, the
 * first one may block, the rest do not. */
static int conn_recvmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    unsigned i = 0;
    for (; i < vlen; i++) {
        ssize_t n = s->ops->recvmsg(s, fd, &vec[i].msg_hdr, i ? flags | MSG_DONTWAIT : flags);
        if (n < 0)
            return i ? (int)i : -1;
        vec[i].msg_len = (unsigned)n;
        if (n == 0)
            return (int)i + 1;
    }
    return (int)i;
}

static int conn_sendmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    unsigned i = 0;
    for (; i < vlen; i++) {
        ssize_t n = s->ops->sendmsg(s, fd, &vec[i].msg_hdr, flags);
        if (n < 0)
            return i ? (int)i : -1;
        vec[i].msg_len = (unsigned)n;
    }
    return (int)i;
}

VS_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
                       struct timespec *timeout)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.recvmmsg(fd, vec, vlen, flags, timeout));
    struct vs_sock *s = vs_fd_get(fd);
    int before = errno;
    unsigned outer = vs_signals_call_begin();
    int n = !s || !s->ops      ? vs_real.recvmmsg(fd, vec, vlen, flags, timeout)
            : s->ops->recvmmsg ? s->ops->recvmmsg(s, fd, vec, vlen, flags, timeout)
                               : conn_recvmmsg(s, fd, vec, vlen, flags);
    keep_errno(n, before);
    vs_signals_call_end(outer);
    if (s) {
        if (n > 0 && !(flags & MSG_PEEK))
            vs_sock_count_rx(s, fd, (long)mmsg_bytes(vec, n), (unsigned)n);
        vs_sock_put(s);
    }
    return n;
}

VS_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.send(fd, buf, len, flags));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops) {
        struct iovec iov = {(void *)buf, len};
        return done_tx(s, fd, conn_send(s, fd, &iov, 1, flags, NULL, 0));
    }
    ssize_t n = vs_real.send(fd, buf, len, flags);
    return s ? done_tx(s, fd, n) : n;
}

VS_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
                         const struct sockaddr *addr, socklen_t addrlen)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sendto(fd, buf, len, flags, addr, addrlen));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops) {
        /* sendto refuses an address longer than any (sendmsg would cut it). */
        if (addr && addrlen > sizeof(struct sockaddr_storage)) {
            vs_sock_put(s);
            errno = EINVAL;
            return -1;
        }
        struct iovec iov = {(void *)buf, len};
        return done_tx(s, fd, conn_send(s, fd, &iov, 1, flags, addr, addrlen));
    }
    ssize_t n = vs_real.sendto(fd, buf, len, flags, addr, addrlen);
    return s ? done_tx(s, fd, n) : n;
}

VS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sendmsg(fd, msg, flags));
    struct vs_sock *s = vs_fd_get(fd);
    if (s && s->ops) {
        int before = errno;
        return done_tx(s, fd, keep_errno(s->ops->sendmsg(s, fd, msg, flags), before));
    }
    ssize_t n = vs_real.sendmsg(fd, msg, flags);
    return s ? done_tx(s, fd, n) : n;
}

VS_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sendmmsg(fd, vec, vlen, flags));
    struct vs_sock *s = vs_fd_get(fd);
    int before = errno;
    unsigned outer = vs_signals_call_begin();
    int n = !s || !s->ops      ? vs_real.sendmmsg(fd, vec, vlen, flags)
            : s->ops->sendmmsg ? s->ops->sendmmsg(s, fd, vec, vlen, flags)
                               : conn_sendmmsg(s, fd, vec, vlen, flags);
    keep_errno(n, before);
    vs_signals_call_end(outer);
    if (s) {
        if (n > 0)
            vs_sock_count_tx(s, fd, (long)mmsg_bytes(vec, n), (unsigned)n);
        vs_sock_put(s);
    }
    return n;
}

/* One mark of the signal handlers run for the whole call, its chunks
 * included (base/signals.h). */
static ssize_t conn_sendfile(struct vs_sock *s, int out_fd, int in_fd, off_t *offset, size_t count)
{
    int before = errno;
    unsigned outer = vs_signals_call_begin();
    ssize_t n = keep_errno(s->ops->sendfile(s, out_fd, in_fd, offset, count), before);
    vs_signals_call_end(outer);
    return n;
}

/* sendfile writes to OUT_FD, which is the socket when one is involved. */
VS_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sendfile(out_fd, in_fd, offset, count));
    struct vs_sock *s = vs_fd_get(out_fd);
    if (s && s->ops)
        return done_tx(s, out_fd, conn_sendfile(s, out_fd, in_fd, offset, count));
    ssize_t n = vs_real.sendfile(out_fd, in_fd, offset, count);
    return s ? done_tx(s, out_fd, n) : n;
}

VS_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.sendfile64(out_fd, in_fd, offset, count));
    struct vs_sock *s = vs_fd_get(out_fd);
    if (s && s->ops)
        return done_tx(s, out_fd, conn_sendfile(s, out_fd, in_fd, offset, count));
    ssize_t n = vs_real.sendfile64(out_fd, in_fd, offset, count);
    return s ? done_tx(s, out_fd, n) : n;
}
