/* dgram.c - which UDP sockets the datagram layer takes, what it hears of
 * them (connect, bind, options), and its table (docs/design/udp.md §1,
 * §10). The layer takes a UDP socket at socket(), or when an inherited one
 * is first seen, so that every call on it from then on passes through
 * s->ops. Every peer is on the kernel for now: the hooks note nothing yet,
 * the data path passes calls on (kernel_path.c), and readiness is the
 * kernel socket's (readiness.c). */
#include "config/config.h"
#include "config/log.h"
#include "transport/dgram/dgram.h"
#include "transport/dgram/ops.h"

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
    vs_debug("fd %d: udp socket on the datagram layer (every peer on the kernel)", fd);
}

/* PEER is the program's; AF_UNSPEC dissolved the association (the kernel
 * accepted the call). */
static void on_connect(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len)
{
    (void)s;
    bool unspec = peer && len >= sizeof(sa_family_t) && peer->sa_family == AF_UNSPEC;
    vs_debug("fd %d: udp %s", fd, unspec ? "association dissolved" : "connected");
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

static void sockopt(struct vs_sock *s, int fd, int level, int name, const void *value,
                    socklen_t len)
{
    (void)s;
    (void)value;
    (void)len;
    vs_debug("fd %d: udp option %d/%d set", fd, level, name);
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
    s->conn = NULL;
}

static void nothing(void)
{
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
    .fork_prepare = nothing,
    .fork_parent = nothing,
    .fork_child = nothing,
    .fork_failed = nothing,
    .before_exec = nothing,
    .leave_all = leave_all,
};
