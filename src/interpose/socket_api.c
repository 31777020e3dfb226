/* socket_api.c - socket creation, naming, connection set-up and options.
 *
 * These wrappers call libc and keep the fd table and the statistics in step
 * with what the kernel did. connect and accept also offer a TCP connection
 * to the transports (transport/registry.c), which upgrade it when the
 * process at the other end runs vsocket too. A UDP socket is offered to the
 * datagram layer at socket(), which then hears of its connect, bind and
 * options once the kernel accepted them. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "config/config.h"
#include "core/fdtable.h"
#include "core/reason.h"
#include "base/real.h"
#include "base/sandbox.h"
#include "transport/transport.h"

#define SOCK_TYPE_MASK 0xf

/* The kernel said EMFILE or ENFILE: descriptors vsocket holds for upgrades
 * under way go back (transport.h), and then the call may be tried again.
 * The program must not run out of descriptors sooner than on the kernel. */
static bool fds_given_back(int r)
{
    if (r >= 0 || (errno != EMFILE && errno != ENFILE))
        return false;
    int saved_errno = errno;
    bool freed = vs_transports_fds_short() > 0;
    errno = saved_errno;
    return freed;
}

/* Starts tracking a socket the kernel just created. */
static void track_new(int fd, int family, int type, int protocol)
{
    if (!vs_sock_tracked_family(family)) {
        vs_fd_set(fd, NULL);
        return;
    }
    int saved_errno = errno;
    struct vs_sock *s = vs_sock_new(fd, family, type & SOCK_TYPE_MASK, protocol, NULL);
    if (s)
        vs_transports_offer_dgram(s, fd);
    vs_fd_set(fd, s);
    errno = saved_errno;
}

VS_EXPORT int socket(int family, int type, int protocol)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.socket(family, type, protocol));
    int fd = vs_real.socket(family, type, protocol);
    if (fds_given_back(fd))
        fd = vs_real.socket(family, type, protocol);
    if (fd >= 0)
        track_new(fd, family, type, protocol);
    return fd;
}

VS_EXPORT int socketpair(int family, int type, int protocol, int fds[2])
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.socketpair(family, type, protocol, fds));
    int r = vs_real.socketpair(family, type, protocol, fds);
    if (r == 0) {
        /* Linux has socketpair for AF_UNIX only: never ours. */
        vs_fd_set(fds[0], NULL);
        vs_fd_set(fds[1], NULL);
    }
    return r;
}

VS_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.bind(fd, addr, len));
    struct vs_sock *s = vs_fd_get(fd);
    int r = vs_real.bind(fd, addr, len);
    if (s) {
        int saved_errno = errno;
        if (r == 0) {
            vs_sock_set_state(s, fd, VS_STATE_BOUND);
            if (s->ops && s->ops->on_bind)
                s->ops->on_bind(s, fd, addr, len);
        }
        vs_sock_put(s);
        errno = saved_errno;
    }
    return r;
}

VS_EXPORT int listen(int fd, int backlog)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.listen(fd, backlog));
    struct vs_sock *s = vs_fd_get(fd);
    int r = vs_real.listen(fd, backlog);
    if (s) {
        if (r == 0) {
            vs_sock_set_state(s, fd, VS_STATE_LISTENING);
            if (s->type == SOCK_STREAM &&
                vs_config.transports != VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL))
                vs_stats_set_reason(s->stat, VS_REASON_LISTENER);
        }
        vs_sock_put(s);
    }
    return r;
}

/* A connection accepted on listener S becomes a socket of its own. */
/* ADDR: accept's address, LEN its length after the call, CAP the buffer's
 * size before: a longer address was cut short, so not usable. */
static int track_accepted(struct vs_sock *listener, int fd, const struct sockaddr *addr,
                          const socklen_t *len, socklen_t cap)
{
    if (fd < 0 || !listener) {
        if (fd >= 0)
            vs_fd_set(fd, NULL);
        return fd;
    }
    int saved_errno = errno;
    struct vs_sock *s = vs_sock_new(fd, listener->family, listener->type, listener->protocol, NULL);
    if (s) {
        bool whole = addr && len && *len <= cap;
        vs_sock_accepted(s, fd, listener, whole ? addr : NULL, whole ? *len : 0);
        vs_transports_offer_accept(s, fd);
        vs_fd_set(fd, s);
    }
    vs_sock_put(listener);
    errno = saved_errno;
    return fd;
}

VS_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.accept(fd, addr, len));
    struct vs_sock *s = vs_fd_get(fd);
    socklen_t cap = addr && len ? *len : 0;
    int r = vs_real.accept(fd, addr, len);
    if (fds_given_back(r))
        r = vs_real.accept(fd, addr, len);
    if (r < 0 && s)
        vs_sock_put(s);
    return r < 0 ? r : track_accepted(s, r, addr, len, cap);
}

VS_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.accept4(fd, addr, len, flags));
    struct vs_sock *s = vs_fd_get(fd);
    socklen_t cap = addr && len ? *len : 0;
    int r = vs_real.accept4(fd, addr, len, flags);
    if (fds_given_back(r))
        r = vs_real.accept4(fd, addr, len, flags);
    if (r < 0 && s)
        vs_sock_put(s);
    return r < 0 ? r : track_accepted(s, r, addr, len, cap);
}

