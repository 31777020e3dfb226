/* conn.c - the life of a connection's shared-memory state: creation at
 * connect/accept, holders across fork, teardown at the last close. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "config/config.h"
#include "config/log.h"
#include "core/fdtable.h"
#include "core/ownfd.h"
#include "core/reason.h"
#include "core/sock.h"
#include "base/real.h"
#include "base/syscall.h"
#include "transport/addr.h"
#include "transport/shm/conn.h"
#include "transport/shm/ops.h"
#include "transport/shm/proto.h"
#include "transport/shm/shm.h"
#include "transport/shm/shm_internal.h"

/* Every connection this process holds, for fork, exec and the reclaim
 * walk. A private array, not links in the connections' pages: those are
 * shared by fork, and a link would point into a page the other process
 * does not map (a connection it made after the fork). */
struct held {
    struct vs_shm_conn *c;
    bool inherited;    /* exec: a descriptor of it stays open in the new image */
    bool exec_dropped; /* exec: we stopped holding it (vs_shm_holder_gone) */
};
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct held *held;
static size_t held_count, held_cap;

static bool list_add(struct vs_shm_conn *c)
{
    pthread_mutex_lock(&conns_lock);
    if (held_count == held_cap) {
        size_t cap = held_cap ? 2 * held_cap : 64;
        struct held *more = realloc(held, cap * sizeof(*more));
        if (!more) {
            pthread_mutex_unlock(&conns_lock);
            return false;
        }
        held = more;
        held_cap = cap;
    }
    held[held_count++] = (struct held){.c = c};
    pthread_mutex_unlock(&conns_lock);
    return true;
}

/* From the end: a connection that lives for one request was added last. */
static void list_del(struct vs_shm_conn *c)
{
    pthread_mutex_lock(&conns_lock);
    for (size_t i = held_count; i-- > 0;) {
        if (held[i].c == c) {
            held[i] = held[--held_count];
            break;
        }
    }
    pthread_mutex_unlock(&conns_lock);
}

void vs_shm_conn_each(void (*fn)(struct vs_shm_conn *c, void *arg), void *arg)
{
    pthread_mutex_lock(&conns_lock);
    for (size_t i = 0; i < held_count; i++)
        fn(held[i].c, arg);
    pthread_mutex_unlock(&conns_lock);
}

/* Pages of connections this process was the last to hold, kept for the
 * next ones: a connection that lives for one request should not pay an
 * mmap and a munmap. Only while no other process can have them (fork_child
 * drops the child's copies). */
#define SPARE_MAX 64
static struct vs_shm_conn *spare[SPARE_MAX];
static int spare_count;

static struct vs_shm_conn *page_get(void)
{
    pthread_mutex_lock(&conns_lock);
    struct vs_shm_conn *c = spare_count ? spare[--spare_count] : NULL;
    pthread_mutex_unlock(&conns_lock);
    if (c) {
        memset(c, 0, sizeof(*c));
        return c;
    }
    c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return c == MAP_FAILED ? NULL : c;
}

/* LAST: no other process holds the connection, so none uses the page. */
static void page_put(struct vs_shm_conn *c, bool last)
{
    pthread_mutex_lock(&conns_lock);
    bool kept = last && spare_count < SPARE_MAX;
    if (kept)
        spare[spare_count++] = c;
    pthread_mutex_unlock(&conns_lock);
    if (!kept)
        munmap(c, sizeof(*c));
}

struct vs_shm_conn *vs_shm_conn_new(struct vs_sock *s, bool accepter, int fd,
                                    const struct sockaddr *peer, socklen_t len)
{
    struct vs_shm_conn *c = page_get();
    if (!c)
        return NULL;
    /* Zero: locks free, flags false. */
    atomic_store(&c->holders, 1);
    c->accepter = accepter;
    c->chan = c->chan_no = -1;
    c->rendezvous = c->rendezvous_no = -1;
    c->rx.fd = c->tx.fd = -1;
    vs_upgrade_init(&c->up);
    if (vs_addr_of_conn(s, fd, peer, len, &c->local, &c->peer) < 0) {
        page_put(c, true);
        return NULL;
    }
    atomic_store(&c->hs, VS_HS_YOUNG);
    vs_shm_holder_new(c);
    if (!list_add(c)) {
        page_put(c, true);
        return NULL;
    }
    return c;
}

void vs_shm_conn_free(struct vs_shm_conn *c)
{
    list_del(c);
    page_put(c, true);
}

static void fd_lost(void *owner, int fd, unsigned first, unsigned last);

int vs_shm_own_fd(struct vs_shm_conn *c, int fd)
{
    return vs_ownfd_take(fd, c, fd_lost);
}

