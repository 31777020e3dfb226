/* unix_msg.h - one message and its descriptors (SCM_RIGHTS) on a unix
 * socket, for the same-host set-ups of shm TCP and shm UDP. */
#ifndef VSOCKET_UNIX_MSG_H
#define VSOCKET_UNIX_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The most descriptors one message carries. */
#define VS_UNIX_MAX_FDS 4

/* Sends LEN bytes of BUF and NFDS descriptors of FDS (at most
 * VS_UNIX_MAX_FDS), without blocking; whether all of it went. */
bool vs_unix_send(int chan, const void *buf, size_t len, const int *fds, int nfds);

/* Receives one message into BUF (LEN bytes), without blocking, and the
 * descriptors it carries into FDS (at most MAXFDS; more are closed; close
 * on exec). The byte count and *NFDS, *MSG_FLAGS (recvmsg's), or -1 and
 * errno. */
ssize_t vs_unix_recv(int chan, void *buf, size_t len, int *fds, int maxfds, int *nfds,
                     int *msg_flags);

#endif
