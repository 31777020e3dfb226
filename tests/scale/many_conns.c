/* many_conns.c - many concurrent TCP connections between two processes, for
 * the scale test (tests/scale/test_many_conns.py, issue 9). Run each role
 * under `vsocket run`; every role prints one JSON object per line.
 *
 *   many_conns server N
 *       Listens on 127.0.0.1 (port chosen by the kernel), prints
 *       {"ev":"listening","port":P}, and echoes whatever any connection sends
 *       (epoll, level-triggered, non-blocking; one shared read buffer, no
 *       per-connection memory). Exits 0 once it has held N connections at once
 *       and all of them are closed again.
 *
 *   many_conns client PORT N [BYTES [CHUNK [PING_PASSES]]]
 *       Prints {"ev":"ready"} and waits for a line "go" on stdin (the driver
 *       measures the process before it connects). Then opens N connections and
 *       keeps them all open; echoes BYTES (default 1 MiB) on each in turn in
 *       CHUNK-byte pieces (default 64 KiB: write all, read the chunk back,
 *       compare with the connection's own pattern); then PING_PASSES (default
 *       2) passes of one 16-byte ping-pong on every connection, 100 ms apart;
 *       then prints {"ev":"idle"} and sits in epoll_wait on all of them (and
 *       stdin). Commands on stdin: "ping" (one more ping pass, then idle
 *       again), "quit" (close every connection, print {"ev":"closed"}, exit).
 *       Any event on an idle connection is an error.
 *
 *   many_conns busy PORT K SECONDS
 *       Opens K connections, ping-pongs 64-byte messages on all of them (one
 *       in flight on each) for 0.3 s of warm-up, then SECONDS measured, prints
 *       {"ev":"busy","round_trips":R,"per_sec":X}, waits for "quit" on stdin,
 *       closes them and exits.
 *
 * Exit codes: 0 success, 1 a check failed (wrong data, unexpected event),
 * 2 a system call failed or usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double t0;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double elapsed(void)
{
    return now() - t0;
}

static void die(const char *what, long index)
{
    int e = errno;
    printf("{\"ev\":\"error\",\"pid\":%d,\"what\":\"%s\",\"index\":%ld,\"errno\":%d,"
           "\"error\":\"%s\",\"t\":%.3f}\n",
           (int)getpid(), what, index, e, strerror(e), elapsed());
    fflush(stdout);
    exit(2);
}

static void fail(const char *what, long index)
{
    printf("{\"ev\":\"error\",\"pid\":%d,\"what\":\"%s\",\"index\":%ld,\"t\":%.3f}\n",
           (int)getpid(), what, index, elapsed());
    fflush(stdout);
    exit(1);
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* Write all of buf; on EAGAIN (non-blocking server sockets) wait with poll. */
static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w > 0) {
            buf += w;
            len -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 10000) <= 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Read exactly len bytes (blocking socket); 0 ok, -1 error or end of stream. */
