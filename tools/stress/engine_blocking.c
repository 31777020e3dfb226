/* Blocking engine: one thread, blocking sockets. On every connection the two ends
 * alternate one message each (the client sends first), so neither end can block
 * in send() while the other also blocks in send(). Connections are served
 * round-robin in connection-id order, which both ends agree on. */
#include "stress.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

struct blocking_ctx {
    const struct engine_opts *o;
    struct rng rng;
    uint8_t *buf;
    bool timed_out;
};

static void fail(struct blocking_ctx *x, struct conn *c, int err)
{
    if (err == ETIMEDOUT && deadline_passed(x->o))
        x->timed_out = true;
    else
        conn_note_error(c, err);
}

/* Send the next message in full; FIN right after the last one. */
static void send_one(struct blocking_ctx *x, struct conn *c)
{
    if (c->shut_wr || c->peer_gone || c->err)
        return;
    if (!tx_prepare(&c->tx)) {
        conn_shutdown_wr(c);
        return;
    }
    if (send_all(c->fd, c->tx.buf, c->tx.len, x->o->deadline_ns) < 0) {
        fail(x, c, errno);
        return;
    }
    c->tx.bytes += c->tx.len;
    c->tx.off = c->tx.len;
    if (!tx_more(&c->tx))
        conn_shutdown_wr(c);
}

/* Read until one whole message has been checked, never past its end. */
static void recv_one(struct blocking_ctx *x, struct conn *c)
{
    if (c->rx.eof || c->peer_gone || c->err)
        return;
    uint64_t before = c->rx.msgs + c->rx.corrupt;
    while (c->rx.msgs + c->rx.corrupt == before) {
        if (deadline_passed(x->o)) {
            x->timed_out = true;
            return;
        }
        ssize_t k = recv(c->fd, x->buf, pick_read_size(&x->rng, rx_want(&c->rx)), 0);
        if (k > 0) {
            rx_feed(&c->rx, x->buf, (size_t)k);
        } else if (k == 0) {
            c->rx.eof = true;
            return;
        } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            fail(x, c, errno);
            return;
        }
    }
    /* After a corrupt header the lock-step is lost: drop the connection so the
     * peer sees EOF instead of waiting for a reply that will not come. */
    if (c->rx.abandoned) {
        shutdown(c->fd, SHUT_RDWR);
        c->rx.eof = c->shut_wr = true;
    }
}

static void drain_to_eof(struct blocking_ctx *x, struct conn *c)
{
    while (!c->rx.eof && !c->peer_gone && !c->err && !x->timed_out) {
        ssize_t k = recv(c->fd, x->buf, READ_MAX, 0);
        if (k > 0)
            rx_feed(&c->rx, x->buf, (size_t)k);
        else if (k == 0)
            c->rx.eof = true;
        else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            fail(x, c, errno);
        x->timed_out = deadline_passed(x->o);
    }
}

enum run_status engine_blocking(struct conn *c, int n, const struct engine_opts *o)
{
    struct blocking_ctx x = {.o = o, .rng = {o->read_seed}, .buf = malloc(READ_MAX)};
    if (!x.buf)
        abort();
    uint64_t rounds = n > 0 ? c[0].tx.cfg->messages : 0;
    for (uint64_t i = 0; i < rounds && !x.timed_out; i++) {
        for (int j = 0; j < n && !x.timed_out; j++) {
            if (o->is_client) {
                send_one(&x, &c[j]);
                recv_one(&x, &c[j]);
            } else {
                recv_one(&x, &c[j]);
                send_one(&x, &c[j]);
            }
        }
    }
    for (int j = 0; j < n && !x.timed_out; j++) {
        conn_shutdown_wr(&c[j]);
        drain_to_eof(&x, &c[j]);
        c[j].done = true;
    }
    free(x.buf);
    return x.timed_out ? RUN_TIMEOUT : RUN_OK;
}
