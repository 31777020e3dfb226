/* rdma.c - which connections try the rdma transport, what the statistics
 * say of them, their readiness as poll and epoll see it, and the process
 * events (fork, exec) they follow. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "config/config.h"
#include "config/log.h"
#include "core/clock.h"
#include "core/fdtable.h"
#include "core/ownfd.h"
#include "core/reason.h"
#include <fcntl.h>
#include "base/real.h"
#include "transport/addr.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/dev.h"
#include "transport/rdma/ops.h"
#include "transport/rdma/rdma.h"

/* Cheap reasons not to try, before any state is made: no device on this
 * machine (one look per process), a loopback peer (RDMA cannot route it),
 * a destination recently found without vsocket. */
static const char *not_worth(bool accepter, const struct sockaddr_storage *peer)
{
    static int present = -1;
    if (present < 0)
        present = vs_rdma_dev_channel_possible();
    if (!present)
        return VS_REASON_NO_RDMA_DEVICE;
    if (vs_addr_loopback(peer))
        return VS_REASON_NO_RDMA_DEVICE;
    if (vs_rdma_peer_cache_plain(accepter, peer))
        return VS_REASON_PEER_CACHED;
    return NULL;
}

static void offer(struct vs_sock *s, int fd, bool accepter, const struct sockaddr *peer,
                  socklen_t len)
{
    if (!vs_upgrade_eligible(s, VS_TRANSPORT_RDMA))
        return;
    struct vs_rdma_conn *c = vs_rdma_conn_new(s, accepter, fd, peer, len);
    if (!c)
        return;
    const char *why = not_worth(accepter, &c->peer);
    if (why) {
        vs_stats_set_reason(s->stat, why);
        vs_rdma_conn_free(c);
        return;
    }
    s->ops = &vs_rdma_ops;
    s->conn = c;
    c->stat = s->stat;
    s->conn_shown = -1;
    vs_stats_set_reason(s->stat, VS_REASON_DEFERRED);
}

static void on_connect(struct vs_sock *s, int fd, const struct sockaddr *peer, socklen_t len)
{
    offer(s, fd, false, peer, len);
}

static void on_accept(struct vs_sock *s, int fd)
{
    offer(s, fd, true, NULL, 0);
}

/* ------------------------------------------------------------- statistics */

/* At exit, connections closed with writes in flight get them placed
 * (bounded): the kernel would have kept sending a closed socket's bytes. */
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void reap_at_exit(void)
{
    vs_rdma_resend_at_exit();
    vs_rdma_reap(true);
}

static void register_exit(void)
{
    atexit(reap_at_exit);
}

static int take_hold(struct vs_rdma_conn *c, int fd);

/* The statistics and the log say where a settled connection went, once;
 * FD < 0: shown as it closes. */
static void show_outcome(struct vs_sock *s, struct vs_rdma_conn *c, int hs, int fd)
{
    long ms = (vs_now_ns() - c->up.born_ns) / 1000000;
    char who[32] = "a closing connection";
    if (fd >= 0)
        snprintf(who, sizeof(who), "fd %d", fd);
    s->conn_shown = hs;
    if (hs == VS_RDMA_DONE) {
        s->transport = VS_TRANSPORT_RDMA;
        vs_stats_set_transport(s->stat, VS_TRANSPORT_RDMA, c->device);
        vs_info("%s: upgraded to rdma on %s %ld ms after it began (rings of %lu and %lu bytes)",
                who, c->device, ms, (unsigned long)c->rx_size, (unsigned long)c->tx_size);
    } else {
        const char *why = c->fail_reason ? c->fail_reason : VS_REASON_PEER_NOT_VSOCKET;
        s->transport = VS_TRANSPORT_KERNEL;
        vs_stats_set_transport(s->stat, VS_TRANSPORT_KERNEL, why);
        vs_info("%s: stays on the kernel: %s", who, why);
    }
}

