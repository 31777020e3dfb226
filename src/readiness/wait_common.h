/* wait_common.h - pieces shared by poll.c and epoll.c. */
#ifndef VSOCKET_WAIT_COMMON_H
#define VSOCKET_WAIT_COMMON_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>

/* NS as a timespec in TS; NULL (wait forever) when NS < 0. */
struct timespec *vs_timespec(long ns, struct timespec *ts);

/* poll/ppoll with a timeout in ns (< 0: none). */
int vs_poll(struct pollfd *fds, nfds_t nfds, long timeout_ns, const sigset_t *sigmask);

/* FD is being watched by poll or another epoll set: if it is an epoll set,
 * its shm sockets must wake it by themselves from now on. */
void vs_epoll_watched(int fd);

#endif
