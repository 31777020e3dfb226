/* vs_steps - one TCP connection driven through a script of steps, for the
 * cases that must put vsocket's set-up in a given state by an order of
 * events (tests/rdma/README.md, "Set-up timeouts").
 *
 *   vs_steps server IP:PORT [--timeout S] [--bufs B] STEP...
 *   vs_steps client IP:PORT [--timeout S] [--bufs B] STEP...
 *
 * The server binds, accepts one connection and closes its listener; the
 * client connects. --bufs B sets SO_SNDBUF and SO_RCVBUF to B before
 * (the kernel's buffers then hold what B allows, not what autotuning
 * grows to). Then each runs its steps in order, on a blocking socket:
 *
 *   send N              sends the next N bytes of this end's stream
 *   recv N              receives N bytes and compares them, byte by byte,
 *                       with the next N of the peer's stream
 *   calls-until F TEXT  poll()s the socket (20 ms) until file F has TEXT:
 *                       vsocket's set-up advances only at the program's
 *                       calls, and the call after which F says TEXT is the
 *                       last one (F: the end's own VSOCKET_LOG_FILE)
 *   quiet-until F       makes no socket call until file F exists
 *   call                one socket call (a poll that does not wait): the
 *                       set-up does what is due at a call, no more
 *   touch F             creates file F
 *   close               shuts its sending side down, reads to the end of
 *                       the stream (no byte more may come), closes
 *   close-at-once       closes the socket, nothing before (what it sent is
 *                       still the peer's to read; nothing more is received)
 *   fill                sends without blocking (MSG_DONTWAIT) until a send
 *                       would block: the peer's end holds all it can
 *   push-until F TEXT   one send without blocking every 20 ms (whatever it
 *                       takes counts) until file F has TEXT
 *   finish              shuts its sending side down, receives and compares
 *                       the peer's stream to its end, closes
 *
 * Each end's stream is a seeded pseudo-random sequence (its seed is its
 * role), so each end knows what the other must send. Output, then exit 0
 * only if every byte came as sent:
 *   STEPS-DATA role=R sent=N sent_fnv=X rcvd=M rcvd_fnv=Y result=OK
 * A step that fails prints STEPS-FAIL and exits 1; --timeout S (default
 * 300) bounds the whole run (a hang: STEPS-TIMEOUT, exit 3). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 20
#define CHUNK (64 << 10)

struct stream {
    uint64_t seed, pos, fnv;
};

static const char *step_now = "start";
static const char *role;

static void on_alarm(int sig)
{
    (void)sig;
    static const char head[] = "STEPS-TIMEOUT in step ";
    ssize_t rc = write(1, head, sizeof(head) - 1);
    rc = write(1, step_now, strlen(step_now));
    rc = write(1, "\n", 1);
    (void)rc;
    _exit(3);
}

static void fail(const char *what)
{
    printf("STEPS-FAIL in step %s: %s%s%s\n", step_now, what, errno ? ": " : "",
           errno ? strerror(errno) : "");
    exit(1);
}

/* Byte I of the stream seeded SEED (splitmix64 of its 8-byte block). */
static uint8_t stream_byte(uint64_t seed, uint64_t i)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i >> 3) + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint8_t)(z >> (8 * (i & 7)));
}

static void fnv(struct stream *s, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s->fnv = (s->fnv ^ p[i]) * 0x100000001b3ull;
}

static bool exists(const char *f)
{
    struct stat st;
    return stat(f, &st) == 0;
}

static bool file_has(const char *f, const char *text)
{
    FILE *fp = fopen(f, "r");
    if (!fp)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof(line), fp))
        found = strstr(line, text) != NULL;
    fclose(fp);
    return found;
}

static void touch(const char *f)
{
    FILE *fp = fopen(f, "w");
    if (!fp)
        fail("touch");
    fclose(fp);
}

static void nap(void)
{
    nanosleep(&(struct timespec){0, TICK_MS * 1000000L}, NULL);
}

/* One send of at most N next bytes of the stream: what it took, or -1
 * (errno set). */
