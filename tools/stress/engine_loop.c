/* Event-loop engines: non-blocking sockets, one loop serving every connection,
 * both directions at once. One file for poll, level-triggered epoll and
 * edge-triggered epoll, because they differ only in how readiness is waited for
 * and in whether a wake-up must be drained until EAGAIN (edge-triggered must). */
#include "stress.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct loop {
    enum mode mode;
    struct conn *c;
    int n;
    int active; /* connections not yet finished */
    int epfd;
    struct pollfd *pfd;
    int *pfd_conn; /* pfd[i] belongs to c[pfd_conn[i]] */
    const struct engine_opts *o;
    struct rng rng;
    uint8_t *buf;
};

static bool finished(const struct conn *c)
{
    bool broken = c->peer_gone || c->err;
    return (c->shut_wr || broken) && (c->rx.eof || broken);
}

static bool wants_read(const struct conn *c)
{
    return !c->rx.eof && !c->peer_gone && !c->err;
}

static bool wants_write(const struct conn *c)
{
    return !c->shut_wr && !c->peer_gone && !c->err;
}

static bool is_again(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK;
}

/* Level-triggered loops read once per wake-up (the next wait reports the rest);
 * the edge-triggered loop must read until EAGAIN or it may never be woken again. */
static void do_read(struct loop *l, struct conn *c, bool drain)
{
    while (wants_read(c)) {
        ssize_t k = recv(c->fd, l->buf, pick_read_size(&l->rng, READ_MAX), 0);
        if (k > 0) {
            rx_feed(&c->rx, l->buf, (size_t)k);
            if (!drain)
                return;
        } else if (k == 0) {
            c->rx.eof = true;
        } else if (errno == EINTR) {
            continue;
        } else {
            if (!is_again(errno))
                conn_note_error(c, errno);
            return;
        }
    }
}

static void do_write(struct conn *c, bool drain)
{
    while (wants_write(c)) {
        if (!tx_pending(&c->tx) && !tx_prepare(&c->tx)) {
            conn_shutdown_wr(c);
            return;
        }
        ssize_t k = send_some(c->fd, c->tx.buf + c->tx.off, c->tx.len - c->tx.off);
        if (k > 0) {
            c->tx.off += (size_t)k;
            c->tx.bytes += (uint64_t)k;
            /* FIN right after the last byte, without waiting for another wake-up. */
            if (!tx_pending(&c->tx) && !tx_more(&c->tx))
                conn_shutdown_wr(c);
            if (!drain)
                return;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else {
            if (k < 0 && !is_again(errno))
                conn_note_error(c, errno);
            return;
        }
    }
}

static uint32_t lt_events(const struct conn *c)
{
    return (wants_read(c) ? EPOLLIN : 0) | (wants_write(c) ? EPOLLOUT : 0);
}

static void epoll_update(struct loop *l, struct conn *c, uint32_t before)
{
    if (finished(c)) {
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        return;
    }
    if (l->mode != MODE_EPOLL_LT || lt_events(c) == before)
        return;
    struct epoll_event ev = {.events = lt_events(c), .data.ptr = c};
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        conn_note_error(c, errno);
}

static void handle(struct loop *l, struct conn *c, uint32_t ev)
{
    bool drain = l->mode == MODE_EPOLL_ET;
    uint32_t before = lt_events(c);
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        do_read(l, c, drain);
    if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        do_write(c, drain);
    if (l->mode != MODE_POLL)
        epoll_update(l, c, before);
    if (finished(c) && !c->done) {
        c->done = true;
        l->active--;
    }
}

static void epoll_add_all(struct loop *l)
{
    for (int i = 0; i < l->n; i++) {
        struct epoll_event ev = {.data.ptr = &l->c[i]};
        ev.events = l->mode == MODE_EPOLL_ET ? EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET
                                             : lt_events(&l->c[i]);
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->c[i].fd, &ev) < 0) {
            perror("vsocket-stress: epoll_ctl");
            exit(EXIT_SETUP);
        }
    }
}

static void epoll_round(struct loop *l)
{
    struct epoll_event ev[64];
    int k = epoll_wait(l->epfd, ev, 64, 100);
    if (k < 0 && errno != EINTR) {
        perror("vsocket-stress: epoll_wait");
        exit(EXIT_SETUP);
    }
    for (int i = 0; i < k; i++)
        handle(l, ev[i].data.ptr, ev[i].events);
}

static void poll_round(struct loop *l)
{
    int m = 0;
    for (int i = 0; i < l->n; i++) {
        struct conn *c = &l->c[i];
        if (c->done)
            continue;
        l->pfd[m] = (struct pollfd){
            c->fd, (short)((wants_read(c) ? POLLIN : 0) | (wants_write(c) ? POLLOUT : 0)), 0};
        l->pfd_conn[m++] = i;
    }
    int k = poll(l->pfd, (nfds_t)m, 100);
    if (k < 0 && errno != EINTR) {
        perror("vsocket-stress: poll");
        exit(EXIT_SETUP);
    }
    for (int i = 0; i < m && k > 0; i++) {
        short r = l->pfd[i].revents;
        if (!r)
            continue;
        /* POLLIN/POLLOUT/POLLHUP/POLLERR have the same values as their EPOLL twins. */
        handle(l, &l->c[l->pfd_conn[i]], (uint32_t)r);
    }
}

enum run_status engine_loop(enum mode m, struct conn *c, int n, const struct engine_opts *o)
{
    struct loop l = {.mode = m,
                     .c = c,
                     .n = n,
                     .active = n,
                     .epfd = -1,
                     .o = o,
                     .rng = {o->read_seed},
                     .buf = malloc(READ_MAX)};
    l.pfd = calloc((size_t)n + 1, sizeof(*l.pfd));
    l.pfd_conn = calloc((size_t)n + 1, sizeof(*l.pfd_conn));
    if (!l.buf || !l.pfd || !l.pfd_conn)
        abort();
    for (int i = 0; i < n; i++)
        if (set_nonblock(c[i].fd, true) < 0)
            conn_note_error(&c[i], errno);
    if (m != MODE_POLL) {
        l.epfd = epoll_create1(0);
        if (l.epfd < 0) {
            perror("vsocket-stress: epoll_create1");
            exit(EXIT_SETUP);
        }
        epoll_add_all(&l);
    }
    enum run_status st = RUN_OK;
    while (l.active > 0) {
        if (deadline_passed(o)) {
            st = RUN_TIMEOUT;
            break;
        }
        if (m == MODE_POLL)
            poll_round(&l);
        else
            epoll_round(&l);
    }
    if (l.epfd >= 0)
        close(l.epfd);
    for (int i = 0; i < n; i++)
        set_nonblock(c[i].fd, false);
    free(l.buf);
    free(l.pfd);
    free(l.pfd_conn);
    return st;
}
