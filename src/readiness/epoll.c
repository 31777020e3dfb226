/* epoll.c - epoll sets holding sockets whose readiness a transport translates.
 *
 * A socket a transport took over (s->ops, transport/transport.h) gets a
 * record per epoll set it is in. The kernel set holds, in its place, its TCP
 * fd (with the events that still mean something there) and the transport's
 * watch fd (shm: the side channel), both tagged with the record's address
 * instead of the user's data; epoll_wait translates what the kernel reports
 * and adds what the transport says from memory (poll_fast: no system call),
 * so the readiness the application sees is the socket's, with its own data.
 * Other sockets stay plain kernel registrations, untouched.
 *
 * An epoll set watched by another epoll set (or by poll) is "nested": the
 * outer wait cannot scan its rings, so its records stay armed for as long
 * as they exist, and each ring change rings the side channel.
 *
 * Records live in one reserved region, so that a tagged value is recognised
 * by its address (and checked by its magic and epoll fd): a user's own data
 * is never mistaken for one. They are found by (epoll fd, fd) in a hash.
 * A tag also carries the generation of its record's slot, in the slot's
 * low bits: a kernel registration can outlive the program's close (another
 * reference to the file: a dup, a call in flight in another thread) and go
 * on reporting its old tag, which must not name the record that reuses the
 * slot (ntirpc's next connection, under the same number, got its
 * predecessor's hang-up). The tags stay inside the region: a wider space
 * would take in users' data (Python's epoll sets data.fd alone, and the
 * other half of the word is whatever was on its stack).
 *
 * Event loops that add and delete a socket for every request (redis, most
 * ae/libevent clients) would pay three or four system calls per call here:
 * a deleted record therefore stays, *dormant*, with its kernel
 * registrations, and a later ADD of the same socket revives it without a
 * system call. The first kernel event for a dormant record deletes its
 * registrations for real, so a deleted socket never wakes a wait twice, and
 * so does the fd's close (vs_epoll_fd_closing): once the number is gone, a
 * registration could no longer be deleted, and a dup of the socket would
 * keep it alive. Dormancy is used in a few sets at a time (DORMANT_SETS),
 * so that a close only looks at those.
 *
 * A server holds many idle connections and a few busy ones: a wait must
 * cost the busy ones, not all of them. A record with nothing to report for
 * COOL_NS goes *cold*: out of the scans, armed for good, it hears of news
 * only from the kernel (the peer rings the side channel on its next write).
 * Its first kernel event makes it hot again. Whoever else reads that side
 * channel (a send on a full ring, another thread, another set) consumed the
 * news: it marks the record kicked and writes the process's kick eventfd,
 * registered edge-triggered in every set with records (nested ones aside)
 * and never read, so that each write wakes every such set (a reset would
 * race). A set that hears it warms its kicked records and scans again: so
 * does a wait asleep on a hot record when another thread changes the
 * connection's phase (vs_epoll_phase_changed), since it sleeps on the
 * kernel registrations of the old one. Only a connection held by one process
 * goes cold (a fork warms them all), and only in one set at a time.
 *
 * A watch fd may serve many connections (rdma: the completion channel of
 * the connections one thread set up; ops->watch_shared). It is registered
 * once per set, counted by its records and tagged as a shared watch, not
 * with a record: when it fires, the transport sorts its news to the
 * connections (ops->shared_news), which kicks their cold records, and the
 * set scans. Whoever reads such an fd may take another thread's wake-up:
 * the transport then kicks every set a thread sleeps on with a shared watch
 * (vs_epoll_wake_shared), and every nested set holding one through an
 * eventfd of its own (the outer wait is not ours to count). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/spin.h"
#include "config/log.h"
#include "core/fdtable.h"
#include "core/ownfd.h"
#include "base/real.h"
#include "base/sandbox.h"
#include "base/signals.h"
#include "readiness/epoll.h"
#include "readiness/wait_common.h"
#include "base/syscall.h"

#define REC_MAGIC 0x7265637670657376ull /* "vsepvcer" */
#define REGION_SIZE (32ul << 20)
#define MAX_EPFD 65536
#define WATCH_TAG 1ul
#define REC_STRIDE 256u /* a slot: the record, then its tag's generation bits */
#define TAG_GENS (REC_STRIDE / 2)
#define HASH_BUCKETS 65536u
#define DORMANT_SETS 8
#define COOL_NS 1000000L     /* quiet this long: cold */
#define SWEEP_NS 1000000000L /* a set's cold records are looked at this often */
#define USER_FLAGS (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP)

struct rec {
    uint64_t magic;
    unsigned tag_gen; /* how many records this slot held before: see rec_tag */
    int epfd, fd;
    struct vs_sock *sock; /* identity only: check with serial, never use without a ref */
    uint64_t serial;
    uint32_t events; /* the user's, flags included */
    epoll_data_t data;
    unsigned gen;        /* ops->generation() the kernel registrations follow */
    int watch;           /* watch fd registered in the kernel set, or -1 */
    bool watch_own;      /* registered by this record (not a dup's: EEXIST) */
    bool watch_shared;   /* WATCH is a shared watch of the set (counted there) */
    uint32_t kev;        /* events of the TCP fd's kernel registration */
    bool disabled;       /* EPOLLONESHOT fired, or dormant */
    bool dormant;        /* deleted by the user; kernel registrations kept */
    unsigned perm;       /* armed for good (nested set, cold, or enabled while others
                            sleep: arm_for_sleepers): what ops->arm() returned */
    bool cold;           /* in the set's cold list: see the top of this file */
    bool for_sleepers;   /* PERM is an arm for the set's sleepers (arm_for_sleepers) */
    _Atomic bool kicked; /* cold, and its news was read elsewhere */
    long quiet_since;    /* when it last had something to report */
    uint64_t rx_mark, tx_mark, round;
    int out_idx;
    struct rec *next, *prev; /* in the set's list */
    struct rec *hnext;       /* in the hash bucket */
};

/* Guards everything below. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *region;
static size_t region_used;
static struct rec *free_recs;
static struct rec **sets;  /* per epoll fd: its records (hot ones) */
static struct rec **colds; /* per epoll fd: its cold records */
static _Atomic int kick_fd = -1;
static bool kick_in[MAX_EPFD]; /* kick_fd is in this kernel set */
static long swept[MAX_EPFD];   /* when the set's cold records were last looked at */
static unsigned cold_count;
static struct rec **buckets; /* by (epoll fd, fd) */
static bool nested[MAX_EPFD];
static uint64_t rounds;
/* Shared watch fds registered in sets, with the records using each; tagged
 * by their place in the region's reserved start (shared_tag). */
#define SHARED_MAX 128
static struct {
    int epfd, fd;
    unsigned refs; /* 0: free */
    const struct vs_transport_ops *ops;
    /* The same set, and fd + 1 (0: free), for readers without the lock,
     * who ask whether a thread sleeps on a set holding a watch they read. */
    _Atomic int pub_epfd, pub_fd1;
} shared[SHARED_MAX];
static unsigned shared_in[MAX_EPFD];      /* shared watches in each set */
static unsigned sleeping[MAX_EPFD];       /* threads in a kernel wait on each set */
static unsigned sleeper_arms[MAX_EPFD];   /* records of each set armed for its sleepers */
static _Atomic unsigned sleeper_arms_all; /* their sum, read without the lock by closes */
static int top_epfd = -1;                 /* the highest set that ever held a record */
static int top_slept = -1;                /* the highest set sleeping[] ever counted */
static _Atomic unsigned shared_sleepers;  /* threads in a kernel wait on such a set */
static _Atomic unsigned set_shared_sleepers[MAX_EPFD]; /* the same, per set */
/* The sets holding dormant records, and how many each. */
static struct {
    int epfd;
    unsigned n;
} dormant_sets[DORMANT_SETS];
static _Atomic unsigned dormant_total; /* read without the lock by closes */

_Static_assert(sizeof(struct rec) <= REC_STRIDE, "a record fits its slot");

/* Whether the region at R keeps users' data out: a program that sets
 * data.fd alone leaves the word's upper half as it found it (often a
 * pointer's: Python's select.epoll), so a region whose addresses have a
 * small lower half, or that straddles a 4 GiB boundary, takes such values
 * for tags. */
static bool region_clear(uintptr_t r)
{
    uint64_t lo = r & 0xffffffffu;
    return lo >= 4 * REGION_SIZE && lo <= 0xffffffffu - REGION_SIZE;
}

/* The region, RW, at an address region_clear accepts: where the kernel puts
 * it, or else 1 GiB into the 4 GiB blocks below (MAP_FIXED_NOREPLACE: taken
 * only if free; a kernel before 4.17 takes it as a hint, checked). */
