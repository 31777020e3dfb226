/* state.c - a UDP socket's shared-memory state (udp_shm.h): made at
 * socket(), its descriptors and page at the first use, freed at release. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/real.h"
#include "base/syscall.h"
#include "config/config.h"
#include "config/log.h"
#include "config/stats.h"
#include "core/ownfd.h"
#include "core/reason.h"
#include "transport/dgram/udp_shm.h"

/* The peer table's size: every peer the socket sends to is counted in it. */
#define PEERS_CAP 1024

static pid_t my_pid;

/* Every state of this process, for the fork handlers: walked under
 * states_lock, never through the socket table, whose references a fork
 * handler must not drop (the last one would release a connection under
 * locks the fork holds). */
static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vs_udp_sock **states;
static size_t nstates, states_cap;
/* Taken at fork_prepare, released in both processes. */
static struct vs_udp_sock **held;
static size_t nheld;

void vs_udp_set_pid(pid_t pid)
{
    my_pid = pid;
}

static bool track(struct vs_udp_sock *u)
{
    pthread_mutex_lock(&states_lock);
    if (nstates == states_cap) {
        size_t cap = states_cap ? 2 * states_cap : 16;
        struct vs_udp_sock **a = realloc(states, cap * sizeof(*a));
        struct vs_udp_sock **h = realloc(held, cap * sizeof(*h));
        if (a)
            states = a;
        if (h)
            held = h;
        if (!a || !h) {
            pthread_mutex_unlock(&states_lock);
            return false;
        }
        states_cap = cap;
    }
    states[nstates++] = u;
    pthread_mutex_unlock(&states_lock);
    return true;
}

static void untrack(struct vs_udp_sock *u)
{
    pthread_mutex_lock(&states_lock);
    for (size_t i = 0; i < nstates; i++)
        if (states[i] == u) {
            states[i] = states[--nstates];
            break;
        }
    pthread_mutex_unlock(&states_lock);
}

static int make_page(struct vs_udp_sock *u);

struct vs_udp_sock *vs_udp_new(int fd, int family, struct vs_stats_record *stat)
{
    (void)fd;
    struct vs_udp_sock *u = calloc(1, sizeof(*u));
    /* The watch fd from the start, never another: a poll or epoll
     * registration made before the first use must hear of rings too. */
    int ep = u ? (int)vs_syscall(SYS_epoll_create1, EPOLL_CLOEXEC) : -1;
    if (ep < 0) {
        free(u);
        return NULL;
    }
    pthread_mutex_init(&u->lock, NULL);
    if (!my_pid)
        my_pid = getpid();
    u->pid = my_pid;
    u->family = family;
    u->stat = stat;
    u->listener = u->event = u->page_fd = -1;
    u->news = vs_udp_own(u, ep);
    for (int i = 0; i < VS_UDP_CALLERS; i++)
        u->caller[i] = -1;
    u->peek = -1;
    /* The page from the start: whoever holds the socket after a fork can
     * mark it left. */
    if (make_page(u) < 0 || !track(u)) {
        vs_udp_free(u);
        return NULL;
    }
    return u;
}

/* A socket forked before its first use: whether this process carries
 * it, claiming it if nobody has. */
static bool claim(struct vs_udp_sock *u)
{
    int32_t who = 0;
    if (!atomic_compare_exchange_strong(&u->page->carrier, &who, (int32_t)my_pid))
        if (who != (int32_t)my_pid) {
            atomic_store(&u->pid, (pid_t)who);
            atomic_store(&u->young_shared, false);
            return false;
        }
    atomic_store(&u->pid, my_pid);
    atomic_store(&u->young_shared, false);
    return true;
}

/* A socket that left shm is still ours while its rings hold datagrams
 * to deliver (u->live counts them). */
struct vs_udp_sock *vs_udp_of(struct vs_sock *s)
{
    struct vs_udp_sock *u = s->conn;
    if (!u)
        return NULL;
    if (atomic_load_explicit(&u->young_shared, memory_order_acquire) ? !claim(u)
                                                                     : u->pid != my_pid) {
        /* Any use by another holder: a send's answers, like what it
         * receives, must reach the kernel socket, and an inherited epoll
         * set asks through here too. */
        vs_udp_mark_left(s, -1, "used");
        return NULL;
    }
    return !u->off || u->live ? u : NULL;
}

