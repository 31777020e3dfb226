/* readiness.c - a datagram socket's readiness. Without shm it is the
 * kernel socket's own: translated() says so, and poll, select and epoll ask
 * nothing else. A socket that may take shm is watched through its kernel
 * socket and, from its first use, its watch set (udp_shm.h: the eventfd its
 * producers ring, its rendezvous and its pairs' sockets), and POLLIN also
 * comes from a ring with a datagram. */
#include <poll.h>

#include "base/syscall.h"
#include "core/clock.h"
#include "transport/dgram/dgram.h"
#include "transport/dgram/udp_shm.h"

static struct vs_udp_sock *watched(struct vs_sock *s)
{
    struct vs_udp_sock *u = vs_udp_of(s);
    return u && u->news >= 0 ? u : NULL;
}

/* From socket() on, not from the first use: a server puts its socket in
 * an epoll set before it receives anything, and a registration made while
 * the socket was the kernel's alone would never hear of a ring. */
bool vs_dgram_translated(struct vs_sock *s)
{
    return vs_udp_of(s) != NULL;
}

unsigned vs_dgram_tcp_interest(struct vs_sock *s, unsigned user)
{
    (void)s;
    return user;
}

int vs_dgram_watch_fd(struct vs_sock *s)
{
    struct vs_udp_sock *u = watched(s);
    return u ? u->news : -1;
}

/* Whether a ring has a datagram; never waits for a busy lock (epoll holds
 * its own: a sender copying into a ring holds ours only briefly, and the
 * next look sees it). */
static bool ring_waits(struct vs_udp_sock *u)
{
    if (pthread_mutex_trylock(&u->lock) != 0)
        return false;
    bool r = vs_udp_ring_ready(u) >= 0;
    pthread_mutex_unlock(&u->lock);
    return r;
}

unsigned vs_dgram_poll(struct vs_sock *s, int fd, unsigned interest, int tcp_revents,
                       bool watch_fired)
{
    struct vs_udp_sock *u = watched(s);
    if (u && watch_fired) {
        pthread_mutex_lock(&u->lock);
        vs_udp_service(u, fd);
        pthread_mutex_unlock(&u->lock);
    }
    if (tcp_revents < 0) {
        struct pollfd p = {.fd = fd, .events = (short)interest};
        tcp_revents = vs_syscall(SYS_poll, &p, 1, 0) > 0 ? p.revents : 0;
    }
    unsigned r = (unsigned)tcp_revents;
    if (u && (interest & POLLIN) && ring_waits(u))
        r |= POLLIN;
    return r;
}

unsigned vs_dgram_poll_fast(struct vs_sock *s, unsigned interest)
{
    struct vs_udp_sock *u = watched(s);
    return u && (interest & POLLIN) && ring_waits(u) ? POLLIN : 0;
}

/* poll's naps and epoll_wait's empty slices: rings quiet for a while give
 * their pages back. */
void vs_dgram_idle(struct vs_sock *s)
{
    struct vs_udp_sock *u = watched(s);
    if (u && pthread_mutex_trylock(&u->lock) == 0) {
        vs_udp_rings_idle(u, vs_now_ns());
        pthread_mutex_unlock(&u->lock);
    }
}

bool vs_dgram_spins(struct vs_sock *s)
{
    struct vs_udp_sock *u = watched(s);
    return u && u->up;
}

unsigned vs_dgram_arm(struct vs_sock *s, unsigned interest)
{
    struct vs_udp_sock *u = watched(s);
    if (!u || !(interest & POLLIN))
        return 0;
    vs_udp_arm(u);
    return POLLIN;
}

void vs_dgram_disarm(struct vs_sock *s, unsigned armed)
{
    struct vs_udp_sock *u = watched(s);
    if (u && armed)
        vs_udp_disarm(u);
}

/* Armed for good (an epoll set watched by another): ask for the next
 * sleep's wake-up too. */
void vs_dgram_rearm(struct vs_sock *s, unsigned armed)
{
    struct vs_udp_sock *u = watched(s);
    if (u && armed && u->page)
        atomic_fetch_add(&u->page->seq, 1);
}

bool vs_dgram_shared_wait(struct vs_sock *s)
{
    (void)s;
    return false;
}

unsigned vs_dgram_generation(struct vs_sock *s)
{
    struct vs_udp_sock *u = vs_udp_of(s);
    return u ? atomic_load(&u->gen) : 0;
}

uint64_t vs_dgram_rx_mark(struct vs_sock *s)
{
    struct vs_udp_sock *u = watched(s);
    if (!u || pthread_mutex_trylock(&u->lock) != 0)
        return 0;
    uint64_t mark = vs_udp_rx_mark(u);
    pthread_mutex_unlock(&u->lock);
    return mark;
}

uint64_t vs_dgram_tx_mark(struct vs_sock *s)
{
    (void)s;
    return 0;
}

/* A producer writes a ring without the kernel seeing it (unless we sleep
 * armed): not the kernel's alone once a ring is there. */
bool vs_dgram_rx_by_kernel(struct vs_sock *s)
{
    struct vs_udp_sock *u = watched(s);
    return !u || !u->live;
}

/* Never cold: a record hears of rings only while armed around its wait. */
bool vs_dgram_cold_attach(struct vs_sock *s, void *rec)
{
    (void)s;
    (void)rec;
    return false;
}

void vs_dgram_cold_detach(struct vs_sock *s, void *rec)
{
    (void)s;
    (void)rec;
}

void *vs_dgram_cold_rec(struct vs_sock *s)
{
    (void)s;
    return NULL;
}
