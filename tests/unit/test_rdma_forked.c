/* test_rdma_forked.c - young connections held by several processes after
 * fork (transport/rdma/forked.c): who may start the set-up, and when. Real
 * processes, no device needed. Each scenario plays the atfork handlers by
 * hand: share before the fork, forked_child in the child. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "transport/rdma/conn.h"

/* More slots than a process tree can have (forked.c has 2048). */
#define MAX_SLOTS 4096

static struct vs_rdma_conn *young(void)
{
    struct vs_rdma_conn *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    atomic_store(&c->share, -1);
    return c;
}

/* forked_alone looks at the other holders at most once a millisecond. */
static int alone_now(struct vs_rdma_conn *c)
{
    c->share_next_ns = 0;
    return vs_rdma_forked_alone(c);
}

/* Waits (at most 5 s) until forked_alone says WANT. */
static bool becomes(struct vs_rdma_conn *c, int want)
{
    for (int i = 0; i < 5000; i++) {
        if (alone_now(c) == want)
            return true;
        usleep(1000);
    }
    return false;
}

static int child_status(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void sync_read(int fd)
{
    char b;
    if (read(fd, &b, 1) != 1)
        _exit(90);
}

static void sync_write(int fd)
{
    if (write(fd, "x", 1) != 1)
        _exit(91);
}

/* Two pipes between a parent and its child: up (child to parent), down. */
struct duplex {
    int up[2], down[2];
};

static void duplex_open(struct duplex *d)
{
    if (pipe(d->up) != 0 || pipe(d->down) != 0)
        abort();
}

static void duplex_close(struct duplex *d)
{
    for (int i = 0; i < 2; i++) {
        close(d->up[i]);
        close(d->down[i]);
    }
}

/* Shares C, forks, and runs CHILD_PART in the child as a holder of C
 * (exit 0: its checks held); the parent goes on as fork_parent would. */
static pid_t fork_holder(struct vs_rdma_conn *c, struct duplex *d,
                         bool (*child_part)(struct vs_rdma_conn *c, struct duplex *d))
{
    CHECK(vs_rdma_forked_share(c));
    duplex_open(d);
    pid_t pid = fork();
    if (pid == 0) {
        bool holder = vs_rdma_forked_child(c);
        _exit(child_part(c, d) && holder ? 0 : 1);
    }
    vs_rdma_forked_born(c);
    return pid;
}

static void end_holder(struct vs_rdma_conn *c, struct duplex *d, pid_t pid)
{
    CHECK_EQ(child_status(pid), 0);
    vs_rdma_forked_drop(c);
    duplex_close(d);
    free(c);
}

/* A fork-per-connection server: the parent closes its copy, the child's
 * set-up may start then (and not before). */
static bool child_waits_for_parent(struct vs_rdma_conn *c, struct duplex *d)
{
    int before = alone_now(c); /* the parent still holds it */
    sync_write(d->up[1]);
    bool after = becomes(c, 1);
    return before == 0 && after && vs_rdma_forked_io(c);
}

static void parent_lets_go(void)
{
    struct vs_rdma_conn *c = young();
    CHECK_EQ(alone_now(c), 1); /* never shared: nothing to wait for */
    struct duplex d;
    pid_t pid = fork_holder(c, &d, child_waits_for_parent);
    CHECK_EQ(alone_now(c), 0);
    sync_read(d.up[0]);
    vs_rdma_forked_drop(c);
    CHECK_EQ(atomic_load(&c->share), -1);
    end_holder(c, &d, pid);
}

/* Both processes moved bytes since the fork: no process may upgrade. */
static bool child_moves_bytes_first(struct vs_rdma_conn *c, struct duplex *d)
{
    bool claimed = vs_rdma_forked_io(c) && vs_rdma_forked_io(c);
    sync_write(d->up[1]);
    sync_read(d->down[0]); /* the parent moved bytes too */
    return claimed && becomes(c, -1);
}

static void both_moved_bytes(void)
{
    struct vs_rdma_conn *c = young();
    struct duplex d;
    pid_t pid = fork_holder(c, &d, child_moves_bytes_first);
    sync_read(d.up[0]);
    CHECK(!vs_rdma_forked_io(c));
    CHECK_EQ(alone_now(c), -1);
    sync_write(d.down[1]);
    end_holder(c, &d, pid);
}

/* A copy that failed (exec, fdopen, a greeting written after the peer's
 * copy claimed the bytes) moves bytes nobody counts: once it closes, the
 * other holder must not upgrade either. */
static void failed_copy_taints(void)
{
    struct vs_rdma_conn *c = young();
    struct duplex d;
    pid_t pid = fork_holder(c, &d, child_moves_bytes_first);
    sync_read(d.up[0]);
    CHECK_EQ(alone_now(c), -1); /* the child moved bytes */
    vs_rdma_conn_fail(c, "test");
    vs_rdma_forked_drop(c); /* closed */
    sync_write(d.down[1]);
    end_holder(c, &d, pid);
}

/* A slot has room for a few holders: a fork past them is refused (the
 * connection then leaves for TCP), and the births are taken back. */
static void slot_full(void)
{
    struct vs_rdma_conn *c = young();
    int shared = 0;
    while (shared < 64 && vs_rdma_forked_share(c)) {
        shared++;
        vs_rdma_forked_failed(c); /* each fork failed: its place freed */
    }
    CHECK_EQ(shared, 64);
    struct vs_rdma_conn *kids[8];
    int born = 0;
    for (; born < 8; born++) {
        kids[born] = young();
        atomic_store(&kids[born]->share, atomic_load(&c->share));
        if (!vs_rdma_forked_share(kids[born]))
            break;
    }
    CHECK(born > 0 && born < 8);
    for (int i = 0; i <= born && i < 8; i++) {
        vs_rdma_forked_failed(kids[i]);
        free(kids[i]);
    }
    CHECK_EQ(alone_now(c), 1);
    free(c);
}

/* A holder that died without closing (SIGKILL) no longer holds; the one
 * that moved bytes before dying still did (its positions are gone). */
static void holder_died(void)
{
    struct vs_rdma_conn *c = young();
    CHECK(vs_rdma_forked_share(c));
    pid_t pid = fork();
    if (pid == 0) {
        vs_rdma_forked_child(c);
        raise(SIGKILL);
    }
    CHECK_EQ(child_status(pid), 128 + SIGKILL);
    CHECK_EQ(alone_now(c), 1);

    struct vs_rdma_conn *d = young();
    CHECK(vs_rdma_forked_share(d));
    pid = fork();
    if (pid == 0) {
        vs_rdma_forked_child(d);
        vs_rdma_forked_io(d);
        raise(SIGKILL);
    }
    CHECK_EQ(child_status(pid), 128 + SIGKILL);
    CHECK_EQ(alone_now(d), -1);
    vs_rdma_forked_drop(d);
    free(c);
    free(d);
}

/* A fork that failed takes back the child's place. */
static void fork_failed(void)
{
    struct vs_rdma_conn *c = young();
    CHECK(vs_rdma_forked_share(c));
    CHECK_EQ(alone_now(c), 0); /* a child being born */
    vs_rdma_forked_failed(c);
    CHECK_EQ(alone_now(c), 1);
    free(c);
}

/* Slots whose holders were all killed are taken again once no slot is
 * free: a server whose children are killed does not run out of them. */
static void dead_slots_reused(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        static struct vs_rdma_conn *held[MAX_SLOTS + 1];
        int n = 0;
        for (; n < MAX_SLOTS; n++) {
            struct vs_rdma_conn *c = held[n] = young();
            if (!vs_rdma_forked_share(c))
                break;
            vs_rdma_forked_failed(c); /* as if its child had died */
        }
        /* Gone holding every slot: nobody lets go of them. */
        for (int i = 0; i <= n && i < MAX_SLOTS; i++)
            free(held[i]);
        _exit(n > 0 && n < MAX_SLOTS ? 0 : 1);
    }
    CHECK_EQ(child_status(pid), 0);
    struct vs_rdma_conn *c = young();
    CHECK(vs_rdma_forked_share(c));
    vs_rdma_forked_failed(c);
    vs_rdma_forked_drop(c);
    free(c);
}

