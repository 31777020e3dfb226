/* sock.c - socket state: creation, adoption, release. */
#include "core/sock.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "config/log.h"
#include "core/fdtable.h"
#include "core/reason.h"
#include "core/spin.h"
#include "base/real.h"
#include "memory/pool.h"

static struct vs_pool pool = VS_POOL_INIT(struct vs_sock, pool_next);

bool vs_sock_tracked_family(int family)
{
    return family == AF_INET || family == AF_INET6;
}

/* Why a new socket is on the kernel. A TCP socket may still move to the
 * shm transport when it connects (the reason then changes). Datagram
 * sockets other than UDP (ICMP "ping" sockets, UDP-Lite) are not the
 * datagram layer's. */
static const char *kernel_reason(int type, int protocol)
{
    bool udp = type == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP);
    if (type != SOCK_STREAM && !udp)
        return VS_REASON_UNSUPPORTED_TYPE;
    bool kernel_only = vs_config.transports == VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL);
    if (kernel_only)
        return vs_config.transports_set ? VS_REASON_DISABLED : VS_REASON_NO_TRANSPORT;
    if (udp)
        return vs_config.udp ? VS_REASON_UDP : VS_REASON_UDP_DISABLED;
    return VS_REASON_NOT_CONNECTED;
}

/* Given from above at load (interpose/init.c): the datagram layer's offer. */
static void (*adopt_hook)(struct vs_sock *s, int fd);

void vs_sock_set_adopt_hook(void (*hook)(struct vs_sock *s, int fd))
{
    adopt_hook = hook;
}

struct vs_sock *vs_sock_new(int fd, int family, int type, int protocol, const char *reason)
{
    struct vs_sock *s = vs_pool_alloc(&pool);
    if (!s) {
        vs_warn("out of memory: fd %d passes through untracked", fd);
        return NULL;
    }
    s->family = family;
    s->type = type;
    s->protocol = protocol;
    s->transport = VS_TRANSPORT_KERNEL;
    s->ops = NULL;
    s->conn = NULL;
    static _Atomic uint64_t next_serial = 1;
    s->serial = atomic_fetch_add_explicit(&next_serial, 1, memory_order_relaxed);
    atomic_store(&s->in_epoll_plain, false);
    atomic_store(&s->bufs_set, 0);
    atomic_store(&s->busy_poll_us, vs_busy_read_us());
    s->conn_shown = -1;
    s->have_addrs = s->have_local = false;
    atomic_store(&s->state, VS_STATE_OPEN);
    s->stat = vs_stats_open(fd, family, type, s->transport,
                            reason ? reason : kernel_reason(type, protocol));
    /* Published last: a racing lookup that finds this recycled object must
     * not take a reference before the fields above are in place. */
    atomic_store_explicit(&s->refs, 1, memory_order_release);
    vs_debug("fd %d: %s socket type %d tracked (transport kernel)", fd,
             family == AF_INET ? "ipv4" : "ipv6", type);
    return s;
}

struct vs_sock *vs_sock_adopt(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return NULL;
    int family = 0, type = 0, protocol = 0, listening = 0;
    socklen_t len = sizeof(int);
    if (vs_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) < 0 ||
        !vs_sock_tracked_family(family))
        return NULL;
    len = sizeof(int);
    vs_real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
    len = sizeof(int);
    vs_real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len);
    len = sizeof(int);
    vs_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);

    struct vs_sock *s = vs_sock_new(fd, family, type, protocol, NULL);
    if (!s)
        return NULL;
    struct sockaddr_storage peer;
    len = sizeof(peer);
    enum vs_sock_state state = listening ? VS_STATE_LISTENING
                               : vs_real.getpeername(fd, (void *)&peer, &len) == 0
                                   ? VS_STATE_CONNECTED
                                   : VS_STATE_BOUND;
    vs_sock_set_state(s, fd, state);
    int busy_us = 0;
    len = sizeof(int);
    if (vs_real.getsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &busy_us, &len) == 0)
        atomic_store(&s->busy_poll_us, busy_us);
    if (state == VS_STATE_CONNECTED && type == SOCK_STREAM &&
        (vs_config.transports & ~VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL)))
        vs_stats_set_reason(s->stat, VS_REASON_INHERITED);
    if (adopt_hook)
        adopt_hook(s, fd);
    vs_info("fd %d: adopted an inherited socket (%s)", fd, vs_stats_state_name(state));
    return s;
}

void vs_sock_release(struct vs_sock *s)
{
    int saved_errno = errno;
    if (s->ops)
        s->ops->release(s);
    vs_stats_close(s->stat);
    vs_pool_free(&pool, s);
    errno = saved_errno;
}

