/* zcopy.c - large sends without a copy: the receiver pulls them with RDMA
 * READ (proto.h).
 *
 * When to offer: a blocking send of at least VSOCKET_RDMA_ZCOPY bytes while
 * the peer sleeps in a read of at least that much (it said so: RX_WAIT). A
 * peer that reads pulls at once, so the send's wait is as long as the
 * transfer; a peer that does not read would make the sender wait where the
 * kernel would have buffered, so then the ring (a copy) is used.
 *
 * The registration of the program's buffer lives exactly as long as the
 * transfer: made at the send, gone before the send returns. So there is no
 * cache to go stale when the program frees, unmaps or remaps the memory
 * (no ODP needed), and the peer's remote read right ends with the send. */
#include <errno.h>
#include <string.h>

#include "config/config.h"
#include "config/log.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/rdma.h"
#include "transport/stream_io.h"

static bool before(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b) < 0;
}

/* ---------------------------------------------------------------- sender */

ssize_t vs_rdma_zcopy_send(struct vs_rdma_conn *c, int fd, const void *buf, size_t len, int flags)
{
    (void)flags;
    if (!vs_config.rdma_zcopy || len < vs_config.rdma_zcopy || !atomic_load(&c->peer_reading))
        return 0;
    struct ibv_mr *mr = ibv_reg_mr(c->pd, (void *)buf, len, IBV_ACCESS_REMOTE_READ);
    if (!mr) {
        vs_debug("rdma: cannot register a send buffer (%s): copying", strerror(errno));
        return 0;
    }
    uint64_t pos = c->tx_head;
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_OFFER,
                            .a = pos,
                            .b = len,
                            .credit_addr = (uintptr_t)buf,
                            .rkey = mr->rkey};
    if (vs_rdma_post_msg(c, &m) < 0) {
        ibv_dereg_mr(mr);
        return 0;
    }
    atomic_store(&c->peer_reading, false);
    /* A stall left from an earlier send ends here: the offer's wait is a
     * stall of its own, whose clock waits for the offer to be placed. */
    vs_rdma_stall(c, false);
    vs_debug("rdma: offered %zu bytes at %lu", len, (unsigned long)pos);
    c->tx_head += len;
    /* The buffer is the program's again only once the peer consumed it:
     * no timeout and no signal may end this wait early (the peer could
     * still be reading), only the connection's end. */
    struct vs_blocking b = VS_BLOCKING_TO_THE_END;
    ssize_t rc = (ssize_t)len;
    while (before(vs_rdma_peer_tail(c), pos + len)) {
        if (atomic_load(&c->broken) || atomic_load(&c->peer_gone)) {
            rc = -EPIPE;
            break;
        }
        vs_rdma_stall(c, true);
        if (atomic_load(&c->st.tx_revert_pending)) {
            /* The peer left: what it did not consume goes on TCP, from the
             * send copy before the offer and from BUF after. */
            int r = vs_rdma_answer_cut(c, fd, pos, buf, len);
            rc = r < 0 ? r : (ssize_t)len;
            break;
        }
        /* After the peer's own CUT above: never a CUT to a peer that left. */
        if (vs_rdma_offer_stalled(c)) {
            /* The peer stopped reading where the kernel would have taken
             * the rest into its buffers: the rest goes on TCP. */
            int r = vs_rdma_spill(c, fd, pos, buf, len);
            if (r != 0) {
                rc = r < 0 ? r : (ssize_t)len;
                break;
            }
        }
        vs_rdma_ask_credit(c);
        vs_rdma_wait(c, fd, 0, &b);
    }
    ibv_dereg_mr(mr);
    return rc;
}

/* -------------------------------------------------------------- receiver */

void vs_rdma_cut_in(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    vs_stream_peer_reverted(&c->st, m->a, m->b);
    /* Offers are void: READs still in flight land past what is read. */
    c->offer_count = 0;
    atomic_store_explicit(&c->rx_cut, true, memory_order_release);
}

static struct vs_rdma_offer *first(struct vs_rdma_conn *c)
{
    return c->offer_count ? &c->offers[c->offer_first % VS_RDMA_OFFERS] : NULL;
}

bool vs_rdma_offer_in(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    /* In stream order, right after what was written, and room to keep it. */
    uint64_t head = atomic_load(&c->rx_head);
    if (m->a != head || m->b == 0 || m->b > (1ull << 40) || c->offer_count == VS_RDMA_OFFERS)
        return false;
    struct vs_rdma_offer *o = &c->offers[(c->offer_first + c->offer_count) % VS_RDMA_OFFERS];
    *o = (struct vs_rdma_offer){.pos = m->a, .len = m->b, .addr = m->credit_addr, .rkey = m->rkey};
    c->offer_count++;
    atomic_store(&c->rx_wait_said, false);
    atomic_store_explicit(&c->rx_head, head + m->b, memory_order_release);
    return true;
}