VS_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.connect(fd, addr, len));
    struct vs_sock *s = vs_fd_get(fd);
    int r = vs_real.connect(fd, addr, len);
    if (!s)
        return r;
    int saved_errno = errno;
    bool unspec = addr && len >= sizeof(sa_family_t) && addr->sa_family == AF_UNSPEC;
    if (unspec) {
        if (r == 0)
            vs_sock_disconnected(s, fd); /* a datagram socket dissolving its association */
    } else if (r == 0)
        vs_sock_connecting(s, fd, VS_STATE_CONNECTED, addr, len);
    else if (errno == EINPROGRESS)
        vs_sock_connecting(s, fd, VS_STATE_CONNECTING, addr, len);
    if (r == 0 || errno == EINPROGRESS)
        vs_transports_offer_connect(s, fd, addr, len);
    vs_sock_put(s);
    errno = saved_errno;
    return r;
}

VS_EXPORT int shutdown(int fd, int how)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.shutdown(fd, how));
    struct vs_sock *s = vs_fd_get(fd);
    if (!s)
        return vs_real.shutdown(fd, how);
    int before = errno;
    int r = s->ops ? s->ops->shutdown(s, fd, how) : vs_real.shutdown(fd, how);
    int saved_errno = r == 0 ? before : errno; /* a success leaves errno alone */
    vs_sock_put(s);
    errno = saved_errno;
    return r;
}

VS_EXPORT int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.getsockopt(fd, level, name, value, len));
    return vs_real.getsockopt(fd, level, name, value, len);
}

/* The buffer sizes the program chose: the shm transport's rings hold at
 * least what the kernel would, and the kernel stops autotuning these. */
static void note_buffer_size(int fd, int name)
{
    unsigned bit = name == SO_SNDBUF || name == SO_SNDBUFFORCE   ? VS_SOCK_SNDBUF_SET
                   : name == SO_RCVBUF || name == SO_RCVBUFFORCE ? VS_SOCK_RCVBUF_SET
                                                                 : 0;
    struct vs_sock *s = bit ? vs_fd_peek(fd) : NULL;
    if (s) {
        atomic_fetch_or(&s->bufs_set, bit);
        vs_sock_put(s);
    }
}

/* A close with SO_LINGER 0 resets the connection: a transport whose bytes
 * the kernel does not see must say so itself (the option is gone with the
 * socket by the time the transport lets go of it). */
static void note_linger(int fd, const void *value, socklen_t len)
{
    struct vs_sock *s = value && len >= sizeof(struct linger) ? vs_fd_peek(fd) : NULL;
    if (s) {
        const struct linger *l = value;
        atomic_store(&s->linger0, l->l_onoff && l->l_linger == 0);
        vs_sock_put(s);
    }
}

/* The kernel took the value (it refuses a raise without CAP_NET_ADMIN). */
static void note_busy_poll(int fd, const void *value, socklen_t len)
{
    struct vs_sock *s = value && len >= (socklen_t)sizeof(int) ? vs_fd_peek(fd) : NULL;
    if (s) {
        int us;
        memcpy(&us, value, sizeof(us));
        atomic_store(&s->busy_poll_us, us);
        vs_sock_put(s);
    }
}

static void note_inq(int fd, const void *value, socklen_t len)
{
    struct vs_sock *s = vs_fd_get(fd);
    if (s && value && len >= (socklen_t)sizeof(int)) {
        atomic_store(&s->tcp_inq, *(const int *)value != 0);
    }
    if (s)
        vs_sock_put(s);
}

/* The kernel accepted an option: the socket's transport hears of it (the
 * datagram layer: options it must honour, or that keep a peer on the
 * kernel). */
static void tell_sockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    struct vs_sock *s = vs_fd_get(fd);
    if (!s)
        return;
    if (s->ops && s->ops->sockopt)
        s->ops->sockopt(s, fd, level, name, value, len);
    vs_sock_put(s);
}

VS_EXPORT int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.setsockopt(fd, level, name, value, len));
    int r = vs_real.setsockopt(fd, level, name, value, len);
    if (r == 0) {
        int saved = errno;
        tell_sockopt(fd, level, name, value, len);
        errno = saved;
    }
    if (r == 0 && level == SOL_SOCKET) {
        int saved = errno;
        note_buffer_size(fd, name);
        if (name == SO_LINGER)
            note_linger(fd, value, len);
        if (name == SO_BUSY_POLL)
            note_busy_poll(fd, value, len);
        errno = saved;
    }
    if (r == 0 && level == IPPROTO_TCP && name == TCP_INQ) {
        int saved = errno;
        note_inq(fd, value, len);
        errno = saved;
    }
    return r;
}

VS_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.getsockname(fd, addr, len));
    return vs_real.getsockname(fd, addr, len);
}

VS_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.getpeername(fd, addr, len));
    return vs_real.getpeername(fd, addr, len);
}