/* ------------------------------------------------ carried on RDMA (carry) */

static struct vs_rdma_conn *carried(void)
{
    struct vs_rdma_conn *c = young();
    atomic_store(&c->held, -1);
    c->carrier = true;
    return c;
}

/* Plays the carrier's helper thread: waits (at most 5 s: a wait ends at an
 * ask, or after 1 s) for a child's ask, then says the connection left. */
static bool serve_one(struct vs_rdma_conn *c)
{
    for (int i = 0; i < 5; i++) {
        if (vs_rdma_forked_asked(c)) {
            vs_rdma_forked_left(c);
            return true;
        }
        vs_rdma_forked_wait_asks(vs_rdma_forked_asks());
    }
    return false;
}

/* A child that never uses its copy: nothing is asked; it holds the slot
 * while alive, and the carrier is alone again once it is reaped. */
static void carry_unused(void)
{
    struct vs_rdma_conn *c = carried();
    CHECK(vs_rdma_forked_carry(c));
    struct duplex d;
    duplex_open(&d);
    pid_t pid = fork();
    if (pid == 0) {
        bool ok = vs_rdma_forked_carry_child(c) && atomic_load(&c->copy_unused) && !c->carrier;
        sync_write(d.up[1]);
        sync_read(d.down[0]);
        _exit(ok ? 0 : 1);
    }
    vs_rdma_forked_carry_born(c);
    sync_read(d.up[0]);
    CHECK(vs_rdma_forked_others(c));
    CHECK(!vs_rdma_forked_asked(c));
    sync_write(d.down[1]);
    CHECK_EQ(child_status(pid), 0);
    CHECK(!vs_rdma_forked_others(c));
    CHECK(!vs_rdma_forked_asked(c));
    duplex_close(&d);
    vs_rdma_forked_let_go(c);
    free(c);
}

