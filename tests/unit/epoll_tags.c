/* epoll_tags.c - run under `vsocket run` (ctest epoll_tags_kernel, _shm).
 *
 * Issue 19: event loops (gRPC's epoll poller, among many) keep a pointer in
 * epoll_event.data, with a tag in its low bit, and dereference whatever
 * epoll_wait hands back. So what the program registered must be exactly
 * what it gets back: its data, only the events it asked for, never after
 * the registration was deleted, modified or its fd closed, whichever
 * transport the connection is on at the time.
 *
 * Every registration here is a fresh struct reg (never freed, never
 * reused), passed as a pointer with a tag in its low bit. Threads wait on
 * three epoll sets (one of them nested in a fourth, waited on through it),
 * while others ADD, MOD, DEL, dup, close and reopen connections to an echo
 * peer (a child process, under vsocket too) and send on them, so that
 * connections move to shm (after 5 ms of life) and some back to the kernel
 * (fdopen makes a connection leave the rings). Each event is checked:
 *   - its data is one of our registrations, with its tag bit, for this set;
 *   - its events are among those the registration asked for (or ERR, HUP);
 *   - the registration was still live when the wait began: a DEL, MOD or
 *     close that returned before the wait started stamps it dead first (a
 *     global counter orders the two, no clock);
 *   - a one-shot registration fires once.
 * Under the shm transport, connections must have been seen on the rings.
 * Exit 0 if no event broke a rule; else the first ones are printed. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ring_use.h"

#define CONNS 40
#define SETS 3    /* set 2 is nested in OUTER */
#define WAITERS 2 /* per set */
#define MUTATORS 4
#define OPS 2500 /* per mutator */
#define REGS (MUTATORS * OPS * 2 + CONNS * SETS * 4)
#define REG_MAGIC 0x5245475245475245ull
#define ASKABLE (EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP)

struct reg {
    uint64_t magic;
    int set, slot;
    uint32_t events;
    unsigned tag;             /* the low bit of its data */
    _Atomic uint64_t dead_at; /* clock when its DEL/MOD/close returned; 0: live */
    _Atomic unsigned hits;
};

/* A connection of the test, and its registrations (one per set at most,
 * and one per set for its dup). Guarded by mu. */
struct slot {
    pthread_mutex_t mu;
    int fd, dup;
    struct reg *reg[SETS], *dupreg[SETS];
    unsigned long born; /* ops counter when connected */
};

static struct reg regs[REGS];
static _Atomic unsigned regs_used;
static struct slot slots[CONNS];
static int sets[SETS], outer;
static _Atomic uint64_t clock_;
static _Atomic int stop;
static _Atomic unsigned violations, events_seen, ops_done, on_rings_seen, leaves;
static struct sockaddr_in peer;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    if (atomic_fetch_add(&violations, 1) >= 20)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("epoll_tags: VIOLATION: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static unsigned rnd(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return *seed >> 8;
}

/* --- the echo peer: what it gets, it sends back (what does not fit is dropped) --- */

static void echo_serve(int l)
{
    static struct pollfd p[256];
    static char buf[65536];
    int n = 1;
    p[0] = (struct pollfd){.fd = l, .events = POLLIN};
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        for (int i = n - 1; i >= 0; i--) {
            if (!p[i].revents)
                continue;
            if (p[i].fd == l) {
                int c = accept(l, NULL, NULL);
                if (c >= 0 && n < 256)
                    p[n++] = (struct pollfd){.fd = c, .events = POLLIN};
                else if (c >= 0)
                    close(c);
                continue;
            }
            ssize_t r = recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (r > 0)
                (void)send(p[i].fd, buf, (size_t)r, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                close(p[i].fd);
                p[i] = p[--n];
            }
        }
    }
}

static pid_t echo_start(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t al = sizeof(peer);
    peer = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (l < 0 || bind(l, (struct sockaddr *)&peer, al) < 0 || listen(l, 256) < 0 ||
        getsockname(l, (struct sockaddr *)&peer, &al) < 0) {
        perror("epoll_tags: listener");
        exit(2);
    }
    pid_t pid = fork();
    if (pid == 0)
        echo_serve(l);
    close(l);
    return pid;
}

