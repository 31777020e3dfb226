/* One run (one mode) seen from each side, and the control protocol between them.
 *
 * Control protocol, all fields little-endian u64, on a first TCP connection:
 *   client -> server  CFG    magic, version, tag, mode, conns, udp_flows, messages,
 *                            min_size, max_size, udp_max_size, seed, timeout_ms, inject
 *   server -> client  ACK    magic, server pid
 *   then the client opens `conns` data connections, each starting with
 *                     HELLO  magic, tag, conn id
 *   after TCP and UDP traffic:
 *   client -> server  DONE   magic
 *   server -> client  RESULT magic, the server's side_result and UDP counters
 */
#include "stress.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CTL_CFG 0x76736f636b434647ULL
#define CTL_ACK 0x76736f636b41434bULL
#define CTL_HELLO 0x76736f636b48454cULL
#define CTL_DONE 0x76736f636b444f4eULL
#define CTL_RESULT 0x76736f636b524553ULL
#define CTL_VERSION 1
#define CFG_WORDS 13
#define RESULT_WORDS 13
#define IO_SLICE_MS 200 /* blocking calls return this often to look at the deadline */

static int send_words(int fd, const uint64_t *w, int n, uint64_t deadline)
{
    uint8_t buf[8 * 16];
    for (int i = 0; i < n; i++)
        put_u64(buf + 8 * i, w[i]);
    return send_all(fd, buf, (size_t)n * 8, deadline);
}

/* Returns 1 when n words arrived and the first is `magic`. */
static int recv_words(int fd, uint64_t *w, int n, uint64_t magic, uint64_t deadline)
{
    uint8_t buf[8 * 16];
    int rc = recv_all(fd, buf, (size_t)n * 8, deadline);
    if (rc <= 0)
        return rc;
    for (int i = 0; i < n; i++)
        w[i] = get_u64(buf + 8 * i);
    return w[0] == magic ? 1 : -1;
}

void tally(struct side_result *s, const struct conn *c, int n)
{
    for (int i = 0; i < n; i++) {
        const struct rx_stream *rx = &c[i].rx;
        s->bytes += rx->bytes;
        s->msgs += rx->msgs;
        s->lost += rx->lost;
        s->corrupt += rx->corrupt;
        s->reordered += rx->reordered;
        s->corrupt_bytes += rx->corrupt_bytes;
        s->peer_gone += c[i].peer_gone;
        s->errors += c[i].err != 0;
        s->conns_ok += c[i].done && rx->eof && c[i].shut_wr && !c[i].peer_gone && !c[i].err;
    }
}

static void conns_free(struct conn *c, int n)
{
    for (int i = 0; i < n; i++) {
        if (c[i].fd >= 0)
            close(c[i].fd);
        tx_free(&c[i].tx);
        rx_free(&c[i].rx);
    }
    free(c);
}

static void conn_setup(struct conn *c, const struct config *cfg, uint32_t id, bool is_client)
{
    bool inject_tcp = cfg->inject != INJECT_NONE && cfg->inject != INJECT_UDP;
    c->id = id;
    tx_init(&c->tx, cfg, stream_id(id, !is_client), is_client && id == 0 && inject_tcp);
    rx_init(&c->rx, cfg, stream_id(id, is_client));
    set_io_timeout(c->fd, IO_SLICE_MS);
}

/* ------------------------------------------------------------------ client */

/* --kill-peer-after: a timer thread that SIGKILLs the server mid-run. */
struct killer {
    pid_t pid;
    int after_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool cancel, fired;
};

static void *killer_thread(void *arg)
{
    struct killer *k = arg;
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_sec += k->after_ms / 1000;
    at.tv_nsec += (long)(k->after_ms % 1000) * 1000000L;
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&k->mu);
    while (!k->cancel && pthread_cond_timedwait(&k->cv, &k->mu, &at) != ETIMEDOUT)
        ;
    if (!k->cancel && kill(k->pid, SIGKILL) == 0)
        k->fired = true;
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void killer_start(struct killer *k, pthread_t *t)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&k->mu, NULL);
    pthread_create(t, NULL, killer_thread, k);
}

static bool killer_stop(struct killer *k, pthread_t t)
{
    pthread_mutex_lock(&k->mu);
    k->cancel = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(t, NULL);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    return k->fired;
}

