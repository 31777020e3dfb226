/* io.c - the datagram layer's data path (docs/design/udp.md §1, §3.5, §7).
 *
 * A socket with no pair off the kernel passes the program's call to its
 * kernel socket as it made it: addresses, flags, vectors, timeouts and
 * errors are the kernel's own. Once a pair is up (or being set up), a send
 * to that peer goes in its ring, and a receive merges the rings with the
 * kernel socket: rings first, the kernel at least every VS_UDP_RING_RUN
 * ring datagrams, and the kernel first for a peer whose ring has delivered
 * nothing yet (its datagrams from before the switch wait there). */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>

#include "base/real.h"
#include "base/syscall.h"
#include "config/stats.h"
#include "core/clock.h"
#include "core/reason.h"
#include "core/spin.h"
#include "transport/dgram/dgram.h"
#include "transport/dgram/udp_shm.h"
#include "transport/stream_io.h"

static void lock(struct vs_udp_sock *u)
{
    pthread_mutex_lock(&u->lock);
}

static void unlock(struct vs_udp_sock *u)
{
    pthread_mutex_unlock(&u->lock);
}

/* The set-ups and the peers' sockets, at most every VS_UDP_SERVICE_NS on
 * the data path (a sleep that woke for them looks at once). */
static void maybe_service(struct vs_udp_sock *u, int fd)
{
    vs_udp_check_left(u);
    if (u->news >= 0 && vs_now_ns() >= u->next_service_ns)
        vs_udp_service(u, fd);
}

/* One non-blocking kernel receive: its length, or -errno. The msghdr's
 * in-out fields are put back when it found nothing. */
static ssize_t kernel_recv(int fd, struct msghdr *msg, int flags)
{
    socklen_t namelen = msg->msg_namelen;
    size_t ctllen = msg->msg_controllen;
    ssize_t n = vs_real.recvmsg(fd, msg, flags | MSG_DONTWAIT);
    if (n >= 0)
        return n;
    int err = errno;
    msg->msg_namelen = namelen;
    msg->msg_controllen = ctllen;
    return -err;
}

/* One datagram from wherever it waits, without sleeping: its length,
 * -EAGAIN when none waits, or the kernel's error. */
static ssize_t take_one(struct vs_udp_sock *u, int fd, struct msghdr *msg, int flags)
{
    bool peek = flags & MSG_PEEK;
    /* After a peek, the next call takes the datagram it showed. */
    int was = u->peek;
    u->peek = -1;
    if (was == VS_UDP_PEEK_KERNEL) {
        ssize_t n = kernel_recv(fd, msg, flags);
        if (n != -EAGAIN) {
            u->peek = peek ? VS_UDP_PEEK_KERNEL : -1;
            return n;
        }
    }
    int slot = was >= 0 ? was : vs_udp_ring_ready(u);
    if (slot >= 0 && u->ring_run < VS_UDP_RING_RUN) {
        struct vs_udp_pair *p = vs_udp_pair_at(u, slot);
        if (p && p->fresh && was != slot) {
            ssize_t n = kernel_recv(fd, msg, flags);
            if (n != -EAGAIN) {
                u->peek = peek ? VS_UDP_PEEK_KERNEL : -1;
                return n;
            }
        }
        ssize_t n = vs_udp_ring_take(u, slot, msg, flags);
        if (n != -EAGAIN) {
            u->ring_run += !peek;
            u->peek = peek ? slot : -1;
            return n;
        }
    }
    u->ring_run = 0;
    ssize_t n = kernel_recv(fd, msg, flags);
    if (n != -EAGAIN || slot < 0) {
        u->peek = peek && n >= 0 ? VS_UDP_PEEK_KERNEL : -1;
        return n;
    }
    n = vs_udp_ring_take(u, slot, msg, flags);
    u->peek = peek && n >= 0 ? slot : -1;
    return n;
}

static bool rings_ready(void *arg, const void *unused)
{
    (void)unused;
    struct vs_udp_sock *u = arg;
    if (pthread_mutex_trylock(&u->lock) != 0)
        return false;
    bool r = vs_udp_ring_ready(u) >= 0;
    unlock(u);
    return r;
}

/* Sleeps until the kernel socket is readable, a ring may have a datagram,
 * or the watch set has news (acted on). 0, -EINTR or -ETIMEDOUT. Called
 * and returns with U unlocked. */