void vs_sock_refresh_addrs(struct vs_sock *s, int fd)
{
    struct sockaddr_storage local, peer;
    socklen_t llen = sizeof(local), plen = sizeof(peer);
    int saved_errno = errno;
    bool have_local = vs_real.getsockname(fd, (void *)&local, &llen) == 0;
    bool have_peer = vs_real.getpeername(fd, (void *)&peer, &plen) == 0;
    s->have_addrs = have_local && have_peer;
    s->have_local = have_local;
    if (have_local)
        s->local = local;
    if (s->have_addrs)
        s->peer = peer;
    vs_stats_set_addrs(s->stat, have_local ? (void *)&local : NULL,
                       have_peer ? (void *)&peer : NULL);
    errno = saved_errno;
}

/* Whether an accepted connection's local address is its listener's: not
 * for a wildcard listener, whose connections each have one of the host's. */
static bool specific(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr != htonl(INADDR_ANY);
    if (ss->ss_family == AF_INET6)
        return !IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
    return false;
}

void vs_sock_accepted(struct vs_sock *s, int fd, const struct vs_sock *listener,
                      const struct sockaddr *peer, socklen_t len)
{
    /* The kernel's accepted socket is a copy of the listener's. */
    atomic_store(&s->busy_poll_us, atomic_load(&listener->busy_poll_us));
    if (!listener->have_local || !specific(&listener->local) || !peer ||
        len < sizeof(struct sockaddr_in) || len > sizeof(s->peer) ||
        peer->sa_family != listener->local.ss_family) {
        vs_sock_set_state(s, fd, VS_STATE_CONNECTED);
        return;
    }
    atomic_store(&s->state, VS_STATE_CONNECTED);
    vs_stats_set_state(s->stat, VS_STATE_CONNECTED);
    s->local = listener->local;
    memset(&s->peer, 0, sizeof(s->peer));
    memcpy(&s->peer, peer, len);
    s->have_addrs = s->have_local = true;
    vs_stats_set_addrs(s->stat, (const void *)&s->local, (const void *)&s->peer);
}

void vs_sock_connecting(struct vs_sock *s, int fd, enum vs_sock_state state,
                        const struct sockaddr *peer, socklen_t len)
{
    socklen_t llen = sizeof(s->local);
    int saved_errno = errno;
    if (!peer || len < sizeof(struct sockaddr_in) || len > sizeof(s->peer) ||
        peer->sa_family != s->family || vs_real.getsockname(fd, (void *)&s->local, &llen) < 0) {
        errno = saved_errno;
        vs_sock_set_state(s, fd, state);
        return;
    }
    errno = saved_errno;
    atomic_store(&s->state, state);
    vs_stats_set_state(s->stat, state);
    memset(&s->peer, 0, sizeof(s->peer));
    memcpy(&s->peer, peer, len);
    s->have_addrs = s->have_local = true;
    vs_stats_set_addrs(s->stat, (const void *)&s->local, (const void *)&s->peer);
}

void vs_sock_set_state(struct vs_sock *s, int fd, enum vs_sock_state state)
{
    atomic_store(&s->state, state);
    vs_stats_set_state(s->stat, state);
    vs_sock_refresh_addrs(s, fd);
}

/* connect(AF_UNSPEC) dissolved a datagram socket's association: no peer.
 * It stays bound where the program bound it to a port of its choosing; a
 * port the kernel chose (bind to port 0, or the connect) goes with the
 * association (the kernel's rule), and then the socket is open again. */
void vs_sock_disconnected(struct vs_sock *s, int fd)
{
    const struct sockaddr none = {.sa_family = AF_UNSPEC};
    vs_stats_set_addrs(s->stat, NULL, &none);
    vs_sock_set_state(s, fd, VS_STATE_OPEN);
    const struct sockaddr_storage *l = &s->local;
    in_port_t port = l->ss_family == AF_INET    ? ((const struct sockaddr_in *)l)->sin_port
                     : l->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)l)->sin6_port
                                                : 0;
    if (s->have_local && port != 0) {
        atomic_store(&s->state, VS_STATE_BOUND);
        vs_stats_set_state(s->stat, VS_STATE_BOUND);
    }
}

void vs_sock_connected_late(struct vs_sock *s, int fd)
{
    int expected = VS_STATE_CONNECTING;
    if (atomic_compare_exchange_strong(&s->state, &expected, VS_STATE_CONNECTED))
        vs_sock_set_state(s, fd, VS_STATE_CONNECTED);
}

void vs_sock_fork_prepare(void)
{
    vs_pool_fork_prepare(&pool);
}

void vs_sock_fork_parent(void)
{
    vs_pool_fork_parent(&pool);
}

static void mark_live(int fd, struct vs_sock *s, void *arg)
{
    (void)fd;
    (void)arg;
    vs_stats_mark_live(s->stat, atomic_load(&s->state));
}

void vs_sock_fork_child(void)
{
    vs_pool_fork_child(&pool);
    vs_fd_for_each(mark_live, NULL);
}