/* A READ into a reader's buffer, in read_len. */
#define DIRECT (1ull << 63)

/* READs complete in the order they were posted: the oldest in flight is
 * done, and it belongs to the first offer with bytes in flight. */
void vs_rdma_pull_done(struct vs_rdma_conn *c)
{
    if (!c->reads_in_flight)
        return;
    uint64_t len = c->read_len[c->read_first % VS_RDMA_READS];
    c->read_first++;
    c->reads_in_flight--;
    if (len & DIRECT) {
        /* After the peer's CUT the bytes are void: its buffer may be reused. */
        if (!atomic_load(&c->rx_cut))
            c->direct_done += len & ~DIRECT;
        return;
    }
    for (unsigned i = 0; i < c->offer_count; i++) {
        struct vs_rdma_offer *o = &c->offers[(c->offer_first + i) % VS_RDMA_OFFERS];
        if (o->pulling) {
            o->pulled += len;
            o->pulling -= len;
            return;
        }
    }
}

/* Pulls the next parts of offer O into their place in the ring, a quarter
 * of the ring per READ and VS_RDMA_READS in flight (the reader copies the
 * first while the others fly): never further ahead of the tail than the
 * ring holds, nor across the ring's end. (qp_lock) */
static void pull(struct vs_rdma_conn *c, struct vs_rdma_offer *o, uint64_t tail)
{
    /* A post finding the send queue full polls the CQ for room (verbs.c,
     * sq_room), and a CUT acted on there voids the offers: O's slot may
     * then hold an offer sent after the CUT (fuzzing.md, F8). */
    while (c->reads_in_flight < VS_RDMA_READS && !atomic_load(&c->rx_cut)) {
        uint64_t done = o->pulled + o->pulling;
        uint64_t at = o->pos + done;
        uint64_t ahead = at - tail;
        if (o->direct || done == o->len || ahead >= c->rx_size)
            return;
        uint64_t off = at & (c->rx_size - 1);
        uint64_t run = o->len - done;
        if (run > c->rx_size - ahead)
            run = c->rx_size - ahead;
        if (run > c->rx_size - off)
            run = c->rx_size - off;
        if (run > c->rx_size / 4)
            run = c->rx_size / 4;
        if (vs_rdma_post_read(c, (char *)c->rx.mem + off, c->rx.mr->lkey, o->addr + done, o->rkey,
                              run) != 0)
            return;
        /* In flight whatever happened meanwhile: its completion comes. */
        c->read_len[(c->read_first + c->reads_in_flight) % VS_RDMA_READS] = run;
        c->reads_in_flight++;
        /* Posted after a CUT: the READ is void, as those in flight at the
         * CUT, and counts for no offer. */
        if (!atomic_load(&c->rx_cut))
            o->pulling += run;
    }
}

/* What the reader may take from TAIL: up to the first offer, then what of
 * it landed. (qp_lock) */
static uint64_t avail_at(struct vs_rdma_conn *c, uint64_t tail)
{
    struct vs_rdma_offer *o = first(c);
    if (atomic_load(&c->rx_cut))
        return 0; /* the peer resends the rest on TCP */
    if (!o)
        return atomic_load(&c->rx_head) - tail;
    if (before(tail, o->pos))
        return o->pos - tail;
    return o->pos + o->pulled - tail;
}

uint64_t vs_rdma_rx_avail(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    uint64_t tail = __atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE);
    struct vs_rdma_offer *o = first(c);
    if (o && !atomic_load(&c->rx_cut) && !before(tail, o->pos) && c->qp && !atomic_load(&c->broken))
        pull(c, o, tail);
    /* Only now: pull's posts may have polled the CQ and acted on what it
     * held (a CUT, offers, writes). With O and the cut as they were
     * before, a CUT and an offer after it in O's slot made this the new
     * offer's position less the tail: megabytes "readable" from a ring of
     * 4 KiB, its bytes delivered over and over (F8). */
    uint64_t avail = avail_at(c, tail);
    pthread_mutex_unlock(&c->qp_lock);
    return avail;
}

void vs_rdma_offers_consumed(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    uint64_t tail = __atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE);
    struct vs_rdma_offer *o;
    while ((o = first(c)) && !before(tail, o->pos + o->len)) {
        c->offer_first++;
        c->offer_count--;
        c->offer_done = true;
    }
    pthread_mutex_unlock(&c->qp_lock);
}

/* --------------------------------------------------- into the reader's buffer */

/* The offer at the tail, when nothing of it is on its way to the ring and
 * at least MIN bytes of it are left. (qp_lock) */