void vs_udp_mark_left(struct vs_sock *s, int fd, const char *why)
{
    struct vs_udp_sock *u = s->conn;
    if (!u || !u->page || atomic_load_explicit(&u->page->left, memory_order_relaxed))
        return;
    atomic_store(&u->page->left, 1);
    char which[24] = "a udp socket";
    if (fd >= 0)
        snprintf(which, sizeof(which), "fd %d", fd);
    vs_info("udp shm: %s %s in process %d (its carrier: %d): its peers send to it on the "
            "kernel from now on (%s)",
            which, why, (int)my_pid, (int)u->pid, VS_REASON_LEFT_BY_FORK);
}

void vs_udp_check_left(struct vs_udp_sock *u)
{
    if (u->page && !u->off && atomic_load_explicit(&u->page->left, memory_order_relaxed))
        vs_udp_off(u, VS_REASON_LEFT_BY_FORK);
}

/* The program took one of our numbers (core/ownfd.h): forget it, and stop
 * using shm on this socket, whose set-up lost a part. */
static void lost(void *owner, int fd, unsigned first, unsigned last)
{
    (void)first;
    (void)last;
    struct vs_udp_sock *u = owner;
    int *mine[] = {&u->listener, &u->event, &u->news, &u->page_fd};
    for (size_t i = 0; i < sizeof(mine) / sizeof(mine[0]); i++)
        if (*mine[i] == fd)
            *mine[i] = -1;
    for (int i = 0; i < VS_UDP_CALLERS; i++)
        if (u->caller[i] == fd)
            u->caller[i] = -1;
    for (uint32_t k = 0; k < u->nmade; k++) {
        struct vs_udp_pair *p = u->pair[u->made[k]];
        if (p->chan == fd)
            p->chan = -1;
        if (p->peer_event == fd)
            p->peer_event = -1;
    }
}

int vs_udp_own(struct vs_udp_sock *u, int fd)
{
    return fd < 0 ? -1 : vs_ownfd_take(fd, u, lost);
}

void vs_udp_close(struct vs_udp_sock *u, int *fd)
{
    if (*fd >= 0)
        vs_ownfd_close(*fd, u);
    *fd = -1;
}

void vs_udp_watch(struct vs_udp_sock *u, int fd, uint64_t tag, bool change)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = tag};
    if (u->news >= 0 && fd >= 0)
        vs_syscall(SYS_epoll_ctl, u->news, change ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
}

void vs_udp_bump(struct vs_udp_sock *u)
{
    atomic_fetch_add(&u->gen, 1);
}

/* The page producers map read-only: sealed to its size, so that nobody
 * can shrink it under them. */
