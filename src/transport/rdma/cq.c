/* cq.c - completion queues and channels shared by a thread's connections
 * (cq.h).
 *
 * Lock order: a connection's qp_lock, then its group's lock. Under the
 * group's lock nothing but the CQ, the inboxes and the tag table is
 * touched, and nothing sleeps: eventfd writes and epoll kicks only. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "config/log.h"
#include "core/ownfd.h"
#include "base/real.h"
#include "transport/wake.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/cq.h"

/* Completions a CQ holds at most (a device's max_cqe may be lower); a
 * group's first CQ is sized for a few connections, each next one as large
 * as those before together: a process with one connection pins little. */
#define CQ_ENTRIES_MAX 16384
#define CQ_FIRST_CONNS 4
/* Tags: a slot index in the low bits, the slot's generation above. */
#define TAG_INDEX_BITS 20
#define TAG_INDEX_MASK ((1u << TAG_INDEX_BITS) - 1)
/* Blocking sleepers of a group whose eventfd another thread may write. */
#define SLEEPERS_MAX 64

struct vs_rdma_gcq {
    struct ibv_cq *cq;
    unsigned size;
    unsigned room;    /* completions not reserved */
    unsigned unacked; /* channel events not acknowledged yet */
    /* Armed since its last event was read: the device is armed, or an
     * event of it waits in the channel (readable, and read before this is
     * cleared). Arming again would be a system call for nothing. Waits
     * that end unheard read the channel all the same (io.c, epoll.c's
     * read_shared): an edge a forked child's epoll took leaves an event
     * nobody else would read. (group) */
    bool armed;
};

/* A thread in a blocking sleep: its eventfd, that fd's owner, and whether
 * the fd was written (its wake-up then reads it, and only then). */
struct sleeper {
    int fd;
    const void *owner;
    bool woken;
};

struct vs_rdma_cqg {
    pthread_mutex_t lock;
    struct ibv_context *ctx;
    struct ibv_comp_channel *channel;
    int fd;                   /* the channel's, ours (core/ownfd.h) */
    unsigned cq_max;          /* the most completions a CQ may hold */
    struct vs_rdma_gcq **cqs; /* each allocated once: connections point at theirs */
    unsigned ncqs;
    /* Tag slots: the connection holding each, and its generation. */
    struct vs_rdma_conn **slots;
    uint32_t *gens;
    unsigned nslots;
    struct sleeper sleepers[SLEEPERS_MAX]; /* threads in a blocking sleep */
    unsigned nsleepers;
    /* The thread whose connections it serves (thread_state.id), or 0: its
     * thread exited, and the next thread without a group adopts it. */
    uint64_t owner;
    struct vs_rdma_cqg *next; /* every group of the process */
};

static pthread_mutex_t groups_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vs_rdma_cqg *groups;
static pthread_key_t thread_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
/* Bumped by fork in the child: a thread's cached group of an older epoch
 * is the parent's. */
static _Atomic unsigned epoch;

/* Devices a thread sets connections up on, each with its group. */
#define THREAD_GROUPS 4

struct thread_state {
    unsigned epoch;
    uint64_t id;               /* never 0, never reused */
    struct thread_state *next; /* the live threads (groups_lock) */
    struct vs_rdma_cqg *groups[THREAD_GROUPS];
    int wake_fd; /* eventfd for blocking sleeps, or -1 */
};

static __thread struct thread_state *me;
static struct thread_state *live; /* (groups_lock) */
static _Atomic uint64_t last_id;

/* A thread exits: its groups stay (their connections may outlive it) and
 * the next threads to set connections up adopt them. */
static void thread_gone(void *arg)
{
    struct thread_state *t = arg;
    if (t->epoch == atomic_load(&epoch)) {
        pthread_mutex_lock(&groups_lock);
        for (struct vs_rdma_cqg *g = groups; g; g = g->next)
            if (g->owner == t->id)
                g->owner = 0;
        for (struct thread_state **p = &live; *p; p = &(*p)->next)
            if (*p == t) {
                *p = t->next;
                break;
            }
        pthread_mutex_unlock(&groups_lock);
        if (t->wake_fd >= 0)
            vs_ownfd_close(t->wake_fd, t);
    }
    /* A later destructor of this thread that calls us gets a new one. */
    if (me == t)
        me = NULL;
    free(t);
}

static void make_key(void)
{
    pthread_key_create(&thread_key, thread_gone);
}

