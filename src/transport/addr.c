/* addr.c - a connection's addresses (addr.h). */
#include "transport/addr.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <netinet/in.h>
#include <string.h>

#include "base/real.h"
#include "core/sock.h"

int vs_addr_of_conn(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len,
                    struct sockaddr_storage *local, struct sockaddr_storage *remote)
{
    socklen_t llen = sizeof(*local), plen = sizeof(*remote);
    if (peer && len <= sizeof(*remote))
        memcpy(remote, peer, len);
    if (s->have_addrs) {
        *local = s->local;
        if (!peer)
            *remote = s->peer;
    } else if (vs_real.getsockname(fd, (void *)local, &llen) < 0 ||
               (!peer && vs_real.getpeername(fd, (void *)remote, &plen) < 0)) {
        return -1;
    }
    return remote->ss_family == AF_INET || remote->ss_family == AF_INET6 ? 0 : -1;
}

bool vs_addr_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    const struct sockaddr_in6 *in6 = (const void *)ss;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
        return in6->sin6_addr.s6_addr[12] == 127;
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
}

bool vs_addr_same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
    if (!a || a->sa_family != b->sa_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

size_t vs_addr_format(char *out, size_t len, const struct sockaddr_storage *ss)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else {
        const struct sockaddr_in6 *in6 = (const void *)ss;
        /* A v6 socket speaking to a v4 peer names it v4-mapped: the other
         * end may be a plain v4 socket, so both must spell it the same. */
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], host, sizeof(host));
        else
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    return (size_t)snprintf(out, len, "%s:%u", host, port);
}
