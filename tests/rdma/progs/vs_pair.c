/* vs_pair - a checksummed echo pair for the impostor cases (tests/rdma/README.md).
 *
 *   vs_pair server --bind IP --port P [--once N] [--start-file F] [--timeout S]
 *   vs_pair client --conn IP:PORT [--conn ...] [--bytes B] [--data-conns LIST]
 *                  [--ready-file F] [--start-file F] [--go-file F] [--hold-file F]
 *                  [--timeout S]
 *
 * Both are single-threaded poll loops on non-blocking sockets that wake at
 * least every 20 ms: under vsocket a set-up advances only at calls of the
 * program, so the program keeps calling while it waits.
 *
 * The server echoes every byte back and closes once its peer finished and
 * everything is echoed (--once N: exits after N connections ended). With
 * --start-file, once it echoed the first connection's first HELLO bytes it
 * sleeps without a socket call until that file exists: its set-ups cannot
 * start before (a test's way to let something else go first).
 *
 * The client connects every --conn, sends 64 random bytes on each and reads
 * them back (so both directions have a prefix the proof covers), writes
 * "INDEX LOCAL PEER" per connection into --ready-file. With --start-file,
 * it then sleeps without a socket call until that file exists, so that no
 * set-up of its connections can start before (a test's way to order it
 * after something it prepared, e.g. a squatter listening). Then it polls
 * until --go-file exists. Then, on the --data-conns (comma separated indexes,
 * default all), it sends B bytes of a seeded pseudo-random stream, reads the
 * echo, compares every byte, shuts its side down and reads to the end:
 *   PAIR-DATA conn=I bytes=B sent_fnv=X rcvd_fnv=Y result=OK|MISMATCH|SHORT
 * Connections not in --data-conns are only held (errors on them are
 * reported, not fatal). Then it waits for --hold-file before closing
 * (so that `vsocket stat` can look at live connections). Exit 0 only if
 * every data connection is OK. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAXC 32
#define HELLO 64
#define TICK_MS 20

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool exists(const char *f)
{
    struct stat st;
    return f && stat(f, &st) == 0;
}

static void nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void die(const char *what)
{
    fprintf(stderr, "vs_pair: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* ------------------------------------------------------------------ server */

/* Sleeps until F exists, making no socket call; false on timeout. */
static bool sleep_until_exists(const char *f, double end)
{
    while (!exists(f)) {
        if (now_s() > end)
            return false;
        nanosleep(&(struct timespec){0, TICK_MS * 1000000L}, NULL);
    }
    return true;
}

struct echo {
    int fd;
    char buf[256 << 10];
    size_t have;
    uint64_t echoed;
    bool eof, done;
};

static int server(const char *ip, int port, int once, const char *start_file, double timeout)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (bind(l, (void *)&a, sizeof(a)) < 0 || listen(l, 64) < 0)
        die("bind/listen");
    nonblock(l);
    printf("PAIR-SERVER listening %s:%d\n", ip, port);
    fflush(stdout);
    static struct echo e[MAXC];
    int n = 0, ended = 0;
    double end = now_s() + timeout;
    while (now_s() < end && !(once && ended >= once)) {
        struct pollfd p[MAXC + 1];
        p[0] = (struct pollfd){.fd = l, .events = POLLIN};
        for (int i = 0; i < n; i++) {
            short ev = 0;
            if (!e[i].done) {
                if (!e[i].eof && e[i].have < sizeof(e[i].buf))
                    ev |= POLLIN;
                if (e[i].have)
                    ev |= POLLOUT;
            }
            p[i + 1] = (struct pollfd){.fd = e[i].done ? -1 : e[i].fd, .events = ev};
        }
        poll(p, n + 1, TICK_MS);
        if ((p[0].revents & POLLIN) && n < MAXC) {
            int fd = accept4(l, NULL, NULL, SOCK_NONBLOCK);
            if (fd >= 0) {
                e[n].fd = fd;
                e[n].have = e[n].echoed = 0;
                e[n].eof = e[n].done = false;
                n++;
            }
        }
        for (int i = 0; i < n; i++) {
            struct echo *c = &e[i];
            if (c->done)
                continue;
            if (!c->eof && c->have < sizeof(c->buf)) {
                ssize_t r = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have);
                if (r > 0)
                    c->have += (size_t)r;
                else if (r == 0)
                    c->eof = true;
                else if (errno != EAGAIN && errno != EINTR) {
                    c->done = true;
                    close(c->fd);
                    ended++;
                    continue;
                }
            }
            if (c->have) {
                ssize_t w = write(c->fd, c->buf, c->have);
                if (w > 0) {
                    memmove(c->buf, c->buf + w, c->have - (size_t)w);
                    c->have -= (size_t)w;
                    c->echoed += (uint64_t)w;
                } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    c->done = true;
                    close(c->fd);
                    ended++;
                    continue;
                }
            }
            if (c->eof && !c->have) {
                c->done = true;
                close(c->fd);
                ended++;
            }
        }
        if (start_file && n > 0 && e[0].echoed >= HELLO) {
            if (!sleep_until_exists(start_file, end)) {
                fprintf(stderr, "vs_pair: timeout waiting for %s\n", start_file);
                return 2;
            }
            start_file = NULL;
        }
    }
    printf("PAIR-SERVER done: %d connections, %d ended\n", n, ended);
    return 0;
}

