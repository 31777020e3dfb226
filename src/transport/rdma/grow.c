/* grow.c - rings that grow while a stream needs them, and shrink back.
 *
 * A connection starts with rings of VSOCKET_RDMA_RING. Between hosts that
 * caps the bytes in flight (a 256 KiB window), where the kernel autotunes
 * its window to megabytes. So a sender that finds the peer's ring full
 * while the reader keeps up (it consumed twice the ring since the size
 * last changed) asks for a larger one (GROW), four times the size up to
 * VSOCKET_RDMA_RING_MAX; the receiver registers it and grants it (REGION)
 * or declines. The sender moves at a stream position where the peer has
 * read everything (EPOCH): no byte is then in two rings, so both ends swap
 * whole rings and every offset stays "position modulo size". After a
 * pause (IDLE_NS without a send) the sender moves back to the first ring,
 * which both ends kept, and the larger ones go.
 *
 * Until the move the sender writes into the old ring; once that is full, it
 * writes no more until the peer read everything (the receiver credits at
 * once when it has, while a grant is open): a bubble of about one round
 * trip per growth, a few times per connection. Memory: a grown connection
 * holds the first rings too; all growth in a process is bounded by
 * GROWN_BUDGET (and RLIMIT_MEMLOCK: a registration it refuses is a
 * decline). docs/design/rdma-transport.md, "Rings that grow". */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>

#include "config/config.h"
#include "config/log.h"
#include "core/clock.h"
#include "transport/rdma/conn.h"

/* A sender that paused this long moves back to the first ring. */
#define IDLE_NS 1000000000L
/* A declined growth, or one not answered, is not asked again before. */
#define ASK_AGAIN_NS 1000000000L
/* Registered bytes above the first rings a process may hold, at most. */
#define GROWN_BUDGET (1ull << 30)
/* GROWs a receiver answers between two moves. */
#define GRANTS_PER_MOVE 8

static _Atomic uint64_t grown;

uint64_t vs_rdma_grown_bytes(void)
{
    return atomic_load(&grown);
}

/* Half of what the process may lock, within GROWN_BUDGET: the rest is for
 * connections' first rings. */
static uint64_t budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 2 < GROWN_BUDGET)
        return rl.rlim_cur / 2;
    return GROWN_BUDGET;
}

/* Registers A of SIZE within the budget; counted. */
static int grown_new(struct vs_rdma_conn *c, struct vs_rdma_area *a, uint64_t size, int access)
{
    if (atomic_fetch_add(&grown, size) + size > budget()) {
        atomic_fetch_sub(&grown, size);
        return -ENOMEM;
    }
    int rc = vs_rdma_area_new(c, a, size, access);
    if (rc < 0)
        atomic_fetch_sub(&grown, size);
    return rc;
}

static void grown_free(struct vs_rdma_area *a)
{
    if (a->mem)
        atomic_fetch_sub(&grown, a->size);
    vs_rdma_area_free(a);
}

/* ------------------------------------------------------------------ sender */

/* Room in the ring we write now. The peer's credit word is its to write: a
 * value past what we sent is a lie that only hurts it, but must not make us
 * count more room than the ring has. */
static uint64_t ring_room(struct vs_rdma_conn *c)
{
    if (!c->tx.mem)
        return 0;
    uint64_t unread = c->tx_head - vs_rdma_peer_tail(c);
    return unread > c->tx_size ? 0 : c->tx_size - unread;
}

uint64_t vs_rdma_tx_room(struct vs_rdma_conn *c)
{
    if (atomic_load(&c->tx_pending) && atomic_load(&c->move_waits))
        return 0;
    return ring_room(c);
}

uint64_t vs_rdma_tx_room_ready(struct vs_rdma_conn *c)
{
    uint64_t pending = atomic_load(&c->tx_pending);
    if (pending && atomic_load(&c->move_waits))
        return c->tx.mem && vs_rdma_peer_tail(c) == c->tx_head ? pending : 0;
    return ring_room(c);
}

/* Moves our writes into the peer's ring of SIZE at ADDR/RKEY: the one it
 * granted (with our copy made for it), or back into its first (BACK).
 * Every byte before is credited. (tx) */