static void *region_map(void)
{
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *r = mmap(NULL, REGION_SIZE, prot, flags, -1, 0);
    if (r == MAP_FAILED || region_clear((uintptr_t)r))
        return r;
    uintptr_t block = (uintptr_t)r & ~(uintptr_t)0xffffffffu;
    for (uintptr_t k = 1; k <= 8 && block > k << 32; k++) {
        void *want = (void *)(block - (k << 32) + (1ul << 30));
        void *m = mmap(want, REGION_SIZE, prot, flags | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == want) {
            munmap(r, REGION_SIZE);
            return m;
        }
        if (m != MAP_FAILED)
            munmap(m, REGION_SIZE);
    }
    return r; /* the rare case left: as before */
}

static bool setup(void)
{
    if (region)
        return true;
    void *r = region_map();
    void *s = mmap(NULL, MAX_EPFD * sizeof(*sets), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *b = mmap(NULL, HASH_BUCKETS * sizeof(*buckets), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *c = mmap(NULL, MAX_EPFD * sizeof(*colds), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED || s == MAP_FAILED || b == MAP_FAILED || c == MAP_FAILED) {
        if (r != MAP_FAILED)
            munmap(r, REGION_SIZE);
        if (s != MAP_FAILED)
            munmap(s, MAX_EPFD * sizeof(*sets));
        if (b != MAP_FAILED)
            munmap(b, HASH_BUCKETS * sizeof(*buckets));
        if (c != MAP_FAILED)
            munmap(c, MAX_EPFD * sizeof(*colds));
        return false;
    }
    sets = s;
    colds = c;
    buckets = b;
    /* The region's start is never a record: its address tags the kick
     * eventfd in the kernel sets, the words after it the shared watches. */
    size_t reserved = (SHARED_MAX + 1) * sizeof(uint64_t);
    region_used = (reserved + REC_STRIDE - 1) / REC_STRIDE * REC_STRIDE;
    region = r;
    return true;
}

static struct rec *rec_alloc(void)
{
    struct rec *r = free_recs;
    unsigned gen = 0;
    if (r) {
        free_recs = r->next;
        gen = r->tag_gen + 1;
    } else {
        if (region_used + REC_STRIDE > REGION_SIZE)
            return NULL;
        r = (struct rec *)(region + region_used);
        region_used += REC_STRIDE;
    }
    memset(r, 0, sizeof(*r));
    r->magic = REC_MAGIC;
    r->tag_gen = gen;
    r->watch = -1;
    return r;
}

/* The value R's kernel registrations carry: its address, plus its slot's
 * generation above the watch bit (untag undoes it). */
static uint64_t rec_tag(const struct rec *r)
{
    return (uint64_t)(uintptr_t)r + (uint64_t)(r->tag_gen % TAG_GENS) * 2;
}

static struct rec **bucket(int epfd, int fd)
{
    uint32_t h = (uint32_t)epfd * 2654435761u ^ (uint32_t)fd * 2246822519u;
    return &buckets[(h ^ h >> 16) % HASH_BUCKETS];
}

/* The list R is in: its set's hot or cold records. */
static struct rec **list_of(const struct rec *r)
{
    return r->cold ? &colds[r->epfd] : &sets[r->epfd];
}

static void list_push(struct rec *r)
{
    struct rec **head = list_of(r);
    r->prev = NULL;
    r->next = *head;
    if (r->next)
        r->next->prev = r;
    *head = r;
}

static void list_remove(struct rec *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        *list_of(r) = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

static bool has_records(int epfd)
{
    return sets && (sets[epfd] || colds[epfd]);
}

/* In a sandboxed process (base/sandbox.h) a set without records of ours is
 * the kernel's alone. One that held records when the filter went in is
 * still translated: its kernel registrations carry our tags. */
static bool pass_through(int epfd)
{
    return vs_sandboxed() && !(epfd >= 0 && epfd < MAX_EPFD && has_records(epfd));
}

static void rec_link(struct rec *r)
{
    if (r->epfd > top_epfd)
        top_epfd = r->epfd;
    list_push(r);
    struct rec **b = bucket(r->epfd, r->fd);
    r->hnext = *b;
    *b = r;
}

/* Makes R dormant if its set may hold one more; false if it may not. */
static bool make_dormant(struct rec *r)
{
    int free_slot = -1;
    for (int i = 0; i < DORMANT_SETS; i++) {
        if (dormant_sets[i].n && dormant_sets[i].epfd == r->epfd) {
            free_slot = i;
            break;
        }
        if (!dormant_sets[i].n && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0)
        return false;
    dormant_sets[free_slot].epfd = r->epfd;
    dormant_sets[free_slot].n++;
    atomic_fetch_add(&dormant_total, 1);
    r->dormant = r->disabled = true;
    return true;
}

static void wake_dormant(struct rec *r)
{
    if (!r->dormant)
        return;
    r->dormant = false;
    for (int i = 0; i < DORMANT_SETS; i++)
        if (dormant_sets[i].n && dormant_sets[i].epfd == r->epfd) {
            dormant_sets[i].n--;
            break;
        }
    atomic_fetch_sub(&dormant_total, 1);
}

static void shared_unref(struct rec *r);

/* R's PERM no longer counts as an arm for sleepers (the arm itself is the
 * caller's to withdraw). */
static void unmark_for_sleepers(struct rec *r)
{
    if (!r->for_sleepers)
        return;
    r->for_sleepers = false;
    sleeper_arms[r->epfd]--;
    atomic_fetch_sub(&sleeper_arms_all, 1);
}

static void rec_unlink(struct rec *r)
{
    unmark_for_sleepers(r);
    shared_unref(r);
    wake_dormant(r);
    list_remove(r);
    if (r->cold)
        cold_count--;
    for (struct rec **p = bucket(r->epfd, r->fd); *p; p = &(*p)->hnext)
        if (*p == r) {
            *p = r->hnext;
            break;
        }
    r->magic = 0;
    r->next = free_recs;
    free_recs = r;
}

static struct rec *find(int epfd, int fd)
{
    if (!sets || epfd < 0 || epfd >= MAX_EPFD)
        return NULL;
    for (struct rec *r = *bucket(epfd, fd); r; r = r->hnext)
        if (r->epfd == epfd && r->fd == fd)
            return r;
    return NULL;
}

enum tag { TAG_USER, TAG_REC, TAG_DEAD, TAG_KICK, TAG_SHARED };

static uint64_t kick_tag(void)
{
    return (uint64_t)(uintptr_t)region;
}

/* What a value from the kernel is: the user's own data, one of our records
 * (*R), a shared watch (*SHARED_IDX), or a record or shared watch dropped
 * meanwhile (its other registration fired in the same batch, or could not
 * be deleted): never the user's, never reported. */
static uint64_t shared_tag(unsigned i)
{
    return (uint64_t)(uintptr_t)region + (i + 1) * sizeof(uint64_t);
}

/* Whether V lies in the region, where every tag does. */
static bool in_tag_space(uint64_t v, uintptr_t base)
{
    return base && v >= base && v - base < REGION_SIZE;
}

static enum tag untag(uint64_t v, int epfd, struct rec **r, bool *watch, unsigned *shared_idx)
{
    if (region && v == kick_tag())
        return TAG_KICK;
    if (!in_tag_space(v, (uintptr_t)region))
        return TAG_USER;
    uint64_t off = v - (uint64_t)(uintptr_t)region;
    if (off <= SHARED_MAX * sizeof(uint64_t)) {
        *shared_idx = (unsigned)(off / sizeof(uint64_t)) - 1;
        bool ok = off % sizeof(uint64_t) == 0 && shared[*shared_idx].refs &&
                  shared[*shared_idx].epfd == epfd;
        return ok ? TAG_SHARED : TAG_DEAD;
    }
    uint64_t at = off / REC_STRIDE * REC_STRIDE, gen = off % REC_STRIDE / 2;
    if (at >= region_used)
        return TAG_USER;
    *r = (struct rec *)(region + at);
    if ((*r)->magic != REC_MAGIC || (*r)->epfd != epfd || (*r)->tag_gen % TAG_GENS != gen)
        return TAG_DEAD;
    *watch = off & WATCH_TAG;
    return TAG_REC;
}

/* The socket a record stands for, with a reference; NULL when the fd was
 * closed or now names another socket (the record is then dropped). */
static struct vs_sock *rec_sock(struct rec *r)
{
    /* Peek, not get: a number closed since is not worth a look at the
     * kernel (a new socket under it could never match the serial). */
    struct vs_sock *s = vs_fd_peek(r->fd);
    if (s && s == r->sock && s->serial == r->serial && s->ops)
        return s;
    if (s)
        vs_sock_put(s);
    return NULL;
}

static unsigned interest(const struct rec *r)
{
    return r->events & (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDHUP);
}

static uint32_t tcp_events(struct vs_sock *s, const struct rec *r)
{
    if (r->disabled)
        return 0;
    unsigned want = r->events & (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDHUP);
    return s->ops->tcp_interest(s, want) | (r->events & (EPOLLET | EPOLLWAKEUP));
}

static bool kick_ready(int epfd);

/* Nested sets holding shared watches, each with an eventfd of its own
 * (edge-triggered, never read) that vs_epoll_wake_shared writes: an outer
 * wait is not ours, so it must hear of a wake-up another thread took. */
#define NESTED_KICKS 16
static struct {
    _Atomic int epfd, fd; /* fd -1: free */
} nested_kicks[NESTED_KICKS] = {[0 ... NESTED_KICKS - 1] = {-1, -1}};
/* The set this thread waits on (its kicks would only wake itself). */
static __thread int waiting_on = -1;

static void nested_kick_ready(int epfd)
{
    int free_i = -1;
    for (int i = 0; i < NESTED_KICKS; i++) {
        if (atomic_load(&nested_kicks[i].fd) >= 0 && atomic_load(&nested_kicks[i].epfd) == epfd)
            return;
        if (atomic_load(&nested_kicks[i].fd) < 0 && free_i < 0)
            free_i = i;
    }
    if (free_i < 0) {
        vs_debug("epoll: more than %d nested sets with shared watches", NESTED_KICKS);
        return;
    }
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
        return;
    fd = vs_ownfd_take(fd, &nested_kicks[free_i], NULL);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = kick_tag()};
    if (vs_real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        vs_ownfd_close(fd, &nested_kicks[free_i]);
        return;
    }
    atomic_store(&nested_kicks[free_i].epfd, epfd);
    atomic_store(&nested_kicks[free_i].fd, fd);
}

/* EPFD (closed) no longer needs its nested kick: its eventfd is closed. */
static void nested_kick_drop(int epfd)
{
    for (int i = 0; i < NESTED_KICKS; i++)
        if (atomic_load(&nested_kicks[i].fd) >= 0 && atomic_load(&nested_kicks[i].epfd) == epfd) {
            int fd = atomic_exchange(&nested_kicks[i].fd, -1);
            vs_ownfd_close(fd, &nested_kicks[i]);
        }
}

/* R's watch FD serves other connections too: registered once in R's set. */
static bool shared_ref(struct rec *r, int fd, const struct vs_transport_ops *ops)
{
    int free_i = -1;
    for (int i = 0; i < SHARED_MAX; i++) {
        if (shared[i].refs && shared[i].epfd == r->epfd && shared[i].fd == fd) {
            shared[i].refs++;
            return true;
        }
        if (!shared[i].refs && free_i < 0)
            free_i = i;
    }
    if (free_i < 0) {
        /* The set stays right: a record not armed this way is scanned,
         * and an armed one makes the wait sleep in slices. */
        vs_debug("epoll: more than %d shared watches", SHARED_MAX);
        return false;
    }
    /* Edge-triggered: its reader drains it (a forked child sharing the
     * kernel set, which does not know the tag, hears it once). EEXIST: the
     * set under another number holds it with another tag: not ours to
     * count. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = shared_tag((unsigned)free_i)};
    if (vs_real.epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        return false;
    /* Other threads that read it wake this set's sleepers by the kick;
     * a nested set by its own (the outer wait would wake for every kick). */
    if (nested[r->epfd])
        nested_kick_ready(r->epfd);
    else
        kick_ready(r->epfd);
    shared[free_i].epfd = r->epfd;
    shared[free_i].fd = fd;
    shared[free_i].ops = ops;
    shared[free_i].refs = 1;
    atomic_store(&shared[free_i].pub_epfd, r->epfd);
    atomic_store(&shared[free_i].pub_fd1, fd + 1);
    shared_in[r->epfd]++;
    return true;
}

/* R no longer uses its shared watch; the last record deletes it from the
 * set (its fd lives as long as the process: the number is still it). */
static void shared_unref(struct rec *r)
{
    if (!r->watch_shared)
        return;
    r->watch_shared = false;
    for (int i = 0; i < SHARED_MAX; i++)
        if (shared[i].refs && shared[i].epfd == r->epfd && shared[i].fd == r->watch) {
            if (--shared[i].refs == 0) {
                atomic_store(&shared[i].pub_fd1, 0);
                vs_real.epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->watch, NULL);
                shared_in[r->epfd]--;
            }
            break;
        }
    r->watch = -1;
}

/* Brings the kernel registrations in line with the socket's phase (no
 * system call when they are already). REARM: the user's MOD or ADD, which
 * makes the kernel look at an edge-triggered fd again. */
static void sync_kernel(struct vs_sock *s, struct rec *r, bool rearm)
{
    struct epoll_event ev = {.events = tcp_events(s, r), .data.u64 = rec_tag(r)};
    bool again = rearm && (ev.events & EPOLLET);
    if ((ev.events != r->kev || again) &&
        vs_real.epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->fd, &ev) == 0)
        r->kev = ev.events;
    /* The old watch fd is never deleted by number: it was closed (which
     * removed it from the set) or still belongs to this connection, and
     * its number may by now name another connection's side channel. */
    int w = s->ops->watch_fd(s);
    bool share = w >= 0 && s->ops->watch_shared && s->ops->watch_shared(s);
    if (w != r->watch || share != r->watch_shared) {
        shared_unref(r);
        if (share) {
            r->watch_own = false;
            r->watch_shared = shared_ref(r, w, s->ops);
            r->watch = r->watch_shared ? w : -1;
        } else {
            struct epoll_event wev = {.events = EPOLLIN, .data.u64 = rec_tag(r) | WATCH_TAG};
            r->watch_own = w >= 0 && vs_real.epoll_ctl(r->epfd, EPOLL_CTL_ADD, w, &wev) == 0;
            bool ok = r->watch_own || (w >= 0 && errno == EEXIST);
            r->watch = ok ? w : -1;
        }
    }
    r->gen = s->ops->generation(s);
}

/* R shares a dup's registration of its side channel (EEXIST): once the
 * dup's record is dropped, it registers its own. One system call per
 * wait, for dups of one socket in one set only. */
static void claim_watch(struct vs_sock *s, struct rec *r)
{
    struct epoll_event wev = {.events = EPOLLIN, .data.u64 = rec_tag(r) | WATCH_TAG};
    if (r->watch == s->ops->watch_fd(s))
        r->watch_own = vs_real.epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->watch, &wev) == 0;
}

