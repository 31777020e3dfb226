/* epoll_rearm.c - run under `vsocket run` (ctest epoll_rearm_kernel, _shm).
 *
 * nfs-ganesha's RPC library (ntirpc) waits in several threads on one epoll
 * set, registers each connection EPOLLIN | EPOLLONESHOT and re-arms it with
 * EPOLL_CTL_MOD after every request, from whichever thread served it. Two
 * things hung it over shm (issue 25; a third, errno after a send that
 * succeeded, is the semantics scenario io_errno_kept), each checked here by
 * an ordering of events, never a clock (a missing wake-up fails after 20 s):
 *
 *  1. rearm: a thread asleep in epoll_wait while another re-arms a fired
 *     one-shot record (MOD) must hear of data that comes after: the kernel
 *     wakes such a wait, and so must vsocket (it had armed only the records
 *     enabled when it went to sleep);
 *  2. added: the same for a record ADDed while the thread sleeps, its socket
 *     already on shm (never seen to fail: a guard beside the first);
 *  3. stale: a kernel registration outlives close() while another
 *     descriptor of the file is open (ntirpc dups each socket for its
 *     EPOLLOUT registration). Its events carry the old tag, which must not
 *     speak for the socket that takes the number next (the next connection
 *     got its predecessor's hang-up, and was never read).
 *
 * The peer is a child process (under vsocket too): for each 'x' it sends
 * REPLY bytes, for each 'p' one byte, and 'q' closes the connection. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ring_use.h"

#define REPLY 4096
#define ROUNDS 20

static int ep;
static pid_t poller_tid;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void *mailbox; /* the data of the last event the poller saw */
static int mails;

static void fail(const char *what)
{
    fprintf(stderr, "epoll_rearm: %s\n", what);
    exit(1);
}

static void serve(int c)
{
    static char reply[REPLY];
    char b;
    while (recv(c, &b, 1, 0) == 1) {
        if (b == 'q')
            break;
        size_t len = b == 'x' ? sizeof(reply) : 1;
        for (size_t off = 0; off < len;) {
            ssize_t n = send(c, reply + off, len - off, MSG_NOSIGNAL);
            if (n <= 0)
                _exit(1);
            off += (size_t)n;
        }
    }
    close(c);
}

/* One connection at a time would not do: the stale case keeps one open
 * while the next is made. A child per connection. */
static void peer(int l)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGCHLD, SIG_IGN);
    for (int c; (c = accept(l, NULL, NULL)) >= 0; close(c))
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            serve(c);
            _exit(0);
        }
    _exit(0);
}

static void *poller(void *arg)
{
    (void)arg;
    poller_tid = (pid_t)syscall(SYS_gettid);
    for (;;) {
        struct epoll_event ev;
        int n = epoll_wait(ep, &ev, 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != 1)
            fail("poller: epoll_wait failed");
        pthread_mutex_lock(&mu);
        mailbox = ev.data.ptr;
        mails++;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* The data of the poller's next event, or NULL after 20 s. */
static void *next_mail(int seen)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&mu);
    while (mails == seen && pthread_cond_timedwait(&cv, &mu, &until) == 0)
        ;
    void *got = mails == seen ? NULL : mailbox;
    pthread_mutex_unlock(&mu);
    return got;
}

static int mails_now(void)
{
    pthread_mutex_lock(&mu);
    int n = mails;
    pthread_mutex_unlock(&mu);
    return n;
}

/* The poller is asleep in the kernel (its state and wait channel say so),
 * not merely between two calls. */
static void wait_poller_asleep(void)
{
    char path[96], buf[256];
    for (int i = 0; i < 20000; i++) {
        snprintf(path, sizeof(path), "/proc/self/task/%d/wchan", (int)poller_tid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        if (strstr(buf, "ep_poll") || strstr(buf, "epoll"))
            return;
        usleep(1000);
    }
    fail("the poller never went to sleep in epoll_wait");
}

static int connect_to(const struct sockaddr_in *a)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof(*a)) < 0)
        fail("connect");
    return c;
}

static void ask(int c, char what)
{
    if (send(c, &what, 1, MSG_NOSIGNAL) != 1)
        fail("send");
}

static void take(int c, size_t len)
{
    static char buf[REPLY];
    if (recv(c, buf, len, MSG_WAITALL) != (ssize_t)len)
        fail("recv of a reply");
}

static long rings_now(void)
{
    struct ring_use u;
    return ring_use_of(getpid(), &u) == 0 ? u.rings : 0;
}