static bool move_to(struct vs_rdma_conn *c, uint64_t addr, uint32_t rkey, uint64_t size, bool back)
{
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_EPOCH, .a = c->tx_head, .b = size};
    unsigned idx;
    pthread_mutex_lock(&c->qp_lock);
    int rc = vs_rdma_post_msg_locked(c, &m, &idx);
    pthread_mutex_unlock(&c->qp_lock);
    if (rc < 0)
        return false; /* the send queue is full: at the next send */
    if (!c->tx_first.mem) {
        /* Leaving the first ring: kept for the way back. */
        c->tx_first = c->tx;
        c->peer_first_addr = c->peer_ring_addr;
        c->peer_first_rkey = c->peer_ring_rkey;
        c->peer_first_size = c->tx_size;
    } else {
        /* A grown copy may still be read by sends in flight (a resend
         * after a lost acknowledgement): freed once the queue is past
         * EPOCH. */
        c->tx_old = c->tx;
        c->tx_old_idx = idx;
    }
    struct vs_rdma_area *next = back ? &c->tx_first : &c->tx_next;
    c->tx = *next;
    memset(next, 0, sizeof(*next));
    c->peer_ring_addr = addr;
    c->peer_ring_rkey = rkey;
    c->tx_size = size;
    c->grow_mark = c->tx_head;
    c->tx_last_ns = vs_now_ns();
    c->shrink_wanted = false;
    vs_debug("rdma: writes from %lu go into the peer's ring of %lu KiB", (unsigned long)m.a,
             (unsigned long)(size >> 10));
    return true;
}

/* The peer's answer to GROW, if it came. (tx) */
static void take_region(struct vs_rdma_conn *c)
{
    if (!atomic_load_explicit(&c->region_in, memory_order_acquire))
        return;
    pthread_mutex_lock(&c->qp_lock);
    uint64_t addr = c->region_addr, size = c->region_size;
    uint32_t rkey = c->region_rkey, seq = c->region_seq;
    atomic_store(&c->region_in, false);
    pthread_mutex_unlock(&c->qp_lock);
    /* Only the answer to our last GROW: an earlier one's ring is gone (the
     * peer frees a grant when asked again). */
    if (!c->grow_asked || seq != c->grow_seq)
        return;
    c->grow_asked = false;
    /* Declined (0), or less than we asked (the peer's VSOCKET_RDMA_RING_MAX
     * is lower): our copy is as large as the ring. */
    bool usable = size > c->tx_size && size <= c->tx_next.size && !(size & (size - 1));
    if (usable && size != c->tx_next.size) {
        grown_free(&c->tx_next);
        usable = grown_new(c, &c->tx_next, size, 0) == 0;
    }
    if (!usable) {
        grown_free(&c->tx_next);
        c->grow_again_ns = vs_now_ns() + ASK_AGAIN_NS;
        return;
    }
    c->pending_addr = addr;
    c->pending_rkey = rkey;
    atomic_store(&c->move_waits, false);
    atomic_store(&c->tx_pending, size);
}

bool vs_rdma_grow_step(struct vs_rdma_conn *c)
{
    if (c->tx_old.mem) {
        pthread_mutex_lock(&c->qp_lock);
        bool past = !c->qp || vs_rdma_sent_past(c, c->tx_old_idx);
        pthread_mutex_unlock(&c->qp_lock);
        if (!past)
            return false; /* no move before it goes */
        grown_free(&c->tx_old);
    }
    take_region(c);
    if (c->grow_asked && vs_now_ns() - c->grow_asked_ns > ASK_AGAIN_NS) {
        /* No answer (it may have met a full send queue): ask later. */
        c->grow_asked = false;
        grown_free(&c->tx_next);
        c->grow_again_ns = vs_now_ns() + ASK_AGAIN_NS;
    }
    uint64_t pending = atomic_load(&c->tx_pending);
    if (pending && !atomic_load(&c->move_waits) && ring_room(c) == 0)
        atomic_store(&c->move_waits, true); /* full: no more before the move */
    if (!pending && !c->shrink_wanted)
        return false;
    if (vs_rdma_peer_tail(c) != c->tx_head)
        return c->shrink_wanted || atomic_load(&c->move_waits);
    if (pending) {
        if (move_to(c, c->pending_addr, c->pending_rkey, pending, false)) {
            atomic_store(&c->tx_pending, 0);
            atomic_store(&c->move_waits, false);
        }
    } else {
        move_to(c, c->peer_first_addr, c->peer_first_rkey, c->peer_first_size, true);
    }
    return false;
}

