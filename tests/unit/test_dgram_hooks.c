/* test_dgram_hooks.c - what the interposed calls tell the datagram layer
 * (docs/design/udp.md §10), seen by a recording table put in its place:
 * which sockets are offered, at socket() and at adoption; bind, connect
 * (AF_UNSPEC too) and setsockopt once the kernel accepted them, never when
 * it refused; sendto's destination in the msghdr; whole vectors for
 * recvmmsg/sendmmsg. Then the real table: which sockets it takes, and the
 * statistics' reasons and datagram counts. This executable links the
 * library's objects, so its own socket(), bind()... are vsocket's. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "config/config.h"
#include "core/fdtable.h"
#include "core/reason.h"
#include "transport/dgram/ops.h"

static struct vs_transport_ops fake;

/* What the recording table saw last. */
static struct {
    int sockets, binds, connects, sockopts, sendmsgs, recvmsgs, recvmmsgs, sendmmsgs;
    int fd, level, name;
    const void *value;
    socklen_t len;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    bool named;
    const struct timespec *timeout;
    unsigned vlen;
} seen;

static void keep_addr(const void *addr, socklen_t len)
{
    memset(&seen.addr, 0, sizeof(seen.addr));
    seen.addrlen = len;
    if (addr && len <= sizeof(seen.addr))
        memcpy(&seen.addr, addr, len);
}

static void rec_socket(struct vs_sock *s, int fd)
{
    seen.sockets++;
    seen.fd = fd;
    s->ops = &fake;
}

static void rec_bind(struct vs_sock *s, int fd, const struct sockaddr *addr, socklen_t len)
{
    (void)s;
    seen.binds++;
    seen.fd = fd;
    keep_addr(addr, len);
}

static void rec_connect(struct vs_sock *s, int fd, const struct sockaddr *addr, socklen_t len)
{
    (void)s;
    seen.connects++;
    seen.fd = fd;
    keep_addr(addr, len);
}

static void rec_sockopt(struct vs_sock *s, int fd, int level, int name, const void *value,
                        socklen_t len)
{
    (void)s;
    seen.sockopts++;
    seen.fd = fd;
    seen.level = level;
    seen.name = name;
    seen.value = value;
    seen.len = len;
}

static ssize_t rec_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags)
{
    seen.sendmsgs++;
    seen.named = msg->msg_name != NULL;
    keep_addr(msg->msg_name, msg->msg_namelen);
    return vs_dgram_ops.sendmsg(s, fd, msg, flags);
}

static ssize_t rec_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags)
{
    seen.recvmsgs++;
    return vs_dgram_ops.recvmsg(s, fd, msg, flags);
}

static int rec_recvmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags,
                        struct timespec *timeout)
{
    seen.recvmmsgs++;
    seen.vlen = vlen;
    seen.timeout = timeout;
    return vs_dgram_ops.recvmmsg(s, fd, vec, vlen, flags, timeout);
}

static int rec_sendmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    seen.sendmmsgs++;
    seen.vlen = vlen;
    return vs_dgram_ops.sendmmsg(s, fd, vec, vlen, flags);
}

static const struct vs_transport_ops *ops_of(int fd)
{
    struct vs_sock *s = vs_fd_get(fd);
    const struct vs_transport_ops *ops = s ? s->ops : NULL;
    if (s)
        vs_sock_put(s);
    return ops;
}

static const char *reason_of(int fd)
{
    static char reason[48];
    struct vs_sock *s = vs_fd_get(fd);
    reason[0] = '\0';
    if (s) {
        memcpy(reason, s->stat->reason, sizeof(reason));
        vs_sock_put(s);
    }
    return reason;
}

/* A receiver whose blocking receive gives up (EAGAIN) only when what must
 * come never does: a defect fails a check instead of hanging. */
static int udp_bound(struct sockaddr_in *sin)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct timeval hang = {.tv_sec = 60};
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hang, sizeof(hang)), 0);
    *sin = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(*sin);
    CHECK_EQ(bind(fd, (void *)sin, sizeof(*sin)), 0);
    CHECK_EQ(getsockname(fd, (void *)sin, &len), 0);
    return fd;
}