void vs_rdma_sync(struct vs_sock *s, int fd)
{
    struct vs_rdma_conn *c = s->conn;
    int hs = atomic_load_explicit(&c->hs, memory_order_acquire);
    if (hs == s->conn_shown && (hs == VS_RDMA_DONE || hs == VS_RDMA_FAILED)) {
        if (hs == VS_RDMA_DONE)
            vs_upgrade_show_peer_left(s, VS_TRANSPORT_RDMA, &c->st);
        return;
    }
    if (hs != VS_RDMA_DONE && hs != VS_RDMA_FAILED) {
        if (hs == VS_RDMA_YOUNG)
            atomic_fetch_add_explicit(&c->up.young_calls, 1, memory_order_relaxed);
        vs_rdma_progress(c, fd);
        hs = atomic_load(&c->hs);
    }
    if (hs != VS_RDMA_DONE && hs != VS_RDMA_FAILED) {
        if (hs != VS_RDMA_YOUNG)
            vs_upgrade_show_pending(s, &c->up, VS_RDMA_LISTEN);
        return;
    }
    if (hs == VS_RDMA_DONE && c->hold_fd < 0)
        take_hold(c, fd);
    show_outcome(s, c, hs, fd);
}

/* At close: a set-up that settled after the program's last call is shown
 * now (the closed record and the log would otherwise say it was pending). */
static void show_at_close(struct vs_sock *s, struct vs_rdma_conn *c)
{
    int hs = atomic_load_explicit(&c->hs, memory_order_acquire);
    if (hs == s->conn_shown)
        return;
    /* One that left RDMA since shows why it left (leave_conn): keep that. */
    if (hs == VS_RDMA_DONE &&
        (atomic_load(&c->st.tx_back_on_tcp) || atomic_load(&c->st.rx_reverted)))
        vs_info("a closing connection had moved to rdma and went back to TCP");
    else if (hs == VS_RDMA_DONE || hs == VS_RDMA_FAILED)
        show_outcome(s, c, hs, -1);
    else if (hs != VS_RDMA_YOUNG)
        vs_info("a connection closed while its set-up was under way: it stayed on the kernel");
}

/* -------------------------------------------------------------- readiness */

static bool rx_on_rdma(struct vs_rdma_conn *c)
{
    if (vs_stream_rx_on_transport(&c->st))
        return true;
    /* Read up to the switch point: the next read is the ring's. */
    return atomic_load(&c->st.rx_switch_known) && !atomic_load(&c->st.rx_back_on_tcp) &&
           c->st.rx_switch_at == __atomic_load_n(&c->st.tcp_rx, __ATOMIC_RELAXED);
}

/* A child's unused copy too: readiness the child acts on is a use. */
static bool translated(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    return vs_rdma_active(c) || atomic_load(&c->copy_unused);
}

static unsigned tcp_interest(struct vs_sock *s, unsigned user)
{
    struct vs_rdma_conn *c = s->conn;
    unsigned want = user & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
    /* On the ring, TCP only says the peer died; once the peer left
     * (CUT) its next bytes come on TCP, with no completion to wake
     * a reader that has emptied the ring. */
    if (rx_on_rdma(c) && !atomic_load(&c->st.rx_reverted))
        want = (want & ~(unsigned)POLLIN) | POLLRDHUP;
    /* A resend waits for TCP's room whatever the program waits for: the
     * next call sends more of it. */
    if (atomic_load(&c->resending))
        want |= POLLOUT;
    else if (vs_stream_tx_on_transport(&c->st))
        want &= ~(unsigned)POLLOUT;
    return want;
}

static int watch_fd(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    return vs_rdma_active(c) && c->cqg ? vs_rdma_cq_fd(c) : -1;
}

/* The watch fd is the completion channel of the connections the thread
 * that set this one up has (cq.h). */
static bool watch_shared(struct vs_sock *s)
{
    (void)s;
    return true;
}

static void shared_news(int fd)
{
    vs_rdma_cq_events(fd);
}

/* Readiness from memory (the CQ is polled without a system call). */
static unsigned ready_rdma(struct vs_rdma_conn *c, unsigned interest)
{
    unsigned ev = 0;
    if (!vs_rdma_done(c))
        return 0;
    vs_rdma_poll(c);
    bool dead = atomic_load(&c->broken) || atomic_load(&c->peer_gone);
    if ((interest & POLLIN) && rx_on_rdma(c) &&
        (vs_rdma_readable(c) || vs_rdma_rx_eof(c) || atomic_load(&c->st.rx_reverted) ||
         atomic_load(&c->st.violated)))
        ev |= POLLIN;
    if (vs_rdma_rx_eof(c))
        ev |= POLLRDHUP & interest;
    /* Room in the ring but not in the send queue (a peer slow to take
     * many small writes) is not writable: the send would say EAGAIN, and a
     * program told it may write would spin. A completion wakes it. */
    if ((interest & POLLOUT) && vs_stream_tx_on_transport(&c->st) && !atomic_load(&c->resending) &&
        ((vs_rdma_writable(c) && vs_rdma_sq_has_room(c)) || dead ||
         atomic_load(&c->st.tx_revert_pending) || vs_rdma_stalled(c)))
        ev |= POLLOUT;
    return ev;
}

