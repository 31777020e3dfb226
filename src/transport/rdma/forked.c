/* forked.c - young connections held by several processes after fork.
 *
 * A fork-per-connection server (PostgreSQL, Python's ForkingTCPServer,
 * inetd-style daemons) accepts, forks, and the parent closes its copy while
 * the child serves. The connection is still young then (no set-up, no RDMA
 * resources), so it need not leave for TCP: its set-up may start once one
 * process holds it alone. Only if no other process moved its bytes since
 * the fork, though: each process counts the stream positions it read and
 * wrote itself, and a switch at a wrong position would lose or repeat bytes.
 *
 * The holders are written in a slot of a region shared by the process and
 * its children (MAP_SHARED, made before the first fork that needs it): how
 * many hold it, the pid of each, and the pid of the one process that moved
 * bytes since the fork (or TAINTED). A holder decides it is alone by turning
 * the count from 1 to OWNED in one step, so no fork can slip a new holder in
 * between its look and its set-up. A holder that dies without closing (a
 * crash) is noticed by kill(pid, 0). A copy that stops counting its bytes
 * (it failed: exec, fdopen, splice, no room for one more holder) taints the
 * slot (vs_rdma_conn_fail): the bytes it moves next are nobody's count. */
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "base/syscall.h"
#include "transport/rdma/conn.h"

#define SLOTS 2048
#define HOLDERS 6
#define BORN (-1)    /* pid[]: a child being born, its pid comes in fork_child */
#define TAINTED (-1) /* io: two processes moved bytes since the fork */
#define OWNED (-1)   /* holders: the last holder took it, nobody joins */
#define EXAMINED 2   /* used: one process sets the slot up or reclaims it */
/* How often a waiting holder looks for the others (kill per holder). */
#define CHECK_NS 1000000L

struct slot {
    _Atomic int used;    /* 0 free, 1 in use, EXAMINED */
    _Atomic int holders; /* entries in pid[] (BORN ones too), or OWNED */
    _Atomic int io;      /* 0, the pid that moved bytes since the fork, or TAINTED */
    _Atomic int pid[HOLDERS];
    /* A connection on RDMA (or in its set-up) at the fork: the process that
     * carries it (0: a young one, above), and where its leaving is. */
    _Atomic int owner;
    _Atomic uint32_t leave; /* LEAVE_* */
};

/* leave: nobody asked; a child asked the owner; the owner left RDMA (every
 * holder is on TCP, settled); the owner died on RDMA (the stream is lost). */
enum { LEAVE_NONE, LEAVE_ASKED, LEAVE_DONE, LEAVE_LOST };

static struct slot *slots; /* set before a fork, then inherited */
/* Bumped by a child that asks an owner to leave (futex word). */
static _Atomic uint32_t *asks;
static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;

static bool region(void)
{
    pthread_mutex_lock(&region_lock);
    if (!slots) {
        void *m = mmap(NULL, (SLOTS + 1) * sizeof(struct slot), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            asks = (_Atomic uint32_t *)&((struct slot *)m)[SLOTS];
            slots = m;
        }
    }
    pthread_mutex_unlock(&region_lock);
    return slots != NULL;
}

static bool alive(int pid)
{
    return kill(pid, 0) == 0 || errno == EPERM;
}

/* A slot whose holders all died without closing (SIGKILL) is nobody's: a
 * process points at a slot only while its pid is in it. */
static bool reclaim(struct slot *sl)
{
    int used = 1;
    if (!atomic_compare_exchange_strong(&sl->used, &used, EXAMINED))
        return false;
    for (int k = 0; k < HOLDERS; k++) {
        int pid = atomic_load(&sl->pid[k]);
        if (pid == BORN || (pid != 0 && alive(pid))) {
            atomic_store(&sl->used, 1);
            return false;
        }
    }
    return true;
}

