/* verbs.c - a connection's queue pair, completion queue and registered
 * memory, and the work requests of the data path (proto.h).
 *
 * Remote access is the least each area needs: the receive ring and the
 * credit word are the only areas the peer may write, and nothing is ever
 * remotely readable. Message buffers and the send copy are local. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "config/config.h"
#include "config/log.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/dev.h"

/* Send work requests are signalled one in this many, and whenever the
 * queue would otherwise fill: enough completions to know what is free. */
#define SIGNAL_EVERY 16

static int area_new(struct vs_rdma_area *a, struct ibv_pd *pd, size_t size, int access)
{
    a->size = size;
    a->mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a->mem == MAP_FAILED) {
        a->mem = NULL;
        return -ENOMEM;
    }
    /* Not in a forked child: the parent keeps its pages where the adapter
     * reads and writes them, and a fork copies none of them (docs: fork). */
    madvise(a->mem, size, MADV_DONTFORK);
    a->mr = ibv_reg_mr(pd, a->mem, size, access);
    if (!a->mr) {
        int err = errno ? errno : ENOMEM;
        munmap(a->mem, size);
        a->mem = NULL;
        return -err;
    }
    return 0;
}

static void area_free(struct vs_rdma_area *a)
{
    if (a->mr)
        ibv_dereg_mr(a->mr);
    if (a->mem)
        munmap(a->mem, a->size);
    memset(a, 0, sizeof(*a));
}

int vs_rdma_area_new(struct vs_rdma_conn *c, struct vs_rdma_area *a, size_t size, int access)
{
    return area_new(a, c->pd, size, access);
}

void vs_rdma_area_free(struct vs_rdma_area *a)
{
    area_free(a);
}

static int post_recv(struct vs_rdma_conn *c, unsigned slot)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)c->msgs.mem + (uint64_t)slot * VS_RDMA_MSG_SIZE,
        .length = VS_RDMA_MSG_SIZE,
        .lkey = c->msgs.mr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = vs_rdma_cq_wr_id(c, slot), .sg_list = &sge, .num_sge = 1},
                       *bad;
    return ibv_post_recv(c->qp, &wr, &bad);
}

int vs_rdma_verbs_setup(struct vs_rdma_conn *c, struct rdma_cm_id *id)
{
    /* A protection domain of its own: a remote key of this connection is
     * worthless on any other queue pair, even another connection's of the
     * same process with the same peer. */
    c->pd = ibv_alloc_pd(id->verbs);
    if (!c->pd)
        return -errno;
    snprintf(c->device, sizeof(c->device), "%s", ibv_get_device_name(id->verbs->device));
    c->depth = (unsigned)vs_config.rdma_qp_depth;
    /* The CQ and channel of this thread's connections (cq.c). */
    int rc = vs_rdma_cq_attach(c, id->verbs);
    if (rc < 0)
        return rc;
    c->rx_size = c->tx_size = vs_config.rdma_ring;
    int local = IBV_ACCESS_LOCAL_WRITE;
    /* Message buffers: DEPTH to receive into, DEPTH to send from. */
    if ((rc = area_new(&c->msgs, c->pd, 2 * (size_t)c->depth * VS_RDMA_MSG_SIZE, local)) < 0)
        return rc;
    struct ibv_qp_init_attr attr = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .cap = {.max_send_wr = c->depth,
                .max_recv_wr = c->depth,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = (uint32_t)vs_config.rdma_inline},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    if (rdma_create_qp(id, c->pd, &attr) < 0) {
        /* The device may not inline that much: without. */
        attr.cap.max_inline_data = 0;
        /* EINVAL: the connection manager had no attributes for the queue
         * pair, the request being gone (the caller gave up on it). */
        if (rdma_create_qp(id, c->pd, &attr) < 0)
            return errno == EINVAL ? -ESTALE : -errno;
    }
    c->qp = id->qp;
    c->inline_max = attr.cap.max_inline_data;
    for (unsigned i = 0; i < c->depth; i++)
        if ((rc = post_recv(c, i)) != 0)
            return -rc;
    return 0;
}

/* The memory the peer may write: registered only once its proof checked. */
int vs_rdma_expose(struct vs_rdma_conn *c)
{
    int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    int rc = area_new(&c->rx, c->pd, c->rx_size, remote);
    if (rc == 0)
        rc = area_new(&c->credit, c->pd, 4096, remote);
    return rc;
}

/* The send copy: as large as the peer's ring, local access only. */
int vs_rdma_alloc_tx(struct vs_rdma_conn *c)
{
    return area_new(&c->tx, c->pd, c->tx_size, 0);
}

