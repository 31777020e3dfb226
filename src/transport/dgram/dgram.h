/* dgram.h - the datagram layer's operations, shared by its files
 * (docs/design/udp.md §1, §10). The layer holds every UDP socket from
 * socket() on; its peers will each take a path (kernel, shm, RDMA UD).
 * Today every peer is on the kernel: each operation passes the program's
 * call to it unchanged. */
#ifndef VSOCKET_DGRAM_H
#define VSOCKET_DGRAM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/sock.h"

/* kernel_path.c: the data path on the program's kernel socket. */
ssize_t vs_dgram_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags);
ssize_t vs_dgram_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags);
int vs_dgram_recvmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags,
                      struct timespec *timeout);
int vs_dgram_sendmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags);
ssize_t vs_dgram_sendfile(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count);
int vs_dgram_shutdown(struct vs_sock *s, int fd, int how);
bool vs_dgram_ioctl(struct vs_sock *s, int fd, unsigned long req, int *value);

/* readiness.c: what poll, select and epoll ask. */
bool vs_dgram_translated(struct vs_sock *s);
unsigned vs_dgram_tcp_interest(struct vs_sock *s, unsigned user);
int vs_dgram_watch_fd(struct vs_sock *s);
unsigned vs_dgram_poll(struct vs_sock *s, int fd, unsigned interest, int tcp_revents,
                       bool watch_fired);
unsigned vs_dgram_poll_fast(struct vs_sock *s, unsigned interest);
bool vs_dgram_spins(struct vs_sock *s);
void vs_dgram_idle(struct vs_sock *s);
unsigned vs_dgram_arm(struct vs_sock *s, unsigned interest);
void vs_dgram_disarm(struct vs_sock *s, unsigned armed);
void vs_dgram_rearm(struct vs_sock *s, unsigned armed);
bool vs_dgram_shared_wait(struct vs_sock *s);
unsigned vs_dgram_generation(struct vs_sock *s);
uint64_t vs_dgram_rx_mark(struct vs_sock *s);
uint64_t vs_dgram_tx_mark(struct vs_sock *s);
bool vs_dgram_rx_by_kernel(struct vs_sock *s);
bool vs_dgram_cold_attach(struct vs_sock *s, void *rec);
void vs_dgram_cold_detach(struct vs_sock *s, void *rec);
void *vs_dgram_cold_rec(struct vs_sock *s);

#endif