/* Nested sets: keep the record armed for what it watches now. */
static void perm_arm(struct vs_sock *s, struct rec *r)
{
    if (r->perm)
        s->ops->disarm(s, r->perm);
    unmark_for_sleepers(r);
    r->perm = nested[r->epfd] && !r->disabled ? s->ops->arm(s, interest(r)) : 0;
}

static void kick_all(void);

/* R was just enabled (ADD, MOD, the ADD that revives a dormant record)
 * while other threads sleep in a kernel wait on its set. They armed the
 * records that were enabled when they went to sleep, not R: a one-shot
 * record re-armed by MOD (ntirpc, nfs-ganesha's RPC library, re-arms after
 * each request) would never wake them, and its data would wait for their
 * timeout. The kernel's ADD and MOD wake such waits for a ready fd, and its
 * later news reaches them; so must ours: R stays armed (news rings its watch
 * fd, in the set) until a one-shot report disables it or the set's last
 * sleeper wakes (drop_sleeper_arms), and news already there kicks the
 * waits. Waits skip records armed so (arm_all): one arm, one sleeper. */
static void arm_for_sleepers(struct vs_sock *s, struct rec *r)
{
    if (!sleeping[r->epfd] || r->perm || r->disabled || r->cold || nested[r->epfd])
        return;
    kick_ready(r->epfd);
    r->perm = s->ops->arm(s, interest(r));
    if (r->perm) {
        r->for_sleepers = true;
        sleeper_arms[r->epfd]++;
        atomic_fetch_add(&sleeper_arms_all, 1);
    }
    if (s->ops->poll_fast(s, interest(r)))
        kick_all();
}

