/* dgram.c - which UDP sockets the datagram layer takes, what it hears of
 * them (connect, bind, options), and its table (docs/design/udp.md §1,
 * §10). The layer takes a UDP socket at socket(), or when an inherited one
 * is first seen, so that every call on it from then on passes through
 * s->ops. With VSOCKET_UDP_SHM on, a socket also gets a state for peers on
 * this host (udp_shm.h); the data path (io.c) and readiness (readiness.c)
 * are the kernel socket's until a pair is off the kernel. */
#include <netinet/in.h>
#include <netinet/udp.h>
#include <fcntl.h>
#include <unistd.h>

#include "base/real.h"
#include "base/syscall.h"
#include "config/config.h"
#include "config/log.h"
#include "core/fdtable.h"
#include "core/reason.h"
#include "transport/dgram/dgram.h"
#include "transport/dgram/ops.h"
#include "transport/dgram/udp_shm.h"

/* A socket the layer may one day carry off the kernel: UDP on, and a
 * transport other than the kernel allowed. Otherwise s->ops stays NULL and
 * the socket costs what any kernel socket costs (its reason says why:
 * core/sock.c). */
static void on_socket(struct vs_sock *s, int fd)
{
    bool other = vs_config.transports & ~VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL);
    if (!vs_config.udp || !other)
        return;
    s->ops = &vs_dgram_ops;
    s->conn = NULL;
    if (vs_config.udp_shm && (vs_config.transports & VS_TRANSPORT_BIT(VS_TRANSPORT_SHM)))
        s->conn = vs_udp_new(fd, s->family, s->stat);
    vs_debug("fd %d: udp socket on the datagram layer (%s)", fd,
             s->conn ? "peers on this host may take shm" : "every peer on the kernel");
}

/* PEER is the program's; AF_UNSPEC dissolved the association (the kernel
 * accepted the call). */
static void on_connect(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len)
{
    bool unspec = peer && len >= sizeof(sa_family_t) && peer->sa_family == AF_UNSPEC;
    vs_debug("fd %d: udp %s", fd, unspec ? "association dissolved" : "connected");
    struct vs_udp_sock *u = vs_udp_of(s);
    if (!u)
        return;
    struct sockaddr_storage to;
    socklen_t tolen = sizeof(to);
    bool known = !unspec && vs_real.getpeername(fd, (void *)&to, &tolen) == 0;
    pthread_mutex_lock(&u->lock);
    vs_udp_connected(u, known ? &to : NULL);
    pthread_mutex_unlock(&u->lock);
}

static void on_accept(struct vs_sock *s, int fd)
{
    (void)s;
    (void)fd; /* never called: UDP has no accept */
}

static void on_bind(struct vs_sock *s, int fd, const struct sockaddr *addr, socklen_t len)
{
    (void)s;
    (void)addr;
    (void)len;
    vs_debug("fd %d: udp bound", fd);
}

/* Options whose effect shm gives as the kernel does (or that only matter
 * for destinations that stay on the kernel). Any other (IP_PKTINFO,
 * timestamps, SO_REUSEPORT, UDP_CORK, ...) keeps the socket on the kernel
 * for now (udp.md §6: those that can be synthesized come later). */
static bool shm_keeps(int level, int name)
{
    if (level == SOL_SOCKET)
        return name == SO_RCVBUF || name == SO_SNDBUF || name == SO_RCVBUFFORCE ||
               name == SO_SNDBUFFORCE || name == SO_REUSEADDR || name == SO_RCVTIMEO ||
               name == SO_SNDTIMEO || name == SO_BROADCAST || name == SO_PRIORITY ||
               name == SO_KEEPALIVE || name == SO_LINGER;
    if (level == IPPROTO_IP)
        return name == IP_TOS || name == IP_TTL || name == IP_MULTICAST_TTL ||
               name == IP_MULTICAST_LOOP || name == IP_MULTICAST_IF || name == IP_MTU_DISCOVER;
    if (level == IPPROTO_IPV6)
        return name == IPV6_V6ONLY || name == IPV6_TCLASS || name == IPV6_UNICAST_HOPS ||
               name == IPV6_MULTICAST_HOPS || name == IPV6_MULTICAST_LOOP ||
               name == IPV6_MULTICAST_IF || name == IPV6_MTU_DISCOVER;
    return false;
}