static int make_page(struct vs_udp_sock *u)
{
    int fd = (int)vs_syscall(SYS_memfd_create, "vsocket-udp-page", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    void *mem = MAP_FAILED;
    if (ftruncate(fd, VS_UDP_PAGE_SIZE) == 0)
        mem = mmap(NULL, VS_UDP_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    /* Sealed once ours is mapped: no peer can map it writable (and set
     * `left`, or the wake-up words, for us), nor shrink it under anyone. */
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
    /* Before Linux 5.1 there is no F_SEAL_FUTURE_WRITE: a peer could then
     * set our words, which costs us wake-ups or shm, never a datagram. */
    if (mem != MAP_FAILED && vs_syscall(SYS_fcntl, fd, F_ADD_SEALS, seals) != 0 &&
        vs_syscall(SYS_fcntl, fd, F_ADD_SEALS, seals & ~F_SEAL_FUTURE_WRITE) != 0) {
        munmap(mem, VS_UDP_PAGE_SIZE);
        mem = MAP_FAILED;
    }
    if (mem == MAP_FAILED) {
        vs_syscall(SYS_close, fd);
        return -1;
    }
    u->page = mem;
    u->page->magic = VS_UDP_PAGE_MAGIC;
    u->page_fd = vs_udp_own(u, fd);
    return 0;
}

/* Our rendezvous: its listener and the callers accepted on it. */
static void close_rendezvous(struct vs_udp_sock *u)
{
    for (int i = 0; i < VS_UDP_CALLERS; i++)
        vs_udp_close(u, &u->caller[i]);
    vs_udp_close(u, &u->listener);
}

void vs_udp_fork_prepare(void)
{
    pthread_mutex_lock(&states_lock);
    nheld = 0;
    for (size_t i = 0; i < nstates; i++) {
        struct vs_udp_sock *u = states[i];
        /* Held across the fork, so that the child never inherits it held
         * by a thread it does not have. A state busy in another thread
         * is in use: it stays its carrier's, and the child's use marks it
         * left (it has the page). */
        if (pthread_mutex_trylock(&u->lock) != 0)
            continue;
        held[nheld++] = u;
        if (u->pid == my_pid && !u->used && !u->off) {
            atomic_store(&u->page->carrier, 0);
            atomic_store(&u->young_shared, true);
        }
    }
}

/* The child's copies of the carrier's rendezvous and pair sockets: held
 * here too, they would keep its name bound and hide its death from its
 * peers. The page stays mapped, for the mark. */
static void child_forget(struct vs_udp_sock *u)
{
    if (atomic_load(&u->young_shared) || u->pid == my_pid)
        return;
    close_rendezvous(u);
    for (uint32_t k = 0; k < u->nmade; k++) {
        vs_udp_close(u, &u->pair[u->made[k]]->chan);
        vs_udp_close(u, &u->pair[u->made[k]]->peer_event);
    }
}

void vs_udp_fork_done(bool child)
{
    for (size_t i = 0; i < nheld; i++) {
        /* A state we held is whole: safe to read in the child. */
        if (child)
            child_forget(held[i]);
        pthread_mutex_unlock(&held[i]->lock);
    }
    nheld = 0;
    pthread_mutex_unlock(&states_lock);
}

static void listen_at_bound(struct vs_udp_sock *u)
{
    struct sockaddr_un un;
    socklen_t len = vs_udp_rendezvous_name(&u->local, &un);
    int fd = vs_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (vs_real.bind(fd, (void *)&un, len) < 0 || vs_real.listen(fd, 16) < 0) {
        /* Another holds our name: a squatter, or a second socket bound to
         * our address (SO_REUSEADDR). Peers cannot reach us on shm; we may
         * still call them. */
        vs_info("udp shm: rendezvous %s taken (%s): peers reach this socket on the kernel",
                un.sun_path + 1, strerror(errno));
        vs_syscall(SYS_close, fd);
        return;
    }
    u->listener = vs_udp_own(u, fd);
    vs_udp_watch(u, u->listener, VS_UDP_TAG_LISTENER, false);
}

/* The receive capacity our rings offer: the kernel's effective SO_RCVBUF. */
void vs_udp_budget(struct vs_udp_sock *u, int fd)
{
    int v = 0;
    socklen_t len = sizeof(v);
    if (vs_real.getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len) < 0 || v <= 0)
        v = 212992;
    u->budget = (uint64_t)v;
}

void vs_udp_off(struct vs_udp_sock *u, const char *reason)
{
    for (uint32_t k = 0; k < u->nmade; k++)
        vs_udp_pair_down(u, (int)u->made[k], reason);
    /* Callers already accepted hang up too: no pair comes up again (the
     * rings still drain meanwhile, and the service with them). */
    close_rendezvous(u);
    u->off = reason;
    vs_stats_set_reason(u->stat, reason);
    vs_udp_bump(u);
}

void vs_udp_use(struct vs_udp_sock *u, int fd)
{
    if (u->used || u->off)
        return;
    socklen_t len = sizeof(u->local);
    if (vs_real.getsockname(fd, (void *)&u->local, &len) < 0)
        return;
    /* Not bound yet (a send binds it): the rendezvous needs the port. */
    if ((u->local.ss_family == AF_INET && ((struct sockaddr_in *)&u->local)->sin_port == 0) ||
        (u->local.ss_family == AF_INET6 && ((struct sockaddr_in6 *)&u->local)->sin6_port == 0))
        return;
    u->used = u->bound = true;
    vs_udp_budget(u, fd);
    int ev = (int)vs_syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC);
    u->event = vs_udp_own(u, ev);
    if (u->news < 0 || u->event < 0) {
        vs_info("udp shm: no descriptors for the set-up: this socket stays on the kernel");
        u->off = VS_REASON_NO_RESOURCES;
        return;
    }
    vs_udp_watch(u, u->event, VS_UDP_TAG_EVENT, false);
    listen_at_bound(u);
}