static int sleep_rx(struct vs_udp_sock *u, int fd, struct vs_blocking *b)
{
    long asked = vs_blocking_take_busy(b); /* once a call, as the kernel's */
    if (u->up && vs_spin_until(rings_ready, u, NULL, asked))
        return 0;
    /* The timeout is looked up (a system call) only for a sleep: the spin is
     * far shorter than the kernel's own timeouts are exact. */
    vs_blocking_start(b, fd);
    long left = -1;
    if (b->deadline >= 0 && (left = b->deadline - vs_now_ns()) <= 0)
        return -ETIMEDOUT;
    bool nap;
    left = vs_wait_sleep_ns(left, false, &nap);
    struct timespec ts = {left / 1000000000L, left % 1000000000L};
    struct pollfd pf[2] = {{.fd = fd, .events = POLLIN}, {.fd = u->news, .events = POLLIN}};
    lock(u);
    vs_udp_arm(u);
    bool now = vs_udp_ring_ready(u) >= 0;
    unlock(u);
    int n = 0, err = 0;
    bool interrupted = false;
    if (!now) {
        struct timespec *tsp = &ts;
        struct vs_sleep_guard g;
        vs_blocking_sleep_begin(b, &tsp, &g);
        n = (int)vs_syscall(SYS_ppoll, pf, 2, tsp, NULL, _NSIG / 8);
        err = errno;
        interrupted = vs_blocking_sleep_end(b, &g);
    }
    vs_spin_woke();
    lock(u);
    vs_udp_disarm(u);
    if (n > 0 && pf[1].revents)
        vs_udp_service(u, fd);
    unlock(u);
    if (n < 0)
        return err == EINTR ? -EINTR : 0;
    if (interrupted && n == 0)
        return -EINTR;
    if (n == 0 && !now && !nap)
        return -ETIMEDOUT;
    return 0;
}

ssize_t vs_dgram_recvmsg(struct vs_sock *s, int fd, struct msghdr *msg, int flags)
{
    struct vs_udp_sock *u = vs_udp_of(s);
    if (!u || (flags & (MSG_OOB | MSG_ERRQUEUE)))
        return vs_real.recvmsg(fd, msg, flags);
    lock(u);
    vs_udp_use(u, fd);
    maybe_service(u, fd);
    /* Whether the call may sleep is asked of the kernel (a system call)
     * only once it matters: not for a datagram waiting in a ring. */
    int nonblock = -1;
    /* Nothing off the kernel: the kernel's call, unless it would sleep
     * there while a peer calls our rendezvous (a sleep here wakes for it). */
    if (!u->live && (u->listener < 0 || vs_call_nonblocking(&nonblock, flags, fd))) {
        unlock(u);
        return vs_real.recvmsg(fd, msg, flags);
    }
    struct vs_blocking b = VS_BLOCKING_RECV(s);
    ssize_t n;
    for (;;) {
        n = take_one(u, fd, msg, flags);
        if (n != -EAGAIN || vs_call_nonblocking(&nonblock, flags, fd))
            break;
        unlock(u);
        int rc = sleep_rx(u, fd, &b);
        int err = rc < 0 ? vs_wait_failed(rc, &b) : 0;
        lock(u);
        if (err) {
            n = -err;
            break;
        }
        maybe_service(u, fd); /* a long wait: set-ups, and rings gone quiet */
    }
    unlock(u);
    if (n < 0) {
        errno = (int)-n;
        return -1;
    }
    return n;
}

/* Where MSG goes: its address, or the connected peer's; false when the
 * kernel must judge it (no address, another family, a broadcast). */
static bool destination(struct vs_udp_sock *u, const struct msghdr *msg,
                        struct sockaddr_storage *to)
{
    if (!msg->msg_name) {
        *to = u->conn;
        return u->connected;
    }
    const struct sockaddr *sa = msg->msg_name;
    socklen_t len = msg->msg_namelen;
    if ((sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) ||
        (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))) {
        memset(to, 0, sizeof(*to));
        memcpy(to, sa,
               sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
        return true;
    }
    return false;
}

