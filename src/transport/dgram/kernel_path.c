/* kernel_path.c - the datagram layer's data path while every peer of a
 * socket is on the kernel (docs/design/udp.md §1): the program's call goes
 * to its kernel socket as it made it, addresses, flags, vectors and
 * timeouts included, and the kernel's answer (errno too) comes back
 * untouched. The paths to come (shm rings, RDMA UD) will merge here, ahead
 * of these calls. */
#include <sys/sendfile.h>

#include "base/real.h"
#include "transport/dgram/dgram.h"

ssize_t vs_dgram_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags)
{
    (void)s;
    return vs_real.recvmsg(fd, msg, flags);
}

ssize_t vs_dgram_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags)
{
    (void)s;
    return vs_real.sendmsg(fd, msg, flags);
}

/* Whole vectors to the kernel: a loop of recvmsg would lose recvmmsg's own
 * rules (MSG_WAITFORONE, the timeout checked after each datagram, a
 * zero-length datagram that does not end the batch) and cost a system
 * call per datagram. */
int vs_dgram_recvmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags,
                      struct timespec *timeout)
{
    (void)s;
    return vs_real.recvmmsg(fd, vec, vlen, flags, timeout);
}

int vs_dgram_sendmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    (void)s;
    return vs_real.sendmmsg(fd, vec, vlen, flags);
}

/* sendfile to a connected UDP socket sends datagrams of the kernel's
 * choosing: always the kernel's. */
ssize_t vs_dgram_sendfile(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count)
{
    (void)s;
    return vs_real.sendfile(fd, in_fd, offset, count);
}

int vs_dgram_shutdown(struct vs_sock *s, int fd, int how)
{
    (void)s;
    return vs_real.shutdown(fd, how);
}

/* FIONREAD and SIOCOUTQ: the kernel holds every datagram. */
bool vs_dgram_ioctl(struct vs_sock *s, int fd, unsigned long req, int *value)
{
    (void)s;
    (void)fd;
    (void)req;
    (void)value;
    return false;
}
