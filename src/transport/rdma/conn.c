/* conn.c - a connection's RDMA state: creation, failure, this process's
 * list of them. */
#include <netinet/in.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "config/log.h"
#include "core/clock.h"
#include "core/ownfd.h"
#include "core/reason.h"
#include "config/stats.h"
#include "base/real.h"
#include "transport/addr.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/dev.h"

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vs_rdma_conn *list;

static void list_add(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&list_lock);
    c->next = list;
    if (list)
        list->prev = c;
    list = c;
    pthread_mutex_unlock(&list_lock);
}

static void list_del(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&list_lock);
    if (c->prev)
        c->prev->next = c->next;
    else if (list == c)
        list = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    pthread_mutex_unlock(&list_lock);
}

/* A v4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address it is.
 * The JVM, and programs like it, talk to IPv4 peers through IPv6 sockets:
 * rdma_cm binds and resolves the mapped form as IPv6, which no RoCE
 * device's IPv4 address answers (issue 21: both ends "no-rdma-device").
 * The proof and the peer cache map IPv4 to the same 16 bytes, so an end
 * that unmaps agrees with a native IPv4 one. */
static void unmap_v4(struct sockaddr_storage *ss)
{
    const struct sockaddr_in6 *in6 = (const void *)ss;
    if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
        return;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = in6->sin6_port};
    memcpy(&in.sin_addr, &in6->sin6_addr.s6_addr[12], 4);
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, &in, sizeof(in));
}

struct vs_rdma_conn *vs_rdma_conn_new(struct vs_sock *s, bool accepter, int fd,
                                      const struct sockaddr *peer, socklen_t len)
{
    struct vs_rdma_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->ctl_lock, NULL);
    pthread_mutex_init(&c->tx_lock, NULL);
    pthread_mutex_init(&c->rx_lock, NULL);
    pthread_mutex_init(&c->qp_lock, NULL);
    c->accepter = accepter;
    c->hold_fd = -1;
    atomic_store(&c->share, -1);
    atomic_store(&c->held, -1);
    c->carrier = true;
    vs_upgrade_init(&c->up);
    if (vs_addr_of_conn(s, fd, peer, len, &c->local, &c->peer) < 0) {
        free(c);
        return NULL;
    }
    unmap_v4(&c->local);
    unmap_v4(&c->peer);
    atomic_store(&c->hs, VS_RDMA_YOUNG);
    list_add(c);
    return c;
}

/* Under the cm lock: no event can reach the connection while its ids go. */
void vs_rdma_conn_teardown(struct vs_rdma_conn *c)
{
    vs_rdma_dev_lock();
    pthread_mutex_lock(&c->ctl_lock);
    if (c->id)
        rdma_disconnect(c->id);
    vs_rdma_verbs_teardown(c);
    if (c->id)
        rdma_destroy_id(c->id);
    if (c->listen_id)
        rdma_destroy_id(c->listen_id);
    c->id = c->listen_id = NULL;
    pthread_mutex_unlock(&c->ctl_lock);
    vs_rdma_dev_unlock();
}

void vs_rdma_conn_free(struct vs_rdma_conn *c)
{
    list_del(c);
    vs_rdma_forked_drop(c);
    vs_rdma_forked_let_go(c);
    vs_rdma_conn_teardown(c);
    if (c->hold_fd >= 0)
        vs_ownfd_close(c->hold_fd, c);
    vs_rdma_proof_wipe(&c->proof);
    pthread_mutex_destroy(&c->ctl_lock);
    pthread_mutex_destroy(&c->tx_lock);
    pthread_mutex_destroy(&c->rx_lock);
    pthread_mutex_destroy(&c->qp_lock);
    free(c);
}

void vs_rdma_conn_fail(struct vs_rdma_conn *c, const char *reason)
{
    /* Held with other processes since a fork: the bytes this copy moves from
     * now on are not counted where a switch would need them. */
    vs_rdma_forked_taint(c);
    if (!c->fail_reason)
        c->fail_reason = reason;
    vs_rdma_bump(c);
    atomic_store_explicit(&c->hs, VS_RDMA_FAILED, memory_order_release);
    /* Said here, not when a call shows the outcome (rdma.c): a program
     * asleep in a blocking call shows it only as the call returns. */
    vs_debug("rdma: the set-up ended on TCP: %s", c->fail_reason);
}

void vs_rdma_conn_each(void (*fn)(struct vs_rdma_conn *c, void *arg), void *arg)
{
    pthread_mutex_lock(&list_lock);
    for (struct vs_rdma_conn *c = list; c; c = c->next)
        fn(c, arg);
    pthread_mutex_unlock(&list_lock);
}

/* A forked child's copy: its rdma_cm id, queue pair, memory registrations
 * and CQ are the parent's (the device files are shared): forgotten, never
 * destroyed nor polled here. Its registered areas are not in the child at
 * all (MADV_DONTFORK): their addresses are free for the child's own
 * mappings, never to be unmapped from here. */