ssize_t vs_dgram_sendmsg(struct vs_sock *s, int fd, const struct msghdr *msg, int flags)
{
    struct vs_udp_sock *u = vs_udp_of(s);
    struct sockaddr_storage to;
    /* Control messages (IP_PKTINFO...) and corking are the kernel's. */
    if (!u || msg->msg_controllen || (flags & (MSG_MORE | MSG_OOB | MSG_CONFIRM)) ||
        !destination(u, msg, &to))
        return vs_real.sendmsg(fd, msg, flags);
    size_t len = vs_iov_total(msg->msg_iov, msg->msg_iovlen);
    lock(u);
    maybe_service(u, fd);
    int slot;
    if (u->up && vs_udp_pair_for(u, &to, false, &slot) && vs_udp_ring_send(u, slot, msg) == 0) {
        unlock(u);
        return (ssize_t)len;
    }
    unlock(u);
    ssize_t n = vs_real.sendmsg(fd, msg, flags);
    if (n >= 0) {
        int err = errno;
        lock(u);
        vs_udp_sent_on_kernel(u, fd, &to);
        unlock(u);
        errno = err;
    }
    return n;
}

/* Whole vectors to the kernel while no pair is off it: a loop of recvmsg
 * would lose recvmmsg's own rules (MSG_WAITFORONE, the timeout checked
 * after each datagram, a zero-length datagram that does not end the batch)
 * and cost a system call per datagram. */
int vs_dgram_recvmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags,
                      struct timespec *timeout)
{
    struct vs_udp_sock *u = vs_udp_of(s);
    if (u) {
        lock(u);
        vs_udp_use(u, fd);
        maybe_service(u, fd);
    }
    bool live = u && u->live;
    if (u)
        unlock(u);
    if (!live || (flags & MSG_ERRQUEUE))
        return vs_real.recvmmsg(fd, vec, vlen, flags, timeout);
    /* The kernel's rules, one datagram at a time: each entry waits as the
     * call would (all but the first never, with MSG_WAITFORONE), and the
     * timeout is looked at after each datagram. */
    long deadline = timeout ? vs_now_ns() + timeout->tv_sec * 1000000000L + timeout->tv_nsec : -1;
    int f = flags & ~MSG_WAITFORONE;
    unsigned i = 0;
    for (; i < vlen; i++) {
        ssize_t n = vs_dgram_recvmsg(s, fd, &vec[i].msg_hdr, f);
        if (n < 0)
            return i > 0 ? (int)i : -1;
        vec[i].msg_len = (unsigned)n;
        if (flags & MSG_WAITFORONE)
            f |= MSG_DONTWAIT;
        if (deadline >= 0 && vs_now_ns() >= deadline) {
            i++;
            break;
        }
    }
    return (int)i;
}

int vs_dgram_sendmmsg(struct vs_sock *s, int fd, struct mmsghdr *vec, unsigned vlen, int flags)
{
    struct vs_udp_sock *u = vs_udp_of(s);
    if (!u || !u->up)
        return vs_real.sendmmsg(fd, vec, vlen, flags);
    unsigned i = 0;
    for (; i < vlen; i++) {
        ssize_t n = vs_dgram_sendmsg(s, fd, &vec[i].msg_hdr, flags);
        if (n < 0)
            return i > 0 ? (int)i : -1;
        vec[i].msg_len = (unsigned)n;
    }
    return (int)i;
}

/* sendfile to a connected UDP socket sends datagrams of the kernel's
 * choosing: always the kernel's. */
ssize_t vs_dgram_sendfile(struct vs_sock *s, int fd, int in_fd, off_t *offset, size_t count)
{
    (void)s;
    return vs_real.sendfile(fd, in_fd, offset, count);
}

int vs_dgram_shutdown(struct vs_sock *s, int fd, int how)
{
    (void)s;
    return vs_real.shutdown(fd, how);
}

/* FIONREAD/SIOCINQ: the size of the next datagram, Linux's UDP answer:
 * a ring's when one waits, else the kernel's. */
bool vs_dgram_ioctl(struct vs_sock *s, int fd, unsigned long req, int *value)
{
    (void)fd;
    struct vs_udp_sock *u = vs_udp_of(s);
    if (!u || req != FIONREAD)
        return false;
    lock(u);
    int slot = vs_udp_ring_ready(u);
    struct vs_udp_pair *p = vs_udp_pair_at(u, slot);
    ssize_t n = p ? vs_dgram_next_len(&p->rx) : -1;
    unlock(u);
    if (n < 0)
        return false;
    *value = (int)n;
    return true;
}