void vs_rdma_grow_begin(struct vs_rdma_conn *c)
{
    /* Grown and paused: back to the first ring (as TCP starts its window
     * again after an idle time), once the peer credited everything. */
    if (c->tx_first.mem && !atomic_load(&c->tx_pending) && vs_now_ns() - c->tx_last_ns >= IDLE_NS)
        c->shrink_wanted = true;
}

void vs_rdma_grow_sent(struct vs_rdma_conn *c)
{
    if (c->tx_first.mem)
        c->tx_last_ns = vs_now_ns();
}

void vs_rdma_grow_ask(struct vs_rdma_conn *c)
{
    uint64_t want = c->tx_size * 4;
    if (want > vs_config.rdma_ring_max)
        want = vs_config.rdma_ring_max;
    if (want <= c->tx_size || c->grow_asked || atomic_load(&c->tx_pending) ||
        atomic_load(&c->broken) || !vs_rdma_done(c))
        return;
    /* The reader keeps up: it consumed twice the ring since the size
     * changed, and some since the ring was last full. The ring, not the
     * reader, limits the stream. */
    uint64_t tail = vs_rdma_peer_tail(c), last_full = c->full_tail;
    c->full_tail = tail;
    if (tail - c->grow_mark < 2 * c->tx_size || tail == last_full)
        return;
    long now = vs_now_ns();
    if (now < c->grow_again_ns)
        return;
    /* Our copy first: a grant we could not use would hold the peer's
     * memory for nothing. */
    if (grown_new(c, &c->tx_next, want, 0) < 0) {
        c->grow_again_ns = now + ASK_AGAIN_NS;
        return;
    }
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_GROW, .a = want, .pad2 = c->grow_seq + 1};
    if (vs_rdma_post_msg(c, &m) < 0) {
        grown_free(&c->tx_next);
        return;
    }
    c->grow_seq++;
    c->grow_asked = true;
    c->grow_asked_ns = now;
    vs_debug("rdma: the peer's ring of %lu KiB limits the stream: asking for %lu KiB",
             (unsigned long)(c->tx_size >> 10), (unsigned long)(want >> 10));
}

/* ---------------------------------------------------------------- receiver */

/* Either end left: the rings are read no more. */
static bool left_rdma(struct vs_rdma_conn *c)
{
    return atomic_load(&c->rx_cut) || atomic_load(&c->st.rx_back_on_tcp);
}

/* Sends REGION, the answer to GROW number SEQ (qp_lock). */
static void answer_grow(struct vs_rdma_conn *c, uint32_t seq, uint64_t addr, uint64_t size,
                        uint32_t rkey)
{
    struct vs_rdma_msg m = {
        .type = VS_RDMA_MSG_REGION, .a = addr, .b = size, .rkey = rkey, .pad2 = seq};
    if (vs_rdma_post_msg_locked(c, &m, NULL) < 0 && size) {
        /* Unsaid: the sender asks again later. */
        grown_free(&c->rx_granted);
        atomic_store(&c->grant_open, false);
    }
}

void vs_rdma_on_grow(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    if (!c->rx.mr || left_rdma(c))
        return;
    /* Asked again (our answer was lost to a full queue, or late): a new
     * grant; the sender takes only the answer to its last question. */
    grown_free(&c->rx_granted);
    atomic_store(&c->grant_open, false);
    uint64_t size = m->a;
    if (size > vs_config.rdma_ring_max)
        size = vs_config.rdma_ring_max;
    /* Sizes are powers of two: offsets wrap by masking. An honest sender
     * asks again only after a second without an answer: a few times per
     * move at most; more is a peer making us register in a loop. */
    if (size <= c->rx_size || (size & (size - 1)) || ++c->grants > GRANTS_PER_MOVE ||
        grown_new(c, &c->rx_granted, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) < 0) {
        answer_grow(c, m->pad2, 0, 0, 0);
        return;
    }
    /* The sender moves once we read everything: it waits for that credit. */
    atomic_store(&c->grant_open, true);
    answer_grow(c, m->pad2, (uintptr_t)c->rx_granted.mem, size, c->rx_granted.mr->rkey);
}

