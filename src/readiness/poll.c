/* poll.c - poll, ppoll, select and pselect over kernel and shm sockets.
 *
 * A set without a socket on the rings goes straight to the kernel. Otherwise
 * each such socket is watched in the kernel through its TCP fd (peer death,
 * data before the switch) and its side channel (the peer rings it when the
 * ring changes while we sleep), and its readiness is computed from the
 * rings: first without sleeping (and busy-polling VSOCKET_POLL_US), then
 * armed, in one real ppoll with everything else in the set. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/spin.h"
#include "core/fdtable.h"
#include "base/real.h"
#include "base/sandbox.h"
#include "base/signals.h"
#include "readiness/wait_common.h"
#include "base/syscall.h"

#define STACK_FDS 64

struct poll_state {
    struct pollfd *k;      /* what the kernel polls: the user's fds, then watch fds */
    struct vs_sock **sock; /* per user fd: the socket if translated */
    int *watch;            /* per user fd: index of its watch fd in k, or -1 */
    bool *shared;          /* per user fd: its watch serves other sockets too */
    unsigned *armed;
    nfds_t n, nk;
};

/* The index in K of a shared watch fd W already there, or -1. The sockets
 * of one thread's set-ups share one: a poll over many of them has it once. */
static int shared_index(const struct poll_state *st, nfds_t upto, int w)
{
    for (nfds_t j = 0; j < upto; j++)
        if (st->shared[j] && st->watch[j] >= 0 && st->k[st->watch[j]].fd == w)
            return st->watch[j];
    return -1;
}

static void build(struct poll_state *st, const struct pollfd *fds)
{
    st->nk = st->n;
    for (nfds_t i = 0; i < st->n; i++) {
        st->k[i] = fds[i];
        st->k[i].revents = 0;
        st->watch[i] = -1;
        st->shared[i] = false;
        struct vs_sock *s = st->sock[i];
        if (!s)
            continue;
        st->k[i].events = (short)s->ops->tcp_interest(s, (unsigned)(unsigned short)fds[i].events);
        int w = s->ops->watch_fd(s);
        if (w < 0)
            continue;
        st->shared[i] = s->ops->watch_shared && s->ops->watch_shared(s);
        int at = st->shared[i] ? shared_index(st, i, w) : -1;
        if (at >= 0) {
            st->watch[i] = at;
        } else {
            st->watch[i] = (int)st->nk;
            st->k[st->nk++] = (struct pollfd){.fd = w, .events = POLLIN};
        }
    }
}

/* Whether any translated fd is on a transport's memory: otherwise spinning
 * can only burn the CPU the peer needs. */
static bool spins(struct poll_state *st)
{
    for (nfds_t i = 0; i < st->n; i++)
        if (st->sock[i] && st->sock[i]->ops->spins(st->sock[i]))
            return true;
    return false;
}

/* Readiness from the rings alone; 0 system calls. */
static int rings_ready(struct poll_state *st, const struct pollfd *fds)
{
    int ready = 0;
    for (nfds_t i = 0; i < st->n; i++)
        if (st->sock[i] && st->sock[i]->ops->poll_fast(st->sock[i], (unsigned short)fds[i].events))
            ready++;
    return ready;
}

static bool rings_ready_cb(void *arg, const void *fds)
{
    return rings_ready(arg, fds) > 0;
}

static int translate(struct poll_state *st, struct pollfd *fds)
{
    int count = 0;
    for (nfds_t i = 0; i < st->n; i++) {
        unsigned r = (unsigned short)st->k[i].revents;
        struct vs_sock *s = st->sock[i];
        if (s && fds[i].fd >= 0) {
            struct pollfd *w = st->watch[i] >= 0 ? &st->k[st->watch[i]] : NULL;
            bool fired = w && w->revents;
            if (fired && st->shared[i]) {
                /* Read once for all its sockets: each then sees its news. */
                s->ops->shared_news(w->fd);
                w->revents = 0;
                fired = false;
            }
            r = s->ops->poll(s, fds[i].fd, (unsigned short)fds[i].events, (int)r, fired);
        }
        fds[i].revents = (short)r;
        count += r != 0;
    }
    return count;
}

