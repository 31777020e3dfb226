/* stream_io.h - pieces of the data path every transport's socket calls
 * share: I/O vectors, the socket's blocking mode and timeouts, and the TCP
 * side of a connection that may have moved (transport/stream.h). */
#ifndef VSOCKET_STREAM_IO_H
#define VSOCKET_STREAM_IO_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "base/signals.h"
#include "core/sock.h"
#include "core/transport_ops.h"

size_t vs_iov_total(const struct iovec *iov, size_t cnt);

/* OUT = the part of IN after SKIP bytes, at most LIMIT long; its count. */
int vs_iov_window(const struct iovec *in, int cnt, size_t skip, uint64_t limit, struct iovec *out);

bool vs_fd_nonblocking(int fd);

/* Whether this call may not block: MSG_DONTWAIT, else the descriptor's
 * O_NONBLOCK, asked of the kernel only when the answer matters (*CACHE: -1
 * unknown yet, set by the first ask), not on every call. */
bool vs_call_nonblocking(int *cache, int flags, int fd);

/* A timeout option (SO_RCVTIMEO, SO_SNDTIMEO) as nanoseconds; -1 when none. */
long vs_sock_timeout_ns(int fd, int opt);

/* State of one blocking call: its deadline, known once it first blocks,
 * and the mark of signal handlers run when it started (base/signals.h). */
struct vs_blocking {
    int opt; /* SO_RCVTIMEO or SO_SNDTIMEO; 0: none */
    bool started;
    bool to_the_end; /* no signal ends it (the adapter owns the buffer) */
    unsigned signals;
    long timeout_ns, deadline;
    /* The spin the program asked for (SO_BUSY_POLL), spent by the call's
     * first wait as the kernel's recvmsg does; 0: the adaptive budget. */
    long busy_ns;
};

/* A call's state as it starts; OPT as in struct vs_blocking. */
#define VS_BLOCKING(o) ((struct vs_blocking){.opt = (o), .signals = vs_signals_call_mark()})
/* A blocking receive on S: it spins as long as S's SO_BUSY_POLL asks. */
#define VS_BLOCKING_RECV(s)                                                                        \
    ((struct vs_blocking){                                                                         \
        .opt = SO_RCVTIMEO, .signals = vs_signals_call_mark(), .busy_ns = vs_sock_busy_ns(s)})
/* The spin B's program asked for, for this wait only: a call spins it once. */
static inline long vs_blocking_take_busy(struct vs_blocking *b)
{
    long asked = b->busy_ns;
    b->busy_ns = 0;
    return asked;
}
/* A wait that only its condition ends: no timeout, no signal. */
#define VS_BLOCKING_TO_THE_END ((struct vs_blocking){.to_the_end = true})

/* Around the sleep of B's wait, whose timeout *TS becomes the one to use
 * (base/signals.h: zero once a handler ran since the call started); end
 * says true when one ran (the call is interrupted). */
void vs_blocking_sleep_begin(const struct vs_blocking *b, struct timespec **ts,
                             struct vs_sleep_guard *g);
bool vs_blocking_sleep_end(const struct vs_blocking *b, const struct vs_sleep_guard *g);

/* Reads the call's timeout and sets its deadline, at its first wait. */
void vs_blocking_start(struct vs_blocking *b, int fd);

/* Nanoseconds left before the call's timeout (read at its first wait), -1
 * without one; 0 or less: timed out. */
long vs_blocking_left(struct vs_blocking *b, int fd);

/* How long a wait on a connection sleeps, LEFT ns before the call's timeout
 * (-1: none): at most a slice (VS_WAIT_SLICE_NS; a nap when another thread
 * sleeps on it too, SHARED), since a wake-up another thread of the process
 * consumed shows only at the next look. *NAP: the slice, not the timeout,
 * ends the sleep (a sleep that ends then has not timed out). */
static inline long vs_wait_sleep_ns(long left, bool shared, bool *nap)
{
    long slice = shared ? VS_WAIT_SHARED_NAP_NS : VS_WAIT_SLICE_NS;
    *nap = left < 0 || left > slice;
    return *nap ? slice : left;
}

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

/* Receive side, TCP phase, one read (vs_tcp_read): the bytes read are
 * counted in ST's tcp_rx unless MSG_PEEK, and the end of stream noted. */
ssize_t vs_stream_tcp_recv(struct vs_stream *st, int fd, struct msghdr *msg, socklen_t namelen,
                           size_t skip, uint64_t limit, int flags);

/* What a transport's receive does around a TCP-phase step. */
struct vs_stream_rx_hooks {
    /* TCP had nothing: look for the peer's news (its switch among them). */
    void (*progress)(void *conn, int fd);
    /* N bytes were read into MSG's buffers after AT bytes. May be NULL. */
    void (*got)(void *conn, const struct msghdr *msg, size_t at, size_t n, int flags);
};

/* Receive side, TCP phase, one step: reads what TCP holds before the
 * switch point into MSG's buffers after *TOTAL bytes, and adds it to
 * *TOTAL. 1: look again (bytes were read, or the phase may have changed);
 * 0: the end of the stream; -EAGAIN: nothing for now, wait; -errno: the
 * call fails with it (ECONNRESET: the peer broke the stream's protocol). */
int vs_stream_tcp_rx_step(struct vs_stream *st, int fd, struct msghdr *msg, socklen_t namelen,
                          size_t *total, int flags, const struct vs_stream_rx_hooks *hooks,
                          void *conn);

/* Send side, TCP phase: the kernel's sendmsg, its bytes counted in ST's
 * tcp_tx. Bytes sent or -errno. */
ssize_t vs_stream_tcp_send(struct vs_stream *st, int fd, const struct msghdr *msg, int flags);

/* What a data call returns once it moved TOTAL bytes or met ERR: the bytes
 * when there are any, else -1 with errno ERR, else 0 (end of stream). */
static inline ssize_t vs_stream_result(size_t total, int err)
{
    if (total > 0)
        return (ssize_t)total;
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

/* N (bytes, or -errno) as a system call returns it. */
static inline ssize_t vs_errno_result(ssize_t n)
{
    if (n < 0) {
        errno = (int)-n;
        return -1;
    }
    return n;
}

#endif