static int setup_fail(struct client_report *r, const char *why)
{
    r->status = EXIT_SETUP;
    r->why = why;
    return -1;
}

static int client_handshake(const struct config *cfg, const struct client_opts *o, int ctl,
                            uint64_t tag, struct client_report *r, pid_t *server_pid)
{
    uint64_t w[CFG_WORDS] = {CTL_CFG,       CTL_VERSION,       tag,           cfg->mode,
                             cfg->conns,    cfg->udp_flows,    cfg->messages, cfg->min_size,
                             cfg->max_size, cfg->udp_max_size, cfg->seed,     cfg->timeout_ms,
                             cfg->inject};
    uint64_t ack[2];
    if (send_words(ctl, w, CFG_WORDS, o->deadline_ns) < 0 ||
        recv_words(ctl, ack, 2, CTL_ACK, o->deadline_ns) != 1)
        return setup_fail(r,
                          "the server did not accept the run (no ACK on the control connection)");
    *server_pid = (pid_t)ack[1];
    return 0;
}

static struct conn *client_connect_all(const struct config *cfg, const struct client_opts *o,
                                       uint64_t tag, struct client_report *r)
{
    struct conn *c = calloc(cfg->conns, sizeof(*c));
    if (!c)
        abort();
    for (uint32_t i = 0; i < cfg->conns; i++)
        c[i].fd = -1;
    for (uint32_t i = 0; i < cfg->conns; i++) {
        c[i].fd = tcp_connect(o->host, o->port, o->ipv6, 2000);
        uint64_t hello[3] = {CTL_HELLO, tag, i};
        if (c[i].fd < 0 || send_words(c[i].fd, hello, 3, o->deadline_ns) < 0) {
            setup_fail(r, "cannot open the data connections");
            conns_free(c, (int)i + 1);
            return NULL;
        }
        conn_setup(&c[i], cfg, i, true);
    }
    return c;
}

static void result_decode(const uint64_t *w, struct side_result *s, uint64_t *udp_corrupt)
{
    s->conns_ok = w[1];
    s->bytes = w[2];
    s->msgs = w[3];
    s->lost = w[4];
    s->corrupt = w[5];
    s->reordered = w[6];
    s->corrupt_bytes = w[7];
    s->peer_gone = w[8];
    s->errors = w[9];
    s->timed_out = w[10] != 0;
    *udp_corrupt = w[12];
}

static void client_finish(const struct config *cfg, struct client_report *r)
{
    const struct side_result *c = &r->client, *s = &r->server;
    if (r->status == EXIT_SETUP)
        return;
    if (c->timed_out || s->timed_out) {
        r->status = EXIT_SETUP;
        r->why = c->timed_out ? "time-out: the run did not finish within --seconds"
                              : "time-out: the server gave up on the run";
        return;
    }
    bool bad = c->corrupt || s->corrupt || c->reordered || s->reordered || c->errors || s->errors ||
               r->udp.corrupt || r->server_udp_corrupt;
    if (!r->peer_killed)
        bad = bad || c->lost || s->lost || c->conns_ok < cfg->conns || s->conns_ok < cfg->conns;
    r->status = bad ? EXIT_DATA : EXIT_PASS;
}

void client_run(const struct config *cfg, const struct client_opts *o, struct client_report *r)
{
    memset(r, 0, sizeof(*r));
    uint64_t tag = mix64(now_ns() ^ (uint64_t)getpid());
    pid_t server_pid = 0;
    int ctl = tcp_connect(o->host, o->port, o->ipv6, 2000);
    if (ctl < 0) {
        setup_fail(r, "cannot connect to the server");
        return;
    }
    set_io_timeout(ctl, IO_SLICE_MS);
    struct conn *c = NULL;
    if (client_handshake(cfg, o, ctl, tag, r, &server_pid) < 0 ||
        !(c = client_connect_all(cfg, o, tag, r))) {
        close(ctl);
        return;
    }

    struct killer k = {.pid = server_pid, .after_ms = o->kill_peer_after_ms};
    pthread_t kt;
    if (o->kill_peer_after_ms >= 0)
        killer_start(&k, &kt);
    struct engine_opts eo = {true, o->deadline_ns, mix64(cfg->seed ^ 0xc11e47)};
    r->client.timed_out = engine_run(cfg->mode, c, (int)cfg->conns, &eo) == RUN_TIMEOUT;
    if (o->kill_peer_after_ms >= 0)
        r->peer_killed = killer_stop(&k, kt);
    for (uint32_t i = 0; i < cfg->conns; i++)
        rx_finish(&c[i].rx, !r->peer_killed);
    tally(&r->client, c, (int)cfg->conns);
    conns_free(c, (int)cfg->conns);

    if (!r->peer_killed && !r->client.timed_out && cfg->udp_flows > 0 &&
        udp_client_run(cfg, o->host, o->port, o->ipv6, o->deadline_ns, &r->udp) < 0)
        r->client.timed_out = errno == ETIMEDOUT;

    uint64_t done = CTL_DONE, w[RESULT_WORDS];
    if (!r->peer_killed && !r->client.timed_out) {
        if (send_words(ctl, &done, 1, o->deadline_ns) < 0 ||
            recv_words(ctl, w, RESULT_WORDS, CTL_RESULT, o->deadline_ns + 2000000000ULL) != 1)
            setup_fail(r, "the server did not report its result");
        else
            r->have_server = true;
        if (r->have_server)
            result_decode(w, &r->server, &r->server_udp_corrupt);
    }
    close(ctl);
    client_finish(cfg, r);
}