static struct thread_state *thread_state(void)
{
    if (me && me->epoch == atomic_load(&epoch))
        return me;
    pthread_once(&key_once, make_key);
    struct thread_state *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->epoch = atomic_load(&epoch);
    t->id = atomic_fetch_add(&last_id, 1) + 1;
    t->wake_fd = -1;
    pthread_mutex_lock(&groups_lock);
    t->next = live;
    live = t;
    pthread_mutex_unlock(&groups_lock);
    /* The old one was the parent's thread's (fork): forgotten. */
    me = t;
    pthread_setspecific(thread_key, t);
    return t;
}

static struct vs_rdma_cqg *group_new(struct ibv_context *ctx)
{
    struct vs_rdma_cqg *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->ctx = ctx;
    g->channel = ibv_create_comp_channel(ctx);
    if (!g->channel) {
        free(g);
        return NULL;
    }
    /* Never blocks: readiness reads it without waiting. */
    int fd = g->channel->fd;
    int fl = vs_real.fcntl(fd, F_GETFL);
    if (fl >= 0)
        vs_real.fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    vs_real.fcntl(fd, F_SETFD, FD_CLOEXEC);
    g->fd = g->channel->fd = vs_ownfd_take(fd, g, NULL);
    struct ibv_device_attr attr;
    g->cq_max = CQ_ENTRIES_MAX;
    if (ibv_query_device(ctx, &attr) == 0 && attr.max_cqe > 0 && (unsigned)attr.max_cqe < g->cq_max)
        g->cq_max = (unsigned)attr.max_cqe;
    pthread_mutex_init(&g->lock, NULL);
    return g;
}

/* A group of the process on CTX owned by OWNER (0: nobody's), or NULL.
 * (groups_lock) */
static struct vs_rdma_cqg *group_owned(struct ibv_context *ctx, uint64_t owner)
{
    for (struct vs_rdma_cqg *g = groups; g; g = g->next)
        if (g->owner == owner && g->ctx == ctx)
            return g;
    return NULL;
}

/* A new group on CTX for OWNER, listed. (groups_lock) */
static struct vs_rdma_cqg *group_add(struct ibv_context *ctx, uint64_t owner)
{
    struct vs_rdma_cqg *g = group_new(ctx);
    if (g) {
        g->owner = owner;
        g->next = groups;
        groups = g;
    }
    return g;
}

/* OWNER's group on CTX: its own (perhaps made for it by another thread,
 * group_of_home), else an exited thread's, adopted (groups are never
 * freed: a server whose threads come and go would pile them up), else a
 * new one. (groups_lock) */
static struct vs_rdma_cqg *group_claim(struct ibv_context *ctx, uint64_t owner)
{
    struct vs_rdma_cqg *g = group_owned(ctx, owner);
    if (!g && (g = group_owned(ctx, 0)))
        g->owner = owner;
    return g ? g : group_add(ctx, owner);
}

/* The calling thread's group on CTX (group_claim). */
static struct vs_rdma_cqg *group_of_thread(struct ibv_context *ctx)
{
    struct thread_state *t = thread_state();
    if (!t)
        return NULL;
    int free_i = -1;
    for (int i = 0; i < THREAD_GROUPS; i++) {
        if (t->groups[i] && t->groups[i]->ctx == ctx)
            return t->groups[i];
        if (!t->groups[i] && free_i < 0)
            free_i = i;
    }
    pthread_mutex_lock(&groups_lock);
    struct vs_rdma_cqg *g;
    if (free_i >= 0) {
        if ((g = group_claim(ctx, t->id)))
            t->groups[free_i] = g;
    } else if (!(g = group_owned(ctx, t->id))) {
        /* More devices than a thread keeps: the process shares one group
         * per device for them (an orphan that stays one). */
        g = group_claim(ctx, 0);
    }
    pthread_mutex_unlock(&groups_lock);
    return g;
}

/* The group on CTX of HOME, the thread that made C's calls last: whichever
 * thread read the rdma_cm event that sets C up, C's completions should
 * wake the thread that waits for them, alone (found: a thread per
 * connection server's 8 connections shared the acceptor's channel). A
 * thread no longer live: the calling thread's. */
