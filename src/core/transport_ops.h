/* transport_ops.h - the one interface through which the layers above
 * (interpose, readiness) call a socket's transport, and core releases it.
 * Defined here, below the transports, because the socket (core/sock.h)
 * holds its table; the transports (transport/) fill it.
 *
 * A socket starts on the kernel. The kernel is not a transport object: it
 * is the absence of one (s->ops == NULL), and every call then goes straight
 * to libc. That keeps the common path (a socket nobody accelerates) one
 * pointer test away from the system call, and states the rule every
 * transport follows: whatever it cannot do, the kernel socket still does.
 *
 * When connect() or accept() gives a transport a connection to try
 * (vs_transports_offer_*; for a UDP socket, socket() itself:
 * vs_transports_offer_dgram), the transport sets s->ops to its table and
 * s->conn to its private state; from then on every call on the socket goes
 * through s->ops, even after the connection fell back to TCP (the transport
 * then passes calls on with vs_real.*). A transport never calls an
 * interposed libc wrapper. docs/design/transports.md describes each
 * operation: when it is called, under which lock, what it may block on. */
#ifndef VSOCKET_TRANSPORT_OPS_H
#define VSOCKET_TRANSPORT_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "core/transport_id.h"

struct vs_sock;
struct msghdr;
struct mmsghdr;
struct timespec;

/* Readiness bits are POLLIN/POLLOUT/POLLRDHUP/POLLHUP/POLLERR, which have
 * the same values as their EPOLL counterparts. */
#define VS_TCP_UNKNOWN (-1) /* poll(): the kernel was not asked about the TCP fd */
/* Every sleep on a connection of a transport is at most this long: a thread
 * whose wake-up another thread of its process consumed looks again by then. */
#define VS_WAIT_SLICE_NS 50000000L
/* The same when another thread sleeps on the connection too (shared_wait). */
#define VS_WAIT_SHARED_NAP_NS 2000000L

struct vs_transport_ops {
    enum vs_transport id;

    /* Taking a connection over. After connect() returned 0 or EINPROGRESS,
     * and after accept(): if the transport will try this connection, it sets
     * s->ops and s->conn (and the statistics' reason); otherwise it leaves
     * them NULL and the next transport is offered the connection. */
    void (*on_connect)(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len);
    void (*on_accept)(struct vs_sock *s, int fd);

    /* Datagram sockets (UDP), taken at creation rather than at connect: a
     * UDP socket talks to many peers, each on a path of its own, so one
     * table (the datagram layer) holds the socket from socket() on, and
     * hears of what the program does with it. May be NULL for a stream
     * transport. on_socket: a UDP socket was created or adopted (inherited
     * through exec); the table may set s->ops. Then, on a socket it took:
     * on_connect after every connect() the kernel accepted, AF_UNSPEC (the
     * association dissolved) included; on_bind after a bind() the kernel
     * accepted; sockopt after a setsockopt() the kernel accepted, with the
     * program's arguments. None may fail the program's call. */
    void (*on_socket)(struct vs_sock *s, int fd);
    void (*on_bind)(struct vs_sock *s, int fd, const struct sockaddr *addr, socklen_t len);
    void (*sockopt)(struct vs_sock *s, int fd, int level, int name, const void *value,
                    socklen_t len);

    /* The data path, as the system calls they serve: -1 and errno. */
    ssize_t (*recvmsg)(struct vs_sock *s, int fd, struct msghdr *msg, int flags);
    /* MSG->msg_name is the program's: the source to report (recvmsg), the
     * destination (sendmsg; sendto's address arrives here). A connected
     * stream transport may ignore it, as the kernel does. */
    ssize_t (*sendmsg)(struct vs_sock *s, int fd, const struct msghdr *msg, int flags);
    /* recvmmsg/sendmmsg as the system calls (the timeout is recvmmsg's own
     * rule). May be NULL: each message then goes through recvmsg/sendmsg,
     * the first receive may block and the rest do not (a byte stream). */
    int (*recvmmsg)(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags,
                    struct timespec *timeout);
    int (*sendmmsg)(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags);
    ssize_t (*sendfile)(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count);
    int (*shutdown)(struct vs_sock *s, int fd, int how);
    /* FIONREAD/SIOCINQ and SIOCOUTQ; false when REQ is not the transport's. */
    bool (*ioctl)(struct vs_sock *s, int fd, unsigned long req, int *value);