/* Ping-pongs with C, new, until the process maps its two rings (shm: it
 * moved there), then 20 more (both ends read from the rings by then, not
 * TCP: the wake-ups under test are the rings'), or, on the kernel, a few. */
static void settle(int c)
{
    long rings = rings_now() + 2;
    int after = -1;
    for (int i = 0; i < 3000; i++) {
        if (after < 0 && i >= 3 && (!shm_expected() || rings_now() >= rings))
            after = i;
        if (after >= 0 && i >= after + 20)
            return;
        ask(c, 'p');
        take(c, 1);
        usleep(1000);
    }
    fail("the connection never moved to shm");
}

static void rearm(const struct sockaddr_in *a, int *conn)
{
    *conn = connect_to(a);
    settle(*conn);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = conn};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, *conn, &ev) < 0)
        fail("epoll_ctl ADD");
    for (int round = 0; round < ROUNDS; round++) {
        int seen = mails_now();
        if (round > 0) {
            wait_poller_asleep();
            if (epoll_ctl(ep, EPOLL_CTL_MOD, *conn, &ev) < 0)
                fail("epoll_ctl MOD");
        }
        ask(*conn, 'x');
        void *got = next_mail(seen);
        if (!got) {
            fprintf(stderr,
                    "epoll_rearm: rearm, round %d: re-armed by MOD while the poller "
                    "slept, and no event in 20 s\n",
                    round);
            exit(1);
        }
        if (got != conn)
            fail("rearm: an event with data the program never registered");
        take(*conn, REPLY);
    }
}

static void added(const struct sockaddr_in *a, int *conn)
{
    *conn = connect_to(a);
    settle(*conn);
    int seen = mails_now();
    wait_poller_asleep();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = conn};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, *conn, &ev) < 0)
        fail("epoll_ctl ADD");
    ask(*conn, 'x');
    void *got = next_mail(seen);
    if (!got)
        fail("added: ADDed while the poller slept, and no event in 20 s");
    if (got != conn)
        fail("added: an event with data the program never registered");
    take(*conn, REPLY);
    if (epoll_ctl(ep, EPOLL_CTL_DEL, *conn, NULL) < 0)
        fail("epoll_ctl DEL");
}

/* In a set of its own, waited on by this thread. Both connections stay
 * young (on TCP: no call of theirs starts a set-up), as ganesha's were: the
 * old registration then watches the TCP fd itself. */
static void stale(const struct sockaddr_in *a)
{
    static int old_tag, new_tag;
    int set = epoll_create1(EPOLL_CLOEXEC);
    int old = connect_to(a);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = &old_tag};
    if (epoll_ctl(set, EPOLL_CTL_ADD, old, &ev) < 0)
        fail("epoll_ctl ADD");
    int keep = dup(old); /* the file lives on: so does its registration */
    close(old);
    int next = connect_to(a);
    if (next != old)
        fail("stale: the next connection did not take the closed number");
    ev.data.ptr = &new_tag;
    if (epoll_ctl(set, EPOLL_CTL_ADD, next, &ev) < 0)
        fail("epoll_ctl ADD of the next connection");
    ask(keep, 'q'); /* the old connection hangs up */
    struct pollfd p = {.fd = keep, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 20000) != 1)
        fail("stale: the old connection never saw its peer close");
    struct epoll_event got[4];
    int n = epoll_wait(set, got, 4, 200);
    for (int i = 0; i < n; i++)
        if (got[i].data.ptr == &new_tag) {
            fprintf(stderr,
                    "epoll_rearm: stale: the next connection got events 0x%x it does "
                    "not have (its predecessor's, under the same number)\n",
                    got[i].events);
            exit(1);
        }
    close(keep);
    close(next);
    close(set);
}

/* Whether case NAME runs: all of them, or those named on the command line. */
static bool wanted(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return argc < 2;
}

int main(int argc, char **argv)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (l < 0 || bind(l, (struct sockaddr *)&a, al) < 0 || listen(l, 8) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0)
        fail("listener");
    pid_t child = fork();
    if (child == 0)
        peer(l);
    close(l);
    ep = epoll_create1(EPOLL_CLOEXEC);
    pthread_t t;
    pthread_create(&t, NULL, poller, NULL);
    static int c1, c2;
    if (wanted(argc, argv, "rearm"))
        rearm(&a, &c1);
    if (wanted(argc, argv, "added"))
        added(&a, &c2);
    if (wanted(argc, argv, "stale"))
        stale(&a);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    printf("epoll_rearm: passed\n");
    return 0;
}