static bool setup_on_qp(struct vs_rdma_conn *c);

static unsigned poll_fast(struct vs_sock *s, unsigned interest)
{
    struct vs_rdma_conn *c = s->conn;
    /* The set-up's last message may have come before the CQ was armed: its
     * completion rings nothing, and an idle connection brings no other
     * (seen: a redis connection whose server end stayed pending while the
     * client wrote on RDMA). Its fd is not needed in these states. */
    if (setup_on_qp(c)) {
        vs_rdma_poll(c);
        if (atomic_load_explicit(&c->setup_msg_in, memory_order_acquire))
            vs_rdma_progress(c, -1);
    }
    return ready_rdma(c, interest);
}

static unsigned poll_now(struct vs_sock *s, int fd, unsigned interest, int tcp_revents,
                         bool watch_fired)
{
    struct vs_rdma_conn *c = s->conn;
    vs_rdma_copy_use(c, fd);
    if (watch_fired)
        vs_rdma_channel_drain(c);
    vs_rdma_sync(s, fd);
    vs_rdma_revert_if_asked(c, fd);
    if (tcp_revents == VS_TCP_UNKNOWN) {
        struct pollfd p = {.fd = fd, .events = (short)tcp_interest(s, interest)};
        tcp_revents = vs_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
    }
    unsigned ev = ready_rdma(c, interest);
    unsigned tcp = (unsigned)tcp_revents;
    if (vs_rdma_done(c) && (tcp & (POLLRDHUP | POLLHUP | POLLERR))) {
        /* The peer may be gone: rdma_cm says whether its queue pair went. */
        vs_rdma_dev_events();
        ev |= ready_rdma(c, interest);
    }
    if (rx_on_rdma(c)) {
        /* TCP after the switch: the peer's death or its CUT resend. */
        if (tcp & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
            atomic_store(&c->tcp_event, true);
            ev |= POLLIN & interest;
        }
        tcp &= ~(unsigned)(POLLIN | POLLRDHUP);
    }
    if (vs_stream_tx_on_transport(&c->st))
        tcp &= ~(unsigned)POLLOUT;
    return ev | (tcp & (interest | POLLHUP | POLLERR));
}

static bool spins(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    return vs_rdma_done(c) &&
           (rx_on_rdma(c) || (vs_stream_tx_on_transport(&c->st) && !atomic_load(&c->resending)));
}

/* The set-up's last steps arrive on the queue pair: the connector waits
 * for the accepter's PROOF, the accepter for the RING after which the
 * connector may already send on RDMA. A program asleep in epoll must wake
 * for them, as for data. */
static bool setup_on_qp(struct vs_rdma_conn *c)
{
    int hs = atomic_load(&c->hs);
    return c->cqg && (hs == VS_RDMA_ACCEPT || hs == VS_RDMA_WAIT_RING);
}

static unsigned arm(struct vs_sock *s, unsigned interest)
{
    struct vs_rdma_conn *c = s->conn;
    unsigned armed = 0;
    /* Counted before the CQ is armed: a thread that reads the channel's
     * event meanwhile arms it again for a connection with sleepers (cq.c). */
    if (setup_on_qp(c) && (interest & POLLIN)) {
        atomic_fetch_add(&c->sleepers, 1);
        vs_rdma_notify(c);
        return POLLIN;
    }
    if (!vs_rdma_done(c) || !c->cqg)
        return 0;
    /* Before the peer's SWITCH too: it comes on the CQ, and the bytes
     * after it never on TCP, so a reader asleep on TCP alone would miss
     * them (seen: an asyncio server woke only when the writer, stalled,
     * left RDMA 200 ms later). */
    if ((interest & POLLIN) && !atomic_load(&c->st.rx_back_on_tcp))
        armed |= POLLIN;
    if ((interest & POLLOUT) && vs_stream_tx_on_transport(&c->st) && !atomic_load(&c->resending)) {
        armed |= POLLOUT;
        if (!vs_rdma_writable(c))
            vs_rdma_ask_credit(c);
    }
    if (armed) {
        atomic_fetch_add(&c->sleepers, 1);
        vs_rdma_notify(c);
    }
    return armed;
}