struct vs_udp_pair *vs_udp_pair_at(struct vs_udp_sock *u, int slot)
{
    return slot >= 0 && u->pair && (uint32_t)slot < u->cap ? u->pair[slot] : NULL;
}

static bool make_table(struct vs_udp_sock *u)
{
    if (u->peers)
        return true;
    void *mem = malloc(vs_udp_peers_size(PEERS_CAP));
    struct vs_udp_pair **pair = calloc(PEERS_CAP, sizeof(*pair));
    uint32_t *made = calloc(PEERS_CAP, sizeof(*made));
    uint64_t seed = 0;
    if (!mem || !pair || !made || vs_syscall(SYS_getrandom, &seed, sizeof(seed), 0) < 0) {
        free(mem);
        free(pair);
        free(made);
        return false;
    }
    u->peers = vs_udp_peers_init(mem, PEERS_CAP, seed);
    u->pair = pair;
    u->made = made;
    u->cap = PEERS_CAP;
    return true;
}

struct vs_udp_pair *vs_udp_pair_for(struct vs_udp_sock *u, const struct sockaddr_storage *addr,
                                    bool make, int *slot)
{
    *slot = -1;
    if (!make && !u->peers)
        return NULL;
    if (!make_table(u))
        return NULL;
    int at = make ? vs_udp_peers_add(u->peers, addr) : vs_udp_peers_find(u->peers, addr);
    if (at < 0)
        return NULL; /* a full table: the kernel carries the rest */
    *slot = at;
    if (!u->pair[at] && make) {
        struct vs_udp_pair *p = calloc(1, sizeof(*p));
        if (!p)
            return NULL;
        p->chan = p->peer_event = -1;
        p->peer = *addr;
        p->made_at = u->nmade;
        u->pair[at] = p;
        u->made[u->nmade++] = (uint32_t)at;
    }
    return u->pair[at];
}

/* Unmaps and closes what this process has of the pair, telling nobody:
 * after vs_udp_pair_down (which tells the peer), or in another process
 * than the state's (fork), whose rings are not its own. */
static void forget_pair(struct vs_udp_sock *u, struct vs_udp_pair *p)
{
    if (p->rx_ok)
        vs_ring_destroy(&p->rx);
    if (p->tx_ok)
        vs_ring_destroy(&p->tx);
    p->rx_ok = p->tx_ok = false;
    if (p->peer_page)
        munmap((void *)p->peer_page, VS_UDP_PAGE_SIZE);
    p->peer_page = NULL;
    vs_udp_close(u, &p->chan);
    vs_udp_close(u, &p->peer_event);
}

void vs_udp_free(struct vs_udp_sock *u)
{
    untrack(u);
    bool ours = u->pid == my_pid;
    /* Every pair ends first (each end recounts the others), then goes. */
    for (uint32_t k = 0; ours && k < u->nmade; k++)
        vs_udp_pair_down(u, (int)u->made[k], NULL);
    for (uint32_t k = 0; k < u->nmade; k++) {
        struct vs_udp_pair *p = u->pair[u->made[k]];
        forget_pair(u, p);
        free(p);
    }
    close_rendezvous(u);
    vs_udp_close(u, &u->event);
    vs_udp_close(u, &u->news);
    vs_udp_close(u, &u->page_fd);
    if (u->page)
        munmap(u->page, VS_UDP_PAGE_SIZE);
    free(u->peers);
    free(u->pair);
    free(u->made);
    pthread_mutex_destroy(&u->lock);
    free(u);
}
