/* diag.c - which socket holds an address, from NETLINK_SOCK_DIAG (diag.h). */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/real.h"
#include "base/syscall.h"
#include "transport/diag.h"

/* Fills ADDR (4 words, network order) and PORT; FAMILY is the family to ask
 * for: a v4 address is asked for as v4-mapped when FAMILY is AF_INET6. */
static void diag_addr(const struct sockaddr_storage *ss, int family, __be32 addr[4], __be16 *port)
{
    memset(addr, 0, 4 * sizeof(__be32));
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)ss;
        *port = in->sin_port;
        if (family == AF_INET) {
            addr[0] = in->sin_addr.s_addr;
        } else {
            addr[2] = htonl(0xffff);
            addr[3] = in->sin_addr.s_addr;
        }
    } else {
        const struct sockaddr_in6 *in6 = (const void *)ss;
        *port = in6->sin6_port;
        if (family == AF_INET && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            memcpy(&addr[0], &in6->sin6_addr.s6_addr[12], 4);
        else
            memcpy(addr, &in6->sin6_addr, 16);
    }
}

/* SRC and DST as the kernel's lookup takes them: for TCP the socket's own
 * end and its peer; for UDP the sender and the receiving socket (udp_diag
 * looks up the socket a datagram from SRC to DST would reach). */
static uint64_t query(int family, int proto, const struct sockaddr_storage *src,
                      const struct sockaddr_storage *dst, unsigned *uid)
{
    int nl = vs_real.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return 0;
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } msg = {
        .nlh = {.nlmsg_len = sizeof(msg),
                .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST},
        .req = {.sdiag_family = (uint8_t)family,
                .sdiag_protocol = (uint8_t)proto,
                .idiag_states = ~0u},
    };
    diag_addr(src, family, msg.req.id.idiag_src, &msg.req.id.idiag_sport);
    diag_addr(dst, family, msg.req.id.idiag_dst, &msg.req.id.idiag_dport);
    msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    uint64_t ino = 0;
    union {
        struct nlmsghdr h;
        char buf[1024];
    } reply;
    if (vs_real.send(nl, &msg, sizeof(msg), 0) == (ssize_t)sizeof(msg)) {
        ssize_t n = vs_real.recv(nl, &reply, sizeof(reply), 0);
        if (n >= (ssize_t)NLMSG_LENGTH(sizeof(struct inet_diag_msg)) &&
            NLMSG_OK(&reply.h, (size_t)n) && reply.h.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            const struct inet_diag_msg *m = NLMSG_DATA(&reply.h);
            ino = m->idiag_inode;
            *uid = m->idiag_uid;
        }
    }
    vs_syscall(SYS_close, nl);
    return ino;
}

static bool is_v4(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return true;
    const struct sockaddr_in6 *in6 = (const void *)ss;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr);
}

/* The socket may be v4 or a v6 socket speaking v4-mapped: ask both. */
static uint64_t ask(int proto, const struct sockaddr_storage *src,
                    const struct sockaddr_storage *dst, unsigned *uid)
{
    uint64_t ino = 0;
    unsigned ignored;
    uid = uid ? uid : &ignored;
    if (is_v4(src) && is_v4(dst))
        ino = query(AF_INET, proto, src, dst, uid);
    if (!ino)
        ino = query(AF_INET6, proto, src, dst, uid);
    return ino;
}

uint64_t vs_diag_tcp(const struct sockaddr_storage *local, const struct sockaddr_storage *peer,
                     unsigned *uid)
{
    return ask(IPPROTO_TCP, local, peer, uid);
}

uint64_t vs_diag_udp(const struct sockaddr_storage *from, const struct sockaddr_storage *to,
                     unsigned *uid)
{
    return ask(IPPROTO_UDP, from, to, uid);
}
