/* rdma.h - the rdma transport's operations (internal to transport/rdma:
 * the layers above reach them through vs_rdma_ops, ops.h).
 *
 * A TCP connection to another host starts on the kernel like any other.
 * Once it has shown it will live, vsocket meets the process at the other
 * end over rdma_cm, each side proves it holds the connection (proof.h),
 * and each direction moves to a ring in the receiver's registered memory
 * at a byte offset its sender announces (transport/stream.h). The kernel
 * socket stays the application's fd for the connection's life. */
#ifndef VSOCKET_RDMA_H
#define VSOCKET_RDMA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/sock.h"
#include "transport/rdma/dev.h"

struct vs_rdma_conn;

/* cm.c: an rdma_cm event for C (dev.c calls it under the cm lock). */
void vs_rdma_on_cm_event(struct vs_rdma_conn *c, const struct vs_rdma_event *e);

/* io.c: the data path, as the system calls it serves. */
ssize_t vs_rdma_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags);
ssize_t vs_rdma_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags);
ssize_t vs_rdma_sendfile(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count);
int vs_rdma_shutdown(struct vs_sock *s, int fd, int how);
bool vs_rdma_ioctl(struct vs_sock *s, int fd, unsigned long req, int *value);
/* Readable bytes and end of stream on the ring, without a system call. */
uint64_t vs_rdma_readable(struct vs_rdma_conn *c);
bool vs_rdma_rx_eof(struct vs_rdma_conn *c);
/* Bytes the sender may write now. */
uint64_t vs_rdma_writable(struct vs_rdma_conn *c);
/* leave.c: the connection leaves RDMA (exec, fork, stdio): CUT, each end
 * resends on TCP what the other did not read; settled before it returns. */
void vs_rdma_revert(struct vs_rdma_conn *c, int fd, const char *reason);
/* leave.c: the peer left RDMA: resend on TCP what it had not read, now. */
void vs_rdma_revert_if_asked(struct vs_rdma_conn *c, int fd);
/* The program's last reference went: SHUT, then the connection goes once
 * its writes are placed (bounded), its TCP socket with it. */
void vs_rdma_close(struct vs_rdma_conn *c);

/* rdma.c: statistics follow the connection's phase. */
void vs_rdma_sync(struct vs_sock *s, int fd);

#endif
