/* Threads engine: blocking sockets, and per connection one sender thread and one
 * receiver thread, so both directions run at once (full duplex). */
#include "stress.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

/* Each thread keeps its own error so the two never write the same field. */
struct half {
    struct conn *c;
    const struct engine_opts *o;
    uint64_t read_seed;
    int err;
    bool timed_out;
};

static void half_fail(struct half *h, int err)
{
    if (err == ETIMEDOUT && deadline_passed(h->o))
        h->timed_out = true;
    else
        h->err = err;
}

static void *sender(void *arg)
{
    struct half *h = arg;
    struct conn *c = h->c;
    while (tx_prepare(&c->tx)) {
        if (send_all(c->fd, c->tx.buf, c->tx.len, h->o->deadline_ns) < 0) {
            half_fail(h, errno);
            return NULL;
        }
        c->tx.bytes += c->tx.len;
    }
    if (shutdown(c->fd, SHUT_WR) < 0)
        h->err = errno;
    return NULL;
}

static void *receiver(void *arg)
{
    struct half *h = arg;
    struct conn *c = h->c;
    struct rng rng = {h->read_seed};
    uint8_t *buf = malloc(READ_MAX);
    if (!buf)
        abort();
    for (;;) {
        if (deadline_passed(h->o)) {
            h->timed_out = true;
            break;
        }
        ssize_t k = recv(c->fd, buf, pick_read_size(&rng, READ_MAX), 0);
        if (k > 0) {
            rx_feed(&c->rx, buf, (size_t)k);
        } else if (k == 0) {
            c->rx.eof = true;
            break;
        } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            half_fail(h, errno);
            break;
        }
    }
    free(buf);
    return NULL;
}

enum run_status engine_threads(struct conn *c, int n, const struct engine_opts *o)
{
    struct half *h = calloc((size_t)n * 2, sizeof(*h));
    pthread_t *t = calloc((size_t)n * 2, sizeof(*t));
    if (!h || !t)
        abort();
    for (int i = 0; i < n * 2; i++) {
        h[i] = (struct half){.c = &c[i / 2], .o = o, .read_seed = o->read_seed + (uint64_t)i};
        int rc = pthread_create(&t[i], NULL, i % 2 ? receiver : sender, &h[i]);
        if (rc != 0) {
            fprintf(stderr, "vsocket-stress: pthread_create failed\n");
            exit(EXIT_SETUP);
        }
    }
    bool timed_out = false;
    for (int i = 0; i < n * 2; i++) {
        pthread_join(t[i], NULL);
        timed_out |= h[i].timed_out;
        if (h[i].err)
            conn_note_error(h[i].c, h[i].err);
    }
    for (int i = 0; i < n; i++)
        c[i].shut_wr = c[i].done = true;
    free(h);
    free(t);
    return timed_out ? RUN_TIMEOUT : RUN_OK;
}