/* ------------------------------------------------------------------ client */

static uint64_t next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

struct conn {
    int fd;
    bool data, dead, shut, end;
    uint64_t seed_tx, seed_rx; /* the stream, regenerated on both sides */
    uint64_t sent, rcvd;
    uint64_t fnv_tx, fnv_rx;
    bool mismatch;
    uint64_t bad_at;
    uint8_t hello[HELLO];
};

static void fnv(uint64_t *h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ p[i]) * 0x100000001b3ull;
}

static void fill(uint64_t *seed, uint8_t *p, size_t n)
{
    /* Byte-wise from a 64-bit generator: positions are independent of chunking. */
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(next(seed) >> 29);
}

static void addr_str(const struct sockaddr_in *a, char *out, size_t len)
{
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
}

/* Polls every connection once (TICK_MS): keeps the set-ups going. */
static void tick(struct conn *c, int n)
{
    struct pollfd p[MAXC];
    for (int i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = c[i].dead ? -1 : c[i].fd, .events = POLLIN};
    poll(p, n, TICK_MS);
    for (int i = 0; i < n; i++) {
        if (c[i].dead || !p[i].revents)
            continue;
        /* Nothing is expected while held: an error or end is reported. */
        char b[256];
        ssize_t r = read(c[i].fd, b, sizeof(b));
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            printf("PAIR-HELD conn=%d ended while held (%s)\n", i,
                   r == 0 ? "end of stream" : strerror(errno));
            c[i].dead = true;
        } else if (r > 0) {
            printf("PAIR-HELD conn=%d unexpected %zd bytes while held\n", i, r);
            c[i].mismatch = true;
        }
    }
    fflush(stdout);
}

