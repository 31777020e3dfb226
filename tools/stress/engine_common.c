/* Helpers shared by the TCP engines, and the mode dispatch. */
#include "stress.h"

#include <errno.h>
#include <sys/socket.h>

const char *mode_name(enum mode m)
{
    static const char *const names[MODE_COUNT] = {"blocking", "poll", "epoll-lt", "epoll-et",
                                                  "threads"};
    return (unsigned)m < MODE_COUNT ? names[m] : "?";
}

enum run_status engine_run(enum mode m, struct conn *c, int n, const struct engine_opts *o)
{
    switch (m) {
    case MODE_BLOCKING:
        return engine_blocking(c, n, o);
    case MODE_THREADS:
        return engine_threads(c, n, o);
    default:
        return engine_loop(m, c, n, o);
    }
}

/* Read sizes are log-uniform in 1 B .. 256 KiB (so 1-byte reads happen often),
 * never more than `cap`. */
size_t pick_read_size(struct rng *r, size_t cap)
{
    size_t k = (size_t)log_uniform(rng_next(r), 1, READ_MAX);
    if (cap == 0)
        cap = 1;
    return k < cap ? k : cap;
}

bool peer_gone_errno(int err)
{
    return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED;
}

void conn_note_error(struct conn *c, int err)
{
    if (peer_gone_errno(err))
        c->peer_gone = true;
    else if (c->err == 0)
        c->err = err;
}

void conn_shutdown_wr(struct conn *c)
{
    if (c->shut_wr)
        return;
    c->shut_wr = true;
    if (shutdown(c->fd, SHUT_WR) < 0)
        conn_note_error(c, errno);
}

bool deadline_passed(const struct engine_opts *o)
{
    return now_ns() >= o->deadline_ns;
}