void vs_shm_close_own(struct vs_shm_conn *c, int *fd)
{
    vs_ownfd_close(*fd, c);
    *fd = -1;
}

void vs_shm_conn_fail(struct vs_shm_conn *c, const char *reason)
{
    if (!c->fail_reason)
        c->fail_reason = reason;
    vs_shm_close_own(c, &c->rendezvous);
    vs_shm_close_own(c, &c->chan);
    vs_shm_bump(c);
    atomic_store_explicit(&c->hs, VS_HS_FAILED, memory_order_release);
}

/* The last holder leaves: the peer reads what we sent, then end of stream;
 * what it sends from now on fails with EPIPE. Our mapping goes, the peer's
 * stays valid until it closes too. */
void vs_shm_release(struct vs_sock *s)
{
    struct vs_shm_conn *c = s->conn;
    s->ops = NULL;
    s->conn = NULL;
    list_del(c);
    vs_shm_holder_gone(c);
    bool last = atomic_fetch_sub(&c->holders, 1) == 1;
    vs_plock_lock(&c->ctl_lock);
    bool rx_ready = atomic_load(&c->rx_ready), tx_ready = atomic_load(&c->tx_ready);
    /* As the kernel: SO_LINGER 0, or received bytes left unread, reset. */
    bool reset = last && (atomic_load(&s->linger0) || (rx_ready && vs_ring_readable(&c->rx) > 0));
    if (last && tx_ready)
        vs_ring_close_writer(&c->tx, reset);
    if (last && rx_ready)
        vs_ring_close_reader(&c->rx);
    if (last && c->chan >= 0)
        vs_shm_send_msg(c, VS_MSG_WAKE, 0, 0);
    /* The state is shared with the other holders (fork): only our own
     * mappings and descriptors go, through private copies. Our copies of
     * descriptors another holder closed are known by their numbers only. */
    struct vs_ring rx = c->rx, tx = c->tx;
    int fds[] = {c->chan, c->rendezvous, c->chan_no, c->rendezvous_no};
    vs_plock_unlock(&c->ctl_lock);
    if (tx_ready)
        vs_ring_destroy(&tx);
    if (rx_ready)
        vs_ring_destroy(&rx);
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        vs_shm_close_own(c, &fds[i]);
    page_put(c, last);
}

/* The child of a fork holds every connection too: count it before the fork,
 * so that a parent closing its copy at once cannot tear a connection down
 * under the child. No set-up step is under way meanwhile (holders.c). */
void vs_shm_fork_prepare(void)
{
    vs_shm_setup_fork_prepare();
    pthread_mutex_lock(&conns_lock);
    for (size_t i = 0; i < held_count; i++) {
        atomic_fetch_add(&held[i].c->holders, 1);
        vs_shm_holder_fork_prepare(held[i].c);
    }
}

void vs_shm_fork_parent(void)
{
    pthread_mutex_unlock(&conns_lock);
    vs_shm_setup_fork_parent();
}

void vs_shm_fork_child(void)
{
    vs_shm_setup_fork_child();
    for (size_t i = 0; i < held_count; i++)
        vs_shm_holder_fork_child(held[i].c);
    /* The parent keeps its spare pages: ours are the same pages. */
    for (int i = 0; i < spare_count; i++)
        munmap(spare[i], sizeof(*spare[i]));
    spare_count = 0;
    pthread_mutex_unlock(&conns_lock);
}

/* A failed fork gives the holders back. */
void vs_shm_fork_failed(void)
{
    pthread_mutex_lock(&conns_lock);
    for (size_t i = 0; i < held_count; i++) {
        atomic_fetch_sub(&held[i].c->holders, 1);
        vs_shm_holder_fork_failed(held[i].c);
    }
    pthread_mutex_unlock(&conns_lock);
}

/* Leaves the rings for good (under ctl_lock): see proto.h, REVERT. */
static void leave_locked(struct vs_shm_conn *c, const char *reason)
{
    /* Mid-handshake: tell the peer at once rather than let it time out. */
    if (!vs_shm_done(c) && vs_shm_active(c) && c->chan >= 0)
        vs_shm_send_msg(c, VS_MSG_DECLINE, VS_DECLINE_LEAVING, 0);
    if (vs_shm_done(c) && c->chan >= 0) {
        uint64_t consumed = c->rx.pos;
        uint64_t end = atomic_load(&c->st.tx_switched) ? c->tx.pos : 0;
        vs_shm_send_msg(c, VS_MSG_REVERT, consumed, end);
    }
    if (vs_shm_active(c))
        vs_shm_conn_fail(c, reason);
}

