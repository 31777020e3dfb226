/* bench/rdma/conns.c - many concurrent connections in one process, for the
 * memory-per-connection figure of bench/rdma/run (--conns N).
 *
 * Plain sockets (no libvsocket calls): run it under the preload to carry the
 * connections over vsocket.
 *
 *   conns server --port P [--bind A]
 *       one thread, poll(): accepts every connection and echoes what it reads.
 *   conns client --host H --port P -n N [--go FILE] [--stop FILE]
 *                [--max-seconds S]
 *       prints "ready pid=..." and waits until FILE --go exists (the driver
 *       measures the memory of both processes before); opens N connections
 *       (stops at the first that fails and keeps the others: that is the
 *       limit); then, round after round, writes 1 byte on every connection and
 *       waits (poll) for every echo, so that each connection keeps calling into
 *       vsocket and its upgrade progresses; after every round it looks for
 *       FILE --stop (the driver saw the connections upgraded), then holds
 *       every connection open without traffic until SIGTERM/SIGINT, closes them
 *       and exits.
 *
 * Both raise RLIMIT_NOFILE to its hard limit. Output: one line per event,
 * "key=value" pairs, on stdout (flushed). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t quit;
static void on_signal(int sig) { (void)sig; quit = 1; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        printf("nofile=%llu\n", (unsigned long long)rl.rlim_cur);
    }
}

static int resolve(const char *host, const char *port, int passive, struct sockaddr_storage *ss,
                   socklen_t *len)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    if (passive)
        hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc) {
        fprintf(stderr, "conns: %s: %s\n", host ? host : "*", gai_strerror(rc));
        return -1;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static int server(const char *bind_addr, const char *port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(bind_addr, port, 1, &ss, &len) < 0)
        return 2;
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&ss, len) < 0 || listen(lfd, 4096) < 0) {
        perror("conns server: listen");
        return 3;
    }
    printf("listening port=%s\n", port);
    fflush(stdout);
    size_t cap = 1024, n = 1;
    struct pollfd *p = calloc(cap, sizeof(*p));
    p[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    unsigned long accepted = 0, closed = 0;
    char buf[4096];
    while (!quit) {
        int r = poll(p, n, 1000);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            perror("conns server: poll");
            return 3;
        }
        if (p[0].revents & POLLIN) {
            for (;;) {
                int fd = accept(lfd, NULL, NULL);
                if (fd < 0) {
                    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                        fprintf(stderr, "conns server: accept after %lu: %s\n", accepted,
                                strerror(errno));
                        usleep(100000);
                    }
                    break;
                }
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                if (n == cap) {
                    cap *= 2;
                    p = realloc(p, cap * sizeof(*p));
                }
                p[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
                accepted++;
                /* Non-blocking listener after the first: accept every pending one. */
                fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
            }
        }
        for (size_t i = 1; i < n; i++) {
            if (!p[i].revents)
                continue;
            ssize_t k = read(p[i].fd, buf, sizeof(buf));
            if (k > 0) {
                if (write(p[i].fd, buf, (size_t)k) != k)
                    k = 0;
            }
            if (k <= 0 && !(k < 0 && (errno == EAGAIN || errno == EINTR))) {
                close(p[i].fd);
                p[i] = p[--n];
                p[n].revents = 0;
                i--;
                closed++;
            }
        }
    }
    printf("server accepted=%lu closed=%lu open=%zu\n", accepted, closed, n - 1);
    return 0;
}

static int exists(const char *f) { return f && access(f, F_OK) == 0; }

static int client(const char *host, const char *port, long want, const char *go, const char *stop,
                  double max_s)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (resolve(host, port, 0, &ss, &len) < 0)
        return 2;
    printf("ready pid=%d\n", getpid());
    fflush(stdout);
    while (go && !exists(go) && !quit)
        usleep(20000);
    int *fds = calloc((size_t)want, sizeof(int));
    struct pollfd *p = calloc((size_t)want, sizeof(*p));
    long n = 0, one = 1;
    double t0 = now_s();
    for (; n < want && !quit; n++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0) {
            printf("connect_failed at=%ld errno=%d error=\"%s\"\n", n, errno, strerror(errno));
            if (fd >= 0)
                close(fd);
            break;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(int));
        fds[n] = fd;
    }
    printf("connected n=%ld seconds=%.2f\n", n, now_s() - t0);
    fflush(stdout);
    double t1 = now_s();
    long round = 0;
    char c = 'x';
    while (!quit && !exists(stop) && now_s() - t1 < max_s) {
        for (long i = 0; i < n; i++) {
            if (write(fds[i], &c, 1) != 1) {
                printf("write_failed conn=%ld round=%ld error=\"%s\"\n", i, round, strerror(errno));
                return 3;
            }
            p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        }
        long left = n;
        double r0 = now_s();
        while (left > 0 && !quit) {
            int r = poll(p, (nfds_t)n, 1000);
            if (r < 0 && errno != EINTR) {
                perror("conns client: poll");
                return 3;
            }
            if (now_s() - r0 > 60) {
                printf("round_timeout round=%ld missing=%ld\n", round, left);
                return 3;
            }
            for (long i = 0; i < n && r > 0; i++) {
                if (!p[i].revents)
                    continue;
                char b;
                ssize_t k = read(fds[i], &b, 1);
                if (k == 1) {
                    p[i].fd = -1; /* poll ignores it for the rest of the round */
                    p[i].revents = 0;
                    left--;
                } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
                    printf("read_failed conn=%ld round=%ld error=\"%s\"\n", i, round,
                           k == 0 ? "EOF" : strerror(errno));
                    return 3;
                }
            }
        }
        round++;
        printf("round n=%ld seconds=%.3f elapsed=%.1f\n", round, now_s() - r0, now_s() - t1);
        fflush(stdout);
    }
    printf("holding n=%ld rounds=%ld\n", n, round);
    fflush(stdout);
    while (!quit)
        pause();
    double t2 = now_s();
    for (long i = 0; i < n; i++)
        close(fds[i]);
    printf("closed n=%ld seconds=%.2f\n", n, now_s() - t2);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
    usage:
        fprintf(stderr, "usage: conns server --port P [--bind A]\n"
                        "       conns client --host H --port P -n N [--go F] [--stop F] "
                        "[--max-seconds S]\n");
        return 2;
    }
    const char *host = NULL, *port = NULL, *bind_addr = NULL, *go = NULL, *stop = NULL;
    long n = 1000;
    double max_s = 600;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            goto usage;
        if (!strcmp(a, "--host"))
            host = v;
        else if (!strcmp(a, "--port"))
            port = v;
        else if (!strcmp(a, "--bind"))
            bind_addr = v;
        else if (!strcmp(a, "-n"))
            n = atol(v);
        else if (!strcmp(a, "--go"))
            go = v;
        else if (!strcmp(a, "--stop"))
            stop = v;
        else if (!strcmp(a, "--max-seconds"))
            max_s = atof(v);
        else
            goto usage;
        i++;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    raise_nofile();
    if (!strcmp(argv[1], "server") && port)
        return server(bind_addr, port);
    if (!strcmp(argv[1], "client") && host && port && n > 0)
        return client(host, port, n, go, stop, max_s);
    goto usage;
}