static int claim_slot(void)
{
    /* Free slots first; the dead holders' only when none is left. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < SLOTS; i++) {
            int free_slot = 0;
            if (pass == 0 ? atomic_compare_exchange_strong(&slots[i].used, &free_slot, EXAMINED)
                          : reclaim(&slots[i])) {
                atomic_store(&slots[i].io, 0);
                atomic_store(&slots[i].owner, 0);
                atomic_store(&slots[i].leave, LEAVE_NONE);
                for (int k = 0; k < HOLDERS; k++)
                    atomic_store(&slots[i].pid[k], k == 0 ? getpid() : 0);
                atomic_store(&slots[i].holders, 1);
                atomic_store(&slots[i].used, 1);
                return i;
            }
        }
    }
    return -1;
}

/* Replaces one entry FROM by TO; whether there was one. */
static bool swap_entry(struct slot *sl, int from, int to)
{
    for (int k = 0; k < HOLDERS; k++) {
        int v = from;
        if (atomic_compare_exchange_strong(&sl->pid[k], &v, to))
            return true;
    }
    return false;
}

/* One holder fewer; the last frees the slot. */
static void leave_slot(struct slot *sl)
{
    int n = atomic_load(&sl->holders);
    while (n > 0 && !atomic_compare_exchange_weak(&sl->holders, &n, n - 1))
        ;
    if (n == 1 || n == OWNED) {
        atomic_store(&sl->holders, 0);
        int used = 1;
        atomic_compare_exchange_strong(&sl->used, &used, 0);
    }
}

/* One holder more, unless the slot is taken or full. */
static bool join_slot(struct slot *sl)
{
    int n = atomic_load(&sl->holders);
    do {
        if (n <= 0 || n >= HOLDERS)
            return false;
    } while (!atomic_compare_exchange_weak(&sl->holders, &n, n + 1));
    if (swap_entry(sl, 0, BORN))
        return true;
    leave_slot(sl); /* entries of dead holders not yet cleared */
    return false;
}

bool vs_rdma_forked_share(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->share);
    if (i < 0) {
        if (!region() || (i = claim_slot()) < 0)
            return false;
        atomic_store(&c->share, i);
    }
    c->share_born = join_slot(&slots[i]);
    return c->share_born;
}

/* The child of this fork was born (parent) or is us (child). */
static bool take_birth(struct vs_rdma_conn *c, int pid)
{
    int i = atomic_load(&c->share);
    bool born = c->share_born;
    c->share_born = false;
    return born && i >= 0 && swap_entry(&slots[i], BORN, pid);
}

void vs_rdma_forked_born(struct vs_rdma_conn *c)
{
    c->share_born = false;
}

bool vs_rdma_forked_child(struct vs_rdma_conn *c)
{
    return take_birth(c, getpid());
}

void vs_rdma_forked_failed(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->share);
    if (take_birth(c, 0))
        leave_slot(&slots[i]);
}

void vs_rdma_forked_taint(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->share);
    if (i >= 0)
        atomic_store(&slots[i].io, TAINTED);
}

bool vs_rdma_forked_io(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->share);
    if (i < 0)
        return true;
    int me = getpid(), io = 0;
    if (atomic_compare_exchange_strong(&slots[i].io, &io, me) || io == me)
        return true;
    atomic_store(&slots[i].io, TAINTED);
    return false;
}

static bool moved_by_another(struct slot *sl, int me)
{
    int io = atomic_load(&sl->io);
    return io != 0 && io != me;
}

int vs_rdma_forked_alone(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->share);
    if (i < 0)
        return 1;
    struct slot *sl = &slots[i];
    int me = getpid();
    if (moved_by_another(sl, me))
        return -1;
    long now = vs_now_ns();
    if (now < c->share_next_ns)
        return 0;
    c->share_next_ns = now + CHECK_NS;
    for (int k = 0; k < HOLDERS; k++) {
        int pid = atomic_load(&sl->pid[k]);
        if (pid == 0 || pid == me)
            continue;
        if (pid == BORN || alive(pid))
            return 0;
        /* Died holding it: no longer a holder. */
        if (atomic_compare_exchange_strong(&sl->pid[k], &pid, 0))
            leave_slot(sl);
    }
    int one = 1;
    if (!atomic_compare_exchange_strong(&sl->holders, &one, OWNED))
        return 0;
    /* A holder claims the bytes before it moves them, and dies after. */
    if (moved_by_another(sl, me))
        return -1; /* the slot goes at close (forked_drop) */
    vs_rdma_forked_drop(c);
    return 1;
}

void vs_rdma_forked_drop(struct vs_rdma_conn *c)
{
    vs_rdma_forked_failed(c); /* freed while its fork was under way */
    int i = atomic_exchange(&c->share, -1);
    if (i >= 0 && swap_entry(&slots[i], getpid(), 0))
        leave_slot(&slots[i]);
}

/* ------------------------------------------------------ carried on RDMA */