static ssize_t send_some(int fd, struct stream *s, uint64_t n, int flags)
{
    static uint8_t buf[CHUNK];
    size_t len = n < CHUNK ? (size_t)n : CHUNK;
    for (size_t i = 0; i < len; i++)
        buf[i] = stream_byte(s->seed, s->pos + i);
    ssize_t w = send(fd, buf, len, MSG_NOSIGNAL | flags);
    if (w > 0) {
        fnv(s, buf, (size_t)w);
        s->pos += (uint64_t)w;
    }
    return w;
}

static void do_send(int fd, struct stream *s, uint64_t n)
{
    while (n > 0) {
        ssize_t w = send_some(fd, s, n, 0);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            fail("send");
        n -= (uint64_t)w;
    }
}

/* Sends without blocking: false once a send would block. */
static bool send_nowait(int fd, struct stream *s)
{
    ssize_t w = send_some(fd, s, CHUNK, MSG_DONTWAIT);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        fail("send");
    return w > 0;
}

static void do_fill(int fd, struct stream *s)
{
    uint64_t from = s->pos;
    while (send_nowait(fd, s))
        ;
    printf("STEP fill: %llu bytes\n", (unsigned long long)(s->pos - from));
}

/* One receive of at most N next bytes of the peer's stream, each compared:
 * what it took, 0 at the end, or -1 (errno set). */
static ssize_t recv_some(int fd, struct stream *s, uint64_t n)
{
    static uint8_t buf[CHUNK];
    ssize_t r = recv(fd, buf, n < CHUNK ? (size_t)n : CHUNK, 0);
    for (ssize_t i = 0; i < r; i++) {
        if (buf[i] != stream_byte(s->seed, s->pos + (uint64_t)i)) {
            errno = 0;
            printf("STEPS-DATA role=%s result=MISMATCH at byte %llu\n", role,
                   (unsigned long long)(s->pos + (uint64_t)i));
            fail("a byte differs from the peer's stream");
        }
    }
    if (r > 0) {
        fnv(s, buf, (size_t)r);
        s->pos += (uint64_t)r;
    }
    return r;
}

static void do_recv(int fd, struct stream *s, uint64_t n)
{
    while (n > 0) {
        ssize_t r = recv_some(fd, s, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            fail(r == 0 ? "the stream ended early" : "recv");
        }
        n -= (uint64_t)r;
    }
}

static void calls_until(int fd, const char *f, const char *text)
{
    unsigned calls = 0;
    while (!file_has(f, text)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, TICK_MS) < 0 && errno != EINTR)
            fail("poll");
        calls++;
    }
    printf("STEP calls-until: '%s' after %u calls\n", text, calls);
}

static void do_close(int fd)
{
    uint8_t b[4096];
    if (shutdown(fd, SHUT_WR) < 0)
        fail("shutdown");
    ssize_t r;
    while ((r = recv(fd, b, sizeof(b), 0)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            fail("recv to the end");
        errno = 0;
        fail("bytes after the peer's stream");
    }
    if (close(fd) < 0)
        fail("close");
}

/* Shuts our side down and takes the peer's stream to its end. */
static void do_finish(int fd, struct stream *rx)
{
    if (shutdown(fd, SHUT_WR) < 0)
        fail("shutdown");
    ssize_t r;
    while ((r = recv_some(fd, rx, CHUNK)) != 0)
        if (r < 0 && errno != EINTR)
            fail("recv");
    if (close(fd) < 0)
        fail("close");
}

static int open_conn(bool server, const char *ipport, int bufs)
{
    char ip[64];
    const char *colon = strrchr(ipport, ':');
    if (!colon || (size_t)(colon - ipport) >= sizeof(ip))
        fail("IP:PORT expected");
    memcpy(ip, ipport, (size_t)(colon - ipport));
    ip[colon - ipport] = '\0';
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        fail("not an IPv4 address");
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (s < 0)
        fail("socket");
    if (bufs > 0 && (setsockopt(s, SOL_SOCKET, SO_SNDBUF, &bufs, sizeof(bufs)) < 0 ||
                     setsockopt(s, SOL_SOCKET, SO_RCVBUF, &bufs, sizeof(bufs)) < 0))
        fail("setsockopt SO_SNDBUF/SO_RCVBUF");
    if (!server) {
        if (connect(s, (void *)&a, sizeof(a)) < 0)
            fail("connect");
        return s;
    }
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s, (void *)&a, sizeof(a)) < 0 || listen(s, 1) < 0)
        fail("bind/listen");
    printf("STEPS listening %s\n", ipport);
    fflush(stdout);
    int c = accept(s, NULL, NULL);
    if (c < 0)
        fail("accept");
    close(s);
    return c;
}

