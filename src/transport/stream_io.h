/* stream_io.h - pieces of the data path every transport's socket calls
 * share: I/O vectors, the socket's blocking mode and timeouts, and the TCP
 * side of a connection that may have moved (transport/stream.h). */
#ifndef VSOCKET_STREAM_IO_H
#define VSOCKET_STREAM_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

size_t vs_iov_total(const struct iovec *iov, size_t cnt);

/* OUT = the part of IN after SKIP bytes, at most LIMIT long; its count. */
int vs_iov_window(const struct iovec *in, int cnt, size_t skip, uint64_t limit, struct iovec *out);

bool vs_fd_nonblocking(int fd);

/* A timeout option (SO_RCVTIMEO, SO_SNDTIMEO) as nanoseconds; -1 when none. */
long vs_sock_timeout_ns(int fd, int opt);

/* State of one blocking call: its deadline, known once it first blocks. */
struct vs_blocking {
    int opt; /* SO_RCVTIMEO or SO_SNDTIMEO */
    bool started;
    long timeout_ns, deadline;
};

/* Nanoseconds left before the call's timeout (read at its first wait), -1
 * without one; 0 or less: timed out. */
long vs_blocking_left(struct vs_blocking *b, int fd);

/* After a wait failed (RC -ETIMEDOUT or -EINTR): 0 when the call goes on
 * (a signal whose handler asked for restarts, as the kernel would), else
 * the errno to return. */
int vs_wait_failed(int rc, const struct vs_blocking *b);

/* EPIPE on a stream: SIGPIPE unless MSG_NOSIGNAL. */
void vs_raise_sigpipe(int flags);

/* What the kernel says of the TCP socket once the data moved: 1 bytes
 * waiting, 0 end of stream (the peer is gone), -errno (reset), -EAGAIN
 * nothing. */
int vs_tcp_peek(int fd);

/* Receive side, TCP phase: reads at most LIMIT bytes of MSG's buffers after
 * SKIP, without blocking. */
ssize_t vs_tcp_read(int fd, struct msghdr *msg, socklen_t namelen, size_t skip, uint64_t limit,
                    int flags);

struct vs_stream;

/* Receive side, TCP phase, one step (vs_tcp_read): the bytes read are
 * counted in ST's tcp_rx unless MSG_PEEK, and the end of stream noted. */
ssize_t vs_stream_tcp_recv(struct vs_stream *st, int fd, struct msghdr *msg, socklen_t namelen,
                           size_t skip, uint64_t limit, int flags);

#endif
