/* readiness.c - poll, select and epoll.
 *
 * Every tracked socket is a kernel socket for now, so the kernel knows its
 * readiness and these wrappers pass straight through. They exist so that
 * the readiness of accelerated sockets (whose bytes the kernel never sees)
 * has one place to live. */
#include <errno.h>

#include "interpose/real.h"

VS_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    VS_REAL_READY();
    return vs_real.poll(fds, nfds, timeout);
}

VS_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
                    const sigset_t *sigmask)
{
    VS_REAL_READY();
    return vs_real.ppoll(fds, nfds, timeout, sigmask);
}

VS_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *timeout)
{
    VS_REAL_READY();
    return vs_real.select(nfds, rd, wr, ex, timeout);
}

VS_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *timeout,
                      const sigset_t *sigmask)
{
    VS_REAL_READY();
    return vs_real.pselect(nfds, rd, wr, ex, timeout, sigmask);
}

VS_EXPORT int epoll_create(int size)
{
    VS_REAL_READY();
    return vs_real.epoll_create(size);
}

VS_EXPORT int epoll_create1(int flags)
{
    VS_REAL_READY();
    return vs_real.epoll_create1(flags);
}

VS_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    VS_REAL_READY();
    return vs_real.epoll_ctl(epfd, op, fd, event);
}

VS_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    VS_REAL_READY();
    return vs_real.epoll_wait(epfd, events, maxevents, timeout);
}

VS_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
                          const sigset_t *sigmask)
{
    VS_REAL_READY();
    return vs_real.epoll_pwait(epfd, events, maxevents, timeout, sigmask);
}

VS_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
                           const struct timespec *timeout, const sigset_t *sigmask)
{
    VS_REAL_READY();
    if (!vs_real.epoll_pwait2) {
        errno = ENOSYS;
        return -1;
    }
    return vs_real.epoll_pwait2(epfd, events, maxevents, timeout, sigmask);
}