void vs_rdma_verbs_teardown(struct vs_rdma_conn *c)
{
    if (c->qp && c->id) {
        rdma_destroy_qp(c->id);
        c->qp = NULL;
    }
    /* After the queue pair: nothing of it can reach the CQ any more. */
    vs_rdma_cq_detach(c);
    vs_rdma_grow_teardown(c);
    area_free(&c->rx);
    area_free(&c->credit);
    area_free(&c->msgs);
    area_free(&c->tx);
    if (c->pd) {
        ibv_dealloc_pd(c->pd);
        c->pd = NULL;
    }
}

static bool sq_room(struct vs_rdma_conn *c, unsigned want);

/* Posts WR, signalled every SIGNAL_EVERY sends, near a full queue, or when
 * the caller asked (IBV_SEND_SIGNALED in WR: asked here, not through
 * since_signal, which a credit posted by the room check's poll would take). */
static int post_send_locked(struct vs_rdma_conn *c, struct ibv_send_wr *wr)
{
    if (!sq_room(c, 1))
        return -EAGAIN;
    unsigned since = c->since_signal;
    bool signal = ++c->since_signal >= SIGNAL_EVERY || c->sq_posted - c->sq_done + 2 >= c->depth ||
                  (wr->send_flags & IBV_SEND_SIGNALED);
    if (signal) {
        wr->send_flags |= IBV_SEND_SIGNALED;
        c->since_signal = 0;
    }
    c->sq_posted++;
    wr->wr_id = vs_rdma_cq_wr_id(c, signal ? c->sq_posted : 0);
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(c->qp, wr, &bad);
    if (rc) {
        /* Not posted: the next send is signalled if this one was to be
         * (a stalled sender's mark waits for it). */
        c->sq_posted--;
        c->since_signal = since;
        return -rc;
    }
    if (signal) {
        c->sig_idx = c->sq_posted;
        c->sig_head = c->data_head;
    }
    return 0;
}

/* Completions free send queue slots: each signalled one, all before it. */
static void on_send_done(struct vs_rdma_conn *c, const struct vs_rdma_wc *wc)
{
    if (wc->opcode == IBV_WC_RDMA_READ) {
        vs_rdma_pull_done(c);
        vs_rdma_bump(c);
    }
    if (wc->wr && wc->wr - c->sq_done <= c->sq_posted - c->sq_done) {
        c->sq_done = wc->wr;
        if (wc->wr == c->sig_idx)
            c->placed_head = c->sig_head;
    }
}

static void on_recv(struct vs_rdma_conn *c, const struct vs_rdma_wc *wc)
{
    unsigned slot = wc->wr;
    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        uint32_t imm = ntohl(wc->imm);
        if (imm & VS_RDMA_IMM_CREDIT) {
            vs_rdma_on_credit(c);
        } else {
            /* The peer can only write what our credit allowed: more is a lie. */
            uint64_t head = atomic_load(&c->rx_head) + imm;
            if (head - __atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE) > c->rx_size)
                atomic_store(&c->st.violated, true);
            else
                atomic_store_explicit(&c->rx_head, head, memory_order_release);
        }
    } else if (wc->byte_len >= sizeof(struct vs_rdma_msg)) {
        struct vs_rdma_msg m;
        memcpy(&m, (char *)c->msgs.mem + (uint64_t)slot * VS_RDMA_MSG_SIZE, sizeof(m));
        vs_rdma_on_msg(c, &m);
    } else {
        atomic_store(&c->st.violated, true);
    }
    if (slot < c->depth && post_recv(c, slot) != 0)
        atomic_store(&c->broken, true);
}

/* (qp_lock) */
static int poll_locked(struct vs_rdma_conn *c)
{
    /* Acting on a completion may post (a CREDIT_REQ's answer), and a full
     * send queue polls for room: polling again there would act on newer
     * completions before the rest of this batch, and an OFFER would be
     * checked against a head without the writes before it (an honest
     * peer marked violated: fuzzing.md, F6). Then the post waits instead. */
    if (c->polling)
        return 0;
    c->polling = true;
    struct vs_rdma_wc wc[16];
    int total = 0, n;
    while ((n = vs_rdma_cq_take(c, wc, 16)) > 0) {
        total += n;
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                /* Flushed or failed: the queue pair is in error for good. */
                if (!atomic_exchange(&c->broken, true))
                    vs_info("rdma %s: completion error: %s", c->device,
                            ibv_wc_status_str((enum ibv_wc_status)wc[i].status));
                continue;
            }
            if (wc[i].opcode & IBV_WC_RECV)
                on_recv(c, &wc[i]);
            else
                on_send_done(c, &wc[i]);
        }
    }
    c->polling = false;
    /* Room as this batch left it (polling for more here would recurse). */
    if (c->wake_owed && c->sq_posted - c->sq_done < c->depth && !atomic_load(&c->broken) &&
        vs_rdma_post_credit_locked(c, true) == 0)
        atomic_store(&c->peer_waits, false);
    return total;
}

