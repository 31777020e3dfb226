/* test_sockets.c - the fd table, socket lifetimes and statistics, exercised
 * through the interposed calls (this executable links the library's
 * objects, so its own socket(), close(), fork()... are vsocket's). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tcp_pair.h"
#include "config/config.h"
#include "core/fdtable.h"
#include "core/reason.h"

static char stats_dir[] = "/tmp/vsocket-test-XXXXXX";

static struct vs_stats_record *record_of(int fd)
{
    struct vs_sock *s = vs_fd_get(fd);
    if (!s)
        return NULL;
    struct vs_stats_record *r = s->stat;
    vs_sock_put(s);
    return r;
}

static void test_tracking_and_counters(void)
{
    int a, b;
    tcp_pair(&a, &b);
    struct vs_sock *s = vs_fd_get(a);
    CHECK(s != NULL);
    if (!s)
        return;
    CHECK_EQ(s->type, SOCK_STREAM);
    CHECK_EQ(atomic_load(&s->state), VS_STATE_CONNECTED);
    CHECK_EQ(atomic_load(&s->refs), 2); /* the fd and us */
    CHECK(strcmp(s->stat->reason, VS_REASON_NO_TRANSPORT) == 0 ||
          strcmp(s->stat->reason, VS_REASON_DISABLED) == 0);
    vs_sock_put(s);

    char buf[1000] = {0};
    CHECK_EQ(write(a, buf, sizeof(buf)), 1000);
    CHECK_EQ(send(a, buf, 24, 0), 24);
    size_t got = 0;
    while (got < 1024) {
        ssize_t n = recv(b, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    CHECK_EQ(record_of(a)->tx_bytes, 1024);
    CHECK_EQ(record_of(a)->tx_msgs, 2);
    CHECK_EQ(record_of(b)->rx_bytes, 1024);
    /* MSG_PEEK reads nothing. */
    CHECK_EQ(write(a, "x", 1), 1);
    CHECK_EQ(recv(b, buf, 1, MSG_PEEK), 1);
    CHECK_EQ(record_of(b)->rx_bytes, 1024);
    CHECK_EQ(recv(b, buf, 1, 0), 1);
    CHECK_EQ(record_of(b)->rx_bytes, 1025);
    CHECK_EQ(record_of(b)->local.port, record_of(a)->peer.port);
    close(a);
    close(b);
}

static void test_foreign_fds(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK(vs_fd_get(p[0]) == NULL);
    int u[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, u), 0);
    CHECK(vs_fd_get(u[0]) == NULL);
    CHECK(vs_fd_get(-1) == NULL);
    CHECK(vs_fd_get(1 << 30) == NULL);
    close(p[0]), close(p[1]), close(u[0]), close(u[1]);
}

static void test_dup_and_close(void)
{
    int a, b;
    tcp_pair(&a, &b);
    struct vs_stats_record *r = record_of(a);
    int d = dup(a);
    int f = fcntl(a, F_DUPFD_CLOEXEC, 100);
    CHECK(d >= 0 && f >= 100);
    CHECK(record_of(d) == r && record_of(f) == r);
    close(a);
    CHECK_EQ(atomic_load(&r->use), VS_REC_LIVE); /* still open through d and f */
    CHECK(r->fd == d || r->fd == f);
    CHECK(vs_fd_get(a) == NULL || record_of(a) != r);
    /* dup2 over a tracked fd releases what it named. */
    int c, e;
    tcp_pair(&c, &e);
    struct vs_stats_record *rc = record_of(c);
    CHECK_EQ(dup2(d, c), c);
    CHECK(record_of(c) == r);
    CHECK_EQ(atomic_load(&rc->use), VS_REC_CLOSED);
    close(c);
    close(d);
    close(f);
    CHECK_EQ(atomic_load(&r->use), VS_REC_CLOSED);
    close(b);
    close(e);
}

static void test_adoption(void)
{
    /* A socket made behind our back, as an exec'd image inherits one. */
    int fd = (int)syscall(SYS_socket, AF_INET6, SOCK_DGRAM, 0);
    CHECK(fd >= 0);
    struct vs_sock *s = vs_fd_get(fd);
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ(s->family, AF_INET6);
        CHECK_EQ(s->type, SOCK_DGRAM);
        vs_sock_put(s);
    }
    /* fclose closes inside libc: the number must not stay a socket. */
    FILE *f = fdopen(fd, "r+");
    CHECK(f != NULL);
    fclose(f);
    int file = open("/dev/null", O_RDONLY);
    CHECK_EQ(file, fd);
    CHECK(vs_fd_get(file) == NULL);
    close(file);
}