void vs_rdma_on_region(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    c->region_addr = m->a;
    c->region_size = m->b;
    c->region_rkey = m->rkey;
    c->region_seq = m->pad2;
    atomic_store_explicit(&c->region_in, true, memory_order_release);
}

/* The peer moves its writes: into the ring we granted, or back into the
 * first. Only where we read (and credited) everything it wrote: then no
 * byte is left in the ring we leave, no offer nor READ is under way, and
 * it can go at once (the peer writes into it no more: its writes come in
 * order). Anything else is a lie, and so is a move after the peer's CUT.
 * After we left RDMA the ring is read no more, but its size still bounds
 * the peer's writes in flight (they may cross our CUT): the move is made
 * all the same, but never under a READ or an offer still to pull (an
 * honest peer has none: it moves only past what we consumed), whose bytes
 * would land in the ring freed here. (qp_lock) */
void vs_rdma_on_epoch(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    uint64_t start = m->a, size = m->b;
    bool pulls = c->offer_count || c->reads_in_flight;
    bool all_read = start == atomic_load(&c->rx_head) && start == atomic_load(&c->rx_credited);
    bool we_left = atomic_load(&c->st.rx_back_on_tcp);
    if (pulls || (!all_read && !we_left) || atomic_load(&c->rx_cut) || !c->rx.mr) {
        atomic_store(&c->st.violated, true);
        return;
    }
    bool on_first = !c->rx_first.mem;
    struct vs_rdma_area next;
    if (c->rx_granted.mem && size == c->rx_granted.size) {
        next = c->rx_granted;
        memset(&c->rx_granted, 0, sizeof(c->rx_granted));
    } else if (!on_first && size == c->rx_first.size) {
        next = c->rx_first;
        memset(&c->rx_first, 0, sizeof(c->rx_first));
    } else {
        atomic_store(&c->st.violated, true);
        return;
    }
    if (on_first)
        c->rx_first = c->rx; /* kept for the way back */
    else
        grown_free(&c->rx);
    /* A reader copies only bytes we credited after it copied them, and
     * START is all we credited: none of the old ring is being read. */
    __atomic_store_n(&c->rx.mem, next.mem, __ATOMIC_RELEASE);
    c->rx.mr = next.mr;
    c->rx.size = next.size;
    __atomic_store_n(&c->rx_size, next.size, __ATOMIC_RELEASE);
    atomic_store(&c->grant_open, false);
    c->grants = 0;
    vs_debug("rdma: the peer writes from %lu into our ring of %lu KiB", (unsigned long)start,
             (unsigned long)(size >> 10));
}

/* Before the areas go (after the queue pair): the growth ones are counted;
 * the first ring and copy become the connection's again, freed with it. */
void vs_rdma_grow_teardown(struct vs_rdma_conn *c)
{
    grown_free(&c->rx_granted);
    grown_free(&c->tx_next);
    grown_free(&c->tx_old);
    if (c->rx_first.mem) {
        grown_free(&c->rx);
        c->rx = c->rx_first;
        memset(&c->rx_first, 0, sizeof(c->rx_first));
    }
    if (c->tx_first.mem) {
        grown_free(&c->tx);
        c->tx = c->tx_first;
        memset(&c->tx_first, 0, sizeof(c->tx_first));
    }
    atomic_store(&c->tx_pending, 0);
}

void vs_rdma_grow_forget(struct vs_rdma_conn *c)
{
    struct vs_rdma_area *areas[] = {&c->rx_first, &c->rx_granted, &c->tx_first, &c->tx_next,
                                    &c->tx_old};
    for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++)
        memset(areas[i], 0, sizeof(*areas[i]));
    atomic_store(&c->tx_pending, 0);
    atomic_store(&grown, 0); /* the parent's */
}