/* The program is taking one of C's numbers, one of [FIRST, LAST] that its
 * call closes or overwrites. If this process keeps the connection (an fd of
 * the socket outside the range: sshd's child with it on 0 and 1), the
 * connection leaves the rings while the side channel is still ours, for
 * every holder. Otherwise the same call closes the socket too (a forked
 * child's closefrom before exec): only this process lets go of the number,
 * and other holders carry on. */
static void fd_lost(void *owner, int fd, unsigned first, unsigned last)
{
    /* OWNER is a name only: another thread may be releasing the connection
     * (its close cannot close FD, which is LEAVING, and goes on to unmap
     * the page). The socket found keeps it mapped until we put it. */
    struct vs_sock *s = vs_fd_conn_outside(owner, first, last);
    if (!s)
        return;
    struct vs_shm_conn *c = s->conn;
    vs_plock_lock(&c->ctl_lock);
    if (fd == c->chan || fd == c->rendezvous) {
        vs_info("the program took descriptor %d of a connection's side channel", fd);
        leave_locked(c, VS_REASON_FD_TAKEN);
    }
    vs_plock_unlock(&c->ctl_lock);
    vs_sock_put(s);
}

void vs_shm_leave(struct vs_sock *s, int fd, const char *reason)
{
    struct vs_shm_conn *c = s->conn;
    if (!c || !vs_shm_active(c))
        return;
    vs_plock_lock(&c->ctl_lock);
    leave_locked(c, reason);
    vs_plock_unlock(&c->ctl_lock);
    vs_info("a connection leaves the rings: %s", reason);
    vs_shm_sync(s, fd);
}

struct leave_all {
    const char *reason;
    bool inherited_only; /* exec keeps only descriptors without close-on-exec */
};

static void leave_one(int fd, struct vs_sock *s, void *arg)
{
    const struct leave_all *how = arg;
    struct vs_shm_conn *c = s->conn;
    if (s->ops != &vs_shm_ops || !c)
        return;
    if (how->inherited_only) {
        long fl = vs_syscall(SYS_fcntl, fd, F_GETFD);
        if (fl < 0 || (fl & FD_CLOEXEC))
            return;
    }
    vs_plock_lock(&c->ctl_lock);
    leave_locked(c, how->reason);
    vs_plock_unlock(&c->ctl_lock);
}

static void mark_inherited(int fd, struct vs_sock *s, void *arg)
{
    (void)arg;
    if (s->ops != &vs_shm_ops || !s->conn)
        return;
    long fl = vs_syscall(SYS_fcntl, fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC))
        return;
    for (size_t i = 0; i < held_count; i++)
        if (held[i].c == s->conn)
            held[i].inherited = true;
}

/* A connection none of whose descriptors survives the exec is no longer
 * ours once it succeeds: the other holders (a parent running a subprocess)
 * may carry on alone, its set-up included. Never the last holder: if the
 * exec fails we hold it again (vs_shm_exec_failed). */
static void drop_closed_on_exec(void)
{
    pthread_mutex_lock(&conns_lock);
    for (size_t i = 0; i < held_count; i++)
        held[i].inherited = held[i].exec_dropped = false;
    vs_fd_for_each(mark_inherited, NULL);
    for (size_t i = 0; i < held_count; i++) {
        struct vs_shm_conn *c = held[i].c;
        int n = atomic_load(&c->holders);
        if (held[i].inherited)
            continue;
        while (n > 1 && !atomic_compare_exchange_weak(&c->holders, &n, n - 1))
            ;
        if (n > 1) {
            vs_shm_holder_gone(c);
            held[i].exec_dropped = true;
        }
    }
    pthread_mutex_unlock(&conns_lock);
}

void vs_shm_before_exec(void)
{
    vs_fd_for_each(leave_one, &(struct leave_all){VS_REASON_LEFT_BY_EXEC, true});
    drop_closed_on_exec();
}

/* The exec failed: we hold again what we let go. If another holder began
 * the set-up meanwhile, its rings are not mapped here: this process must
 * then not use the connection (a child whose exec failed exits). */
void vs_shm_exec_failed(void)
{
    pthread_mutex_lock(&conns_lock);
    for (size_t i = 0; i < held_count; i++) {
        if (!held[i].exec_dropped)
            continue;
        held[i].exec_dropped = false;
        atomic_fetch_add(&held[i].c->holders, 1);
        vs_shm_holder_back(held[i].c);
    }
    pthread_mutex_unlock(&conns_lock);
}

void vs_shm_leave_all(const char *reason)
{
    vs_fd_for_each(leave_one, &(struct leave_all){reason, false});
}