static bool sq_room(struct vs_rdma_conn *c, unsigned want)
{
    if (c->sq_posted - c->sq_done + want <= c->depth)
        return true;
    poll_locked(c);
    return c->sq_posted - c->sq_done + want <= c->depth;
}

/* Sends after the last signalled one complete unseen: once that one is
 * done, a signalled credit write says when they are. (qp_lock) */
static void signal_unseen(struct vs_rdma_conn *c)
{
    if (c->sq_posted == c->sq_done || (int)(c->sq_done - c->sig_idx) < 0 || !c->credit.mr ||
        !c->peer_credit_rkey || c->sq_posted - c->sq_done >= c->depth)
        return;
    c->since_signal = SIGNAL_EVERY;
    vs_rdma_post_credit_locked(c, false);
}

uint64_t vs_rdma_placed_head(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    if (c->qp && !atomic_load(&c->broken)) {
        poll_locked(c);
        if (c->placed_head != c->data_head)
            signal_unseen(c);
    }
    uint64_t placed = c->placed_head;
    pthread_mutex_unlock(&c->qp_lock);
    return placed;
}

bool vs_rdma_sq_has_room(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    bool room = !c->qp || sq_room(c, 1);
    pthread_mutex_unlock(&c->qp_lock);
    return room;
}

void vs_rdma_poll(struct vs_rdma_conn *c)
{
    if (!c->cq)
        return;
    pthread_mutex_lock(&c->qp_lock);
    poll_locked(c);
    pthread_mutex_unlock(&c->qp_lock);
}

void vs_rdma_notify(struct vs_rdma_conn *c)
{
    vs_rdma_cq_notify(c);
}

void vs_rdma_channel_drain(struct vs_rdma_conn *c)
{
    vs_rdma_cq_drain(c);
}

int vs_rdma_post_msg(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    pthread_mutex_lock(&c->qp_lock);
    int rc = vs_rdma_post_msg_locked(c, m, NULL);
    pthread_mutex_unlock(&c->qp_lock);
    return rc;
}

bool vs_rdma_sent_past(struct vs_rdma_conn *c, unsigned idx)
{
    return (int)(c->sq_done - idx) >= 0;
}

int vs_rdma_post_msg_locked(struct vs_rdma_conn *c, const struct vs_rdma_msg *m, unsigned *idx)
{
    /* Room first: with the queue full, the slot below is the one of the
     * oldest send, which the device may not have read yet. */
    if (!sq_room(c, 1))
        return -EAGAIN;
    /* A send slot is reused only after depth more messages, so depth more
     * sends at least, when the queue cannot still hold the one that used
     * it. (Its own count: the count of sends wraps at 2^32, which a depth
     * that is not a power of two does not divide.) */
    unsigned slot = c->depth + c->msg_slot;
    void *buf = (char *)c->msgs.mem + (uint64_t)slot * VS_RDMA_MSG_SIZE;
    memcpy(buf, m, sizeof(*m));
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = sizeof(*m), .lkey = c->msgs.mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};
    if (c->inline_max >= sizeof(*m))
        wr.send_flags = IBV_SEND_INLINE;
    /* Close and leaving wait for these to complete, a move to another ring
     * frees the copy before it once it did: signalled. */
    if (m->type == VS_RDMA_MSG_SHUT || m->type == VS_RDMA_MSG_CUT || m->type == VS_RDMA_MSG_EPOCH)
        wr.send_flags |= IBV_SEND_SIGNALED;
    int rc = post_send_locked(c, &wr);
    if (rc == 0) {
        c->msg_slot = (c->msg_slot + 1) % c->depth;
        if (idx)
            *idx = c->sq_posted;
    }
    return rc;
}

