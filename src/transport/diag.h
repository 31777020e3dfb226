/* diag.h - which socket holds an address, from NETLINK_SOCK_DIAG: how a
 * process on this host proves to another that it holds a given TCP or UDP
 * socket (local_proof.h). The queries need no privilege. */
#ifndef VSOCKET_DIAG_H
#define VSOCKET_DIAG_H

#include <stdint.h>
#include <sys/socket.h>

/* The inode of the TCP socket with this exact 4-tuple (LOCAL is its own
 * end), 0 if none, and (UID not NULL) the user that created it. */
uint64_t vs_diag_tcp(const struct sockaddr_storage *local, const struct sockaddr_storage *peer,
                     unsigned *uid);

/* The inode of the UDP socket that would receive a datagram sent from FROM
 * to TO (a wildcard bind, a connected socket: the kernel's own lookup), 0
 * if none, and (UID not NULL) its creator. */
uint64_t vs_diag_udp(const struct sockaddr_storage *from, const struct sockaddr_storage *to,
                     unsigned *uid);

#endif