static void idle_all(struct poll_state *st)
{
    for (nfds_t i = 0; i < st->n; i++)
        if (st->sock[i] && st->sock[i]->ops->idle)
            st->sock[i]->ops->idle(st->sock[i]);
}

static int poll_translated(struct poll_state *st, struct pollfd *fds, long timeout_ns,
                           const sigset_t *sigmask, unsigned signals)
{
    long deadline = timeout_ns < 0 ? -1 : vs_now_ns() + timeout_ns;
    long asked = vs_busy_poll_ns(); /* net.core.busy_poll: once a call */
    for (;;) {
        build(st, fds);
        long left = deadline < 0 ? -1 : deadline - vs_now_ns();
        if (left < 0 && deadline >= 0)
            left = 0;
        if (left != 0 && rings_ready(st, fds))
            left = 0;
        if (left != 0 && spins(st)) {
            if (vs_spin_until(rings_ready_cb, st, fds, asked))
                left = 0;
            asked = 0;
        }
        bool armed = false, nap = false;
        if (left != 0) {
            armed = true;
            for (nfds_t i = 0; i < st->n; i++) {
                st->armed[i] =
                    st->sock[i] ? st->sock[i]->ops->arm(st->sock[i], (unsigned short)fds[i].events)
                                : 0;
                nap |= st->armed[i] && st->sock[i]->ops->shared_wait(st->sock[i]);
            }
            if (rings_ready(st, fds))
                left = 0;
            long slice = nap ? VS_WAIT_SHARED_NAP_NS : VS_WAIT_SLICE_NS;
            nap = left < 0 || left > slice;
            if (nap)
                left = slice;
        }
        struct timespec ts, *tsp = vs_timespec(left, &ts);
        /* A handler that ran since the call started ends it as the
         * kernel's would (base/signals.h), unless something is ready. */
        struct vs_sleep_guard g;
        vs_signals_sleep_begin(signals, &tsp, &g);
        int n = (int)vs_syscall(SYS_ppoll, st->k, st->nk, tsp, sigmask, _NSIG / 8);
        int err = errno;
        bool interrupted = vs_signals_sleep_end(signals, &g);
        vs_spin_woke();
        if (armed)
            for (nfds_t i = 0; i < st->n; i++)
                if (st->armed[i])
                    st->sock[i]->ops->disarm(st->sock[i], st->armed[i]);
        int count = n < 0 ? 0 : translate(st, fds);
        if (count == 0 && (n < 0 || interrupted)) {
            errno = n < 0 ? err : EINTR;
            return -1;
        }
        if (n == 0 && nap)
            idle_all(st); /* a quiet nap: memory may go back */
        if (count > 0 || (left == 0 && !nap) || (deadline >= 0 && vs_now_ns() >= deadline))
            return count;
        /* Only side-channel news (now read) or a stale ring wake-up: wait on. */
    }
}

int vs_poll(struct pollfd *fds, nfds_t nfds, long timeout_ns, const sigset_t *sigmask)
{
    int before = errno; /* left alone by a poll that succeeds, as the kernel does */
    unsigned signals = vs_signals_mark();
    struct vs_sock *stack_sock[STACK_FDS];
    struct vs_sock **sock = nfds <= STACK_FDS ? stack_sock : calloc(nfds, sizeof(*sock));
    if (!sock) {
        errno = ENOMEM;
        return -1;
    }
    nfds_t translated = 0;
    for (nfds_t i = 0; i < nfds; i++) {
        struct vs_sock *s = fds[i].fd >= 0 ? vs_fd_get(fds[i].fd) : NULL;
        if (!s && fds[i].fd >= 0)
            vs_epoll_watched(fds[i].fd);
        if (s && !vs_sock_translated(s)) {
            vs_sock_put(s);
            s = NULL;
        }
        sock[i] = s;
        translated += s != NULL;
    }
    int r;
    if (!translated) {
        struct timespec ts;
        r = (int)vs_syscall(SYS_ppoll, fds, nfds, vs_timespec(timeout_ns, &ts), sigmask, _NSIG / 8);
    } else {
        struct poll_state st = {.sock = sock, .n = nfds};
        st.k = malloc((nfds + translated) * sizeof(*st.k));
        st.watch = malloc(nfds * sizeof(*st.watch));
        st.shared = malloc(nfds * sizeof(*st.shared));
        st.armed = calloc(nfds, sizeof(*st.armed));
        if (!st.k || !st.watch || !st.shared || !st.armed) {
            errno = ENOMEM;
            r = -1;
        } else {
            r = poll_translated(&st, fds, timeout_ns, sigmask, signals);
        }
        int err = errno;
        free(st.k);
        free(st.watch);
        free(st.shared);
        free(st.armed);
        errno = err;
    }
    int err = r >= 0 ? before : errno;
    for (nfds_t i = 0; i < nfds; i++)
        if (sock[i])
            vs_sock_put(sock[i]);
    if (sock != stack_sock)
        free(sock);
    errno = err;
    return r;
}