/* (qp_lock) */
int vs_rdma_post_credit_locked(struct vs_rdma_conn *c, bool wake)
{
    /* The word goes from the credit area's second half: our own copy. */
    uint64_t *word = (uint64_t *)((char *)c->credit.mem + 2048);
    uint64_t tail = __atomic_load_n(&c->rx_tail, __ATOMIC_SEQ_CST);
    *word = tail;
    struct ibv_sge sge = {.addr = (uintptr_t)word, .length = 8, .lkey = c->credit.mr->lkey};
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = wake ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
        .imm_data = htonl(VS_RDMA_IMM_CREDIT),
        .wr.rdma = {.remote_addr = c->peer_credit_addr, .rkey = c->peer_credit_rkey},
    };
    if (c->inline_max >= 8)
        wr.send_flags = IBV_SEND_INLINE;
    int rc = post_send_locked(c, &wr);
    if (rc == 0)
        atomic_store(&c->rx_credited, tail);
    if (wake)
        c->wake_owed = rc < 0;
    return rc;
}

int vs_rdma_post_credit(struct vs_rdma_conn *c, bool wake)
{
    pthread_mutex_lock(&c->qp_lock);
    int rc = vs_rdma_post_credit_locked(c, wake);
    pthread_mutex_unlock(&c->qp_lock);
    return rc;
}

int vs_rdma_post_data(struct vs_rdma_conn *c, uint64_t pos, size_t len)
{
    uint64_t off = pos & (c->tx_size - 1);
    struct ibv_sge sge = {
        .addr = (uintptr_t)c->tx.mem + off, .length = (uint32_t)len, .lkey = c->tx.mr->lkey};
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .imm_data = htonl((uint32_t)len),
        .wr.rdma = {.remote_addr = c->peer_ring_addr + off, .rkey = c->peer_ring_rkey},
    };
    if (len <= c->inline_max)
        wr.send_flags = IBV_SEND_INLINE;
    pthread_mutex_lock(&c->qp_lock);
    /* Room first: a signalled credit posted by its poll would take a
     * head that counts this write as placed. */
    if (!sq_room(c, 1)) {
        pthread_mutex_unlock(&c->qp_lock);
        return -EAGAIN;
    }
    uint64_t head = c->data_head;
    c->data_head = pos + len;
    int rc = post_send_locked(c, &wr);
    if (rc < 0)
        c->data_head = head;
    pthread_mutex_unlock(&c->qp_lock);
    return rc;
}

int vs_rdma_post_read(struct vs_rdma_conn *c, void *local, uint32_t lkey, uint64_t remote,
                      uint32_t rkey, uint64_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey};
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .wr.rdma = {.remote_addr = remote, .rkey = rkey},
    };
    /* Its completion says the bytes landed: always signalled. */
    wr.send_flags = IBV_SEND_SIGNALED;
    return post_send_locked(c, &wr);
}

uint64_t vs_rdma_peer_tail(struct vs_rdma_conn *c)
{
    return c->credit.mem ? __atomic_load_n((uint64_t *)c->credit.mem, __ATOMIC_ACQUIRE) : 0;
}

void vs_rdma_stall_mark(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    c->tx_stall_mark = c->sq_posted;
    c->tx_placed_ns = 0;
    if (c->sq_done != c->sq_posted)
        c->since_signal = SIGNAL_EVERY;
    pthread_mutex_unlock(&c->qp_lock);
}

long vs_rdma_stall_placed(struct vs_rdma_conn *c, long now)
{
    pthread_mutex_lock(&c->qp_lock);
    if (!c->tx_placed_ns && (!c->qp || (int)(c->sq_done - c->tx_stall_mark) >= 0))
        c->tx_placed_ns = now;
    long placed = c->tx_placed_ns;
    pthread_mutex_unlock(&c->qp_lock);
    return placed;
}

void vs_rdma_stall_replaced(struct vs_rdma_conn *c, long now)
{
    pthread_mutex_lock(&c->qp_lock);
    if (c->tx_placed_ns)
        c->tx_placed_ns = now;
    pthread_mutex_unlock(&c->qp_lock);
}

bool vs_rdma_sends_done(struct vs_rdma_conn *c)
{
    pthread_mutex_lock(&c->qp_lock);
    /* Without it a full queue's wait for room never ended once a credit
     * (any thread's, an owed one) followed the last signalled send, and
     * the SHUT or CUT that waited was lost (fuzzing.md, F11). */
    if (c->qp && c->sq_posted != c->sq_done && !atomic_load(&c->broken)) {
        poll_locked(c);
        signal_unseen(c);
    }
    bool done = !c->qp || c->sq_posted == c->sq_done;
    pthread_mutex_unlock(&c->qp_lock);
    return done;
}