/* Withdraws R's arm for sleepers. S: its socket, or NULL when it is gone. */
static void drop_sleeper_arm(struct vs_sock *s, struct rec *r)
{
    if (!r->for_sleepers)
        return;
    if (s)
        s->ops->disarm(s, r->perm);
    r->perm = 0;
    unmark_for_sleepers(r);
}

/* The last sleeper on EPFD woke: nobody left for the arms to wake. */
static void drop_sleeper_arms(int epfd)
{
    for (struct rec *r = sets[epfd]; r && sleeper_arms[epfd]; r = r->next)
        if (r->for_sleepers) {
            struct vs_sock *s = rec_sock(r);
            drop_sleeper_arm(s, r);
            if (s)
                vs_sock_put(s);
        }
}

/* R was reported: a one-shot is disabled now, its arm for sleepers done. */
static void reported(struct vs_sock *s, struct rec *r)
{
    if (r->disabled)
        drop_sleeper_arm(s, r);
}

/* --- cold records: see the top of this file --- */

/* Makes R hot again. S: its socket, or NULL when the arming is not ours to
 * withdraw (the socket is gone, or this is a forked child's copy). */
static void warm(struct rec *r, struct vs_sock *s)
{
    if (!r->cold)
        return;
    list_remove(r);
    r->cold = false;
    list_push(r);
    cold_count--;
    if (s) {
        s->ops->cold_detach(s, r);
        s->ops->disarm(s, r->perm);
    }
    r->perm = 0;
    atomic_store(&r->kicked, false);
    r->quiet_since = vs_now_ns();
}

/* The kick eventfd is in EPFD's kernel set (edge-triggered, never read). */
static bool kick_ready(int epfd)
{
    if (kick_in[epfd])
        return true;
    int k = atomic_load(&kick_fd);
    if (k < 0) {
        /* Its owner is this file: a program taking the number goes through
         * vs_epoll_fd_closing first (cold_closing). */
        k = vs_ownfd_take(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), &kick_fd, NULL);
        if (k < 0)
            return false;
        atomic_store(&kick_fd, k);
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = kick_tag()};
    if (vs_real.epoll_ctl(epfd, EPOLL_CTL_ADD, k, &ev) < 0 && errno != EEXIST)
        return false;
    kick_in[epfd] = true;
    return true;
}

/* What keeps R from being cold: its rings' readiness. Edge-triggered, room
 * to send is no news: the peer rings when it reads (the ring is armed).
 * Unread bytes are: the peer rings only for a ring it saw empty. */
static unsigned cold_level(struct vs_sock *s, struct rec *r)
{
    unsigned level = s->ops->poll_fast(s, interest(r));
    return r->events & EPOLLET ? level & ~(unsigned)EPOLLOUT : level;
}

/* R leaves the scans: cold. */
static void freeze(struct rec *r)
{
    list_remove(r);
    r->cold = true;
    list_push(r);
    cold_count++;
}

/* R, hot and quiet since COOL_NS, goes cold if it may. */
static void cool(struct vs_sock *s, struct rec *r, long now)
{
    unsigned in = interest(r);
    unsigned need = (in & (EPOLLIN | EPOLLPRI | EPOLLRDHUP) ? POLLIN : 0) | (in & EPOLLOUT);
    r->quiet_since = now; /* refused: not again before COOL_NS */
    /* Not on a transport's memory (a young connection, a set-up under way,
     * one that stays on TCP): its news comes through its kernel
     * registrations (TCP, the watch fd), tagged with this record, and a
     * change of phase made here kicks it. Nothing to arm. */
    bool kernel_only = !s->ops->spins(s);
    /* Its wake-ups must come tagged with this record: not through a dup's
     * registration of the side channel, which the dup's delete takes away.
     * A shared watch's come as kicks (the transport sorts its news). */
    bool watched = r->watch_own || r->watch_shared;
    if (!need || r->disabled || r->perm || nested[r->epfd] || (r->watch >= 0 && !watched) ||
        (r->watch < 0 && !kernel_only) || atomic_load(&s->no_cold) || !kick_ready(r->epfd))
        return;
    atomic_store(&r->kicked, false);
    if (!s->ops->cold_attach(s, r))
        return;
    if (kernel_only) {
        if (r->gen != s->ops->generation(s) || cold_level(s, r))
            s->ops->cold_detach(s, r);
        else
            freeze(r);
        return;
    }
    /* Armed first, then looked: news from now on rings the side channel. */
    unsigned armed = s->ops->arm(s, need);
    bool covered =
        armed == need || (armed == (need & ~(unsigned)POLLIN) && s->ops->rx_by_kernel(s));
    if (!covered || r->gen != s->ops->generation(s) || cold_level(s, r)) {
        s->ops->disarm(s, armed);
        s->ops->cold_detach(s, r);
        return;
    }
    r->perm = armed;
    freeze(r);
}

/* Warms the cold records of EPFD (KICKED_ONLY: those kicked); drops those
 * whose socket is gone. */
static void warm_set(int epfd, bool kicked_only)
{
    struct rec *next;
    for (struct rec *r = colds[epfd]; r; r = next) {
        next = r->next;
        if (kicked_only && !atomic_load(&r->kicked))
            continue;
        struct vs_sock *s = rec_sock(r);
        warm(r, s);
        if (s)
            vs_sock_put(s);
        else
            rec_unlink(r);
    }
}

/* A safety net, not the mechanism: once per SWEEP_NS, warm the cold
 * records of EPFD whose rings have something, so that a wake-up lost by a
 * path nobody foresaw costs a second, not for ever. */
static void sweep(int epfd, long now)
{
    if (now - swept[epfd] < SWEEP_NS)
        return;
    swept[epfd] = now;
    struct rec *next;
    for (struct rec *r = colds[epfd]; r; r = next) {
        next = r->next;
        struct vs_sock *s = rec_sock(r);
        if (s && cold_level(s, r)) {
            vs_debug("epoll: a cold record had news without a wake-up (fd %d)", r->fd);
            atomic_store(&r->kicked, true);
        } else if (s && s->ops->idle) {
            s->ops->idle(s); /* quiet for a while: memory may go back */
        }
        if (s)
            vs_sock_put(s);
    }
    warm_set(epfd, true);
}

static void warm_all(void)
{
    for (int epfd = 0; cold_count && epfd < MAX_EPFD; epfd++)
        if (colds[epfd])
            warm_set(epfd, false);
}

static void kick_all(void)
{
    int k = atomic_load(&kick_fd);
    uint64_t one = 1;
    if (k >= 0)
        (void)vs_real.write(k, &one, sizeof(one));
}

/* FD is a socket a transport took over: none of its records may go cold
 * from now on. */
static bool forbid_cold(int fd)
{
    struct vs_sock *s = vs_fd_peek(fd);
    bool ours = s && s->ops;
    if (ours)
        atomic_store(&s->no_cold, true);
    if (s)
        vs_sock_put(s);
    return ours;
}

/* Another thread's wait may sleep on a record of this connection on the
 * registrations of its old phase (no side channel yet, a ring it did not
 * arm), and nothing it watches may ever fire again: gRPC's poller thread
 * sleeps while its other threads' reads and writes move the connection to
 * shm, and slept for good. The kick eventfd is in every set with records
 * (ctl_record): a wait that hears it looks again, re-registering. */
void vs_epoll_phase_changed(void)
{
    kick_all();
}

/* Whether a thread sleeps (or is about to) on a set holding watch FD. */
static bool sleeps_on_watch(int fd)
{
    for (int i = 0; i < SHARED_MAX; i++)
        if (atomic_load(&shared[i].pub_fd1) == fd + 1) {
            int epfd = atomic_load(&shared[i].pub_epfd);
            if (epfd >= 0 && epfd < MAX_EPFD && atomic_load(&set_shared_sleepers[epfd]))
                return true;
        }
    return false;
}

void vs_epoll_wake_shared(int fd)
{
    /* Only sets holding FD can have lost their wake-up to our read (a
     * thread per connection group each on its own set: memcached's
     * workers woke each other on every message). */
    if (atomic_load(&shared_sleepers) && (fd < 0 || sleeps_on_watch(fd)))
        kick_all();
    uint64_t one = 1;
    for (int i = 0; i < NESTED_KICKS; i++) {
        int fd = atomic_load(&nested_kicks[i].fd);
        if (fd >= 0 && atomic_load(&nested_kicks[i].epfd) != waiting_on &&
            vs_ownfd_mine(fd, &nested_kicks[i]))
            (void)vs_real.write(fd, &one, sizeof(one));
    }
}

/* The set whose shared watch this thread is reading: its kicked records
 * are warmed right after, without the eventfd. */
static __thread int sorting_for = -1;

