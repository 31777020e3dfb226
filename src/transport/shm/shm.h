/* shm.h - the same-host transport's operations (internal to transport/shm:
 * the layers above reach them through vs_shm_ops, transport/transport.h).
 *
 * A TCP connection whose peer is on this host starts on the kernel like any
 * other. At connect and accept vsocket opens a side channel to the process
 * at the other end; once both prove they hold the two ends of this very
 * connection (proto.h), each direction moves to a shared-memory ring at a
 * byte offset its sender announces, so nothing is lost or reordered. The
 * kernel socket stays the application's fd for the connection's life:
 * options, names and the peer's liveness still come from it.
 *
 * Every function below takes a socket whose s->conn is a vs_shm_conn and
 * follows the system call it serves: -1 and errno on error. */
#ifndef VSOCKET_SHM_H
#define VSOCKET_SHM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/sock.h"

/* After connect() returned 0 or EINPROGRESS, and after accept(). */
void vs_shm_on_connect(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len);
void vs_shm_on_accept(struct vs_sock *s, int fd);

/* The last reference of this process went (vs_sock_release). */
void vs_shm_release(struct vs_sock *s);

ssize_t vs_shm_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags);
ssize_t vs_shm_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags);
ssize_t vs_shm_sendfile(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count);
int vs_shm_shutdown(struct vs_sock *s, int fd, int how);
/* FIONREAD/SIOCINQ and SIOCOUTQ; false when REQ is not ours to answer. */
bool vs_shm_ioctl(struct vs_sock *s, int fd, unsigned long req, int *value);

/* Readiness (transport.h: struct vs_transport_ops). */
/* Whether the kernel's readiness of the TCP fd is not the socket's. */
bool vs_shm_translated(struct vs_sock *s);
/* The events to ask the kernel for on the TCP fd, given the user's. */
unsigned vs_shm_tcp_interest(struct vs_sock *s, unsigned user);
/* The extra fd to watch (side channel or rendezvous), or -1. */
int vs_shm_watch_fd(struct vs_sock *s);
/* Readiness now. TCP_REVENTS: what the kernel said of the TCP fd, or
 * VS_TCP_UNKNOWN (then asked if needed). WATCH_FIRED: the extra fd was
 * reported (the side channel is read). */
unsigned vs_shm_poll(struct vs_sock *s, int fd, unsigned interest, int tcp_revents,
                     bool watch_fired);
/* Whether the rings carry the connection (busy-polling them can help). */
bool vs_shm_spins(struct vs_sock *s);
/* Readiness from the rings alone: no system call, 0 when unsure. */
unsigned vs_shm_poll_rings(struct vs_sock *s, unsigned interest);
/* Announce that we are about to sleep in the kernel
 * for INTEREST: the peer then rings the side channel when the ring changes. */
unsigned vs_shm_arm(struct vs_sock *s, unsigned interest);
/* Whether another thread sleeps on this connection too: the side channel
 * then wakes only one of them, and the waits must nap (poll.c, epoll.c). */
bool vs_shm_shared_wait(struct vs_sock *s);
/* epoll.c's cold records: REC hears of the connection's news only through
 * its side channel (armed for good). False when it may not: the handshake
 * is not over, another process holds the connection too (fork), or another
 * record is cold on it. */
bool vs_shm_cold_attach(struct vs_sock *s, void *rec);
void vs_shm_cold_detach(struct vs_sock *s, void *rec);
void *vs_shm_cold_rec(struct vs_sock *s);
/* The receive side is not on the ring, and only TCP or a side-channel
 * message (kernel-visible both) can change that. */
bool vs_shm_rx_by_kernel(struct vs_sock *s);
/* Withdraws what vs_shm_arm() returned. */
void vs_shm_disarm(struct vs_sock *s, unsigned armed);
/* Keeps what vs_shm_arm() returned armed for one more wake-up. */
void vs_shm_rearm(struct vs_sock *s, unsigned armed);
/* A counter that changes whenever vs_shm_tcp_interest() or
 * vs_shm_watch_fd() may have changed. */
unsigned vs_shm_generation(struct vs_sock *s);
/* Positions that advance with each new byte (edge-triggered reporting). */
uint64_t vs_shm_rx_mark(struct vs_sock *s);
uint64_t vs_shm_tx_mark(struct vs_sock *s);

/* fork: every connection of this process gains a holder in the child. */
void vs_shm_fork_prepare(void);
void vs_shm_fork_parent(void);
void vs_shm_fork_child(void);
void vs_shm_fork_failed(void);

/* exec: the new image cannot map our rings. Every connection leaves them:
 * the peer reads what we wrote, resends on TCP what we did not read, and
 * both continue on TCP (proto.h: REVERT). */
void vs_shm_before_exec(void);
/* A connection none of whose descriptors the new image would inherit is
 * no longer this process's while exec runs; held again if it fails. */
void vs_shm_exec_failed(void);

/* The same for every connection of the process (a seccomp filter goes in:
 * base/sandbox.h). */
void vs_shm_leave_all(const char *reason);

/* The same for one connection, FD, whose bytes are about to move out of
 * our sight (stdio on the socket, splice): REASON shows in the statistics
 * at once. */
void vs_shm_leave(struct vs_sock *s, int fd, const char *reason);

#endif