static struct vs_rdma_cqg *group_of_home(struct ibv_context *ctx, uint64_t home)
{
    struct thread_state *t = thread_state();
    if (!home || (t && t->id == home))
        return group_of_thread(ctx);
    pthread_mutex_lock(&groups_lock);
    struct thread_state *l = live;
    while (l && l->id != home)
        l = l->next;
    struct vs_rdma_cqg *g = l ? group_claim(ctx, home) : NULL;
    pthread_mutex_unlock(&groups_lock);
    return g ? g : group_of_thread(ctx);
}

void vs_rdma_cq_home(struct vs_rdma_conn *c)
{
    struct thread_state *t = thread_state();
    if (t)
        atomic_store_explicit(&c->home_thread, t->id, memory_order_relaxed);
}

/* A CQ of G with room for WANT completions, made if none has. (group) */
static struct vs_rdma_gcq *reserve(struct vs_rdma_cqg *g, unsigned want, int *err)
{
    for (unsigned i = 0; i < g->ncqs; i++)
        if (g->cqs[i]->room >= want) {
            g->cqs[i]->room -= want;
            return g->cqs[i];
        }
    *err = -EINVAL;
    if (want > g->cq_max)
        return NULL;
    *err = -ENOMEM;
    struct vs_rdma_gcq **more = realloc(g->cqs, (g->ncqs + 1) * sizeof(*more));
    if (!more)
        return NULL;
    g->cqs = more;
    unsigned size = CQ_FIRST_CONNS * want;
    for (unsigned i = 0; i < g->ncqs; i++)
        size += g->cqs[i]->size;
    if (size > g->cq_max)
        size = g->cq_max;
    struct vs_rdma_gcq *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->cq = ibv_create_cq(g->ctx, (int)size, g, g->channel, 0);
    if (!q->cq) {
        *err = errno ? -errno : -ENOMEM;
        free(q);
        return NULL;
    }
    q->size = size;
    q->room = size - want;
    g->cqs[g->ncqs++] = q;
    return q;
}

/* A free tag slot for C. (group) */
static int take_slot(struct vs_rdma_cqg *g, struct vs_rdma_conn *c)
{
    unsigned i = 0;
    while (i < g->nslots && g->slots[i])
        i++;
    if (i == g->nslots) {
        unsigned n = g->nslots ? 2 * g->nslots : 64;
        if (n > TAG_INDEX_MASK + 1)
            return -ENOMEM;
        struct vs_rdma_conn **s = realloc(g->slots, n * sizeof(*s));
        if (!s)
            return -ENOMEM;
        g->slots = s;
        uint32_t *gens = realloc(g->gens, n * sizeof(*gens));
        if (!gens)
            return -ENOMEM;
        g->gens = gens;
        for (unsigned k = g->nslots; k < n; k++) {
            g->slots[k] = NULL;
            g->gens[k] = 0;
        }
        g->nslots = n;
    }
    g->slots[i] = c;
    g->gens[i] = (g->gens[i] + 1) & (UINT32_MAX >> TAG_INDEX_BITS);
    c->cq_tag = i | g->gens[i] << TAG_INDEX_BITS;
    return 0;
}

int vs_rdma_cq_attach(struct vs_rdma_conn *c, struct ibv_context *ctx)
{
    struct vs_rdma_cqg *g =
        group_of_home(ctx, atomic_load_explicit(&c->home_thread, memory_order_relaxed));
    if (!g)
        return errno ? -errno : -ENOMEM;
    /* Every receive and every send of C may complete at once. */
    unsigned want = 2 * c->depth;
    unsigned size = 1;
    while (size < want)
        size <<= 1;
    c->inbox = malloc(size * sizeof(*c->inbox));
    if (!c->inbox)
        return -ENOMEM;
    c->inbox_size = size;
    c->inbox_head = c->inbox_tail = 0;
    pthread_mutex_lock(&g->lock);
    int rc = 0;
    struct vs_rdma_gcq *q = reserve(g, want, &rc);
    if (q && (rc = take_slot(g, c)) < 0)
        q->room += want;
    pthread_mutex_unlock(&g->lock);
    if (!q || rc < 0) {
        free(c->inbox);
        c->inbox = NULL;
        return rc;
    }
    c->cqg = g;
    c->gcq = q;
    c->cq = q->cq;
    return 0;
}

uint64_t vs_rdma_cq_wr_id(const struct vs_rdma_conn *c, uint32_t low)
{
    return (uint64_t)c->cq_tag << 32 | low;
}