void vs_epoll_kick(void *rec)
{
    struct rec *r = rec;
    atomic_store(&r->kicked, true);
    if (r->epfd != sorting_for)
        kick_all();
}

/* FD, about to be closed: a cold record of it goes hot (and is dropped by
 * the next scan); if FD is the kick eventfd, every cold record goes hot.
 * The socket's no_cold is already set (forbid_cold). */
static void cold_closing(int fd)
{
    if (fd == atomic_load(&kick_fd)) {
        warm_all();
        atomic_store(&kick_fd, -1);
        memset(kick_in, 0, sizeof(kick_in));
        return;
    }
    struct vs_sock *s = vs_fd_peek(fd);
    if (!s)
        return;
    struct rec *r = vs_sock_cold_rec(s);
    if (r && r->magic == REC_MAGIC && r->cold && r->sock == s && r->fd == fd)
        warm(r, s);
    vs_sock_put(s);
}

/* Forgets a record. S: the socket, still open, whose registrations the
 * user asked to delete; NULL when the fd was closed (the kernel dropped the
 * registrations itself, and the numbers may already name other files). */
static void rec_drop(struct rec *r, struct vs_sock *s)
{
    if (s) {
        warm(r, s);
        if (r->perm)
            s->ops->disarm(s, r->perm);
        vs_real.epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->fd, NULL);
        if (r->watch >= 0 && !r->watch_shared && r->watch == s->ops->watch_fd(s))
            vs_real.epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->watch, NULL);
    }
    r->perm = 0;
    rec_unlink(r);
}

/* EPOLL_CTL_MOD, or the ADD that revives a dormant record. */
static int ctl_modify(struct vs_sock *s, struct rec *r, const struct epoll_event *event)
{
    r->events = event->events;
    r->data = event->data;
    /* A wait of another thread that reported R in its current round must
     * not add events to that entry: it carries the old data, which never
     * asked for the new events. */
    r->round = 0;
    r->disabled = false;
    r->rx_mark = r->tx_mark = 0;
    r->quiet_since = vs_now_ns();
    sync_kernel(s, r, true);
    perm_arm(s, r);
    arm_for_sleepers(s, r);
    return 0;
}

static int ctl_record(int epfd, int op, int fd, struct epoll_event *event, struct vs_sock *s)
{
    struct rec *r = find(epfd, fd);
    if (r)
        warm(r, s);
    if (r && r->dormant) {
        if (op != EPOLL_CTL_ADD) {
            errno = ENOENT;
            return -1;
        }
        if (!event) {
            errno = EFAULT;
            return -1;
        }
        wake_dormant(r);
        return ctl_modify(s, r, event);
    }
    if (op == EPOLL_CTL_ADD) {
        if (r) {
            errno = EEXIST;
            return -1;
        }
        if (!event) {
            errno = EFAULT;
            return -1;
        }
        if (!(r = rec_alloc())) {
            errno = ENOMEM;
            return -1;
        }
        r->epfd = epfd;
        r->fd = fd;
        r->sock = s;
        r->serial = s->serial;
        r->events = event->events;
        r->data = event->data;
        r->quiet_since = vs_now_ns();
        struct epoll_event ev = {.events = tcp_events(s, r), .data.u64 = rec_tag(r)};
        if (vs_real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            int err = errno;
            r->magic = 0;
            r->next = free_recs;
            free_recs = r;
            errno = err;
            return -1;
        }
        r->kev = ev.events;
        rec_link(r);
        sync_kernel(s, r, false);
        perm_arm(s, r);
        arm_for_sleepers(s, r);
        /* So that a phase change in another thread wakes its waits (a
         * nested set hears it through its records, armed for good). */
        if (!nested[epfd])
            kick_ready(epfd);
        return 0;
    }
    if (!r) {
        errno = ENOENT;
        return -1;
    }
    if (op == EPOLL_CTL_DEL) {
        /* Dormant: see the top of this file. */
        if (r->for_sleepers)
            drop_sleeper_arm(s, r);
        else if (r->perm)
            s->ops->disarm(s, r->perm);
        r->perm = 0;
        if (!make_dormant(r))
            rec_drop(r, s);
        return 0;
    }
    if (!event) {
        errno = EFAULT;
        return -1;
    }
    return ctl_modify(s, r, event);
}

static bool is_epoll_fd(int fd)
{
    char path[32], target[32];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return false;
    target[n] = '\0';
    return strcmp(target, "anon_inode:[eventpoll]") == 0;
}

/* FD, an epoll set, is now watched from outside: arm its records for good. */
static void mark_nested(int fd)
{
    pthread_mutex_lock(&lock);
    if (setup() && !nested[fd]) {
        nested[fd] = true;
        warm_set(fd, false);
        /* an outer wait would wake for every kick */
        if (kick_in[fd] && vs_real.epoll_ctl(fd, EPOLL_CTL_DEL, atomic_load(&kick_fd), NULL) == 0)
            kick_in[fd] = false;
        if (shared_in[fd])
            nested_kick_ready(fd);
        for (struct rec *r = sets[fd]; r; r = r->next) {
            struct vs_sock *s = rec_sock(r);
            if (s) {
                perm_arm(s, r);
                vs_sock_put(s);
            }
        }
    }
    pthread_mutex_unlock(&lock);
}

/* Deletes the kernel registrations of R, dormant, while its fd is open. */
static void drop_dormant(struct rec *r)
{
    struct vs_sock *s = rec_sock(r);
    rec_drop(r, s);
    if (s)
        vs_sock_put(s);
}

/* Forgets every record of a set (no system call: the set is gone, or is
 * somebody else's). */
static void forget_set(int epfd)
{
    /* First: the records' unlinking must not delete their shared watch. */
    for (int i = 0; i < SHARED_MAX; i++)
        if (shared[i].refs && shared[i].epfd == epfd) {
            shared[i].refs = 0;
            atomic_store(&shared[i].pub_fd1, 0);
        }
    shared_in[epfd] = 0;
    nested_kick_drop(epfd);
    if (sets)
        warm_set(epfd, false); /* armed in the rings: only we can withdraw it */
    while (sets && sets[epfd]) {
        struct rec *r = sets[epfd];
        struct vs_sock *s = r->perm ? rec_sock(r) : NULL;
        if (s) {
            s->ops->disarm(s, r->perm); /* the connection may outlive the set */
            vs_sock_put(s);
        }
        rec_unlink(r);
    }
    nested[epfd] = false;
    kick_in[epfd] = false;
}

/* FD is being closed, and its connection may live on in a dup (ntirpc's):
 * our arms for sleepers go with this number, while it still names the
 * socket. (lock) */
static void sleeper_closing(int fd)
{
    struct vs_sock *s = vs_fd_peek(fd);
    for (int epfd = 0; epfd <= top_epfd; epfd++) {
        struct rec *r = sleeper_arms[epfd] ? find(epfd, fd) : NULL;
        if (r && r->for_sleepers)
            drop_sleeper_arm(s && s == r->sock && s->serial == r->serial && s->ops ? s : NULL, r);
    }
    if (s)
        vs_sock_put(s);
}

void vs_epoll_fd_closing(int fd)
{
    /* No record was ever made (most programs that close many sockets, one
     * per short connection): nothing here can name FD. A record made later
     * is of a descriptor still open then. */
    if (!sets)
        return;
    /* An epoll fd: its records go with it. (Read without the lock: a set
     * being filled by another thread while we close it is the user's race.) */
    if (fd >= 0 && fd < MAX_EPFD && (has_records(fd) || kick_in[fd])) {
        pthread_mutex_lock(&lock);
        forget_set(fd);
        pthread_mutex_unlock(&lock);
    }
    /* Set before the lock: a record cooling after this sees it. */
    if (forbid_cold(fd) || fd == atomic_load(&kick_fd)) {
        pthread_mutex_lock(&lock);
        cold_closing(fd);
        pthread_mutex_unlock(&lock);
    }
    if (atomic_load(&sleeper_arms_all)) {
        pthread_mutex_lock(&lock);
        sleeper_closing(fd);
        pthread_mutex_unlock(&lock);
    }
    if (!atomic_load(&dormant_total))
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < DORMANT_SETS; i++) {
        struct rec *r = dormant_sets[i].n ? find(dormant_sets[i].epfd, fd) : NULL;
        if (r && r->dormant)
            drop_dormant(r);
    }
    pthread_mutex_unlock(&lock);
}

/* Every dormant record of an fd in [FIRST, LAST]: its kernel registrations
 * deleted, or (FORGET) only the record. */