static void test_close_range(void)
{
    int a, b;
    tcp_pair(&a, &b);
    struct vs_stats_record *ra = record_of(a), *rb = record_of(b);
    int lo = a < b ? a : b, hi = a < b ? b : a;
    CHECK_EQ(close_range((unsigned)lo, (unsigned)hi, 0), 0);
    CHECK_EQ(atomic_load(&ra->use), VS_REC_CLOSED);
    CHECK_EQ(atomic_load(&rb->use), VS_REC_CLOSED);
}

static int stats_file_exists(pid_t pid)
{
    char path[256];
    vs_stats_path(stats_dir, pid, vs_stats_pid_ns(0), path, sizeof(path));
    return access(path, F_OK) == 0;
}

static void test_fork(void)
{
    int a, b;
    tcp_pair(&a, &b);
    struct vs_stats_record *r = record_of(a);
    CHECK(stats_file_exists(getpid()));
    pid_t child = fork();
    if (child == 0) {
        /* The child's own segment, with the inherited socket in it, at the
         * same address; its counting must not reach the parent's file. */
        int ok = stats_file_exists(getpid()) && record_of(a) == r &&
                 atomic_load(&r->use) == VS_REC_LIVE && write(a, "hello", 5) == 5 &&
                 r->tx_bytes == 5;
        _exit(ok ? 0 : 1);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char path[256];
    vs_stats_path(stats_dir, child, vs_stats_pid_ns(0), path, sizeof(path));
    unlink(path);
    CHECK_EQ(r->tx_bytes, 0);
    char buf[8];
    CHECK_EQ(read(b, buf, sizeof(buf)), 5);
    CHECK(stats_file_exists(getpid()));
    close(a);
    close(b);
}

struct race {
    int fd;
    volatile int stop;
};

static void *lookup_loop(void *arg)
{
    struct race *race = arg;
    /* Yield now and then: under valgrind, which runs one thread at a time,
     * three spinners would otherwise starve the thread that closes. */
    for (unsigned i = 1; !race->stop; i++) {
        if (i % 16 == 0)
            sched_yield();
        struct vs_sock *s = vs_fd_get(race->fd);
        if (s) {
            /* Whatever we hold must be alive. */
            if (atomic_load(&s->refs) == 0)
                abort();
            vs_sock_put(s);
        }
    }
    return NULL;
}

/* Lookups on one fd number while it is closed and re-created under them. */
static void test_concurrent_lookup_and_close(void)
{
    int a, b;
    tcp_pair(&a, &b);
    struct race race = {.fd = a};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, lookup_loop, &race);
    for (int i = 0; i < 20000; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        CHECK_EQ(dup2(s, a), a);
        close(s);
    }
    race.stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    struct vs_sock *s = vs_fd_get(a);
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ(atomic_load(&s->refs), 2);
        vs_sock_put(s);
    }
    close(a);
    close(b);
}

static int signal_fd;
static volatile sig_atomic_t signal_sends;

static void on_alarm(int sig)
{
    (void)sig;
    if (send(signal_fd, "s", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
        signal_sends++;
}

/* Data calls from a signal handler while the interrupted thread creates and
 * closes sockets (which takes our locks): no deadlock, nothing lost. */
static void test_signal_handler_io(void)
{
    int a, b;
    tcp_pair(&a, &b);
    signal_fd = a;
    struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {.it_interval = {0, 200}, .it_value = {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    uint64_t received = 0;
    char buf[4096];
    for (int i = 0; i < 20000; i++) {
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        close(dup(s));
        close(s);
        ssize_t n = recv(b, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0)
            received += (uint64_t)n;
    }
    struct itimerval off = {0};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN); /* one may still be pending */
    shutdown(a, SHUT_WR);
    for (ssize_t n; (n = recv(b, buf, sizeof(buf), 0)) > 0;)
        received += (uint64_t)n;
    CHECK(signal_sends > 0);
    CHECK_EQ(received, signal_sends);
    CHECK_EQ(record_of(a)->tx_bytes, signal_sends);
    close(a);
    close(b);
}

int main(void)
{
    CHECK(mkdtemp(stats_dir) != NULL);
    setenv("VSOCKET_STATS_DIR", stats_dir, 1);
    vs_config_load(&vs_config);
    test_tracking_and_counters();
    test_foreign_fds();
    test_dup_and_close();
    test_adoption();
    test_close_range();
    test_fork();
    test_concurrent_lookup_and_close();
    test_signal_handler_io();
    char path[256];
    vs_stats_path(stats_dir, getpid(), vs_stats_pid_ns(0), path, sizeof(path));
    unlink(path);
    rmdir(stats_dir);
    return check_finish("test_sockets");
}