static void disarm(struct vs_sock *s, unsigned armed)
{
    if (armed)
        atomic_fetch_sub(&((struct vs_rdma_conn *)s->conn)->sleepers, 1);
}

static void rearm(struct vs_sock *s, unsigned armed)
{
    if (armed)
        vs_rdma_notify(s->conn);
}

static bool shared_wait(struct vs_sock *s)
{
    return atomic_load(&((struct vs_rdma_conn *)s->conn)->sleepers) > 1;
}

static unsigned generation(struct vs_sock *s)
{
    return atomic_load(&((struct vs_rdma_conn *)s->conn)->gen);
}

static uint64_t rx_mark(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    return atomic_load(&c->rx_head) + __atomic_load_n(&c->st.tcp_rx, __ATOMIC_RELAXED);
}

static uint64_t tx_mark(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    return c->tx.mem ? vs_rdma_peer_tail(c) : 0;
}

/* Only TCP can change the receive side while no queue pair exists. */
static bool rx_by_kernel(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    return !vs_rdma_active(c) || !c->cqg;
}

/* A cold epoll record (readiness/epoll.c) hears of the connection only
 * through its TCP fd and its watch fd, armed once: without it every wait
 * of a server polls the CQ of each of its idle connections. On TCP for good,
 * the kernel says everything. On RDMA: the CQ's notification covers data,
 * messages, credit asked for and completion errors; what this process
 * changes bumps the generation, which kicks the record; news read by
 * another path (a blocking call's drain of the channel) is passed on. Not
 * during the set-up, whose steps come as rdma_cm events on the process's
 * channel, nor while the sender is stalled, which ends in a spill at a time,
 * not at an event. */
static bool cold_attach(struct vs_sock *s, void *rec)
{
    struct vs_rdma_conn *c = s->conn;
    /* A child's unused copy: the kernel would never say its bytes (they
     * are in the parent's ring); each wait must look (poll_now: its use). */
    if (atomic_load(&c->copy_unused))
        return false;
    if (!vs_rdma_active(c))
        return true;
    void *none = NULL;
    bool stalled = vs_stream_tx_on_transport(&c->st) && atomic_load(&c->tx_stall_ns);
    return vs_rdma_done(c) && c->cqg && spins(s) && !stalled && !atomic_load(&c->resending) &&
           atomic_compare_exchange_strong(&c->cold_rec, &none, rec);
}

static void cold_detach(struct vs_sock *s, void *rec)
{
    struct vs_rdma_conn *c = s->conn;
    if (c)
        atomic_compare_exchange_strong(&c->cold_rec, &rec, NULL);
}

static void *cold_rec(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    return c ? atomic_load(&c->cold_rec) : NULL;
}

/* ---------------------------------------------------------- process events */

/* A descriptor of the connection's TCP socket to resend on when it leaves:
 * the hold taken once a call saw it on RDMA, or else one of the program's.
 * (Found: a set-up that ended inside a call that did not look again had no
 * hold, and a fork then left without a CUT: the peer went on writing into
 * a ring nobody read, and both programs waited for ever.) */
struct fd_of {
    struct vs_rdma_conn *c;
    int fd;
};

static void find_fd(int fd, struct vs_sock *s, void *arg)
{
    struct fd_of *f = arg;
    if (f->fd < 0 && s->ops == &vs_rdma_ops && s->conn == f->c)
        f->fd = fd;
}

static int take_hold(struct vs_rdma_conn *c, int fd)
{
    int dup = vs_real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0)
        return fd;
    dup = vs_ownfd_take(dup, c, NULL);
    int none = -1;
    if (!__atomic_compare_exchange_n(&c->hold_fd, &none, dup, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        vs_ownfd_close(dup, c); /* a call took one meanwhile */
        return none;
    }
    pthread_once(&exit_once, register_exit);
    return dup;
}

static int conn_fd(struct vs_rdma_conn *c)
{
    int held = __atomic_load_n(&c->hold_fd, __ATOMIC_ACQUIRE);
    if (held >= 0 || !c->carrier)
        return held;
    struct fd_of f = {c, -1};
    vs_fd_for_each(find_fd, &f);
    return f.fd < 0 ? -1 : take_hold(c, f.fd);
}