static void forget_parents(struct vs_rdma_conn *c)
{
    memset(&c->rx, 0, sizeof(c->rx));
    memset(&c->tx, 0, sizeof(c->tx));
    memset(&c->msgs, 0, sizeof(c->msgs));
    memset(&c->credit, 0, sizeof(c->credit));
    vs_rdma_grow_forget(c);
    c->id = c->listen_id = NULL;
    c->qp = NULL;
    c->pd = NULL;
    c->cqg = NULL;
    c->gcq = NULL;
    c->cq = NULL;
    c->inbox = NULL; /* in the group's lock's keeping: left */
}

/* fork: the child's copies of the connections are not its own (their
 * memory and queue pairs are the parent's): forget them without touching
 * them. Their sockets in the child go through vs_rdma_ops still and find
 * every connection FAILED (rdma.c), but those still young, which the child
 * holds with its parent (forked.c). A copy of one its parent carries on
 * RDMA is unused until the child's first call on it (rdma.c: copy_use). */
void vs_rdma_conn_fork_child(void)
{
    pthread_mutex_init(&list_lock, NULL);
    for (struct vs_rdma_conn *c = list; c; c = c->next) {
        /* Its locks may have been held by a thread of the parent, which
         * the child does not have. */
        pthread_mutex_init(&c->ctl_lock, NULL);
        pthread_mutex_init(&c->tx_lock, NULL);
        pthread_mutex_init(&c->rx_lock, NULL);
        pthread_mutex_init(&c->qp_lock, NULL);
        if (atomic_load(&c->hs) == VS_RDMA_YOUNG && atomic_load(&c->share) >= 0) {
            if (vs_rdma_forked_child(c)) {
                vs_rdma_forked_carry_child(c);
                c->carrier = true; /* its own to set up, once alone */
                continue;
            }
            /* Not written in as a holder: must never upgrade, nor let
             * another holder upgrade while it moves bytes. */
            vs_rdma_forked_taint(c);
            c->fail_reason = VS_REASON_LEFT_BY_FORK;
        }
        atomic_store(&c->share, -1); /* the parent's to drop */
        bool carried = vs_rdma_forked_carry_child(c);
        atomic_store(&c->hs, VS_RDMA_FAILED);
        /* What the parent had to settle is its own to settle, and the
         * copy's positions are stale: to the child the socket is the
         * kernel's alone (readiness watches TCP for everything). */
        atomic_store(&c->rx_unsettled, false);
        c->rx_skip = 0;
        atomic_store(&c->st.rx_back_on_tcp, true);
        atomic_store(&c->st.tx_back_on_tcp, true);
        atomic_store(&c->resending, false); /* the parent's to send */
        c->fin_after_resend = false;
        forget_parents(c);
        /* The socket is the parent's to keep open, not ours. */
        if (c->hold_fd >= 0)
            vs_ownfd_close(c->hold_fd, c);
        c->hold_fd = -1;
        if (carried) {
            /* What the child's rows say (rdma.c: sync) until its first use. */
            c->fail_reason = VS_REASON_RDMA_IN_PARENT;
            if (c->stat)
                vs_stats_set_transport(c->stat, VS_TRANSPORT_KERNEL, VS_REASON_RDMA_IN_PARENT);
        }
    }
}

void vs_rdma_conn_close_later(struct vs_rdma_conn *c, long linger_ns)
{
    pthread_mutex_lock(&list_lock);
    c->close_deadline_ns = vs_now_ns() + linger_ns;
    c->closing = true;
    pthread_mutex_unlock(&list_lock);
}

static struct vs_rdma_conn *take_reapable(long now)
{
    struct vs_rdma_conn *found = NULL;
    pthread_mutex_lock(&list_lock);
    for (struct vs_rdma_conn *c = list; c && !found; c = c->next) {
        if (!c->closing)
            continue;
        vs_rdma_poll(c);
        /* A resend goes first, as far as TCP takes it at each run: one
         * under way, or one the peer's CUT asks for since the close (its
         * process left RDMA, and has not read all our ring). */
        if (vs_rdma_resend_due(c)) {
            if (pthread_mutex_trylock(&c->tx_lock) != 0)
                continue;
            if (!atomic_load(&c->resending))
                c->close_deadline_ns = now + VS_RDMA_CLOSE_RESEND_NS;
            bool over = vs_rdma_resend_closed(c, c->close_deadline_ns);
            pthread_mutex_unlock(&c->tx_lock);
            if (!over)
                continue;
        }
        if (vs_rdma_sends_done(c) || atomic_load(&c->broken) || now > c->close_deadline_ns) {
            c->closing = false;
            found = c;
        }
    }
    pthread_mutex_unlock(&list_lock);
    return found;
}

static bool any_closing(void)
{
    bool any = false;
    pthread_mutex_lock(&list_lock);
    for (struct vs_rdma_conn *c = list; c && !any; c = c->next)
        any = c->closing;
    pthread_mutex_unlock(&list_lock);
    return any;
}

void vs_rdma_reap(bool wait)
{
    for (;;) {
        struct vs_rdma_conn *c;
        while ((c = take_reapable(vs_now_ns())))
            vs_rdma_conn_free(c);
        if (!wait || !any_closing())
            return;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}