    /* Readiness (readiness/poll.c, readiness/epoll.c). */
    /* Whether the kernel's readiness of the TCP fd is not the socket's. */
    bool (*translated)(struct vs_sock *s);
    /* The events to ask the kernel for on the TCP fd, given the user's. */
    unsigned (*tcp_interest)(struct vs_sock *s, unsigned user);
    /* An extra fd to wait on (news from the peer), or -1. */
    int (*watch_fd)(struct vs_sock *s);
    /* Whether the watch fd serves other connections too (rdma: the
     * completion channel of a thread's connections): epoll registers it
     * once per set and calls shared_news when it fires. May be NULL. */
    bool (*watch_shared)(struct vs_sock *s);
    /* The shared watch FD fired: read it and sort its news to the
     * connections (whose poll_fast then shows it). */
    void (*shared_news)(int fd);
    /* Readiness now. TCP_REVENTS: what the kernel said of the TCP fd, or
     * VS_TCP_UNKNOWN. WATCH_FIRED: the watch fd was reported. */
    unsigned (*poll)(struct vs_sock *s, int fd, unsigned interest, int tcp_revents,
                     bool watch_fired);
    /* Readiness from memory alone: no system call, 0 when unsure. */
    unsigned (*poll_fast)(struct vs_sock *s, unsigned interest);
    /* Whether busy-polling memory can show news (VSOCKET_POLL_US): not while
     * the connection still runs on TCP, whose news only the kernel has. */
    bool (*spins)(struct vs_sock *s);
    /* About to sleep in the kernel for INTEREST: the peer then rings the
     * watch fd on news. Returns what was armed; disarm withdraws it, rearm
     * keeps it for one more wake-up. */
    unsigned (*arm)(struct vs_sock *s, unsigned interest);
    void (*disarm)(struct vs_sock *s, unsigned armed);
    void (*rearm)(struct vs_sock *s, unsigned armed);
    /* Another thread sleeps on this connection too: waits must nap. */
    bool (*shared_wait)(struct vs_sock *s);
    /* Changes whenever tcp_interest() or watch_fd() may have changed. */
    unsigned (*generation)(struct vs_sock *s);
    /* Positions that advance with each new byte (edge-triggered epoll). */
    uint64_t (*rx_mark)(struct vs_sock *s);
    uint64_t (*tx_mark)(struct vs_sock *s);
    /* The receive side can only change by TCP or the watch fd (both kernel-visible). */
    bool (*rx_by_kernel)(struct vs_sock *s);
    /* epoll's cold records: REC hears of the connection only through its
     * watch fd, armed for good; false when it may not. */
    bool (*cold_attach)(struct vs_sock *s, void *rec);
    void (*cold_detach)(struct vs_sock *s, void *rec);
    void *(*cold_rec)(struct vs_sock *s);
    /* The program waits and S was quiet for a while (a nap of poll, epoll's
     * look at its quiet records): a chance to give memory back. May make
     * system calls; may be NULL. */
    void (*idle)(struct vs_sock *s);

    /* Leaving for the kernel: the connection's bytes are about to move out
     * of our sight (stdio on the socket, splice). REASON shows at once. */
    void (*leave)(struct vs_sock *s, int fd, const char *reason);

    /* The last reference of this process to the socket went. */
    void (*release)(struct vs_sock *s);

    /* Process events, for every connection of the transport in this
     * process. fork: in the order of vs_fork_prepare (interpose/init.c). exec:
     * connections the new image inherits leave for the kernel.
     * leave_all: every connection leaves (a seccomp filter goes in). */
    void (*fork_prepare)(void);
    void (*fork_parent)(void);
    void (*fork_child)(void);
    void (*fork_failed)(void);
    void (*before_exec)(void);
    /* The exec failed: the process still holds what it inherited. May be
     * NULL. */
    void (*exec_failed)(void);
    void (*leave_all)(const char *reason);
    /* The program is about to change its credentials (set*id, setgroups,
     * capset), then did (CHANGED) or not. May be NULL. */
    void (*before_creds)(void);
    void (*after_creds)(bool changed);
    /* The program's socket or accept met EMFILE/ENFILE: descriptors held
     * for set-ups under way go back, and none starts for a while, so that
     * the program gets the descriptors the kernel would give it. Returns
     * how many went back. May be NULL. */
    unsigned (*fds_short)(void);
};

#endif