/* Puts WC into its connection's inbox, or drops it when its connection is
 * gone. (group) */
static void sort_one(struct vs_rdma_cqg *g, const struct ibv_wc *wc)
{
    uint32_t tag = (uint32_t)(wc->wr_id >> 32);
    unsigned i = tag & TAG_INDEX_MASK;
    if (i >= g->nslots || !g->slots[i] || g->gens[i] != tag >> TAG_INDEX_BITS)
        return; /* a queue pair destroyed since it was posted */
    struct vs_rdma_conn *c = g->slots[i];
    if (c->inbox_tail - c->inbox_head >= c->inbox_size) {
        /* Cannot happen (room is reserved per queue pair): the connection
         * could no longer trust its counts. */
        atomic_store(&c->broken, true);
        return;
    }
    c->inbox[c->inbox_tail++ & (c->inbox_size - 1)] = (struct vs_rdma_wc){
        .wr = (uint32_t)wc->wr_id,
        .byte_len = wc->byte_len,
        .imm = wc->imm_data,
        .opcode = (uint16_t)wc->opcode,
        .status = (uint16_t)wc->status,
    };
    /* A cold epoll record hears of it from nobody else: the channel's event
     * may find this CQ sorted already (the connection's own call did). */
    vs_rdma_pass_news_on(c);
}

/* Sorts everything in Q, a CQ of G. (group) */
static void sort_cq(struct vs_rdma_cqg *g, struct vs_rdma_gcq *q)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(q->cq, 16, wc)) > 0)
        for (int i = 0; i < n; i++)
            sort_one(g, &wc[i]);
    if (n < 0)
        vs_info("rdma: polling a completion queue failed");
}

int vs_rdma_cq_take(struct vs_rdma_conn *c, struct vs_rdma_wc *out, int max)
{
    struct vs_rdma_cqg *g = c->cqg;
    if (!g)
        return 0;
    int n = 0;
    pthread_mutex_lock(&g->lock);
    if (c->cqg != g) { /* left the group meanwhile (vs_rdma_cq_detach) */
        pthread_mutex_unlock(&g->lock);
        return 0;
    }
    sort_cq(g, c->gcq);
    while (n < max && c->inbox_head != c->inbox_tail)
        out[n++] = c->inbox[c->inbox_head++ & (c->inbox_size - 1)];
    pthread_mutex_unlock(&g->lock);
    return n;
}

void vs_rdma_cq_detach(struct vs_rdma_conn *c)
{
    struct vs_rdma_cqg *g = c->cqg;
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    /* Its queue pair is gone: what it left in the CQ goes to the others,
     * or nowhere; then its tag and its room are free. */
    sort_cq(g, c->gcq);
    unsigned i = c->cq_tag & TAG_INDEX_MASK;
    if (i < g->nslots && g->slots[i] == c)
        g->slots[i] = NULL;
    c->gcq->room += 2 * c->depth;
    free(c->inbox);
    c->inbox = NULL;
    c->cqg = NULL;
    c->gcq = NULL;
    c->cq = NULL;
    pthread_mutex_unlock(&g->lock);
}

/* Q's next completion rings the channel. (group) */
static void arm(struct vs_rdma_gcq *q)
{
    if (!q->armed && ibv_req_notify_cq(q->cq, 0) == 0)
        q->armed = true;
}

void vs_rdma_cq_notify(struct vs_rdma_conn *c)
{
    struct vs_rdma_cqg *g = c->cqg;
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->cqg == g && c->gcq)
        arm(c->gcq);
    pthread_mutex_unlock(&g->lock);
}

int vs_rdma_cq_fd(const struct vs_rdma_conn *c)
{
    return c->cqg ? c->cqg->fd : -1;
}

static struct vs_rdma_cqg *group_of_fd(int fd)
{
    pthread_mutex_lock(&groups_lock);
    struct vs_rdma_cqg *g = groups;
    while (g && g->fd != fd)
        g = g->next;
    pthread_mutex_unlock(&groups_lock);
    return g;
}

/* Another thread may have slept for the event just read: wake them all
 * (their news is in their inboxes now). (group) */
static void wake_others(struct vs_rdma_cqg *g)
{
    uint64_t one = 1;
    for (unsigned i = 0; i < g->nsleepers; i++) {
        struct sleeper *s = &g->sleepers[i];
        if (s->owner != me && !s->woken && vs_ownfd_mine(s->fd, s->owner)) {
            s->woken = true;
            (void)vs_real.write(s->fd, &one, sizeof(one));
        }
    }
    vs_wake_shared_read(g->fd);
}