static void sockopt(struct vs_sock *s, int fd, int level, int name, const void *value,
                    socklen_t len)
{
    (void)value;
    (void)len;
    vs_debug("fd %d: udp option %d/%d set", fd, level, name);
    struct vs_udp_sock *u = vs_udp_of(s);
    if (!u)
        return;
    pthread_mutex_lock(&u->lock);
    if (!shm_keeps(level, name))
        vs_udp_off(u, VS_REASON_UDP_OPTION);
    else if (level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_RCVBUFFORCE))
        vs_udp_budget(u, fd);
    pthread_mutex_unlock(&u->lock);
}

/* Bytes move only through the kernel socket: nothing to hand back. */
static void leave(struct vs_sock *s, int fd, const char *reason)
{
    (void)s;
    (void)fd;
    (void)reason;
}

static void release(struct vs_sock *s)
{
    if (s->conn)
        vs_udp_free(s->conn);
    s->conn = NULL;
}

/* A pre-fork server binds, forks, and its children receive: its sockets,
 * not used yet, go to the holder that uses them first (udp_shm.h). */
static void fork_prepare(void)
{
    if (vs_config.udp_shm)
        vs_udp_fork_prepare();
}

static void fork_parent(void)
{
    if (vs_config.udp_shm)
        vs_udp_fork_done(false);
}

/* The child's sockets are its parent's state's: it sends and receives on
 * the kernel, and its first use takes the socket off shm (udp_shm.h). */
static void fork_child(void)
{
    vs_udp_set_pid(getpid());
    if (vs_config.udp_shm)
        vs_udp_fork_done(true);
}

/* A socket the new image inherits is read there on the kernel: its peers
 * must send to it there. (The carrier's own rings end with its image.) */
static void exec_one(int fd, struct vs_sock *s, void *arg)
{
    (void)arg;
    if (s->ops != &vs_dgram_ops || !s->conn)
        return;
    long flags = vs_syscall(SYS_fcntl, fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC))
        vs_udp_mark_left(s, fd, "is inherited by an exec'd image");
}

static void before_exec(void)
{
    if (vs_config.udp_shm)
        vs_fd_for_each(exec_one, NULL);
}

static void leave_all(const char *reason)
{
    (void)reason;
}

const struct vs_transport_ops vs_dgram_ops = {
    .id = VS_TRANSPORT_KERNEL,
    .on_connect = on_connect,
    .on_accept = on_accept,
    .on_socket = on_socket,
    .on_bind = on_bind,
    .sockopt = sockopt,
    .recvmsg = vs_dgram_recvmsg,
    .sendmsg = vs_dgram_sendmsg,
    .recvmmsg = vs_dgram_recvmmsg,
    .sendmmsg = vs_dgram_sendmmsg,
    .sendfile = vs_dgram_sendfile,
    .shutdown = vs_dgram_shutdown,
    .ioctl = vs_dgram_ioctl,
    .translated = vs_dgram_translated,
    .tcp_interest = vs_dgram_tcp_interest,
    .watch_fd = vs_dgram_watch_fd,
    .poll = vs_dgram_poll,
    .poll_fast = vs_dgram_poll_fast,
    .spins = vs_dgram_spins,
    .idle = vs_dgram_idle,
    .arm = vs_dgram_arm,
    .disarm = vs_dgram_disarm,
    .rearm = vs_dgram_rearm,
    .shared_wait = vs_dgram_shared_wait,
    .generation = vs_dgram_generation,
    .rx_mark = vs_dgram_rx_mark,
    .tx_mark = vs_dgram_tx_mark,
    .rx_by_kernel = vs_dgram_rx_by_kernel,
    .cold_attach = vs_dgram_cold_attach,
    .cold_detach = vs_dgram_cold_detach,
    .cold_rec = vs_dgram_cold_rec,
    .leave = leave,
    .release = release,
    .fork_prepare = fork_prepare,
    .fork_parent = fork_parent,
    .fork_child = fork_child,
    .fork_failed = fork_parent,
    .before_exec = before_exec,
    .leave_all = leave_all,
};