static void leave(struct vs_sock *s, int fd, const char *reason)
{
    struct vs_rdma_conn *c = s->conn;
    vs_rdma_copy_use(c, fd);
    if (vs_rdma_active(c) && !vs_rdma_done(c))
        vs_rdma_setup_leave(c, reason);
    if (vs_rdma_done(c))
        vs_rdma_revert(c, fd, reason);
    vs_rdma_forked_left(c);
    vs_rdma_sync(s, fd);
}

/* Leaves RDMA for a process event, the peer told (CUT, or the set-up's
 * end), settled: every holder of the socket may use TCP after. */
static void leave_conn(struct vs_rdma_conn *c, const char *reason)
{
    if (!c->carrier)
        return; /* a child's copy: the carrier's to leave (copy_use) */
    bool was = vs_rdma_active(c);
    if (was && !vs_rdma_done(c))
        vs_rdma_setup_leave(c, reason);
    int fd = conn_fd(c);
    if (vs_rdma_done(c) || vs_rdma_unsettled(c) || atomic_load(&c->st.tx_revert_pending))
        vs_rdma_revert(c, fd, reason);
    vs_rdma_forked_left(c);
    /* Said at once: the process may never call on the socket again (a
     * parent that closes its copy after fork). */
    if (was && c->stat && !c->closing)
        vs_stats_set_transport(c->stat, VS_TRANSPORT_KERNEL, reason);
}

/* A forked child's copy of a connection its parent carries on RDMA, at the
 * child's first use (a call that moves bytes, shuts down, or acts on
 * readiness; an exec that keeps the descriptor): the parent leaves RDMA
 * first (forked.c), then the call goes on on TCP. */
void vs_rdma_copy_use(struct vs_rdma_conn *c, int fd)
{
    if (!atomic_load(&c->copy_unused))
        return;
    int rc = vs_rdma_forked_ask(c);
    if (!atomic_exchange(&c->copy_unused, false))
        return;
    if (rc < 0) {
        vs_warn("rdma: the parent that carried this connection on rdma died with it: the "
                "connection ends");
        if (fd >= 0)
            vs_real.shutdown(fd, SHUT_RDWR);
    }
    c->fail_reason = VS_REASON_LEFT_BY_FORK; /* the child's copy: its own */
    vs_rdma_bump(c);
    if (c->stat)
        vs_stats_set_transport(c->stat, VS_TRANSPORT_KERNEL, VS_REASON_LEFT_BY_FORK);
}

/* The carrier lets go while a child holds the connection: it leaves RDMA
 * (a SHUT would end the stream the child may still use), then goes. */
static void release(struct vs_sock *s)
{
    struct vs_rdma_conn *c = s->conn;
    show_at_close(s, c);
    if (c->carrier && atomic_load(&c->held) >= 0 && vs_rdma_forked_others(c))
        leave_conn(c, VS_REASON_LEFT_BY_FORK);
    s->conn = NULL;
    c->stat = NULL; /* goes with the socket; the connection may linger */
    if (vs_rdma_done(c))
        vs_rdma_close(c);
    else
        vs_rdma_conn_free(c);
    vs_rdma_reap(false);
}

static void leave_one(struct vs_rdma_conn *c, void *arg)
{
    leave_conn(c, arg);
}

static void leave_all(const char *reason)
{
    vs_rdma_conn_each(leave_one, (void *)reason);
}

/* After the change, the device's files refuse us (dev.h): connections
 * leave while they can still tell their peers (CUT). Soft-RoCE even rings
 * its send doorbell through the device file: a connection that stayed
 * could not send a byte more. */
static _Atomic bool retiring;

static void before_creds(void)
{
    /* Never opened: the first open will have the new credentials. */
    if (!vs_rdma_dev_retire(VS_REASON_CREDS_CHANGED))
        return;
    atomic_store(&retiring, true);
    vs_info("rdma: the program changes its credentials: its connections leave rdma, and new "
            "ones stay on TCP");
    leave_all(VS_REASON_CREDS_CHANGED);
}

/* A change that failed (a setgroups without the privilege) changed
 * nothing: new connections may use the device again. */
static void after_creds(bool changed)
{
    if (atomic_exchange(&retiring, false) && !changed)
        vs_rdma_dev_unretire();
}