static int read_exact(int fd, char *buf, size_t len)
{
    while (len > 0) {
        ssize_t r = read(fd, buf, len);
        if (r > 0) {
            buf += r;
            len -= (size_t)r;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else {
            if (r == 0)
                errno = ECONNRESET;
            return -1;
        }
    }
    return 0;
}

/* A line from stdin, read with read(2) (fd 0 sits in an epoll set, so no
 * stdio buffering). Returns the line without its newline, "" at end of file. */
static const char *stdin_line(void)
{
    static char buf[256];
    static size_t have;
    static char line[256];
    for (;;) {
        char *nl = memchr(buf, '\n', have);
        if (nl) {
            size_t n = (size_t)(nl - buf);
            memcpy(line, buf, n);
            line[n] = '\0';
            memmove(buf, nl + 1, have - n - 1);
            have -= n + 1;
            return line;
        }
        if (have == sizeof(buf))
            have = 0;
        ssize_t r = read(0, buf + have, sizeof(buf) - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return "";
        have += (size_t)r;
    }
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int connect_one(int port)
{
    struct sockaddr_in a = loopback(port);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
        return -1;
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return s;
}

/* ------------------------------------------------------------------ server */

static int server(long want)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = loopback(0);
    socklen_t al = sizeof(a);
    int one = 1;
    if (l < 0)
        die("socket", -1);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, SOMAXCONN) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0)
        die("listen", -1);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = l};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &e) < 0)
        die("epoll", -1);
    printf("{\"ev\":\"listening\",\"role\":\"server\",\"pid\":%d,\"port\":%d}\n", (int)getpid(),
           ntohs(a.sin_port));
    fflush(stdout);

    static char buf[64 * 1024];
    struct epoll_event evs[256];
    long open = 0, peak = 0, accepted = 0, closed = 0;
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait", -1);
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == l) {
                for (;;) {
                    int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
                    if (c < 0) {
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED)
                            break;
                        die("accept", accepted);
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    struct epoll_event ce = {.events = EPOLLIN, .data.fd = c};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce) < 0)
                        die("epoll_ctl add", accepted);
                    accepted++;
                    if (++open > peak)
                        peak = open;
                    if (accepted % 1000 == 0) {
                        printf("{\"ev\":\"accepted\",\"pid\":%d,\"n\":%ld,\"open\":%ld,"
                               "\"t\":%.3f}\n",
                               (int)getpid(), accepted, open, elapsed());
                        fflush(stdout);
                    }
                }
                continue;
            }
            /* Echo: a few reads per event, so one busy connection cannot
             * starve the others. */
            int gone = 0;
            for (int round = 0; round < 4; round++) {
                ssize_t r = read(fd, buf, sizeof(buf));
                if (r > 0) {
                    if (write_all(fd, buf, (size_t)r) < 0)
                        gone = 1;
                    else if ((size_t)r == sizeof(buf))
                        continue;
                } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                    gone = 1;
                }
                break;
            }
            if (gone) {
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                open--;
                closed++;
                if (closed % 1000 == 0) {
                    printf("{\"ev\":\"closed\",\"pid\":%d,\"n\":%ld,\"open\":%ld,\"t\":%.3f}\n",
                           (int)getpid(), closed, open, elapsed());
                    fflush(stdout);
                }
                if (open == 0 && peak >= want) {
                    printf("{\"ev\":\"done\",\"role\":\"server\",\"pid\":%d,\"accepted\":%ld,"
                           "\"peak\":%ld,\"t\":%.3f}\n",
                           (int)getpid(), accepted, peak, elapsed());
                    return 0;
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ client */

/* The bytes of connection `conn` at stream offset `off`: a per-connection
 * pattern, so a byte delivered on the wrong connection or at the wrong place
 * is caught. */
static void fill_pattern(char *p, size_t len, long conn, size_t off)
{
    size_t i = 0;
    while (i < len) {
        size_t at = off + i, word = at / 8, skip = at % 8;
        uint64_t x = (uint64_t)conn * 0x9E3779B97F4A7C15ull + word;
        x ^= x >> 29;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 32;
        size_t take = 8 - skip < len - i ? 8 - skip : len - i;
        memcpy(p + i, (const char *)&x + skip, take);
        i += take;
    }
}

static void ping_pass(const int *fds, long n, int pass)
{
    char msg[16], back[16];
    double start = now();
    for (long i = 0; i < n; i++) {
        memset(msg, '.', sizeof(msg));
        memcpy(msg, &i, sizeof(i));
        msg[sizeof(i)] = (char)pass;
        if (write_all(fds[i], msg, sizeof(msg)) < 0 || read_exact(fds[i], back, sizeof(back)) < 0)
            die("ping", i);
        if (memcmp(msg, back, sizeof(msg)) != 0)
            fail("ping-mismatch", i);
    }
    printf("{\"ev\":\"pinged\",\"pid\":%d,\"pass\":%d,\"seconds\":%.3f,\"t\":%.3f}\n",
           (int)getpid(), pass, now() - start, elapsed());
    fflush(stdout);
}

static int client(int port, long n, size_t bytes, size_t chunk, int passes)
{
    int *fds = calloc((size_t)n, sizeof(int));
    char *out = malloc(chunk), *in = malloc(chunk);
    if (!fds || !out || !in)
        die("malloc", -1);
    printf("{\"ev\":\"ready\",\"role\":\"client\",\"pid\":%d,\"n\":%ld}\n", (int)getpid(), n);
    fflush(stdout);
    const char *cmd;
    while (strcmp(cmd = stdin_line(), "go") != 0)
        if (!*cmd)
            return 0;
    t0 = now();

    /* 1. All N connections open at the same time. */
    for (long i = 0; i < n; i++) {
        fds[i] = connect_one(port);
        if (fds[i] < 0)
            die("connect", i);
        if ((i + 1) % 1000 == 0 || i + 1 == n) {
            printf("{\"ev\":\"connected\",\"pid\":%d,\"n\":%ld,\"t\":%.3f}\n", (int)getpid(), i + 1,
                   elapsed());
            fflush(stdout);
        }
    }
    double t_connected = elapsed();

    /* 2. BYTES echoed on each, CHUNK at a time, checked. */
    for (long i = 0; i < n; i++) {
        for (size_t off = 0; off < bytes; off += chunk) {
            size_t len = bytes - off < chunk ? bytes - off : chunk;
            fill_pattern(out, len, i, off);
            if (write_all(fds[i], out, len) < 0)
                die("echo write", i);
            if (read_exact(fds[i], in, len) < 0)
                die("echo read", i);
            if (memcmp(out, in, len) != 0)
                fail("echo-mismatch", i);
        }
        if ((i + 1) % 1000 == 0 || i + 1 == n) {
            printf("{\"ev\":\"echoed\",\"pid\":%d,\"n\":%ld,\"t\":%.3f}\n", (int)getpid(), i + 1,
                   elapsed());
            fflush(stdout);
        }
    }
    double t_echoed = elapsed();

    /* 3. Small ping-pongs on every connection, so that each connection's
     *    set-up has calls at both ends to finish on. */
    for (int p = 1; p <= passes; p++) {
        if (p > 1)
            pause_ms(100);
        ping_pass(fds, n, p);
    }

    free(out);
    free(in);
    /* 4. Idle in epoll_wait on all of them, like a client holding connections. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create", -1);
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = (uint64_t)-1};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, 0, &e) < 0)
        die("epoll_ctl stdin", -1);
    for (long i = 0; i < n; i++) {
        e.events = EPOLLIN | EPOLLRDHUP;
        e.data.u64 = (uint64_t)i;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e) < 0)
            die("epoll_ctl", i);
    }
    printf("{\"ev\":\"idle\",\"role\":\"client\",\"pid\":%d,\"n\":%ld,\"connect_s\":%.3f,"
           "\"echo_s\":%.3f,\"total_s\":%.3f,\"bytes\":%zu,\"t\":%.3f}\n",
           (int)getpid(), n, t_connected, t_echoed - t_connected, elapsed(), bytes, elapsed());
    fflush(stdout);

    struct epoll_event evs[64];
    int pass = passes;
    double last_beat = now();
    for (;;) {
        int k = epoll_wait(ep, evs, 64, 1000);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait", -1);
        }
        if (now() - last_beat >= 10) {
            last_beat = now();
            printf("{\"ev\":\"idling\",\"pid\":%d,\"t\":%.3f}\n", (int)getpid(), elapsed());
            fflush(stdout);
        }
        for (int j = 0; j < k; j++) {
            if (evs[j].data.u64 != (uint64_t)-1) {
                printf("{\"ev\":\"error\",\"pid\":%d,\"what\":\"event-on-idle-connection\","
                       "\"index\":%" PRIu64 ",\"events\":%u,\"t\":%.3f}\n",
                       (int)getpid(), evs[j].data.u64, evs[j].events, elapsed());
                fflush(stdout);
                return 1;
            }
            cmd = stdin_line();
            if (strcmp(cmd, "ping") == 0) {
                ping_pass(fds, n, ++pass);
                printf("{\"ev\":\"idle\",\"role\":\"client\",\"pid\":%d,\"n\":%ld,\"t\":%.3f}\n",
                       (int)getpid(), n, elapsed());
                fflush(stdout);
            } else if (strcmp(cmd, "quit") == 0 || !*cmd) {
                double start = now();
                for (long i = 0; i < n; i++)
                    close(fds[i]);
                printf("{\"ev\":\"closed\",\"role\":\"client\",\"pid\":%d,\"n\":%ld,"
                       "\"seconds\":%.3f,\"t\":%.3f}\n",
                       (int)getpid(), n, now() - start, elapsed());
                fflush(stdout);
                free(fds);
                return 0;
            }
        }
    }
}

/* -------------------------------------------------------------------- busy */

static int busy(int port, int k, double seconds)
{
    int *fds = calloc((size_t)k, sizeof(int));
    if (!fds)
        die("malloc", -1);
    t0 = now();
    for (int i = 0; i < k; i++)
        if ((fds[i] = connect_one(port)) < 0)
            die("connect", i);
    char msg[64], back[64];
    memset(msg, 'b', sizeof(msg));
    long trips = 0;
    double start = now(), warm_end = start + 0.3, end = warm_end + seconds;
    int measuring = 0;
    for (;;) {
        double t = now();
        if (!measuring && t >= warm_end) {
            measuring = 1;
            trips = 0;
            start = t;
        }
        if (measuring && t >= end)
            break;
        for (int i = 0; i < k; i++) {
            msg[0] = (char)('A' + i % 26);
            if (write_all(fds[i], msg, sizeof(msg)) < 0)
                die("busy write", i);
        }
        for (int i = 0; i < k; i++) {
            if (read_exact(fds[i], back, sizeof(back)) < 0)
                die("busy read", i);
            if (back[0] != (char)('A' + i % 26))
                fail("busy-mismatch", i);
        }
        trips += k;
    }
    double took = now() - start;
    printf("{\"ev\":\"busy\",\"role\":\"busy\",\"pid\":%d,\"conns\":%d,\"seconds\":%.3f,"
           "\"round_trips\":%ld,\"per_sec\":%.1f}\n",
           (int)getpid(), k, took, trips, (double)trips / took);
    fflush(stdout);
    const char *cmd;
    while ((cmd = stdin_line())[0] && strcmp(cmd, "quit") != 0) {
    }
    for (int i = 0; i < k; i++)
        close(fds[i]);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    t0 = now();
    if (argc == 3 && strcmp(argv[1], "server") == 0)
        return server(atol(argv[2]));
    if (argc >= 4 && argc <= 7 && strcmp(argv[1], "client") == 0) {
        long n = atol(argv[3]);
        size_t bytes = argc > 4 ? (size_t)atol(argv[4]) : 1 << 20;
        size_t chunk = argc > 5 ? (size_t)atol(argv[5]) : 64 << 10;
        int passes = argc > 6 ? atoi(argv[6]) : 2;
        if (n < 1 || chunk < 1)
            goto usage;
        return client(atoi(argv[2]), n, bytes, chunk, passes);
    }
    if (argc == 5 && strcmp(argv[1], "busy") == 0 && atoi(argv[3]) > 0)
        return busy(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
usage:
    fprintf(stderr, "usage: many_conns server N\n"
                    "       many_conns client PORT N [BYTES [CHUNK [PING_PASSES]]]\n"
                    "       many_conns busy PORT K SECONDS\n");
    return 2;
}
