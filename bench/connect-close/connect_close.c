/* connect_close.c - short TCP connections: one small request, one response, close.
 *
 *   connect_close server [-p PORT] [-t THREADS] [-n COUNT] [-q REQ] [-r RESP]
 *       listens on 127.0.0.1:PORT (0: any; prints "port N"), THREADS threads block
 *       in accept(); per connection: read REQ bytes, write RESP bytes, close.
 *       Runs until killed, or until COUNT connections were served; then prints
 *       "served COUNT cpu_us X" (the process's user+system CPU per connection).
 *   connect_close client -p PORT [-d SECONDS | -n COUNT] [-c THREADS] [-q REQ] [-r RESP]
 *       THREADS threads each loop: socket, connect, write REQ bytes, read RESP
 *       bytes, close; for SECONDS (default 5) or COUNT connections in all.
 *       Prints one line: conns, seconds, conn/s, p50/p99/max of one connection
 *       (socket() to close() returned, us), the process's CPU per connection
 *       (user+system, us), errors.
 *
 * Defaults: REQ 64, RESP 1024, THREADS 1. Exit code 0 if no connection failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port, threads = 1;
static long count = -1;
static double seconds = 5;
static size_t req = 64, resp = 1024;
static int lfd;
static atomic_long started, errors;
static double deadline;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* read exactly len bytes; -1 on error or early EOF */
static int read_all(int fd, char *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const char *buf, size_t len)
{
    for (size_t put = 0; put < len;) {
        ssize_t n = write(fd, buf + put, len - put);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        put += (size_t)n;
    }
    return 0;
}

/* the next connection's turn, or 0 when COUNT is reached */
static int take(void)
{
    return count < 0 || atomic_fetch_add(&started, 1) < count;
}

static void *serve(void *arg)
{
    char *buf = calloc(1, req > resp ? req : resp);
    (void)arg;
    while (take()) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            perror("accept");
            atomic_fetch_add(&errors, 1);
            continue;
        }
        if (read_all(fd, buf, req) || write_all(fd, buf, resp))
            atomic_fetch_add(&errors, 1);
        close(fd);
    }
    free(buf);
    return NULL;
}

struct lat {
    float *us;
    size_t n, cap;
};

static void *client(void *arg)
{
    struct lat *l = arg;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((unsigned short)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char *buf = calloc(1, req > resp ? req : resp);
    while (count >= 0 || now() < deadline) {
        if (!take())
            break;
        double t0 = now();
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) || write_all(fd, buf, req) ||
            read_all(fd, buf, resp)) {
            if (atomic_fetch_add(&errors, 1) < 5)
                perror("client connection");
            if (fd >= 0)
                close(fd);
            continue;
        }
        close(fd);
        if (l->n == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 4096;
            l->us = realloc(l->us, l->cap * sizeof *l->us);
            if (!l->us)
                abort();
        }
        l->us[l->n++] = (float)((now() - t0) * 1e6);
    }
    free(buf);
    return NULL;
}

/* the process's user+system CPU so far, us */
static double cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static int cmp(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int usage(const char *me)
{
    fprintf(stderr,
            "usage: %s server [-p PORT] [-t THREADS] [-n COUNT] [-q REQ] [-r RESP]\n"
            "       %s client -p PORT [-d SECONDS | -n COUNT] [-c THREADS] [-q REQ] [-r RESP]\n",
            me, me);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")))
        return usage(argv[0]);
    int server = strcmp(argv[1], "server") == 0, opt;
    while ((opt = getopt(argc - 1, argv + 1, "p:t:c:n:d:q:r:")) != -1) {
        switch (opt) {
        case 'p':
            port = atoi(optarg);
            break;
        case 't':
        case 'c':
            threads = atoi(optarg);
            break;
        case 'n':
            count = atol(optarg);
            break;
        case 'd':
            seconds = atof(optarg);
            break;
        case 'q':
            req = (size_t)atol(optarg);
            break;
        case 'r':
            resp = (size_t)atol(optarg);
            break;
        default:
            return usage(argv[0]);
        }
    }
    if (threads < 1 || threads > 1024 || req < 1 || resp < 1 || (!server && port <= 0))
        return usage(argv[0]);
    signal(SIGPIPE, SIG_IGN);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    struct lat *lat = calloc((size_t)threads, sizeof *lat);

    if (server) {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((unsigned short)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        int one = 1;
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
            bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 4096) ||
            getsockname(lfd, (struct sockaddr *)&sa, &len)) {
            perror("server");
            return 1;
        }
        printf("port %d\n", ntohs(sa.sin_port));
        fflush(stdout);
    }
    double t0 = now();
    deadline = t0 + seconds;
    for (int i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, server ? serve : client, &lat[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    double el = now() - t0;
    if (server) {
        printf("served %ld cpu_us %.1f\n", count, cpu_us() / (double)(count ? count : 1));
        return errors ? 1 : 0;
    }

    size_t n = 0;
    for (int i = 0; i < threads; i++)
        n += lat[i].n;
    float *all = malloc((n ? n : 1) * sizeof *all);
    for (size_t i = 0, k = 0; i < (size_t)threads; k += lat[i].n, i++)
        memcpy(all + k, lat[i].us, lat[i].n * sizeof *all);
    qsort(all, n, sizeof *all, cmp);
    printf("conns %zu seconds %.3f conn/s %.1f p50_us %.1f p99_us %.1f max_us %.1f cpu_us %.1f "
           "errors %ld\n",
           n, el, (double)n / el, n ? all[n / 2] : 0.0, n ? all[n * 99 / 100] : 0.0,
           n ? all[n - 1] : 0.0, cpu_us() / (double)(n ? n : 1), (long)errors);
    return errors ? 1 : 0;
}