/* ------------------------------------------------------------------ server */

static bool cfg_decode(const uint64_t *w, struct config *cfg, uint64_t *tag)
{
    *tag = w[2];
    *cfg = (struct config){.mode = (enum mode)w[3],
                           .conns = (uint32_t)w[4],
                           .udp_flows = (uint32_t)w[5],
                           .messages = w[6],
                           .min_size = w[7],
                           .max_size = w[8],
                           .udp_max_size = w[9],
                           .seed = w[10],
                           .timeout_ms = w[11],
                           .inject = (enum inject)w[12]};
    return w[1] == CTL_VERSION && w[3] < MODE_COUNT && cfg->conns >= 1 && cfg->conns <= 4096 &&
           cfg->min_size >= 1 && cfg->min_size <= cfg->max_size && cfg->max_size <= (1ULL << 30) &&
           cfg->messages <= (1ULL << 32);
}

/* Accept the data connections; stray ones (wrong tag) are closed and ignored. */
static struct conn *server_accept_all(int lfd, const struct config *cfg, uint64_t tag,
                                      uint64_t deadline)
{
    struct conn *c = calloc(cfg->conns, sizeof(*c));
    if (!c)
        abort();
    for (uint32_t i = 0; i < cfg->conns; i++)
        c[i].fd = -1;
    for (uint32_t got = 0; got < cfg->conns;) {
        int fd = accept_until(lfd, deadline);
        if (fd < 0) {
            fprintf(stderr, "vsocket-stress server: accepting data connections: %s\n",
                    strerror(errno));
            conns_free(c, (int)cfg->conns);
            return NULL;
        }
        uint64_t h[3];
        set_io_timeout(fd, IO_SLICE_MS);
        if (recv_words(fd, h, 3, CTL_HELLO, deadline) != 1 || h[1] != tag || h[2] >= cfg->conns ||
            c[h[2]].fd >= 0) {
            close(fd);
            continue;
        }
        c[h[2]].fd = fd;
        conn_setup(&c[h[2]], cfg, (uint32_t)h[2], false);
        got++;
    }
    return c;
}

static void server_report(const struct server_opts *o, const struct config *cfg,
                          const struct side_result *s, const struct udp_result *u, int status)
{
    if (o->quiet && status == EXIT_PASS)
        return;
    printf("stress-server: mode=%s tcp_conns=%u conns_ok=%llu bytes=%llu msgs=%llu lost=%llu "
           "corrupt=%llu reordered=%llu peer_gone=%llu errors=%llu udp_received=%llu "
           "udp_corrupt=%llu%s\n",
           mode_name(cfg->mode), cfg->conns, (unsigned long long)s->conns_ok,
           (unsigned long long)s->bytes, (unsigned long long)s->msgs, (unsigned long long)s->lost,
           (unsigned long long)s->corrupt, (unsigned long long)s->reordered,
           (unsigned long long)s->peer_gone, (unsigned long long)s->errors,
           (unsigned long long)u->received, (unsigned long long)u->corrupt,
           s->timed_out ? " TIMEOUT" : "");
    fflush(stdout);
}