/* A connection on RDMA (or in its set-up) at a fork stays there: registered
 * memory is kept out of the child (MADV_DONTFORK) and the kernel copies any
 * other pinned page for the child (copy-on-fork), so the parent's state is
 * untouched. The child holds a copy it may not use as is: the bytes it
 * would read are in the parent's ring, and its writes would overtake the
 * parent's. Its first use asks the parent, through the slot, to leave RDMA
 * (CUT: both ends told, every byte resent on TCP, settled); the parent's
 * helper thread (rdma.c) does it at once, whatever the parent is doing, and
 * the child's call then goes on on TCP. A child that only closes its copy,
 * execs with it close-on-exec, or exits changes nothing. */

bool vs_rdma_forked_carry(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->held);
    if (i < 0) {
        if (!c->carrier || !region() || (i = claim_slot()) < 0)
            return false;
        atomic_store(&slots[i].owner, getpid());
        atomic_store(&c->held, i);
    }
    if (atomic_load(&slots[i].leave) != LEAVE_NONE)
        return false; /* left, or leaving: the copy is plain TCP */
    c->held_born = join_slot(&slots[i]);
    return c->held_born;
}

void vs_rdma_forked_carry_born(struct vs_rdma_conn *c)
{
    c->held_born = false;
}

bool vs_rdma_forked_carry_child(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->held);
    bool born = c->held_born;
    c->held_born = false;
    c->carrier = false;
    if (!born || i < 0 || !swap_entry(&slots[i], BORN, getpid())) {
        atomic_store(&c->held, -1);
        return false;
    }
    atomic_store(&c->copy_unused, true);
    return true;
}

void vs_rdma_forked_carry_failed(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->held);
    bool born = c->held_born;
    c->held_born = false;
    if (born && i >= 0 && swap_entry(&slots[i], BORN, 0))
        leave_slot(&slots[i]);
}

static void futex_wake(_Atomic uint32_t *word)
{
    vs_syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *word, uint32_t val, long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    vs_syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* How often a child waiting for its parent to leave checks that it lives. */
#define ASK_CHECK_NS 20000000L

int vs_rdma_forked_ask(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->held);
    if (i < 0)
        return 0;
    struct slot *sl = &slots[i];
    uint32_t none = LEAVE_NONE;
    if (atomic_compare_exchange_strong(&sl->leave, &none, LEAVE_ASKED)) {
        atomic_fetch_add(asks, 1);
        futex_wake(asks);
    }
    uint32_t now;
    while ((now = atomic_load(&sl->leave)) == LEAVE_ASKED) {
        int owner = atomic_load(&sl->owner);
        if (!alive(owner)) {
            /* Died on RDMA: what it had read ahead is gone with it. */
            uint32_t asked = LEAVE_ASKED;
            atomic_compare_exchange_strong(&sl->leave, &asked, LEAVE_LOST);
            continue;
        }
        futex_wait(&sl->leave, LEAVE_ASKED, ASK_CHECK_NS);
    }
    return now == LEAVE_DONE ? 0 : -1;
}

bool vs_rdma_forked_asked(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->held);
    return c->carrier && i >= 0 && atomic_load(&slots[i].leave) == LEAVE_ASKED;
}

void vs_rdma_forked_left(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->held);
    if (!c->carrier || i < 0)
        return;
    atomic_store(&slots[i].leave, LEAVE_DONE);
    futex_wake(&slots[i].leave);
}

bool vs_rdma_forked_others(struct vs_rdma_conn *c)
{
    int i = atomic_load(&c->held);
    if (i < 0 || atomic_load(&slots[i].leave) == LEAVE_DONE)
        return false;
    int me = getpid();
    for (int k = 0; k < HOLDERS; k++) {
        int pid = atomic_load(&slots[i].pid[k]);
        if (pid == BORN || (pid != 0 && pid != me && alive(pid)))
            return true;
    }
    return false;
}

uint32_t vs_rdma_forked_asks(void)
{
    return asks ? atomic_load(asks) : 0;
}

void vs_rdma_forked_wait_asks(uint32_t seen)
{
    futex_wait(asks, seen, 1000000000L);
}

void vs_rdma_forked_let_go(struct vs_rdma_conn *c)
{
    vs_rdma_forked_carry_failed(c);
    int i = atomic_exchange(&c->held, -1);
    if (i >= 0 && swap_entry(&slots[i], getpid(), 0))
        leave_slot(&slots[i]);
}