static void end_dormant(unsigned first, unsigned last, bool forget)
{
    for (int i = 0; i < DORMANT_SETS; i++) {
        struct rec *next;
        for (struct rec *r = dormant_sets[i].n ? sets[dormant_sets[i].epfd] : NULL; r; r = next) {
            next = r->next;
            if (!r->dormant || (unsigned)r->fd < first || (unsigned)r->fd > last)
                continue;
            if (forget)
                rec_unlink(r);
            else
                drop_dormant(r);
        }
    }
}

void vs_epoll_range_closing(unsigned first, unsigned last)
{
    pthread_mutex_lock(&lock);
    for (unsigned fd = first; sets && fd <= last && fd < MAX_EPFD; fd++) {
        if (atomic_load(&sleeper_arms_all))
            sleeper_closing((int)fd);
        if (has_records((int)fd) || kick_in[fd])
            forget_set((int)fd);
        if (forbid_cold((int)fd) || (int)fd == atomic_load(&kick_fd))
            cold_closing((int)fd);
    }
    end_dormant(first, last, false);
    pthread_mutex_unlock(&lock);
}

/* R becomes the kernel registration its user asked for (a dormant one
 * none), and is forgotten. */
static void make_plain(struct rec *r)
{
    struct vs_sock *s = rec_sock(r);
    int epfd = r->epfd, fd = r->fd;
    bool keep = !r->dormant && s;
    /* A fired one-shot cannot be re-created as it was: at most once more. */
    uint32_t fired = r->events & (EPOLLONESHOT | EPOLLET);
    struct epoll_event ev = {.events = r->disabled ? fired : r->events, .data = r->data};
    rec_drop(r, s); /* deletes its kernel registrations, when S is there */
    if (keep)
        vs_real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    if (s)
        vs_sock_put(s);
}

void vs_epoll_make_plain(void)
{
    pthread_mutex_lock(&lock);
    for (int epfd = 0; sets && epfd < MAX_EPFD; epfd++) {
        if (kick_in[epfd])
            vs_real.epoll_ctl(epfd, EPOLL_CTL_DEL, atomic_load(&kick_fd), NULL);
        kick_in[epfd] = false;
        nested[epfd] = false;
        while (colds[epfd])
            make_plain(colds[epfd]);
        while (sets[epfd])
            make_plain(sets[epfd]);
    }
    pthread_mutex_unlock(&lock);
}

void vs_epoll_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

/* The child holds every connection too: none may stay cold (the child
 * could read a side channel). Threads asleep on cold records look again. */
void vs_epoll_fork_parent(void)
{
    if (cold_count) {
        warm_all();
        kick_all();
    }
    pthread_mutex_unlock(&lock);
}

/* The child shares the parent's kernel epoll sets: a dormant registration
 * there is the parent's to delete (the child's user deleted the socket
 * too), so the child forgets its dormant records without a system call. */
void vs_epoll_fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    /* The shared watches stay the parent's: the child never deletes them. */
    memset(shared, 0, sizeof(shared));
    memset(shared_in, 0, sizeof(shared_in));
    atomic_store(&shared_sleepers, 0);
    memset(set_shared_sleepers, 0, sizeof(set_shared_sleepers));
    for (int i = 0; i < NESTED_KICKS; i++)
        atomic_store(&nested_kicks[i].fd, -1); /* the parent's (still open here) */
    end_dormant(0, ~0u, true);
    /* The parent withdraws its cold records' arming; the child's copies
     * only go back to the scans. */
    for (int epfd = 0; cold_count && epfd < MAX_EPFD; epfd++)
        while (colds[epfd])
            warm(colds[epfd], NULL);
    /* No thread of the child sleeps; arms for the parent's sleepers are
     * the parent's to withdraw. */
    for (int epfd = 0; epfd <= top_slept; epfd++)
        sleeping[epfd] = 0;
    atomic_store(&sleeper_arms_all, 0);
    for (int epfd = 0; sets && epfd <= top_epfd; epfd++) {
        sleeper_arms[epfd] = 0;
        for (struct rec *r = sets[epfd]; r; r = r->next)
            if (r->for_sleepers) {
                r->perm = 0;
                r->for_sleepers = false;
            }
    }
}

void vs_epoll_watched(int fd)
{
    /* Cheap for poll: only a set that holds records needs it. */
    if (fd >= 0 && fd < MAX_EPFD && !nested[fd] && has_records(fd))
        mark_nested(fd);
}

VS_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
    VS_REAL_READY();
    if (pass_through(epfd))
        return vs_real.epoll_ctl(epfd, op, fd, event);
    struct vs_sock *s = vs_fd_get(fd);
    if (!s) {
        if (op == EPOLL_CTL_ADD && fd >= 0 && fd < MAX_EPFD && !nested[fd] && is_epoll_fd(fd))
            mark_nested(fd);
        return vs_real.epoll_ctl(epfd, op, fd, event);
    }
    int r, before = errno;
    pthread_mutex_lock(&lock);
    /* A record left by a socket closed under this number is stale. */
    struct rec *old = find(epfd, fd);
    if (old && (old->sock != s || old->serial != s->serial)) {
        rec_drop(old, NULL);
        old = NULL;
    }
    bool ours = s->ops && (vs_sock_translated(s) || old);
    if (ours && epfd >= 0 && epfd < MAX_EPFD && setup()) {
        r = ctl_record(epfd, op, fd, event, s);
    } else {
        /* A TCP socket not connected yet may be upgraded later, but this
         * registration would not follow: keep it on the kernel for good. */
        if (op == EPOLL_CTL_ADD && !s->ops && s->type == SOCK_STREAM)
            atomic_store(&s->in_epoll_plain, true);
        r = vs_real.epoll_ctl(epfd, op, fd, event);
    }
    int err = r == 0 ? before : errno; /* a success leaves errno alone */
    pthread_mutex_unlock(&lock);
    vs_sock_put(s);
    errno = err;
    return r;
}

/* A new epoll fd: whatever records an earlier one under this number left
 * are stale. */
static int fresh_epfd(int epfd)
{
    if (epfd < 0 || epfd >= MAX_EPFD)
        return epfd;
    pthread_mutex_lock(&lock);
    forget_set(epfd);
    pthread_mutex_unlock(&lock);
    return epfd;
}

VS_EXPORT int epoll_create(int size)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.epoll_create(size));
    return fresh_epfd(vs_real.epoll_create(size));
}

VS_EXPORT int epoll_create1(int flags)
{
    VS_REAL_READY();
    VS_PASS_IF_SANDBOXED(vs_real.epoll_create1(flags));
    return fresh_epfd(vs_real.epoll_create1(flags));
}

/* --- waiting --- */

struct wait {
    int epfd;
    struct epoll_event *out;
    int max, n;
    uint64_t round;
    long now;
    bool kicked; /* the kick eventfd fired */
    bool spins;  /* a record's socket is on a transport's memory (last scan) */
};

static void report(struct wait *w, struct rec *r, unsigned m)
{
    /* Only what the program asked for (and what epoll always reports): a
     * transport's answer, or a kernel event of the registration as it was
     * before a MOD, may say more. */
    m &= interest(r) | EPOLLERR | EPOLLHUP;
    if (!m)
        return;
    if (r->round == w->round) {
        w->out[r->out_idx].events |= m;
        return;
    }
    if (w->n >= w->max)
        return;
    r->round = w->round;
    r->quiet_since = w->now;
    r->out_idx = w->n;
    w->out[w->n++] = (struct epoll_event){.events = m, .data = r->data};
    if (r->events & EPOLLONESHOT) {
        r->disabled = true;
        struct epoll_event none = {.events = 0, .data.u64 = rec_tag(r)};
        if (vs_real.epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->fd, &none) == 0)
            r->kev = 0;
    }
}

/* Edge-triggered: only news is reported. FROM_KERNEL: the TCP fd itself
 * reported an edge. */
static unsigned edges(struct vs_sock *s, struct rec *r, unsigned m, unsigned from_kernel)
{
    uint64_t rx = s->ops->rx_mark(s), tx = s->ops->tx_mark(s);
    if (r->events & EPOLLET) {
        if ((m & EPOLLIN) && !(from_kernel & EPOLLIN) && rx == r->rx_mark)
            m &= ~(unsigned)(EPOLLIN | EPOLLRDHUP);
        if ((m & EPOLLOUT) && !(from_kernel & EPOLLOUT) && tx == r->tx_mark)
            m &= ~(unsigned)EPOLLOUT;
    }
    if (m & EPOLLIN)
        r->rx_mark = rx;
    if (m & EPOLLOUT)
        r->tx_mark = tx;
    return m;
}