/* The child's first use asks and waits; the carrier (its helper) leaves;
 * the ask returns 0 once it did. */
static void carry_used(void)
{
    struct vs_rdma_conn *c = carried();
    CHECK(vs_rdma_forked_carry(c));
    pid_t pid = fork();
    if (pid == 0)
        _exit(vs_rdma_forked_carry_child(c) && vs_rdma_forked_ask(c) == 0 ? 0 : 1);
    vs_rdma_forked_carry_born(c);
    CHECK(serve_one(c));
    CHECK_EQ(child_status(pid), 0);
    vs_rdma_forked_let_go(c);
    free(c);
}

/* A carrier that dies on RDMA without leaving: its child's ask says the
 * stream is lost (-1), it does not wait for ever. */
static void carrier_died(void)
{
    int res[2];
    if (pipe(res) != 0)
        abort();
    pid_t carrier = fork();
    if (carrier == 0) {
        struct vs_rdma_conn *c = carried();
        if (!vs_rdma_forked_carry(c))
            _exit(1);
        pid_t pid = fork();
        if (pid == 0) {
            char r = vs_rdma_forked_carry_child(c) && vs_rdma_forked_ask(c) == -1 ? 'L' : 'x';
            if (write(res[1], &r, 1) != 1)
                _exit(2);
            _exit(0);
        }
        _exit(0); /* gone without a word, its child's ask unanswered */
    }
    CHECK_EQ(child_status(carrier), 0);
    char r = 0;
    close(res[1]);
    CHECK_EQ(read(res[0], &r, 1), 1);
    CHECK_EQ(r, 'L');
    close(res[0]);
}

/* After the carrier left, a new fork gives the child no copy to ask for:
 * the connection is on TCP for every holder. */
static void carry_after_leave(void)
{
    struct vs_rdma_conn *c = carried();
    CHECK(vs_rdma_forked_carry(c));
    vs_rdma_forked_carry_failed(c); /* as if that fork had failed */
    vs_rdma_forked_left(c);
    CHECK(!vs_rdma_forked_carry(c));
    vs_rdma_forked_let_go(c);
    free(c);
}

int main(void)
{
    carry_unused();
    carry_used();
    carrier_died();
    carry_after_leave();
    parent_lets_go();
    both_moved_bytes();
    failed_copy_taints();
    slot_full();
    holder_died();
    fork_failed();
    dead_slots_reused();
    return check_finish("test_rdma_forked");
}