/* A young connection no call is inside (none can move bytes unclaimed):
 * the child holds it with us (forked.c). (list) */
static bool share_young(struct vs_rdma_conn *c)
{
    if (atomic_load(&c->hs) != VS_RDMA_YOUNG || c->closing || !c->carrier)
        return false;
    if (pthread_mutex_trylock(&c->tx_lock) != 0)
        return false;
    bool shared = false;
    if (pthread_mutex_trylock(&c->rx_lock) == 0) {
        if (pthread_mutex_trylock(&c->ctl_lock) == 0) {
            shared = atomic_load(&c->hs) == VS_RDMA_YOUNG && vs_rdma_forked_share(c);
            pthread_mutex_unlock(&c->ctl_lock);
        }
        pthread_mutex_unlock(&c->rx_lock);
    }
    pthread_mutex_unlock(&c->tx_lock);
    return shared;
}

/* Whether the kernel keeps pinned pages the parent's at fork and copies
 * them for the child (copy-on-fork, Linux 5.13): then registered memory
 * survives a fork untouched, whatever the child does. Older kernels would
 * share them copy-on-write, and the parent's next write would move its
 * page away from the adapter's: there every connection leaves first. */
static bool copy_on_fork(void)
{
    static int known = -1;
    if (known < 0)
        known = !vs_config.rdma_fork_leave && ibv_is_fork_initialized() == IBV_FORK_UNNEEDED;
    return known;
}

/* The carrier's helper: a child that uses its copy waits for the carrier
 * to leave RDMA, which must happen whatever the carrier does meanwhile
 * (it may wait for that very child: waitpid, a pipe, its turn). A thread,
 * started at the first fork that leaves a child a copy, asleep on the
 * shared futex until a child asks; every signal blocked. */
static bool helper_ok;
static pthread_once_t helper_once = PTHREAD_ONCE_INIT;

static void serve(struct vs_rdma_conn *c, void *arg)
{
    (void)arg;
    if (!vs_rdma_forked_asked(c))
        return;
    vs_info("rdma: a forked child uses a connection carried here on rdma: it leaves for TCP");
    leave_conn(c, VS_REASON_LEFT_BY_FORK);
}

static void *helper(void *arg)
{
    (void)arg;
    for (;;) {
        uint32_t seen = vs_rdma_forked_asks();
        vs_rdma_conn_each(serve, NULL);
        vs_rdma_forked_wait_asks(seen);
    }
    return NULL;
}

/* At exit, a connection a live child still holds leaves RDMA: the child
 * may go on using it. */
static void exit_one(struct vs_rdma_conn *c, void *arg)
{
    (void)arg;
    if (c->carrier && atomic_load(&c->held) >= 0 && vs_rdma_forked_others(c))
        leave_conn(c, VS_REASON_LEFT_BY_FORK);
}

static void carrier_exit(void)
{
    vs_rdma_conn_each(exit_one, NULL);
}

static void start_helper(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    pthread_t t;
    helper_ok = pthread_create(&t, &a, helper, NULL) == 0;
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (helper_ok)
        atexit(carrier_exit);
    else
        vs_info("rdma: no helper thread: connections leave rdma at fork");
}

/* A connection on RDMA or in its set-up stays there in the parent; the
 * child holds a copy (forked.c). A child's unused copy is held by its own
 * child too. */
static bool carry(struct vs_rdma_conn *c)
{
    if (c->closing || !copy_on_fork())
        return false;
    if (c->carrier) {
        /* One that left RDMA may still owe the peer a resend or have TCP
         * bytes to drop: the child's use waits for those too. */
        int hs = atomic_load(&c->hs);
        if (hs == VS_RDMA_YOUNG || (hs == VS_RDMA_FAILED && !c->qp))
            return false;
        pthread_once(&helper_once, start_helper);
        if (!helper_ok)
            return false;
    } else if (!atomic_load(&c->copy_unused)) {
        return false;
    }
    return vs_rdma_forked_carry(c);
}

static void fork_one(struct vs_rdma_conn *c, void *arg)
{
    if (share_young(c) || carry(c))
        return;
    /* Closed by the program, its last writes in flight: the child has no
     * descriptor of it (its copy of the hold is closed), nothing to do. */
    if (c->closing && copy_on_fork())
        return;
    /* A child's copy it cannot pass on: the carrier leaves first. */
    vs_rdma_copy_use(c, -1);
    leave_conn(c, arg);
}