static void test_offers(void)
{
    memset(&seen, 0, sizeof(seen));
    int u = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
    CHECK_EQ(seen.sockets, 1);
    CHECK_EQ(seen.fd, u);
    CHECK(ops_of(u) == &fake);
    int t = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(seen.sockets, 1);
    CHECK(ops_of(t) == NULL);
    /* A ping socket is a datagram socket but not UDP (refused where
     * net.ipv4.ping_group_range leaves us out: nothing to look at then). */
    int p = socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP);
    if (p >= 0) {
        CHECK_EQ(seen.sockets, 1);
        CHECK(strcmp(reason_of(p), VS_REASON_UNSUPPORTED_TYPE) == 0);
        close(p);
    }
    /* Inherited through exec: made behind our back, seen at first use. */
    int a = (int)syscall(SYS_socket, AF_INET, SOCK_DGRAM, 0);
    CHECK_EQ(seen.sockets, 1);
    CHECK(ops_of(a) == &fake);
    CHECK_EQ(seen.sockets, 2);
    CHECK_EQ(seen.fd, a);
    close(a);
    close(t);
    close(u);
}

static void test_bind_connect_options(void)
{
    struct sockaddr_in sin;
    memset(&seen, 0, sizeof(seen));
    int r = udp_bound(&sin);
    CHECK_EQ(seen.binds, 1);
    CHECK_EQ(seen.fd, r);
    CHECK_EQ(seen.addrlen, sizeof(sin));
    CHECK_EQ(((struct sockaddr_in *)&seen.addr)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    /* Refused by the kernel (the port is taken): nothing to hear of. */
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK_EQ(bind(u, (void *)&sin, sizeof(sin)), -1);
    CHECK_EQ(errno, EADDRINUSE);
    CHECK_EQ(seen.binds, 1);

    int size = 65536;
    seen.sockopts = 0; /* udp_bound set one */
    CHECK_EQ(setsockopt(u, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)), 0);
    CHECK_EQ(seen.sockopts, 1);
    CHECK_EQ(seen.fd, u);
    CHECK_EQ(seen.level, SOL_SOCKET);
    CHECK_EQ(seen.name, SO_RCVBUF);
    CHECK(seen.value == &size);
    CHECK_EQ(seen.len, sizeof(size));
    CHECK_EQ(setsockopt(u, 9999, 1, &size, sizeof(size)), -1);
    CHECK_EQ(seen.sockopts, 1);

    CHECK_EQ(connect(u, (void *)&sin, sizeof(sin)), 0);
    CHECK_EQ(seen.connects, 1);
    CHECK_EQ(seen.fd, u);
    CHECK_EQ(((struct sockaddr_in *)&seen.addr)->sin_port, sin.sin_port);
    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
    CHECK_EQ(connect(u, &unspec, sizeof(unspec)), 0);
    CHECK_EQ(seen.connects, 2);
    CHECK_EQ(seen.addr.ss_family, AF_UNSPEC);
    /* Dissolving an association keeps a port the program chose, not one
     * the kernel chose (bind to port 0): E gets one, X binds to it. */
    int one = 1, e = socket(AF_INET, SOCK_DGRAM, 0), x = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(any);
    CHECK_EQ(setsockopt(e, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    CHECK_EQ(setsockopt(x, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    CHECK_EQ(bind(e, (void *)&any, sizeof(any)), 0);
    CHECK_EQ(getsockname(e, (void *)&any, &alen), 0);
    CHECK_EQ(bind(x, (void *)&any, sizeof(any)), 0);
    for (int i = 0; i < 2; i++) {
        int fd = i ? x : e;
        CHECK_EQ(connect(fd, (void *)&sin, sizeof(sin)), 0);
        CHECK_EQ(connect(fd, &unspec, sizeof(unspec)), 0);
        struct vs_sock *s = vs_fd_get(fd);
        CHECK(s != NULL);
        if (!s)
            continue;
        CHECK_EQ(atomic_load(&s->state), i ? VS_STATE_BOUND : VS_STATE_OPEN);
        CHECK_EQ(s->stat->peer.family, 0);
        CHECK_EQ(s->stat->peer.port, 0);
        vs_sock_put(s);
    }
    close(e);
    close(x);
    close(u);
    close(r);
}

static void test_data_path(void)
{
    struct sockaddr_in sin;
    int r = udp_bound(&sin);
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    memset(&seen, 0, sizeof(seen));

    /* sendto's destination reaches the table, and the kernel. */
    CHECK_EQ(sendto(u, "one", 3, 0, (void *)&sin, sizeof(sin)), 3);
    CHECK_EQ(seen.sendmsgs, 1);
    CHECK(seen.named);
    CHECK_EQ(seen.addrlen, sizeof(sin));
    CHECK_EQ(((struct sockaddr_in *)&seen.addr)->sin_port, sin.sin_port);
    char buf[16];
    struct sockaddr_in from;
    socklen_t flen = sizeof(from);
    CHECK_EQ(recvfrom(r, buf, sizeof(buf), 0, (void *)&from, &flen), 3);
    CHECK_EQ(flen, sizeof(from));
    CHECK_EQ(from.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    CHECK_EQ(seen.recvmsgs, 1);
    /* Longer than any address: the kernel's EINVAL, nothing sent. */
    char big[sizeof(struct sockaddr_storage) + 8] = {0};
    memcpy(big, &sin, sizeof(sin));
    CHECK_EQ(sendto(u, "x", 1, 0, (void *)big, sizeof(big)), -1);
    CHECK_EQ(errno, EINVAL);

    /* read(2) of nothing leaves the datagram queued; recv(2) of nothing
     * takes it. */
    CHECK_EQ(sendto(u, "two", 3, 0, (void *)&sin, sizeof(sin)), 3);
    int before = seen.recvmsgs;
    CHECK_EQ(read(r, buf, 0), 0);
    CHECK_EQ(seen.recvmsgs, before);
    CHECK_EQ(recv(r, buf, 0, MSG_TRUNC), 3);
    CHECK_EQ(recv(r, buf, sizeof(buf), MSG_DONTWAIT), -1);
    CHECK_EQ(errno, EAGAIN);
    /* recvfrom with an address but no length: the kernel's EFAULT, after
     * it took the datagram. */
    CHECK_EQ(sendto(u, "three", 5, 0, (void *)&sin, sizeof(sin)), 5);
    CHECK_EQ(recvfrom(r, buf, sizeof(buf), 0, (void *)&from, NULL), -1);
    CHECK_EQ(errno, EFAULT);
    CHECK_EQ(recv(r, buf, sizeof(buf), MSG_DONTWAIT), -1);

    /* Whole vectors, timeout included. */
    struct iovec iov[3] = {{"a", 1}, {"", 0}, {"ccc", 3}};
    struct mmsghdr out[3];
    memset(out, 0, sizeof(out));
    for (int i = 0; i < 3; i++) {
        out[i].msg_hdr.msg_name = &sin;
        out[i].msg_hdr.msg_namelen = sizeof(sin);
        out[i].msg_hdr.msg_iov = &iov[i];
        out[i].msg_hdr.msg_iovlen = 1;
    }
    CHECK_EQ(sendmmsg(u, out, 3, 0), 3);
    CHECK_EQ(seen.sendmmsgs, 1);
    CHECK_EQ(seen.vlen, 3);
    char bufs[4][8];
    struct iovec in_iov[4];
    struct mmsghdr in[4];
    memset(in, 0, sizeof(in));
    for (int i = 0; i < 4; i++) {
        in_iov[i] = (struct iovec){bufs[i], sizeof(bufs[i])};
        in[i].msg_hdr.msg_iov = &in_iov[i];
        in[i].msg_hdr.msg_iovlen = 1;
    }
    struct timespec timeout = {.tv_sec = 0, .tv_nsec = 1000000};
    /* The zero-length datagram in the middle does not end the batch. */
    CHECK_EQ(recvmmsg(r, in, 4, MSG_DONTWAIT, &timeout), 3);
    CHECK_EQ(seen.recvmmsgs, 1);
    CHECK(seen.timeout == &timeout);
    CHECK_EQ(in[0].msg_len, 1);
    CHECK_EQ(in[1].msg_len, 0);
    CHECK_EQ(in[2].msg_len, 3);

    /* A connected socket's send names no one. */
    CHECK_EQ(connect(u, (void *)&sin, sizeof(sin)), 0);
    CHECK_EQ(send(u, "four", 4, 0), 4);
    CHECK(!seen.named);
    CHECK_EQ(recv(r, buf, sizeof(buf), 0), 4);
    close(u);
    close(r);
}

/* The real table: which sockets it takes, and what the statistics say. */
static void test_real_table(void)
{
    vs_transports_register_dgram(&vs_dgram_ops);
    unsigned transports = vs_config.transports;
    vs_config.transports =
        VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL) | VS_TRANSPORT_BIT(VS_TRANSPORT_SHM);

    vs_config.udp = false;
    int off = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(ops_of(off) == NULL);
    CHECK(strcmp(reason_of(off), VS_REASON_UDP_DISABLED) == 0);
    vs_config.udp = true;

    struct sockaddr_in sin;
    int r = udp_bound(&sin);
    CHECK(ops_of(r) == &vs_dgram_ops);
    CHECK(strcmp(reason_of(r), VS_REASON_UDP) == 0);
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK_EQ(sendto(u, "", 0, 0, (void *)&sin, sizeof(sin)), 0);
    CHECK_EQ(sendto(u, "abc", 3, 0, (void *)&sin, sizeof(sin)), 3);
    char buf[8];
    CHECK_EQ(recv(r, buf, sizeof(buf), 0), 0);
    CHECK_EQ(recv(r, buf, sizeof(buf), 0), 3);
    CHECK_EQ(read(r, buf, 0), 0); /* no datagram: not counted */
    struct vs_sock *s = vs_fd_get(r), *t = vs_fd_get(u);
    CHECK(s && t);
    if (s && t) {
        /* The zero-length datagram counts each way. */
        CHECK_EQ(atomic_load(&s->stat->rx_msgs), 2);
        CHECK_EQ(atomic_load(&s->stat->rx_bytes), 3);
        CHECK_EQ(atomic_load(&t->stat->tx_msgs), 2);
        CHECK_EQ(atomic_load(&t->stat->tx_bytes), 3);
    }
    if (s)
        vs_sock_put(s);
    if (t)
        vs_sock_put(t);

    /* Nothing but the kernel allowed: the layer leaves UDP alone. */
    vs_config.transports = VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL);
    int k = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(ops_of(k) == NULL);
    vs_config.transports = transports;
    close(k);
    close(u);
    close(r);
    close(off);
}

int main(void)
{
    char dir[] = "/tmp/vsocket-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("VSOCKET_STATS_DIR", dir, 1);
    vs_config_load(&vs_config);
    fake = vs_dgram_ops;
    fake.on_socket = rec_socket;
    fake.on_bind = rec_bind;
    fake.on_connect = rec_connect;
    fake.sockopt = rec_sockopt;
    fake.sendmsg = rec_sendmsg;
    fake.recvmsg = rec_recvmsg;
    fake.recvmmsg = rec_recvmmsg;
    fake.sendmmsg = rec_sendmmsg;
    vs_transports_register_dgram(&fake);
    test_offers();
    test_bind_connect_options();
    test_data_path();
    test_real_table();
    char path[256];
    vs_stats_path(dir, getpid(), vs_stats_pid_ns(0), path, sizeof(path));
    unlink(path);
    rmdir(dir);
    return check_finish("test_dgram_hooks");
}
