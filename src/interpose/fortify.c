/* fortify.c - glibc's _FORTIFY_SOURCE entry points.
 *
 * A program built with -D_FORTIFY_SOURCE calls __read_chk instead of read,
 * and so on. Each checks its buffer bound exactly as glibc does, then goes
 * through our wrapper of the plain function. */
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/real.h"

extern void __chk_fail(void) __attribute__((noreturn));

VS_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
VS_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
VS_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                                 struct sockaddr *addr, socklen_t *addrlen);
VS_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen);
VS_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
                          const sigset_t *sigmask, size_t fdslen);
VS_EXPORT long int __fdelt_chk(long int d);

ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
    if (len > buflen)
        __chk_fail();
    return read(fd, buf, len);
}

ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
    if (len > buflen)
        __chk_fail();
    return recv(fd, buf, len, flags);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *addrlen)
{
    if (len > buflen)
        __chk_fail();
    return recvfrom(fd, buf, len, flags, addr, addrlen);
}

int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
    if (fdslen / sizeof(*fds) < nfds)
        __chk_fail();
    return poll(fds, nfds, timeout);
}

int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
                const sigset_t *sigmask, size_t fdslen)
{
    if (fdslen / sizeof(*fds) < nfds)
        __chk_fail();
    return ppoll(fds, nfds, timeout, sigmask);
}

/* Used by FD_SET and friends under fortification: the index of D's word in
 * an fd_set, after checking D fits in one. */
long int __fdelt_chk(long int d)
{
    if (d < 0 || d >= FD_SETSIZE)
        __chk_fail();
    return d / __NFDBITS;
}
