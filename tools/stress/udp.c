/* UDP flows. The client sends datagrams carrying the same header as TCP
 * messages; the server verifies each one and echoes the good ones; the client
 * verifies the echoes. Loss is allowed (and reported); corruption is not. */
#include "stress.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UDP_BUF 65536
#define UDP_WAIT_NS (200 * 1000000ULL) /* an echo later than this counts as lost */
#define UDP_GIVE_UP 5                  /* consecutive time-outs before a flow is dead */

struct flow {
    int fd;
    uint64_t stream;
    uint64_t next; /* next sequence number to send */
    bool waiting;  /* one datagram is in flight */
    uint64_t sent_at;
    int timeouts_in_row;
    bool dead;
};

/* UDP streams live in their own id space so they never look like TCP ones. */
static uint64_t udp_stream(uint32_t flow)
{
    return (1ULL << 32) | flow;
}

static size_t build_datagram(const struct config *cfg, const struct flow *f, uint8_t *out)
{
    uint64_t r = mix64(cfg->seed ^ mix64(f->stream * 0x100000001ULL + f->next));
    size_t len = (size_t)log_uniform(r, 1, cfg->udp_max_size);
    fill_payload(out + HDR_SIZE, len, cfg->seed, f->stream, f->next);
    struct msg_hdr h = {MSG_MAGIC, f->stream, f->next, len, fnv1a(FNV_INIT, out + HDR_SIZE, len)};
    hdr_encode(out, &h);
    if (cfg->inject == INJECT_UDP && f->stream == udp_stream(0) && f->next == 1)
        out[HDR_SIZE + len / 2] ^= 0x01;
    return HDR_SIZE + len;
}

/* Header and checksum agree with the datagram's own bytes. */
static bool datagram_ok(const uint8_t *p, size_t n, struct msg_hdr *h)
{
    return n >= HDR_SIZE && hdr_decode(p, h) && h->len == n - HDR_SIZE &&
           fnv1a(FNV_INIT, p + HDR_SIZE, h->len) == h->sum;
}

static void flow_send(const struct config *cfg, struct flow *f, uint8_t *buf,
                      struct udp_result *res)
{
    size_t n = build_datagram(cfg, f, buf);
    ssize_t k;
    do
        k = send(f->fd, buf, n, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    res->sent++;
    f->waiting = true;
    f->sent_at = now_ns();
    if (k < 0) /* e.g. ECONNREFUSED from an earlier ICMP: the datagram is lost */
        f->sent_at = 0;
}

static void flow_receive(struct flow *f, uint8_t *buf, struct udp_result *res)
{
    ssize_t k = recv(f->fd, buf, UDP_BUF, MSG_DONTWAIT);
    if (k < 0)
        return;
    struct msg_hdr h;
    if (!datagram_ok(buf, (size_t)k, &h) || h.stream != f->stream || h.seq > f->next) {
        res->corrupt++;
        return;
    }
    if (f->waiting && h.seq == f->next) {
        res->received++;
        f->waiting = false;
        f->timeouts_in_row = 0;
        f->next++;
    } else {
        res->late++; /* an echo we already gave up on */
    }
}

static void flow_check_timeout(const struct config *cfg, struct flow *f, struct udp_result *res)
{
    if (!f->waiting || now_ns() - f->sent_at < UDP_WAIT_NS)
        return;
    res->lost++;
    f->waiting = false;
    f->next++;
    if (++f->timeouts_in_row >= UDP_GIVE_UP) {
        /* The peer is gone; do not spend 200 ms on each remaining datagram. */
        res->lost += cfg->messages - f->next;
        res->sent += cfg->messages - f->next;
        f->dead = true;
    }
}

static bool flow_finished(const struct config *cfg, const struct flow *f)
{
    return f->dead || (!f->waiting && f->next >= cfg->messages);
}

int udp_client_run(const struct config *cfg, const char *host, uint16_t port, bool ipv6,
                   uint64_t deadline_ns, struct udp_result *res)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (resolve(host, port, ipv6, SOCK_DGRAM, false, &ss, &sl) < 0)
        return -1;
    uint32_t n = cfg->udp_flows;
    struct flow *f = calloc(n, sizeof(*f));
    struct pollfd *p = calloc(n, sizeof(*p));
    uint8_t *buf = malloc(UDP_BUF);
    if (!f || !p || !buf)
        abort();
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        f[i] = (struct flow){.fd = socket(ss.ss_family, SOCK_DGRAM, 0), .stream = udp_stream(i)};
        if (f[i].fd < 0 || connect(f[i].fd, (struct sockaddr *)&ss, sl) < 0) {
            fprintf(stderr, "vsocket-stress: UDP socket/connect: %s\n", strerror(errno));
            rc = -1;
            n = i + (f[i].fd >= 0);
            goto out;
        }
    }
    for (;;) {
        bool all_done = true;
        for (uint32_t i = 0; i < n; i++) {
            if (!f[i].waiting && !flow_finished(cfg, &f[i]))
                flow_send(cfg, &f[i], buf, res);
            all_done &= flow_finished(cfg, &f[i]);
            p[i] = (struct pollfd){f[i].fd, POLLIN, 0};
        }
        if (all_done)
            break;
        if (now_ns() >= deadline_ns) {
            errno = ETIMEDOUT;
            rc = -1;
            break;
        }
        if (poll(p, n, 20) > 0)
            for (uint32_t i = 0; i < n; i++)
                if (p[i].revents)
                    flow_receive(&f[i], buf, res);
        for (uint32_t i = 0; i < n; i++)
            flow_check_timeout(cfg, &f[i], res);
    }
out:
    for (uint32_t i = 0; i < n; i++)
        if (f[i].fd >= 0)
            close(f[i].fd);
    free(f);
    free(p);
    free(buf);
    return rc;
}

void *udp_server_thread(void *arg)
{
    struct udp_server *s = arg;
    uint8_t *buf = malloc(UDP_BUF);
    if (!buf)
        abort();
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        struct sockaddr_storage from;
        socklen_t fl = sizeof(from);
        ssize_t k = recvfrom(s->fd, buf, UDP_BUF, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (k < 0)
            continue;
        struct msg_hdr h;
        if (!datagram_ok(buf, (size_t)k, &h)) {
            s->res.corrupt++;
            continue; /* not echoed: the client counts it as lost too */
        }
        s->res.received++;
        sendto(s->fd, buf, (size_t)k, MSG_NOSIGNAL, (struct sockaddr *)&from, fl);
    }
    free(buf);
    return NULL;
}
