/* epoll.h - what the epoll module needs to hear from the rest of the library. */
#ifndef VSOCKET_EPOLL_H
#define VSOCKET_EPOLL_H

/* FD is about to be closed (close, fclose, or dup2/dup3 onto it): the
 * kernel registrations that a set deleted by the user still keeps for it
 * (dormant records, see epoll.c) go now, while its number is still valid;
 * if FD is an epoll set, its records go. */
void vs_epoll_fd_closing(int fd);

/* The same for every fd in [FIRST, LAST] (close_range, closefrom). */
void vs_epoll_range_closing(unsigned first, unsigned last);

/* The next three reach the transports as their wake hooks
 * (transport/wake.h, wired at load by interpose/init.c): a transport never
 * includes this file.
 *
 * A cold record's news was read by somebody else (see epoll.c): its set
 * must look at it. Any thread, any lock held; REC may be stale. */
void vs_epoll_kick(void *rec);

/* A connection's phase changed (its generation, transport/transport.h) in
 * this thread: a wait asleep in another thread on a set holding it sleeps
 * on the kernel registrations of the old phase, and must look again. Any
 * thread, any lock held. */
void vs_epoll_phase_changed(void);

/* A shared watch fd (epoll.c) was read by a thread that may have taken
 * another thread's wake-up: every set a thread sleeps on with a shared
 * watch looks again. Any thread, any lock held. */
void vs_epoll_wake_shared(int fd);

/* fork: the records' lock is held across it; the child forgets its
 * dormant records (the kernel sets are shared with the parent). */
/* A seccomp filter goes in (base/sandbox.h): every record becomes the plain
 * kernel registration its user asked for, while we may still make calls,
 * and every set passes through from then on. */
void vs_epoll_make_plain(void);

void vs_epoll_fork_prepare(void);
void vs_epoll_fork_parent(void);
void vs_epoll_fork_child(void);

#endif