/* Q fired, which disarmed it: armed again if a connection on it is waited
 * for (a cold or nested epoll record is, for good, and nobody else would
 * arm it for them); otherwise the next sleeper arms it, and completions
 * meanwhile ring nothing. (group) */
static void rearm_if_waited(struct vs_rdma_cqg *g, struct vs_rdma_gcq *q)
{
    for (unsigned i = 0; i < g->nslots; i++) {
        struct vs_rdma_conn *c = g->slots[i];
        if (c && c->gcq == q && atomic_load(&c->sleepers) > 0) {
            arm(q);
            sort_cq(g, q); /* what came before the arming rings nothing */
            return;
        }
    }
}

/* Reads G's channel: see vs_rdma_cq_events. */
static unsigned group_events(struct vs_rdma_cqg *g)
{
    /* The program may have taken the number: it is not our channel then. */
    if (!g || !vs_ownfd_mine(g->fd, g))
        return 0;
    struct ibv_cq *cq;
    void *ctx;
    unsigned got = 0;
    pthread_mutex_lock(&g->lock);
    while (ibv_get_cq_event(g->channel, &cq, &ctx) == 0) {
        got++;
        for (unsigned k = 0; k < g->ncqs; k++) {
            struct vs_rdma_gcq *q = g->cqs[k];
            if (q->cq != cq)
                continue;
            q->armed = false; /* the device disarmed as it sent the event */
            /* Sorted now: the sleepers woken below find it in their inboxes. */
            sort_cq(g, q);
            rearm_if_waited(g, q);
            if (++q->unacked >= 64) {
                ibv_ack_cq_events(cq, q->unacked);
                q->unacked = 0;
            }
        }
    }
    if (got)
        wake_others(g);
    pthread_mutex_unlock(&g->lock);
    return got;
}

unsigned vs_rdma_cq_events(int fd)
{
    return group_events(group_of_fd(fd));
}

unsigned vs_rdma_cq_drain(struct vs_rdma_conn *c)
{
    /* Groups are never freed: the pointer read once stays good. */
    return group_events(c->cqg);
}

int vs_rdma_cq_sleep_begin(struct vs_rdma_cqg *g)
{
    struct thread_state *t = thread_state();
    if (!g || !t)
        return -1;
    /* The program may have taken the number (close, dup2): a new one. */
    if (t->wake_fd >= 0 && !vs_ownfd_mine(t->wake_fd, t))
        t->wake_fd = -1;
    if (t->wake_fd < 0) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
            return -1;
        t->wake_fd = vs_ownfd_take(fd, t, NULL);
    }
    pthread_mutex_lock(&g->lock);
    bool room = g->nsleepers < SLEEPERS_MAX;
    if (room)
        g->sleepers[g->nsleepers++] = (struct sleeper){t->wake_fd, t, false};
    pthread_mutex_unlock(&g->lock);
    return room ? t->wake_fd : -1;
}

void vs_rdma_cq_sleep_end(struct vs_rdma_cqg *g, int wake_fd, bool woken)
{
    if (!g || wake_fd < 0)
        return;
    pthread_mutex_lock(&g->lock);
    for (unsigned i = 0; i < g->nsleepers; i++)
        if (g->sleepers[i].fd == wake_fd && g->sleepers[i].owner == me) {
            woken |= g->sleepers[i].woken;
            g->sleepers[i] = g->sleepers[--g->nsleepers];
            break;
        }
    pthread_mutex_unlock(&g->lock);
    /* Written under the lock, before the entry went: nothing is left to
     * read when it was not (a read per sleep is a system call per message),
     * unless the sleep saw it readable (written for an outer sleep of this
     * thread's, a signal handler's call in between). */
    uint64_t v;
    if (woken && vs_ownfd_mine(wake_fd, me))
        (void)vs_real.read(wake_fd, &v, sizeof(v));
}

void vs_rdma_cq_fork_child(void)
{
    /* The parent's: never touched here (their descriptors stay open, as
     * the rdma_cm channel's, dev.c). */
    pthread_mutex_init(&groups_lock, NULL);
    groups = NULL;
    live = NULL; /* the parent's threads: none runs here */
    atomic_fetch_add(&epoch, 1);
}