/* A sleep on W's set ended unheard (a slice): its shared watches are read
 * all the same. Their edge may have gone to another process's wait on the
 * set (a forked child's, which drops it): the event would stay unread, and
 * a CQ counted as armed until it is read never rings again (cq.c). (lock) */
static void read_shared(struct wait *w)
{
    sorting_for = w->epfd;
    for (int i = 0; i < SHARED_MAX; i++)
        if (shared[i].refs && shared[i].epfd == w->epfd)
            shared[i].ops->shared_news(shared[i].fd);
    sorting_for = -1;
    w->kicked = true;
}

static void translate(struct wait *w, const struct epoll_event *kev, int n)
{
    for (int i = 0; i < n; i++) {
        bool watch = false;
        struct rec *r = NULL;
        unsigned si = 0;
        enum tag tag = untag(kev[i].data.u64, w->epfd, &r, &watch, &si);
        if (tag == TAG_SHARED) {
            /* Sorted to the connections: kicked cold records warm and the
             * hot ones are scanned, below. */
            sorting_for = w->epfd;
            shared[si].ops->shared_news(shared[si].fd);
            sorting_for = -1;
            w->kicked = true;
        }
        if (tag == TAG_KICK)
            w->kicked = true;
        if (tag == TAG_DEAD || tag == TAG_KICK || tag == TAG_SHARED)
            continue;
        if (tag == TAG_USER) {
            if (w->n < w->max)
                w->out[w->n++] = kev[i];
            continue;
        }
        struct vs_sock *s = rec_sock(r);
        if (!s) {
            rec_drop(r, NULL);
            continue;
        }
        warm(r, s);
        if (r->dormant) {
            /* What woke it may concern a dup of the socket in this set
             * (SWITCH, WAKE): act on the messages before they are orphaned. */
            if (watch)
                s->ops->poll(s, r->fd, 0, 0, true);
            rec_drop(r, s); /* now for real: it will not wake us again */
            vs_sock_put(s);
            continue;
        }
        /* One-shot, fired: its side channel is still read, or its news
         * would wake every wait until the user re-arms it. */
        if (r->disabled && watch)
            s->ops->poll(s, r->fd, 0, 0, true);
        if (!r->disabled) {
            unsigned from_kernel = watch ? 0 : kev[i].events;
            unsigned m = s->ops->poll(s, r->fd, interest(r),
                                      watch ? VS_TCP_UNKNOWN : (int)from_kernel, watch);
            m = edges(s, r, m, from_kernel);
            if (m)
                report(w, r, m);
            if (r->round == w->round)
                reported(s, r);
        }
        if (r->perm)
            s->ops->rearm(s, r->perm);
        vs_sock_put(s);
    }
}

/* What the rings say, for every record of the set. SYNC: also bring the
 * kernel registrations up to date (may make system calls). */
static void scan(struct wait *w, bool sync)
{
    struct rec *next;
    for (struct rec *r = sets[w->epfd]; r; r = next) {
        next = r->next;
        if (r->disabled || r->round == w->round)
            continue;
        struct vs_sock *s = rec_sock(r);
        if (!s) {
            rec_drop(r, NULL);
            continue;
        }
        if (sync && r->gen != s->ops->generation(s)) {
            sync_kernel(s, r, false);
            perm_arm(s, r);
            /* Its rings came (or went): a sleeper that was to be covered
             * while it was young is covered now. */
            arm_for_sleepers(s, r);
        }
        if (sync && r->watch >= 0 && !r->watch_own && !r->watch_shared)
            claim_watch(s, r);
        w->spins |= s->ops->spins(s);
        unsigned m = s->ops->poll_fast(s, interest(r));
        if (m && (m = edges(s, r, m, 0))) {
            report(w, r, m);
            if (r->round == w->round)
                reported(s, r);
        } else if (sync && w->now - r->quiet_since >= COOL_NS)
            cool(s, r, w->now);
        vs_sock_put(s);
    }
}

static bool scan_any(void *arg, const void *unused)
{
    (void)unused;
    struct wait *w = arg;
    pthread_mutex_lock(&lock);
    for (struct rec *r = sets[w->epfd]; r; r = r->next) {
        struct vs_sock *s = r->disabled ? NULL : rec_sock(r);
        if (!s)
            continue;
        unsigned m = s->ops->poll_fast(s, interest(r));
        vs_sock_put(s);
        if (m) {
            pthread_mutex_unlock(&lock);
            return true;
        }
    }
    pthread_mutex_unlock(&lock);
    return false;
}

/* Armed sockets, to withdraw after the kernel wait. */
struct armed {
    struct vs_sock **sock;
    unsigned *what;
    int n;
    bool shared; /* another thread sleeps on one of them: nap */
    bool held;   /* records armed for good cover this sleep too: slice it */
};

static void arm_all(struct wait *w, struct armed *a)
{
    a->n = 0;
    int count = 0;
    for (struct rec *r = sets[w->epfd]; r; r = r->next)
        count++;
    a->sock = malloc((size_t)count * sizeof(*a->sock));
    a->what = malloc((size_t)count * sizeof(*a->what));
    if (!a->sock || !a->what)
        return;
    for (struct rec *r = sets[w->epfd]; r; r = r->next) {
        struct vs_sock *s = r->disabled ? NULL : rec_sock(r);
        if (!s)
            continue;
        if (r->perm) {
            /* Armed for good already (nested, for sleepers): its watch fd
             * is in the set, and a second arm would count a second
             * sleeper. Its wake-up may have been taken by another thread
             * (a blocking recv reads the side channel): armed afresh, and
             * the sleep sliced as for an arm of ours. */
            s->ops->rearm(s, r->perm);
            a->shared |= s->ops->shared_wait(s);
            a->held = true;
            vs_sock_put(s);
            continue;
        }
        unsigned what = s->ops->arm(s, interest(r));
        if (!what) {
            vs_sock_put(s);
            continue;
        }
        a->shared |= s->ops->shared_wait(s);
        a->sock[a->n] = s;
        a->what[a->n++] = what;
    }
}

/* A sleep that ended with nothing to report (a slice ran out): the armed
 * sockets may give memory back (a UDP socket's rings), as cold records do
 * at sweep. Outside the set's lock: a reclaim punches pages. */
static void idle_armed(struct armed *a)
{
    for (int i = 0; i < a->n; i++)
        if (a->sock[i]->ops->idle)
            a->sock[i]->ops->idle(a->sock[i]);
}

static void disarm_all(struct armed *a)
{
    for (int i = 0; i < a->n; i++) {
        a->sock[i]->ops->disarm(a->sock[i], a->what[i]);
        vs_sock_put(a->sock[i]);
    }
    free(a->sock);
    free(a->what);
}

/* epoll_pwait2, which takes its timeout by address (base/signals.h zeroes
 * it there), or epoll_pwait where the kernel (before 5.11) or a seccomp
 * filter (older container runtimes: EPERM) does not offer it. */
static int kernel_pwait2(int epfd, struct epoll_event *kev, int max, struct timespec *ts,
                         const sigset_t *mask)
{
    static _Atomic bool no_pwait2;
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        int n = (int)vs_syscall(SYS_epoll_pwait2, epfd, kev, max, ts, mask, _NSIG / 8);
        if (n >= 0 || (errno != ENOSYS && errno != EPERM))
            return n;
        atomic_store(&no_pwait2, true);
    }
    long ms = !ts ? -1 : ts->tv_sec * 1000L + (ts->tv_nsec + 999999) / 1000000;
    if (ms > INT_MAX)
        ms = INT_MAX;
    return (int)vs_syscall(SYS_epoll_pwait, epfd, kev, max, (int)ms, mask, _NSIG / 8);
}

/* One sleep of a wait that started at the mark SIGNALS: interrupted (-1,
 * EINTR) when a handler ran since and nothing is ready, as the kernel's
 * would be. */
static int kernel_wait(int epfd, struct epoll_event *kev, int max, long ns, const sigset_t *mask,
                       unsigned signals)
{
    struct timespec ts, *tsp = vs_timespec(ns, &ts);
    struct vs_sleep_guard g;
    if (ns != 0)
        vs_signals_sleep_begin(signals, &tsp, &g);
    int n = kernel_pwait2(epfd, kev, max, tsp, mask);
    int err = errno;
    if (ns != 0 && vs_signals_sleep_end(signals, &g) && n == 0) {
        n = -1;
        err = EINTR;
    }
    errno = err;
    return n;
}

/* A thread goes to sleep on EPFD, or wakes. (lock) */
static void sleeper_in(int epfd)
{
    if (sleeping[epfd]++ == 0 && epfd > top_slept)
        top_slept = epfd;
}

