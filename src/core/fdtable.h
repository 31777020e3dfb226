/* fdtable.h - from file descriptor to socket state.
 *
 * A slot holds one of: nothing yet (we have not looked at this fd), FOREIGN
 * (not a socket we track: pass every call through), CLOSING (a close is in
 * progress), or a socket. Lookups take no lock: a slot is one atomic
 * pointer and sockets are reference counted in type-stable memory. */
#ifndef VSOCKET_FDTABLE_H
#define VSOCKET_FDTABLE_H

#include "core/sock.h"

/* The socket behind FD with a reference the caller must put, or NULL when
 * calls on FD pass straight to the kernel. An fd never seen before is looked
 * at once (fstat): an internet socket we did not see created (inherited
 * across exec) is adopted, anything else is marked foreign. */
struct vs_sock *vs_fd_get(int fd);

/* The same for a socket already known only: no system call, no adoption
 * (for paths that run on every close). */
struct vs_sock *vs_fd_peek(int fd);

/* Makes FD name S, consuming the caller's reference; S == NULL marks FD
 * foreign. Whatever FD named before is released. */
void vs_fd_set(int fd, struct vs_sock *s);

/* close(): detach FD before the real close so that no lookup adopts it while
 * it is being closed, and forget it afterwards. */
struct vs_sock *vs_fd_close_begin(int fd);
void vs_fd_close_end(int fd, struct vs_sock *s);

/* close_range()/closefrom(): forget every fd in [FIRST, LAST]. */
void vs_fd_forget_range(unsigned first, unsigned last);

/* A socket named by an fd outside [FIRST, LAST] whose transport state is
 * CONN, with a reference the caller must put (which keeps CONN from being
 * released), or NULL. Looks only outside the range: a closefrom costs a
 * few slots. CONN is compared, never used: it may be gone already. */
struct vs_sock *vs_fd_conn_outside(const void *conn, unsigned first, unsigned last);

/* Calls FN for every fd naming a socket, holding a reference on it; an fd
 * closed or opened meanwhile by another thread may be missed or seen. */
void vs_fd_for_each(void (*fn)(int fd, struct vs_sock *s, void *arg), void *arg);

#endif