static struct vs_rdma_offer *fresh_at_tail(struct vs_rdma_conn *c, uint64_t min)
{
    struct vs_rdma_offer *o = first(c);
    uint64_t tail = __atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE);
    if (!o || atomic_load(&c->rx_cut) || c->reads_in_flight || o->pulling ||
        tail != o->pos + o->pulled || o->len - o->pulled < min)
        return NULL;
    return o;
}

/* A READ into the reader's buffer lands whole or not at all: one part's
 * time is what the sender sees without its credit moving (leave.c), so a
 * part stays short even on a slow link. */
#define DIRECT_PART_MAX (1u << 20)

/* Posts the READs of offer O's bytes [FROM + *POSTED, FROM + RUN) into BUF
 * + *POSTED, in parts, up to VS_RDMA_READS in flight, so that the tail
 * (and the sender's credit) moves as each lands. (qp_lock) */
static int post_direct(struct vs_rdma_conn *c, struct vs_rdma_offer *o, char *buf, uint32_t lkey,
                       uint64_t from, uint64_t run, uint64_t *posted)
{
    uint64_t part = (run + VS_RDMA_READS - 1) / VS_RDMA_READS;
    if (part > DIRECT_PART_MAX)
        part = DIRECT_PART_MAX;
    /* After a CUT, O may be another offer's slot: one acted on before
     * this call (the lock was let go), or by a post's poll for room. */
    while (*posted < run && c->reads_in_flight < VS_RDMA_READS && !atomic_load(&c->rx_cut)) {
        uint64_t n = run - *posted < part ? run - *posted : part;
        int rc = vs_rdma_post_read(c, buf + *posted, lkey, o->addr + from + *posted, o->rkey, n);
        if (rc != 0)
            return rc;
        c->read_len[(c->read_first + c->reads_in_flight) % VS_RDMA_READS] = n | DIRECT;
        c->reads_in_flight++;
        *posted += n;
    }
    return 0;
}

ssize_t vs_rdma_zcopy_recv(struct vs_rdma_conn *c, int fd, void *buf, size_t len)
{
    uint64_t min = vs_config.rdma_zcopy;
    if (!min || len < min || !c->offer_count || !c->qp || atomic_load(&c->broken))
        return 0;
    pthread_mutex_lock(&c->qp_lock);
    struct vs_rdma_offer *o = fresh_at_tail(c, min);
    uint64_t from = o ? o->pulled : 0, run = o ? o->len - from : 0, posted = 0;
    if (run > len)
        run = len;
    if (o)
        o->direct = true; /* the ring pulls none of it meanwhile */
    pthread_mutex_unlock(&c->qp_lock);
    if (!o)
        return 0;
    struct ibv_mr *mr = ibv_reg_mr(c->pd, buf, run, IBV_ACCESS_LOCAL_WRITE);
    pthread_mutex_lock(&c->qp_lock);
    int rc = mr ? post_direct(c, o, buf, mr->lkey, from, run, &posted) : -ENOMEM;
    /* A full send queue (-EAGAIN) has room once the READs posted land. */
    if (rc == -EAGAIN && posted)
        rc = 0;
    pthread_mutex_unlock(&c->qp_lock);
    /* Until every READ posted is done the buffer is the adapter's: no
     * timeout or signal ends this wait, only the queue pair's failure. */
    struct vs_blocking b = VS_BLOCKING_TO_THE_END;
    uint64_t taken = 0;
    for (;;) {
        pthread_mutex_lock(&c->qp_lock);
        uint64_t landed = c->direct_done - taken;
        if (landed && !atomic_load(&c->rx_cut)) {
            o->pulled += landed;
            __atomic_store_n(&c->rx_tail, c->rx_tail + landed, __ATOMIC_SEQ_CST);
            taken += landed;
        }
        if (rc == 0 && posted < run && !atomic_load(&c->broken)) {
            int r = post_direct(c, o, buf, mr->lkey, from, run, &posted);
            rc = r == -EAGAIN ? 0 : r;
        }
        bool idle = c->reads_in_flight == 0;
        pthread_mutex_unlock(&c->qp_lock);
        if (landed)
            vs_rdma_credit_read(c);
        if (idle || atomic_load(&c->broken))
            break;
        vs_rdma_wait(c, fd, 0, &b);
    }
    pthread_mutex_lock(&c->qp_lock);
    if (!atomic_load(&c->rx_cut))
        o->direct = false;
    c->direct_done = 0;
    pthread_mutex_unlock(&c->qp_lock);
    if (mr)
        ibv_dereg_mr(mr);
    vs_debug("rdma: pulled %lu bytes of an offer straight into the reader's buffer",
             (unsigned long)taken);
    if (rc < 0 && !taken) {
        vs_debug("rdma: cannot pull into the reader's buffer (%s): through the ring",
                 strerror(-rc));
        return 0;
    }
    return (ssize_t)taken;
}