/* How many arguments step S takes; -1: no such step. */
static int step_args(const char *s)
{
    static const char *const names[] = {"close",       "call",   "send",         "recv",
                                        "quiet-until", "touch",  "calls-until",  "fill",
                                        "push-until",  "finish", "close-at-once"};
    static const int args[] = {0, 0, 1, 1, 1, 1, 2, 0, 2, 0, 0};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (!strcmp(s, names[k]))
            return args[k];
    return -1;
}

/* Whether ARGV from I is a script of known steps with their arguments:
 * checked before the first, so that a typo does not wait for a set-up. */
static bool script_ok(int argc, char **argv, int i)
{
    while (i < argc) {
        int need = step_args(argv[i]);
        if (need < 0 || i + need >= argc)
            return false;
        i += need + 1;
    }
    return true;
}

static void run(int fd, int argc, char **argv, int i, struct stream *tx, struct stream *rx)
{
    while (i < argc) {
        const char *s = argv[i];
        int need = step_args(s);
        step_now = s;
        printf("STEP %s%s%s\n", s, need ? " " : "", need ? argv[i + 1] : "");
        if (!strcmp(s, "send"))
            do_send(fd, tx, strtoull(argv[i + 1], NULL, 0));
        else if (!strcmp(s, "recv"))
            do_recv(fd, rx, strtoull(argv[i + 1], NULL, 0));
        else if (!strcmp(s, "calls-until"))
            calls_until(fd, argv[i + 1], argv[i + 2]);
        else if (!strcmp(s, "quiet-until"))
            while (!exists(argv[i + 1]))
                nap();
        else if (!strcmp(s, "touch"))
            touch(argv[i + 1]);
        else if (!strcmp(s, "call"))
            poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, 0);
        else if (!strcmp(s, "close"))
            do_close(fd);
        else if (!strcmp(s, "fill"))
            do_fill(fd, tx);
        else if (!strcmp(s, "push-until"))
            while (!file_has(argv[i + 1], argv[i + 2])) {
                send_nowait(fd, tx);
                nap();
            }
        else if (!strcmp(s, "finish"))
            do_finish(fd, rx);
        else if (!strcmp(s, "close-at-once") && close(fd) < 0)
            fail("close");
        fflush(stdout);
        i += need + 1;
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: vs_steps server|client IP:PORT [--timeout S] [--bufs B] STEP...\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool server = !strcmp(argv[1], "server");
    role = argv[1];
    int i = 3;
    unsigned timeout = 300;
    int bufs = 0;
    for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (!strcmp(argv[i], "--timeout"))
            timeout = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bufs"))
            bufs = atoi(argv[i + 1]);
        else
            break;
    }
    if (!script_ok(argc, argv, i)) {
        fprintf(stderr, "vs_steps: an unknown step or one short of its arguments\n");
        return 2;
    }
    signal(SIGALRM, on_alarm);
    alarm(timeout);
    int fd = open_conn(server, argv[2], bufs);
    struct stream tx = {.seed = server ? 2 : 1, .fnv = 0xcbf29ce484222325ull};
    struct stream rx = {.seed = server ? 1 : 2, .fnv = 0xcbf29ce484222325ull};
    run(fd, argc, argv, i, &tx, &rx);
    printf("STEPS-DATA role=%s sent=%llu sent_fnv=%016llx rcvd=%llu rcvd_fnv=%016llx result=OK\n",
           role, (unsigned long long)tx.pos, (unsigned long long)tx.fnv, (unsigned long long)rx.pos,
           (unsigned long long)rx.fnv);
    return 0;
}