/* A connection stays on RDMA at fork, in the parent; the child's copy is
 * forgotten (its memory kept out of the child: verbs.c) and its first use
 * makes the connection leave. A young one has nothing to lose: both hold
 * it, and its set-up starts once one of them holds it alone (a
 * fork-per-connection server's child, once the parent closed its copy). */
static void fork_prepare(void)
{
    vs_rdma_conn_each(fork_one, (void *)VS_REASON_LEFT_BY_FORK);
}

static void born(struct vs_rdma_conn *c, void *arg)
{
    (void)arg;
    vs_rdma_forked_born(c);
    vs_rdma_forked_carry_born(c);
}

static void fork_parent(void)
{
    vs_rdma_conn_each(born, NULL);
}

static void fork_child(void)
{
    /* The parent's helper thread is not ours: a connection this process
     * carries one day gets a helper of its own at its first fork. */
    helper_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    helper_ok = false;
    vs_rdma_conn_fork_child();
    vs_rdma_cq_fork_child();
    vs_rdma_dev_fork_child();
}

static void forget_birth(struct vs_rdma_conn *c, void *arg)
{
    (void)arg;
    vs_rdma_forked_failed(c);
    vs_rdma_forked_carry_failed(c);
}

static void fork_failed(void)
{
    vs_rdma_conn_each(forget_birth, NULL);
}

/* Which connections the exec'd program keeps (not close-on-exec): it may
 * use them, so a child's copy among them makes its carrier leave first. */
static void exec_keeps(int fd, struct vs_sock *s, void *arg)
{
    (void)arg;
    if (s->ops != &vs_rdma_ops || !s->conn)
        return;
    struct vs_rdma_conn *c = s->conn;
    int fl = vs_real.fcntl(fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC))
        return;
    c->exec_kept = true;
    vs_rdma_copy_use(c, fd);
}

/* The state does not survive exec: a connection on RDMA leaves. One the
 * exec closes that other processes hold (a child's unused copy, a young
 * one held since a fork) is left alone: it changes nothing for them (a
 * young one tainted here could never upgrade in the parent). It stays
 * held: an exec may fail (a PATH search tries one after another) and the
 * program go on with it. */
static void exec_one(struct vs_rdma_conn *c, void *arg)
{
    bool young = atomic_load(&c->hs) == VS_RDMA_YOUNG;
    if (!c->exec_kept &&
        ((!c->carrier && atomic_load(&c->copy_unused)) || (young && atomic_load(&c->share) >= 0)))
        return;
    leave_conn(c, arg);
}

static void before_exec(void)
{
    vs_fd_for_each(exec_keeps, NULL);
    vs_rdma_conn_each(exec_one, (void *)VS_REASON_LEFT_BY_EXEC);
}

const struct vs_transport_ops vs_rdma_ops = {
    .id = VS_TRANSPORT_RDMA,
    .on_connect = on_connect,
    .on_accept = on_accept,
    .recvmsg = vs_rdma_recvmsg,
    .sendmsg = vs_rdma_sendmsg,
    .sendfile = vs_rdma_sendfile,
    .shutdown = vs_rdma_shutdown,
    .ioctl = vs_rdma_ioctl,
    .translated = translated,
    .tcp_interest = tcp_interest,
    .watch_fd = watch_fd,
    .watch_shared = watch_shared,
    .shared_news = shared_news,
    .poll = poll_now,
    .poll_fast = poll_fast,
    .spins = spins,
    .arm = arm,
    .disarm = disarm,
    .rearm = rearm,
    .shared_wait = shared_wait,
    .generation = generation,
    .rx_mark = rx_mark,
    .tx_mark = tx_mark,
    .rx_by_kernel = rx_by_kernel,
    .cold_attach = cold_attach,
    .cold_detach = cold_detach,
    .cold_rec = cold_rec,
    .idle = NULL,
    .leave = leave,
    .release = release,
    .fork_prepare = fork_prepare,
    .fork_parent = fork_parent,
    .fork_child = fork_child,
    .fork_failed = fork_failed,
    .before_exec = before_exec,
    .leave_all = leave_all,
    .before_creds = before_creds,
    .after_creds = after_creds,
    .fds_short = vs_rdma_fds_short,
};
