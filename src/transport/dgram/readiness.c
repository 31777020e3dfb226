/* readiness.c - a datagram socket's readiness while every peer is on the
 * kernel: the kernel socket's own. translated() says so, and poll, select
 * and epoll then treat the socket as any kernel fd and ask nothing else;
 * the other answers are those of a socket with nothing of its own. */
#include "transport/dgram/dgram.h"

bool vs_dgram_translated(struct vs_sock *s)
{
    (void)s;
    return false;
}

unsigned vs_dgram_tcp_interest(struct vs_sock *s, unsigned user)
{
    (void)s;
    return user;
}

int vs_dgram_watch_fd(struct vs_sock *s)
{
    (void)s;
    return -1;
}

unsigned vs_dgram_poll(struct vs_sock *s, int fd, unsigned interest, int tcp_revents,
                       bool watch_fired)
{
    (void)s;
    (void)fd;
    (void)interest;
    (void)watch_fired;
    return tcp_revents < 0 ? 0 : (unsigned)tcp_revents;
}

unsigned vs_dgram_poll_fast(struct vs_sock *s, unsigned interest)
{
    (void)s;
    (void)interest;
    return 0;
}

bool vs_dgram_spins(struct vs_sock *s)
{
    (void)s;
    return false;
}

unsigned vs_dgram_arm(struct vs_sock *s, unsigned interest)
{
    (void)s;
    (void)interest;
    return 0;
}

void vs_dgram_disarm(struct vs_sock *s, unsigned armed)
{
    (void)s;
    (void)armed;
}

void vs_dgram_rearm(struct vs_sock *s, unsigned armed)
{
    (void)s;
    (void)armed;
}

bool vs_dgram_shared_wait(struct vs_sock *s)
{
    (void)s;
    return false;
}

unsigned vs_dgram_generation(struct vs_sock *s)
{
    (void)s;
    return 0;
}

uint64_t vs_dgram_rx_mark(struct vs_sock *s)
{
    (void)s;
    return 0;
}

uint64_t vs_dgram_tx_mark(struct vs_sock *s)
{
    (void)s;
    return 0;
}

bool vs_dgram_rx_by_kernel(struct vs_sock *s)
{
    (void)s;
    return true;
}

/* Never cold: there is no watch fd to hear the socket through. */
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