static int connect_peer(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&peer, sizeof(peer)) < 0) {
        perror("epoll_tags: connect");
        exit(2);
    }
    return s;
}

/* --- registrations --- */

static struct reg *reg_new(int set, int slot, uint32_t events, unsigned *seed)
{
    unsigned i = atomic_fetch_add(&regs_used, 1);
    if (i >= REGS) {
        fprintf(stderr, "epoll_tags: out of registrations\n");
        exit(2);
    }
    struct reg *r = &regs[i];
    r->set = set;
    r->slot = slot;
    r->events = events;
    r->tag = rnd(seed) & 1;
    r->magic = REG_MAGIC;
    return r;
}

static uint64_t data_of(const struct reg *r)
{
    return (uint64_t)(uintptr_t)r | r->tag;
}

/* R is gone: a wait that begins from now on must never return it. */
static void reg_kill(struct reg *r)
{
    if (r)
        atomic_store(&r->dead_at, atomic_fetch_add(&clock_, 1) + 1);
}

static uint32_t pick_events(unsigned *seed)
{
    static const uint32_t choice[] = {EPOLLIN, EPOLLIN | EPOLLOUT, EPOLLIN | EPOLLRDHUP, EPOLLOUT,
                                      EPOLLIN | EPOLLOUT | EPOLLRDHUP};
    uint32_t ev = choice[rnd(seed) % 5];
    unsigned f = rnd(seed) % 8;
    if (f < 3)
        ev |= EPOLLET;
    else if (f == 3)
        ev |= EPOLLONESHOT;
    return ev;
}

static void add(struct slot *s, int k, int fd, struct reg **where, unsigned *seed)
{
    struct reg *r = reg_new(k, (int)(s - slots), pick_events(seed), seed);
    struct epoll_event ev = {.events = r->events, .data.u64 = data_of(r)};
    if (epoll_ctl(sets[k], EPOLL_CTL_ADD, fd, &ev) < 0) {
        fprintf(stderr, "epoll_tags: ADD fd %d: %s\n", fd, strerror(errno));
        exit(2);
    }
    *where = r;
}

static void modify(struct slot *s, int k, int fd, struct reg **where, unsigned *seed)
{
    struct reg *r = reg_new(k, (int)(s - slots), pick_events(seed), seed);
    struct epoll_event ev = {.events = r->events, .data.u64 = data_of(r)};
    if (epoll_ctl(sets[k], EPOLL_CTL_MOD, fd, &ev) < 0) {
        fprintf(stderr, "epoll_tags: MOD fd %d: %s\n", fd, strerror(errno));
        exit(2);
    }
    reg_kill(*where);
    *where = r;
}

static void del(int k, int fd, struct reg **where)
{
    if (epoll_ctl(sets[k], EPOLL_CTL_DEL, fd, NULL) < 0) {
        fprintf(stderr, "epoll_tags: DEL fd %d: %s\n", fd, strerror(errno));
        exit(2);
    }
    reg_kill(*where);
    *where = NULL;
}

/* The dup goes first, deleted from its sets before its close: a closed
 * number whose file lives on in a dup keeps its registrations in the
 * kernel too (epoll(7)), so a program must delete them itself. */
static void drop_dup(struct slot *s)
{
    if (s->dup < 0)
        return;
    for (int k = 0; k < SETS; k++)
        if (s->dupreg[k])
            del(k, s->dup, &s->dupreg[k]);
    close(s->dup);
    s->dup = -1;
}

/* Close without DEL (as gRPC does), then a new connection, likely under
 * the same number. */