static void sleeper_out(int epfd)
{
    if (--sleeping[epfd] == 0 && sleeper_arms[epfd])
        drop_sleeper_arms(epfd);
}

static int wait_translated(int epfd, struct epoll_event *events, int max, long timeout_ns,
                           const sigset_t *mask, unsigned signals)
{
    struct epoll_event *kev = malloc((size_t)max * sizeof(*kev));
    if (!kev) {
        errno = ENOMEM;
        return -1;
    }
    struct wait w = {.epfd = epfd, .out = events, .max = max};
    int outer = waiting_on;
    waiting_on = epfd;
    long deadline = timeout_ns < 0 ? -1 : vs_now_ns() + timeout_ns;
    /* net.core.busy_poll: spun once a call, as the kernel's ep_poll does. */
    long asked = vs_busy_poll_ns();
    int result;
    for (int iter = 0;; iter++) {
        /* The first look does not sleep; later ones sleep what is left. */
        long left = iter == 0 ? 0 : deadline < 0 ? -1 : deadline - vs_now_ns();
        if (iter > 0 && deadline >= 0 && left <= 0) {
            result = 0;
            break;
        }
        struct armed a = {0};
        if (left != 0 && w.spins) {
            if (vs_spin_until(scan_any, &w, NULL, asked))
                left = 0;
            asked = 0;
        }
        w.spins = false;
        pthread_mutex_lock(&lock);
        w.round = ++rounds;
        w.now = vs_now_ns();
        w.n = 0;
        if (colds[epfd])
            sweep(epfd, w.now);
        scan(&w, true);
        /* Nothing on a transport's memory: no reason for a first look
         * that does not sleep (a short-lived connection's every wait), nor
         * when the next look would not spin either (the budget is spent:
         * a system call per wait saved). */
        if (iter == 0 && w.n == 0 && timeout_ns != 0 && (!w.spins || vs_spin_spent(asked)))
            left = deadline < 0 ? -1 : deadline - w.now > 0 ? deadline - w.now : 0;
        /* Counted before the last look: a thread that reads a shared
         * watch after it either sees us asleep or sorted before the look. */
        bool on_shared = w.n == 0 && left != 0 && shared_in[epfd] > 0;
        if (on_shared) {
            atomic_fetch_add(&shared_sleepers, 1);
            atomic_fetch_add(&set_shared_sleepers[epfd], 1);
        }
        if (w.n == 0 && left != 0) {
            arm_all(&w, &a);
            scan(&w, false);
        }
        /* Counted under the lock with the arming: a record enabled after
         * it is armed for us (arm_for_sleepers). */
        bool asleep = w.n == 0 && left != 0;
        if (asleep)
            sleeper_in(epfd);
        bool has_cold = colds[epfd] != NULL;
        pthread_mutex_unlock(&lock);
        /* Sliced: see VS_WAIT_SLICE_NS. */
        long slice = a.shared ? VS_WAIT_SHARED_NAP_NS : VS_WAIT_SLICE_NS;
        if ((a.n > 0 || a.held) && (left < 0 || left > slice))
            left = slice;
        if (has_cold && (left < 0 || left > SWEEP_NS))
            left = SWEEP_NS;
        int n = w.n < max
                    ? kernel_wait(epfd, kev, max - w.n, w.n ? 0 : left, w.n ? NULL : mask, signals)
                    : 0;
        int err = errno;
        vs_spin_woke();
        if (n == 0 && asleep)
            idle_armed(&a);
        if (on_shared) {
            atomic_fetch_sub(&set_shared_sleepers[epfd], 1);
            atomic_fetch_sub(&shared_sleepers, 1);
        }
        pthread_mutex_lock(&lock);
        if (asleep)
            sleeper_out(epfd);
        disarm_all(&a);
        if (n > 0)
            translate(&w, kev, n);
        else if (n == 0 && asleep && shared_in[epfd] > 0)
            read_shared(&w);
        if (w.kicked) {
            w.kicked = false;
            warm_set(epfd, true);
            scan(&w, false);
        }
        pthread_mutex_unlock(&lock);
        if (w.n > 0) {
            result = w.n;
            break;
        }
        if (n < 0) {
            errno = err;
            result = -1;
            break;
        }
        if (timeout_ns == 0) {
            result = 0;
            break;
        }
    }
    waiting_on = outer;
    free(kev);
    return result;
}

/* Whether one of the N values the kernel returned is a tag of ours. */
static bool has_tags(const struct epoll_event *ev, int n)
{
    uintptr_t base = (uintptr_t)__atomic_load_n(&region, __ATOMIC_ACQUIRE);
    for (int i = 0; base && i < n; i++)
        if (in_tag_space(ev[i].data.u64, base))
            return true;
    return false;
}

/* EVENTS holds N events of a wait that began on a set without records:
 * another thread added one since, and its tags are in there. Translated in
 * place: each event yields at most one entry, appended in order, so the
 * output never overtakes the input. */
static int translate_late(int epfd, struct epoll_event *events, int n, int max)
{
    struct wait w = {.epfd = epfd, .out = events, .max = max};
    pthread_mutex_lock(&lock);
    w.round = ++rounds;
    w.now = vs_now_ns();
    translate(&w, events, n);
    if (w.kicked) {
        warm_set(epfd, true);
        scan(&w, false);
    }
    pthread_mutex_unlock(&lock);
    return w.n;
}

static int wait_inner(int epfd, struct epoll_event *events, int max, long timeout_ns,
                      const sigset_t *mask)
{
    unsigned signals = vs_signals_mark();
    bool have = false, counted = false;
    if (epfd >= 0 && epfd < MAX_EPFD && events && max > 0) {
        pthread_mutex_lock(&lock);
        have = has_records(epfd) || kick_in[epfd]; /* kicks are never the user's */
        /* A sleeper too: a record added meanwhile is armed for it. */
        if (!have && timeout_ns != 0) {
            sleeper_in(epfd);
            counted = true;
        }
        pthread_mutex_unlock(&lock);
    }
    if (have)
        return wait_translated(epfd, events, max, timeout_ns, mask, signals);
    /* A set without records is the kernel's: no translation. But another
     * thread may add a socket of ours while this one sleeps (gRPC's poller
     * thread does, as its other threads accept and connect), and the
     * kernel then hands out the record's tag: it must never reach the
     * program, which would take it for its own data. */
    long deadline = timeout_ns < 0 ? -1 : vs_now_ns() + timeout_ns;
    struct timespec ts;
    int n = kernel_pwait2(epfd, events, max, vs_timespec(timeout_ns, &ts), mask);
    if (counted) {
        int err = errno;
        pthread_mutex_lock(&lock);
        sleeper_out(epfd);
        pthread_mutex_unlock(&lock);
        errno = err;
    }
    if (n <= 0 || !has_tags(events, n))
        return n;
    n = translate_late(epfd, events, n, max);
    long left = deadline < 0 ? -1 : deadline - vs_now_ns();
    if (n > 0 || timeout_ns == 0 || (deadline >= 0 && left <= 0))
        return n;
    return wait_translated(epfd, events, max, left, mask, signals);
}

/* errno as the kernel leaves it: untouched by a wait that succeeds (our
 * inner calls may fail on the way: a watch fd already registered by a dup's
 * record, EEXIST). */
static int do_wait(int epfd, struct epoll_event *events, int max, long timeout_ns,
                   const sigset_t *mask)
{
    int before = errno;
    int n = wait_inner(epfd, events, max, timeout_ns, mask);
    if (n >= 0)
        errno = before;
    return n;
}

VS_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    VS_REAL_READY();
    if (pass_through(epfd))
        return vs_real.epoll_wait(epfd, events, maxevents, timeout);
    return do_wait(epfd, events, maxevents, timeout < 0 ? -1 : timeout * 1000000L, NULL);
}

VS_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
                          const sigset_t *sigmask)
{
    VS_REAL_READY();
    if (pass_through(epfd))
        return vs_real.epoll_pwait(epfd, events, maxevents, timeout, sigmask);
    return do_wait(epfd, events, maxevents, timeout < 0 ? -1 : timeout * 1000000L, sigmask);
}

VS_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
                           const struct timespec *timeout, const sigset_t *sigmask)
{
    VS_REAL_READY();
    if (pass_through(epfd))
        return vs_real.epoll_pwait2(epfd, events, maxevents, timeout, sigmask);
    return do_wait(epfd, events, maxevents,
                   timeout ? timeout->tv_sec * 1000000000L + timeout->tv_nsec : -1, sigmask);
}
