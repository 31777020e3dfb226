/* addr.h - a connection's addresses, as every transport reads and judges
 * them when it is offered the connection. */
#ifndef VSOCKET_ADDR_H
#define VSOCKET_ADDR_H

#include <stdbool.h>
#include <sys/socket.h>

struct vs_sock;

/* The connection's LOCAL and REMOTE addresses: PEER (connect's, LEN bytes)
 * when given, the socket's own when it knows them (read at connect or
 * accept), else the kernel's. -1 when the kernel cannot say, or the peer
 * is not an internet address. */
int vs_addr_of_conn(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len,
                    struct sockaddr_storage *local, struct sockaddr_storage *remote);

/* 127.0.0.0/8, ::ffff:127.0.0.0/104 or ::1. */
bool vs_addr_loopback(const struct sockaddr_storage *ss);

/* Whether A and B are the same IP address (ports aside); false when A is
 * NULL. */
bool vs_addr_same_ip(const struct sockaddr *a, const struct sockaddr *b);

/* SS as "address:port" (an IPv4 peer of an IPv6 socket as IPv4, so that
 * both ends spell it the same) into OUT; the length snprintf gives. */
size_t vs_addr_format(char *out, size_t len, const struct sockaddr_storage *ss);

#endif