static void reopen(struct slot *s, unsigned *seed)
{
    drop_dup(s);
    close(s->fd);
    for (int k = 0; k < SETS; k++) {
        reg_kill(s->reg[k]);
        s->reg[k] = NULL;
    }
    s->fd = connect_peer();
    s->born = atomic_load(&ops_done);
    for (int k = 0; k < SETS; k++)
        if (rnd(seed) % 2)
            add(s, k, s->fd, &s->reg[k], seed);
}

static void send_some(int fd, unsigned *seed)
{
    static const char junk[8192];
    size_t n = 1 + rnd(seed) % sizeof(junk);
    (void)send(fd, junk, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* The connection goes back to the kernel: stdio on a socket makes it leave
 * the rings (docs/statistics.md, stdio-on-socket). */
static void leave_rings(struct slot *s)
{
    int d = dup(s->fd);
    FILE *f = d >= 0 ? fdopen(d, "r+") : NULL;
    if (f)
        fclose(f);
    else if (d >= 0)
        close(d);
    atomic_fetch_add(&leaves, 1);
}

static void one_op(unsigned *seed)
{
    struct slot *s = &slots[rnd(seed) % CONNS];
    int k = (int)(rnd(seed) % SETS);
    unsigned op = rnd(seed) % 100;
    pthread_mutex_lock(&s->mu);
    if (op < 30) {
        send_some(s->fd, seed);
    } else if (op < 45) {
        if (!s->reg[k])
            add(s, k, s->fd, &s->reg[k], seed);
        else
            modify(s, k, s->fd, &s->reg[k], seed);
    } else if (op < 60) {
        if (s->reg[k])
            del(k, s->fd, &s->reg[k]);
        else
            add(s, k, s->fd, &s->reg[k], seed);
    } else if (op < 70) {
        if (s->dup < 0)
            s->dup = dup(s->fd);
        if (s->dupreg[k])
            modify(s, k, s->dup, &s->dupreg[k], seed);
        else
            add(s, k, s->dup, &s->dupreg[k], seed);
    } else if (op < 75) {
        drop_dup(s);
    } else if (op < 92) {
        reopen(s, seed);
    } else if (op < 94) {
        leave_rings(s);
    } else {
        /* let it live: connections older than 5 ms move to shm */
        pthread_mutex_unlock(&s->mu);
        usleep(1000);
        pthread_mutex_lock(&s->mu);
        send_some(s->fd, seed);
    }
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&ops_done, 1);
}

static void *mutator(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 17u;
    for (int i = 0; i < OPS; i++) {
        one_op(&seed);
        if (i % 200 == 0) {
            struct ring_use u;
            if (ring_use_of(getpid(), &u) == 0 && u.rings > 0)
                atomic_fetch_add(&on_rings_seen, 1);
        }
    }
    return NULL;
}

/* --- waiters --- */

static void check(const struct epoll_event *ev, int k, uint64_t began)
{
    atomic_fetch_add(&events_seen, 1);
    uint64_t v = ev->data.u64;
    struct reg *r = (struct reg *)(uintptr_t)(v & ~1ull);
    if (r < regs || r >= regs + REGS || ((uintptr_t)r - (uintptr_t)regs) % sizeof(*r) ||
        r->magic != REG_MAGIC) {
        violation("set %d: data 0x%llx is none of our registrations (events 0x%x)", k,
                  (unsigned long long)v, ev->events);
        return;
    }
    if ((v & 1) != r->tag)
        violation("set %d: data 0x%llx lost its tag bit %u", k, (unsigned long long)v, r->tag);
    if (r->set != k)
        violation("set %d: event of a registration in set %d", k, r->set);
    uint32_t allowed = (r->events & ASKABLE) | EPOLLERR | EPOLLHUP;
    if (ev->events & ~allowed)
        violation("set %d slot %d: events 0x%x, registered for 0x%x", k, r->slot, ev->events,
                  r->events);
    uint64_t dead = atomic_load(&r->dead_at);
    if (dead && dead <= began)
        violation("set %d slot %d: event 0x%x for a registration deleted before the wait began", k,
                  r->slot, ev->events);
    if ((r->events & EPOLLONESHOT) && atomic_fetch_add(&r->hits, 1) > 0)
        violation("set %d slot %d: one-shot registration fired twice", k, r->slot);
}

/* Reads what the event says is there, under the slot's lock (the fd may
 * have been closed or reused since: then it reads another connection of
 * ours, which is harmless). */
static void drain(const struct epoll_event *ev)
{
    struct reg *r = (struct reg *)(uintptr_t)(ev->data.u64 & ~1ull);
    if (r < regs || r >= regs + REGS || !(ev->events & EPOLLIN))
        return;
    static __thread char buf[65536];
    struct slot *s = &slots[r->slot];
    pthread_mutex_lock(&s->mu);
    while (recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
    pthread_mutex_unlock(&s->mu);
}

static void wait_once(int epfd, int k, int timeout)
{
    struct epoll_event evs[16];
    uint64_t began = atomic_load(&clock_);
    int n = epoll_wait(epfd, evs, 16, timeout);
    for (int i = 0; i < n; i++)
        check(&evs[i], k, began);
    for (int i = 0; i < n; i++)
        drain(&evs[i]);
}

static void *waiter(void *arg)
{
    int k = (int)(uintptr_t)arg;
    while (!atomic_load(&stop)) {
        if (k != SETS - 1) {
            wait_once(sets[k], k, 20);
            continue;
        }
        /* The nested set: its readiness through the outer one. */
        struct epoll_event o;
        if (epoll_wait(outer, &o, 1, 20) == 1 && o.data.u64 != 0xfeedull)
            violation("outer set: data 0x%llx, registered 0xfeed", (unsigned long long)o.data.u64);
        wait_once(sets[k], k, 0);
    }
    return NULL;
}

int main(void)
{
    setvbuf(stderr, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    pid_t echo = echo_start();
    for (int k = 0; k < SETS; k++)
        sets[k] = epoll_create1(EPOLL_CLOEXEC);
    outer = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event oev = {.events = EPOLLIN, .data.u64 = 0xfeed};
    if (epoll_ctl(outer, EPOLL_CTL_ADD, sets[SETS - 1], &oev) < 0) {
        perror("epoll_tags: nesting");
        return 2;
    }

    /* The waiters sleep on sets with nothing in them yet: the first
     * registrations arrive while they are in epoll_wait. */
    pthread_t w[SETS * WAITERS], m[MUTATORS];
    for (int i = 0; i < SETS * WAITERS; i++)
        pthread_create(&w[i], NULL, waiter, (void *)(uintptr_t)(i % SETS));
    usleep(50000);
    unsigned seed = 1;
    for (int i = 0; i < CONNS; i++) {
        struct slot *s = &slots[i];
        pthread_mutex_init(&s->mu, NULL);
        s->dup = -1;
        s->fd = connect_peer();
        for (int k = 0; k < SETS; k++)
            add(s, k, s->fd, &s->reg[k], &seed);
        send_some(s->fd, &seed);
    }
    for (int i = 0; i < MUTATORS; i++)
        pthread_create(&m[i], NULL, mutator, (void *)(uintptr_t)i);
    for (int i = 0; i < MUTATORS; i++)
        pthread_join(m[i], NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < SETS * WAITERS; i++)
        pthread_join(w[i], NULL);
    kill(echo, SIGKILL);
    waitpid(echo, NULL, 0);

    unsigned bad = atomic_load(&violations);
    printf("epoll_tags: %u ops, %u registrations, %u events checked, %u leaves of the rings, "
           "rings seen %u times: %u violations\n",
           atomic_load(&ops_done), atomic_load(&regs_used), atomic_load(&events_seen),
           atomic_load(&leaves), atomic_load(&on_rings_seen), bad);
    if (bad)
        return 1;
    if (shm_expected() && atomic_load(&on_rings_seen) == 0) {
        fprintf(stderr, "epoll_tags: no connection was ever seen on the rings\n");
        return 1;
    }
    return atomic_load(&events_seen) > 0 ? 0 : 1;
}