static int server_status(const struct config *cfg, const struct side_result *s,
                         const struct udp_result *u)
{
    if (s->timed_out)
        return EXIT_SETUP;
    bool bad = s->lost || s->corrupt || s->reordered || s->errors || u->corrupt ||
               s->conns_ok < cfg->conns;
    return bad ? EXIT_DATA : EXIT_PASS;
}

/* Serve one run: handshake, TCP phase, UDP echo until DONE, report. */
static int serve_one(int lfd, int ufd, const struct server_opts *o)
{
    int ctl = accept_until(lfd, UINT64_MAX);
    if (ctl < 0)
        return EXIT_SETUP;
    set_io_timeout(ctl, IO_SLICE_MS);
    uint64_t w[CFG_WORDS], tag;
    struct config cfg;
    if (recv_words(ctl, w, CFG_WORDS, CTL_CFG, now_ns() + 5000000000ULL) != 1 ||
        !cfg_decode(w, &cfg, &tag)) {
        fprintf(stderr, "vsocket-stress server: bad or missing run configuration\n");
        close(ctl);
        return EXIT_USAGE;
    }
    uint64_t deadline = now_ns() + cfg.timeout_ms * 1000000ULL;
    uint64_t ack[2] = {CTL_ACK, (uint64_t)getpid()};
    struct conn *c = NULL;
    if (send_words(ctl, ack, 2, deadline) < 0 ||
        !(c = server_accept_all(lfd, &cfg, tag, deadline))) {
        close(ctl);
        return EXIT_SETUP;
    }

    struct udp_server us = {.fd = ufd, .cfg = &cfg};
    atomic_init(&us.stop, false);
    pthread_t ut;
    pthread_create(&ut, NULL, udp_server_thread, &us);
    struct engine_opts eo = {false, deadline, mix64(cfg.seed ^ 0x5e7e7)};
    struct side_result s = {0};
    s.timed_out = engine_run(cfg.mode, c, (int)cfg.conns, &eo) == RUN_TIMEOUT;
    for (uint32_t i = 0; i < cfg.conns; i++)
        rx_finish(&c[i].rx, true);
    tally(&s, c, (int)cfg.conns);
    conns_free(c, (int)cfg.conns);

    /* Keep echoing UDP until the client says it is done (or the run times out). */
    uint64_t done;
    bool client_done = !s.timed_out && recv_words(ctl, &done, 1, CTL_DONE, deadline) == 1;
    atomic_store(&us.stop, true);
    pthread_join(ut, NULL);

    uint64_t r[RESULT_WORDS] = {CTL_RESULT,    s.conns_ok, s.bytes,     s.msgs,
                                s.lost,        s.corrupt,  s.reordered, s.corrupt_bytes,
                                s.peer_gone,   s.errors,   s.timed_out, us.res.received,
                                us.res.corrupt};
    if (client_done)
        send_words(ctl, r, RESULT_WORDS, deadline);
    close(ctl);
    int status = server_status(&cfg, &s, &us.res);
    server_report(o, &cfg, &s, &us.res, status);
    return status;
}

/* TCP listener and UDP socket on the same port number, so the client needs only
 * one. With --port 0 the kernel picks the TCP port, and that number may happen to
 * be taken for UDP: then try another. */
static int open_server_sockets(const struct server_opts *o, int *lfd, int *ufd, uint16_t *port)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        *lfd = tcp_listen(o->bind_addr, o->port, o->ipv6, port);
        if (*lfd < 0)
            return -1;
        *ufd = udp_bind(o->bind_addr, *port, o->ipv6);
        if (*ufd >= 0)
            return 0;
        close(*lfd);
        if (o->port != 0)
            return -1;
    }
    return -1;
}

int server_run(const struct server_opts *o)
{
    uint16_t port = 0;
    int lfd, ufd;
    if (open_server_sockets(o, &lfd, &ufd, &port) < 0)
        return EXIT_SETUP;
    if (o->ready_fd >= 0) {
        char msg[16];
        int len = snprintf(msg, sizeof(msg), "%u\n", port);
        if (write(o->ready_fd, msg, (size_t)len) != len)
            return EXIT_SETUP;
        close(o->ready_fd);
    } else if (!o->quiet) {
        printf("stress-server: listening on port %u (TCP and UDP)\n", port);
        fflush(stdout);
    }
    int status;
    do
        status = serve_one(lfd, ufd, o);
    while (!o->once);
    close(lfd);
    close(ufd);
    return status;
}