VS_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.poll(fds, nfds, timeout));
    return vs_poll(fds, nfds, timeout < 0 ? -1 : timeout * 1000000L, NULL);
}

VS_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
                    const sigset_t *sigmask)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.ppoll(fds, nfds, timeout, sigmask));
    return vs_poll(fds, nfds, timeout ? timeout->tv_sec * 1000000000L + timeout->tv_nsec : -1,
                   sigmask);
}

/* select and pselect: the same wait, on a pollfd array made from the sets,
 * when one of the fds is on the rings. */
static bool any_translated(int nfds, fd_set *rd, fd_set *wr, fd_set *ex)
{
    for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++) {
        if (!(rd && FD_ISSET(fd, rd)) && !(wr && FD_ISSET(fd, wr)) && !(ex && FD_ISSET(fd, ex)))
            continue;
        struct vs_sock *s = vs_fd_get(fd);
        bool t = s && vs_sock_translated(s);
        if (s)
            vs_sock_put(s);
        if (t)
            return true;
    }
    return false;
}

static int select_translated(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, long timeout_ns,
                             const sigset_t *sigmask)
{
    struct pollfd *p = malloc((size_t)nfds * sizeof(*p));
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    nfds_t n = 0;
    for (int fd = 0; fd < nfds; fd++) {
        short ev =
            (short)((rd && FD_ISSET(fd, rd) ? POLLIN : 0) | (wr && FD_ISSET(fd, wr) ? POLLOUT : 0) |
                    (ex && FD_ISSET(fd, ex) ? POLLPRI : 0));
        if (ev)
            p[n++] = (struct pollfd){.fd = fd, .events = ev};
    }
    int r = vs_poll(p, n, timeout_ns, sigmask);
    if (r >= 0) {
        if (rd)
            FD_ZERO(rd);
        if (wr)
            FD_ZERO(wr);
        if (ex)
            FD_ZERO(ex);
        r = 0;
        for (nfds_t i = 0; i < n; i++) {
            short re = p[i].revents;
            if (re & POLLNVAL) {
                free(p);
                errno = EBADF;
                return -1;
            }
            if (rd && (p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR)))
                FD_SET(p[i].fd, rd), r++;
            if (wr && (p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR)))
                FD_SET(p[i].fd, wr), r++;
            if (ex && (p[i].events & POLLPRI) && (re & POLLPRI))
                FD_SET(p[i].fd, ex), r++;
        }
    }
    int err = errno;
    free(p);
    errno = err;
    return r;
}

VS_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *timeout)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.select(nfds, rd, wr, ex, timeout));
    if (nfds <= 0 || nfds > FD_SETSIZE || !any_translated(nfds, rd, wr, ex))
        return vs_real.select(nfds, rd, wr, ex, timeout);
    long ns = timeout ? timeout->tv_sec * 1000000000L + timeout->tv_usec * 1000L : -1;
    return select_translated(nfds, rd, wr, ex, ns, NULL);
}

VS_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *timeout,
                      const sigset_t *sigmask)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.pselect(nfds, rd, wr, ex, timeout, sigmask));
    if (nfds <= 0 || nfds > FD_SETSIZE || !any_translated(nfds, rd, wr, ex))
        return vs_real.pselect(nfds, rd, wr, ex, timeout, sigmask);
    long ns = timeout ? timeout->tv_sec * 1000000000L + timeout->tv_nsec : -1;
    return select_translated(nfds, rd, wr, ex, ns, sigmask);
}