static int client(char **targets, int n, uint64_t bytes, const char *data_list,
                  const char *ready_file, const char *start_file, const char *go_file,
                  const char *hold_file, double timeout)
{
    static struct conn c[MAXC];
    double end = now_s() + timeout;
    for (int i = 0; i < n; i++) {
        char host[64];
        snprintf(host, sizeof(host), "%s", targets[i]);
        char *colon = strrchr(host, ':');
        if (!colon)
            die("--conn IP:PORT");
        *colon = 0;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(colon + 1))};
        inet_pton(AF_INET, host, &a.sin_addr);
        c[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c[i].fd, (void *)&a, sizeof(a)) < 0)
            die("connect");
        nonblock(c[i].fd);
        c[i].data = !data_list;
        c[i].fnv_tx = c[i].fnv_rx = 0xcbf29ce484222325ull;
        if (getrandom(&c[i].seed_tx, 8, 0) != 8 || getrandom(c[i].hello, HELLO, 0) != HELLO)
            die("getrandom");
        c[i].seed_tx |= 1;
        c[i].seed_rx = c[i].seed_tx;
    }
    if (data_list) {
        char tmp[256];
        snprintf(tmp, sizeof(tmp), "%s", data_list);
        for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ","))
            if (atoi(t) < n)
                c[atoi(t)].data = true;
    }
    /* Hello: 64 random bytes each way (the echo). */
    for (int i = 0; i < n; i++) {
        size_t off = 0;
        while (off < HELLO) {
            ssize_t w = write(c[i].fd, c[i].hello + off, HELLO - off);
            if (w > 0)
                off += (size_t)w;
            else if (errno != EAGAIN)
                die("hello write");
            else
                poll(&(struct pollfd){.fd = c[i].fd, .events = POLLOUT}, 1, TICK_MS);
        }
    }
    for (int i = 0; i < n; i++) {
        uint8_t back[HELLO];
        size_t got = 0;
        while (got < HELLO) {
            if (now_s() > end) {
                fprintf(stderr, "vs_pair: no hello echo on conn %d\n", i);
                return 2;
            }
            ssize_t r = read(c[i].fd, back + got, HELLO - got);
            if (r > 0)
                got += (size_t)r;
            else if (r == 0 || errno != EAGAIN)
                die("hello read");
            else
                poll(&(struct pollfd){.fd = c[i].fd, .events = POLLIN}, 1, TICK_MS);
        }
        if (memcmp(back, c[i].hello, HELLO) != 0) {
            fprintf(stderr, "vs_pair: hello echo differs on conn %d\n", i);
            return 2;
        }
    }
    FILE *rf = NULL;
    char tmpname[512];
    if (ready_file) {
        snprintf(tmpname, sizeof(tmpname), "%s.tmp", ready_file);
        rf = fopen(tmpname, "w");
    }
    for (int i = 0; i < n; i++) {
        struct sockaddr_in l, p;
        socklen_t ll = sizeof(l), pl = sizeof(p);
        getsockname(c[i].fd, (void *)&l, &ll);
        getpeername(c[i].fd, (void *)&p, &pl);
        char ls[64], ps[64];
        addr_str(&l, ls, sizeof(ls));
        addr_str(&p, ps, sizeof(ps));
        printf("PAIR-CONN %d fd=%d local=%s peer=%s%s\n", i, c[i].fd, ls, ps,
               c[i].data ? " data" : "");
        if (rf)
            fprintf(rf, "%d %s %s\n", i, ls, ps);
    }
    fflush(stdout);
    if (rf) {
        fclose(rf);
        rename(tmpname, ready_file);
    }
    if (start_file && !sleep_until_exists(start_file, end)) {
        fprintf(stderr, "vs_pair: timeout waiting for %s\n", start_file);
        return 2;
    }
    while (go_file && !exists(go_file)) {
        if (now_s() > end) {
            fprintf(stderr, "vs_pair: timeout waiting for %s\n", go_file);
            return 2;
        }
        tick(c, n);
    }
    /* Data. */
    static uint8_t out[65536], in[65536], want[65536];
    uint64_t chunk_seed = 0x9e3779b97f4a7c15ull;
    int active = 0;
    for (int i = 0; i < n; i++)
        active += c[i].data && !c[i].dead;
    while (active > 0 && now_s() < end) {
        struct pollfd p[MAXC];
        for (int i = 0; i < n; i++) {
            short ev = 0;
            if (c[i].data && !c[i].end) {
                ev = POLLIN;
                if (c[i].sent < bytes)
                    ev |= POLLOUT;
            }
            p[i] = (struct pollfd){.fd = c[i].dead ? -1 : c[i].fd, .events = ev};
        }
        poll(p, n, TICK_MS);
        for (int i = 0; i < n; i++) {
            struct conn *k = &c[i];
            if (!k->data || k->end || k->dead)
                continue;
            if (k->sent < bytes) {
                size_t len = 1 + next(&chunk_seed) % sizeof(out);
                if (len > bytes - k->sent)
                    len = bytes - k->sent;
                uint64_t save = k->seed_tx;
                fill(&k->seed_tx, out, len);
                ssize_t w = write(k->fd, out, len);
                if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    printf("PAIR-DATA conn=%d write error after %llu bytes: %s\n", i,
                           (unsigned long long)k->sent, strerror(errno));
                    k->end = true;
                    active--;
                    continue;
                }
                /* Regenerate exactly the bytes that went. */
                k->seed_tx = save;
                if (w > 0) {
                    fill(&k->seed_tx, out, (size_t)w);
                    fnv(&k->fnv_tx, out, (size_t)w);
                    k->sent += (size_t)w;
                }
                if (k->sent == bytes && !k->shut) {
                    shutdown(k->fd, SHUT_WR);
                    k->shut = true;
                }
            }
            ssize_t r = read(k->fd, in, sizeof(in));
            if (r > 0) {
                fill(&k->seed_rx, want, (size_t)r);
                if (!k->mismatch && memcmp(in, want, (size_t)r) != 0) {
                    size_t j = 0;
                    while (in[j] == want[j])
                        j++;
                    k->mismatch = true;
                    k->bad_at = k->rcvd + j;
                }
                fnv(&k->fnv_rx, in, (size_t)r);
                k->rcvd += (size_t)r;
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                if (r < 0)
                    printf("PAIR-DATA conn=%d read error: %s\n", i, strerror(errno));
                k->end = true;
                k->dead = true; /* not held any more */
                active--;
            }
        }
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (!c[i].data)
            continue;
        const char *res = c[i].mismatch                                ? "MISMATCH"
                          : (c[i].rcvd != bytes || c[i].sent != bytes) ? "SHORT"
                                                                       : "OK";
        bad += strcmp(res, "OK") != 0 || c[i].fnv_tx != c[i].fnv_rx;
        printf("PAIR-DATA conn=%d bytes=%llu sent=%llu rcvd=%llu sent_fnv=%016llx rcvd_fnv=%016llx "
               "result=%s",
               i, (unsigned long long)bytes, (unsigned long long)c[i].sent,
               (unsigned long long)c[i].rcvd, (unsigned long long)c[i].fnv_tx,
               (unsigned long long)c[i].fnv_rx, res);
        if (c[i].mismatch)
            printf(" first_bad_byte=%llu", (unsigned long long)c[i].bad_at);
        printf("\n");
    }
    fflush(stdout);
    while (hold_file && !exists(hold_file) && now_s() < end)
        tick(c, n);
    for (int i = 0; i < n; i++)
        close(c[i].fd);
    printf("PAIR-CLIENT %s\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: vs_pair server|client ...\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *ip = "10.77.0.1", *data = NULL, *ready = NULL, *start = NULL, *go = NULL,
               *hold = NULL;
    int port = 0, once = 0, n = 0;
    char *targets[MAXC];
    uint64_t bytes = 1 << 20;
    double timeout = 60;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "vs_pair: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--bind"))
            ip = v;
        else if (!strcmp(a, "--port"))
            port = atoi(v);
        else if (!strcmp(a, "--once"))
            once = atoi(v);
        else if (!strcmp(a, "--timeout"))
            timeout = atof(v);
        else if (!strcmp(a, "--conn") && n < MAXC)
            targets[n++] = (char *)v;
        else if (!strcmp(a, "--bytes"))
            bytes = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--data-conns"))
            data = v;
        else if (!strcmp(a, "--ready-file"))
            ready = v;
        else if (!strcmp(a, "--start-file"))
            start = v;
        else if (!strcmp(a, "--go-file"))
            go = v;
        else if (!strcmp(a, "--hold-file"))
            hold = v;
        else {
            fprintf(stderr, "vs_pair: unknown %s\n", a);
            return 2;
        }
    }
    if (!strcmp(argv[1], "server"))
        return server(ip, port, once, start, timeout);
    if (!strcmp(argv[1], "client") && n > 0)
        return client(targets, n, bytes, data, ready, start, go, hold, timeout);
    fprintf(stderr, "vs_pair: server needs --port, client --conn\n");
    return 2;
}
