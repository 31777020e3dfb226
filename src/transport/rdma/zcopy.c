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
    vs_debug("rdma: offered %zu bytes at %lu", len, (unsigned long)pos);
    c->tx_head += len;
    /* The buffer is the program's again only once the peer consumed it:
     * no timeout and no signal may end this wait early (the peer could
     * still be reading), only the connection's end. */
    struct vs_blocking b = {.opt = 0};
    ssize_t rc = (ssize_t)len;
    uint64_t tail, seen = vs_rdma_peer_tail(c);
    long stalled_since = 0;
    while (before(tail = vs_rdma_peer_tail(c), pos + len)) {
        if (atomic_load(&c->broken) || atomic_load(&c->peer_gone)) {
            rc = -EPIPE;
            break;
        }
        if (tail != seen) {
            seen = tail;
            stalled_since = 0;
        }
        if (atomic_load(&c->st.tx_revert_pending)) {
            /* The peer left: what it did not consume goes on TCP, from the
             * send copy before the offer and from BUF after. */
            int r = vs_rdma_finish_revert(c, fd, pos, buf, len);
            atomic_store(&c->st.tx_back_on_tcp, true);
            rc = r < 0 ? r : (ssize_t)len;
            break;
        }
        /* After the peer's own REVERT above: never a CUT to a peer that left. */
        if (vs_rdma_stalled(&stalled_since)) {
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

/* READs complete in the order they were posted: the oldest in flight is
 * done, and it belongs to the first offer with bytes in flight. */
void vs_rdma_pull_done(struct vs_rdma_conn *c)
{
    if (!c->reads_in_flight)
        return;
    uint64_t len = c->read_len[c->read_first % VS_RDMA_READS];
    c->read_first++;
    c->reads_in_flight--;
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
    while (c->reads_in_flight < VS_RDMA_READS) {
        uint64_t done = o->pulled + o->pulling;
        uint64_t at = o->pos + done;
        uint64_t ahead = at - tail;
        if (done == o->len || ahead >= c->rx_size)
            return;
        uint64_t off = at & (c->rx_size - 1);
        uint64_t run = o->len - done;
        if (run > c->rx_size - ahead)
            run = c->rx_size - ahead;
        if (run > c->rx_size - off)
            run = c->rx_size - off;
        if (run > c->rx_size / 4)
            run = c->rx_size / 4;
        if (vs_rdma_post_read(c, (char *)c->rx.mem + off, o->addr + done, o->rkey, run) != 0)
            return;
        c->read_len[(c->read_first + c->reads_in_flight) % VS_RDMA_READS] = run;
        c->reads_in_flight++;
        o->pulling += run;
    }
}

uint64_t vs_rdma_rx_avail(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    uint64_t tail = __atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE);
    uint64_t head = atomic_load(&c->rx_head), avail;
    struct vs_rdma_offer *o = first(c);
    if (atomic_load(&c->rx_cut)) {
        avail = 0; /* the peer resends the rest on TCP */
    } else if (!o) {
        avail = head - tail;
    } else if (before(tail, o->pos)) {
        avail = o->pos - tail;
    } else {
        if (c->qp && !atomic_load(&c->broken))
            pull(c, o, tail);
        avail = o->pos + o->pulled - tail;
    }
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
