/* ownfd.h - vsocket's own descriptors, kept in a table that is the program's.
 *
 * The program's view of its descriptor table is authoritative. Every
 * descriptor vsocket keeps beyond one call (side channels, rendezvous
 * sockets, the epoll kick eventfd, the log file) is:
 *  - close-on-exec, and moved at or above a floor (VSOCKET_FD_FLOOR) where
 *    programs do not put descriptors of their own by number;
 *  - registered here with its owner. When the program takes the number
 *    anyway (close, dup2/dup3 onto it, close_range, closefrom), the owner is
 *    told before the program's call runs, while the number is still ours,
 *    and lets go of it without closing it: the program's call does that;
 *  - closed by vsocket only while it is still registered to the same owner,
 *    so a number the program took is never touched again.
 * Transient descriptors (opened and closed within one call) are not
 * registered. Lookups and changes take no lock. */
#ifndef VSOCKET_OWNFD_H
#define VSOCKET_OWNFD_H

#include <stdbool.h>

/* Called when the program takes FD, one of the numbers [FIRST, LAST] it is
 * closing or overwriting: the owner stops using it, and does not close it.
 * Runs in the program's thread, inside its close/dup2/... call, while FD is
 * still ours (vs_ownfd_mine). */
typedef void (*vs_ownfd_lost_fn)(void *owner, int fd, unsigned first, unsigned last);

/* Makes FD one of ours: moved above the floor (the original number is
 * closed) and registered to OWNER. Returns the number to use from now on
 * (FD itself when it could not be moved). LOST may be NULL: the owner
 * notices by other means. */
int vs_ownfd_take(int fd, void *owner, vs_ownfd_lost_fn lost);

/* Closes FD if it is still registered to OWNER; otherwise the number
 * belongs to the program now and is left alone. */
void vs_ownfd_close(int fd, const void *owner);

/* The program is about to close or overwrite every number in [FIRST, LAST]
 * (interpose/fd_api.c): each of ours there is given up, its owner told. */
void vs_ownfd_taken(unsigned first, unsigned last);

/* Whether FD is registered as ours (tests, diagnostics). */
bool vs_ownfd_is_ours(int fd);

/* Whether FD is ours, for OWNER, in this process: the check before every
 * use of a number whose owner state other processes share (after fork, one
 * process may have given the number to its program and another not). */
bool vs_ownfd_mine(int fd, const void *owner);

/* The floor our descriptors are moved to (VSOCKET_FD_FLOOR, or by default
 * half the soft RLIMIT_NOFILE, at most 1024). */
int vs_ownfd_floor(void);

#endif
