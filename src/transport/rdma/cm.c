/* cm.c - the rendezvous of the two ends over rdma_cm, and their proofs
 * (proto.h, proof.h).
 *
 * Like shm's, the set-up advances only at calls of the program (and as
 * rdma_cm events arrive, read at those calls): the connector listens on its
 * TCP address in rdma_cm's port space, the accepter calls it, at most once
 * per VS_RDMA_RETRY_NS until the connector answers or is found silent
 * (transport/upgrade.h). */
#include <errno.h>
#include <string.h>

#include "config/config.h"
#include "config/log.h"
#include "core/clock.h"
#include "core/reason.h"
#include "transport/addr.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/rdma.h"

/* An accepter calls a connector that did not answer again after this. */
#define VS_RDMA_RETRY_NS 10000000L
/* Callers that failed their proof before the connector gives up. */
#define VS_RDMA_MAX_BAD_PROOFS 3
/* rdma_cm's address and route resolution limits, in ms. */
#define RESOLVE_MS 2000

static const struct sockaddr_storage *connector_addr(struct vs_rdma_conn *c)
{
    return c->accepter ? &c->peer : &c->local;
}

static const struct sockaddr_storage *accepter_addr(struct vs_rdma_conn *c)
{
    return c->accepter ? &c->local : &c->peer;
}

static void destroy_id(struct rdma_cm_id **id)
{
    if (*id) {
        rdma_destroy_id(*id);
        *id = NULL;
    }
}

/* The verbs resources and ids go; the state stays. (ctl) */
static void drop_link(struct vs_rdma_conn *c)
{
    if (c->id)
        rdma_disconnect(c->id);
    vs_rdma_verbs_teardown(c);
    destroy_id(&c->id);
}

static void fail(struct vs_rdma_conn *c, const char *reason)
{
    drop_link(c);
    destroy_id(&c->listen_id);
    vs_rdma_proof_wipe(&c->proof);
    vs_rdma_conn_fail(c, reason);
}

static struct rdma_conn_param conn_param(const void *pdata, size_t len)
{
    struct rdma_conn_param p = {
        .private_data = pdata,
        .private_data_len = (uint8_t)len,
        .responder_resources = VS_RDMA_READS,
        .initiator_depth = VS_RDMA_READS,
        /* 6, not 7: Soft-RoCE takes 7 for "retry for ever", and a dead
         * peer host must end in an error within bounded time. */
        .retry_count = 6,
        /* 7: the peer not ready to receive is retried for good; its
         * receive buffers come back as it polls. */
        .rnr_retry_count = 7,
    };
    return p;
}

/* ---------------------------------------------------------------- accepter */

/* The process met its descriptor limit (a set-up of ours, or the program's
 * socket or accept): no set-up starts until then (vs_now_ns), so that the
 * program's own sockets come first. */
#define FDS_SHORT_NS 10000000000L
static _Atomic long fds_short_until;

static bool fds_short(void)
{
    long until = atomic_load_explicit(&fds_short_until, memory_order_relaxed);
    return until && vs_now_ns() < until;
}

/* Why verbs set-up failed, for the connection's reason. */
static const char *setup_failure(int rc)
{
    vs_info("rdma: cannot set up a queue pair: %s", strerror(-rc));
    if (rc != -EMFILE && rc != -ENFILE)
        return VS_REASON_NO_RESOURCES;
    atomic_store(&fds_short_until, vs_now_ns() + FDS_SHORT_NS);
    return VS_REASON_NO_DESCRIPTORS;
}

static void retry_later(struct vs_rdma_conn *c)
{
    drop_link(c);
    c->next_try_ns = vs_now_ns() + VS_RDMA_RETRY_NS;
    atomic_store(&c->hs, VS_RDMA_RETRY);
}

static int resolve(struct vs_rdma_conn *c, struct sockaddr_storage *src)
{
    return rdma_resolve_addr(c->id, (struct sockaddr *)src, (struct sockaddr *)&c->peer,
                             RESOLVE_MS);
}

static void accepter_call(struct vs_rdma_conn *c)
{
    struct rdma_event_channel *ch;
    const char *why = NULL;
    if (!(ch = vs_rdma_dev_channel(&why)))
        return fail(c, why);
    if (rdma_create_id(ch, &c->id, c, RDMA_PS_TCP) < 0)
        return fail(c, VS_REASON_NO_RESOURCES);
    /* From our TCP address, port included, shared with the other accepted
     * connections of that port (REUSEADDR): an rdma_cm port of its own,
     * taken from the local port range as TCP's are, would be the port TCP
     * may give next to a client of this host, whose connector then cannot
     * listen there while we live (found: 1 in ~250 connections of
     * fork-carry stayed on the kernel, rendezvous-unavailable). Without
     * the option, any port. */
    struct sockaddr_storage src = c->local;
    int one = 1;
    bool shared =
        rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) == 0;
    if (!shared || resolve(c, &src) < 0) {
        /* The port is taken (a listener of rdma_cm on this address): any
         * other, on a fresh id (the failed one may be bound). */
        if (shared) {
            destroy_id(&c->id);
            if (rdma_create_id(ch, &c->id, c, RDMA_PS_TCP) < 0)
                return fail(c, VS_REASON_NO_RESOURCES);
        }
        if (src.ss_family == AF_INET)
            ((struct sockaddr_in *)&src)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)&src)->sin6_port = 0;
        if (resolve(c, &src) < 0) {
            vs_debug("rdma: rdma_resolve_addr: %s", strerror(errno));
            return fail(c, VS_REASON_NO_RDMA_DEVICE);
        }
    }
    atomic_store(&c->hs, VS_RDMA_RESOLVE);
}

static void accepter_route(struct vs_rdma_conn *c)
{
    if (rdma_resolve_route(c->id, RESOLVE_MS) < 0)
        retry_later(c);
}

/* The local ACK timeout: 4.096 us * 2^17, about 0.5 s. Shorter ones make an
 * emulated or loaded host retransmit for nothing; with 6 retries a dead
 * peer host is noticed within a few seconds. */
#define ACK_TIMEOUT 17

static void set_ack_timeout(struct rdma_cm_id *id)
{
    uint8_t t = ACK_TIMEOUT;
    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t));
}

static void accepter_connect(struct vs_rdma_conn *c)
{
    int rc = vs_rdma_verbs_setup(c, c->id);
    if (rc < 0)
        return fail(c, setup_failure(rc));
    struct vs_rdma_proof *p = &c->proof;
    p->nonce_a = vs_rdma_nonce();
    p->a_tx = __atomic_load_n(&c->st.tcp_tx, __ATOMIC_RELAXED);
    p->a_rx = __atomic_load_n(&c->st.tcp_rx, __ATOMIC_RELAXED);
    struct vs_rdma_req req = {.magic = VS_RDMA_MAGIC,
                              .version = VS_RDMA_VERSION,
                              .nonce = p->nonce_a,
                              .tx = p->a_tx,
                              .rx = p->a_rx};
    struct rdma_conn_param param = conn_param(&req, sizeof(req));
    set_ack_timeout(c->id);
    if (rdma_connect(c->id, &param) < 0)
        return retry_later(c);
    atomic_store(&c->hs, VS_RDMA_CONNECT);
    vs_debug("rdma: calling the connector");
}

static void fill_ring_msg(struct vs_rdma_conn *c, struct vs_rdma_msg *m)
{
    m->rkey = c->rx.mr->rkey;
    m->a = (uintptr_t)c->rx.mem;
    m->b = c->rx_size;
    m->credit_addr = (uintptr_t)c->credit.mem;
    m->credit_rkey = c->credit.mr->rkey;
}

/* The connector's answer: check its proof, then give ours and our ring. */
static void accepter_established(struct vs_rdma_conn *c, const struct vs_rdma_event *e)
{
    struct vs_rdma_rep rep;
    if (e->pdata_len < sizeof(rep))
        return fail(c, VS_REASON_HANDSHAKE_MALFORMED);
    memcpy(&rep, e->pdata, sizeof(rep));
    if (rep.magic != VS_RDMA_MAGIC || rep.version != VS_RDMA_VERSION)
        return fail(c, VS_REASON_HANDSHAKE_MALFORMED);
    struct vs_rdma_proof *p = &c->proof;
    p->nonce_c = rep.nonce;
    p->c_tx = rep.tx;
    p->c_rx = rep.rx;
    uint8_t want[VS_SHA256_LEN];
    vs_rdma_proof_mac(p, true, false, connector_addr(c), accepter_addr(c), want);
    if (vs_rdma_proof_covered(p) == 0 || !vs_equal_ct(want, rep.mac, sizeof(want))) {
        vs_info("rdma: the process that answered cannot prove it holds the peer socket");
        return fail(c, VS_REASON_PEER_PROOF_FAILED);
    }
    if (vs_rdma_expose(c) < 0)
        return fail(c, VS_REASON_NO_RESOURCES);
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_PROOF};
    vs_rdma_proof_mac(p, true, true, connector_addr(c), accepter_addr(c), m.mac);
    fill_ring_msg(c, &m);
    if (vs_rdma_post_msg(c, &m) < 0)
        return fail(c, VS_REASON_NO_RESOURCES);
    vs_upgrade_messages(&c->up);
    atomic_store(&c->hs, VS_RDMA_WAIT_RING);
    vs_debug("rdma: proof and ring sent, waiting for the connector's ring");
}

static void accepter_rejected(struct vs_rdma_conn *c, const struct vs_rdma_event *e)
{
    struct vs_rdma_rep rep;
    if (e->pdata_len >= sizeof(rep)) {
        memcpy(&rep, e->pdata, sizeof(rep));
        if (rep.magic == VS_RDMA_MAGIC &&
            (rep.code == VS_RDMA_REJECT_ADDRESS || rep.code == VS_RDMA_REJECT_DECLINE))
            return fail(c, VS_REASON_DECLINED_BY_PEER);
    }
    /* Nobody listens there yet (or a caller is being checked): later. */
    retry_later(c);
}

/* --------------------------------------------------------------- connector */

static void connector_listen(struct vs_rdma_conn *c)
{
    struct rdma_event_channel *ch;
    const char *why = NULL;
    if (!(ch = vs_rdma_dev_channel(&why)))
        return fail(c, why);
    if (rdma_create_id(ch, &c->listen_id, c, RDMA_PS_TCP) < 0)
        return fail(c, VS_REASON_NO_RESOURCES);
    if (rdma_bind_addr(c->listen_id, (struct sockaddr *)&c->local) < 0) {
        int err = errno;
        /* Taken: an rdma_cm id of an earlier connection on the same TCP
         * port, which the kernel destroys some time after its process
         * exited, while TCP reused the port at once (found: 1 connection
         * in 249 fork-carry spawns stayed on the kernel). Again later,
         * within the set-up's time; the accepter keeps calling meanwhile. */
        if (err == EADDRINUSE && vs_now_ns() < c->up.deadline_ns) {
            destroy_id(&c->listen_id);
            return retry_later(c);
        }
        /* No device on our address: RDMA cannot reach us here. */
        vs_info("rdma: cannot listen on the connection's address: %s", strerror(err));
        return fail(c, err == EADDRINUSE ? VS_REASON_RENDEZVOUS_UNAVAILABLE
                                         : VS_REASON_NO_RDMA_DEVICE);
    }
    if (rdma_listen(c->listen_id, 4) < 0)
        return fail(c, VS_REASON_RENDEZVOUS_UNAVAILABLE);
    atomic_store(&c->hs, VS_RDMA_LISTEN);
}

static void reject(struct rdma_cm_id *id, uint16_t code)
{
    struct vs_rdma_rep rep = {.magic = VS_RDMA_MAGIC, .version = VS_RDMA_VERSION, .code = code};
    rdma_reject(id, &rep, sizeof(rep));
    rdma_destroy_id(id);
}

static void connector_request(struct vs_rdma_conn *c, const struct vs_rdma_event *e)
{
    struct vs_rdma_req req;
    if (atomic_load(&c->hs) != VS_RDMA_LISTEN) {
        vs_debug("rdma: a call while a caller is being checked: refused (busy)");
        return reject(e->id, VS_RDMA_REJECT_BUSY);
    }
    /* Only our TCP peer's host may call: a third host would need to forge
     * its address on the fabric (docs/design/rdma-transport.md). */
    if (!vs_addr_same_ip(rdma_get_peer_addr(e->id), (const struct sockaddr *)&c->peer)) {
        vs_info("rdma: a call from another address than our TCP peer's: refused");
        return reject(e->id, VS_RDMA_REJECT_ADDRESS);
    }
    if (e->pdata_len < sizeof(req))
        return reject(e->id, VS_RDMA_REJECT_DECLINE);
    memcpy(&req, e->pdata, sizeof(req));
    if (req.magic != VS_RDMA_MAGIC || req.version != VS_RDMA_VERSION) {
        vs_debug("rdma: a call of another protocol or version: refused");
        return reject(e->id, VS_RDMA_REJECT_DECLINE);
    }
    struct vs_rdma_proof *p = &c->proof;
    p->nonce_a = req.nonce;
    p->a_tx = req.tx;
    p->a_rx = req.rx;
    p->nonce_c = vs_rdma_nonce();
    p->c_tx = __atomic_load_n(&c->st.tcp_tx, __ATOMIC_RELAXED);
    p->c_rx = __atomic_load_n(&c->st.tcp_rx, __ATOMIC_RELAXED);
    if (vs_rdma_proof_covered(p) == 0)
        return reject(e->id, VS_RDMA_REJECT_NOT_YET);
    int rc = vs_rdma_verbs_setup(c, e->id);
    if (rc < 0) {
        /* The queue pair is the caller's id's (c->id is not set yet). */
        if (c->qp)
            rdma_destroy_qp(e->id);
        c->qp = NULL;
        vs_rdma_verbs_teardown(c);
        /* The request went stale before our answer (the caller's time ran
         * out on a slow host; it calls again): we wait for that call, as
         * when rdma_accept fails. (Found: a stress run across two guests,
         * one connection of ten left on TCP, "cannot set up a queue pair:
         * Invalid argument".) */
        if (rc == -ESTALE) {
            vs_debug("rdma: a call that went stale before its answer: waiting for the next");
            return reject(e->id, VS_RDMA_REJECT_BUSY);
        }
        reject(e->id, VS_RDMA_REJECT_DECLINE);
        return fail(c, setup_failure(rc));
    }
    struct vs_rdma_rep rep = {.magic = VS_RDMA_MAGIC,
                              .version = VS_RDMA_VERSION,
                              .nonce = p->nonce_c,
                              .tx = p->c_tx,
                              .rx = p->c_rx};
    vs_rdma_proof_mac(p, false, false, connector_addr(c), accepter_addr(c), rep.mac);
    struct rdma_conn_param param = conn_param(&rep, sizeof(rep));
    c->id = e->id;
    set_ack_timeout(c->id);
    if (rdma_accept(c->id, &param) < 0) {
        vs_rdma_verbs_teardown(c);
        destroy_id(&c->id);
        return; /* still listening */
    }
    vs_upgrade_messages(&c->up);
    atomic_store(&c->hs, VS_RDMA_ACCEPT);
    vs_debug("rdma: a caller accepted, waiting for its proof");
}

/* The peer's ring: where our writes go. The send copy has its size.
 * -EPROTO: a size no honest peer states; else what allocating failed. */
static int attach_peer(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    if (m->b < VS_RDMA_RING_MIN || m->b > VS_RDMA_RING_MAX || (m->b & (m->b - 1)))
        return -EPROTO;
    c->peer_ring_addr = m->a;
    c->peer_ring_rkey = m->rkey;
    c->peer_credit_addr = m->credit_addr;
    c->peer_credit_rkey = m->credit_rkey;
    c->tx_size = m->b;
    return vs_rdma_alloc_tx(c);
}

/* Why attach_peer() failed, for the connection's reason: the peer's
 * message, or our memory. */
static const char *attach_failure(int rc)
{
    return rc == -EPROTO ? VS_REASON_HANDSHAKE_MALFORMED : VS_REASON_NO_RESOURCES;
}

static void done(struct vs_rdma_conn *c)
{
    vs_rdma_peer_cache_forget(c->accepter, &c->peer);
    vs_rdma_proof_wipe(&c->proof);
    destroy_id(&c->listen_id);
    atomic_store(&c->hs, VS_RDMA_DONE);
    vs_debug("rdma: connection on %s (rings of %lu and %lu bytes; ours at %p rkey %#x, credit "
             "word at %p rkey %#x)",
             c->device, (unsigned long)c->rx_size, (unsigned long)c->tx_size, c->rx.mem,
             c->rx.mr->rkey, c->credit.mem, c->credit.mr->rkey);
}

/* An impostor, or a caller that saw other bytes, or one that hung up or
 * broke the queue pair before its proof: hang up and go on listening for
 * the real peer, a few times. (ctl) */
static void caller_refused(struct vs_rdma_conn *c, const char *reason)
{
    if (++c->bad_proofs >= VS_RDMA_MAX_BAD_PROOFS)
        return fail(c, reason);
    drop_link(c);
    atomic_store(&c->setup_msg_in, false);
    atomic_store(&c->broken, false);
    atomic_store(&c->hs, VS_RDMA_LISTEN);
}

/* The accepter's proof and ring arrived. (ctl) */
static void connector_proof(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    uint8_t want[VS_SHA256_LEN];
    vs_rdma_proof_mac(&c->proof, false, true, connector_addr(c), accepter_addr(c), want);
    if (m->type != VS_RDMA_MSG_PROOF || !vs_equal_ct(want, m->mac, sizeof(want))) {
        vs_info("rdma: the caller cannot prove it holds the peer socket: refused");
        return caller_refused(c, VS_REASON_PEER_PROOF_FAILED);
    }
    if (vs_rdma_expose(c) < 0)
        return fail(c, VS_REASON_NO_RESOURCES);
    int rc = attach_peer(c, m);
    if (rc < 0)
        return fail(c, attach_failure(rc));
    struct vs_rdma_msg ring = {.type = VS_RDMA_MSG_RING};
    fill_ring_msg(c, &ring);
    if (vs_rdma_post_msg(c, &ring) < 0)
        return fail(c, VS_REASON_NO_RESOURCES);
    done(c);
}

static void accepter_ring(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    if (m->type != VS_RDMA_MSG_RING)
        return fail(c, VS_REASON_HANDSHAKE_MALFORMED);
    int rc = attach_peer(c, m);
    if (rc < 0)
        return fail(c, attach_failure(rc));
    done(c);
}

/* ------------------------------------------------------------------ events */

void vs_rdma_on_cm_event(struct vs_rdma_conn *c, const struct vs_rdma_event *e)
{
    pthread_mutex_lock(&c->ctl_lock);
    int hs = atomic_load(&c->hs);
    bool mine = e->id == c->id;
    switch (e->type) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
        connector_request(c, e);
        break;
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (mine && hs == VS_RDMA_RESOLVE)
            accepter_route(c);
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (mine && hs == VS_RDMA_RESOLVE)
            accepter_connect(c);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        if (mine && (hs == VS_RDMA_RESOLVE || hs == VS_RDMA_CONNECT))
            retry_later(c);
        else if (mine && hs == VS_RDMA_ACCEPT)
            caller_refused(c, VS_REASON_DECLINED_BY_PEER);
        break;
    case RDMA_CM_EVENT_REJECTED:
        if (mine && hs == VS_RDMA_CONNECT)
            accepter_rejected(c, e);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (mine && hs == VS_RDMA_CONNECT)
            accepter_established(c, e);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (mine) {
            if (hs == VS_RDMA_DONE) {
                atomic_store(&c->peer_gone, true);
                if (e->type == RDMA_CM_EVENT_DEVICE_REMOVAL)
                    atomic_store(&c->broken, true);
            } else if (hs == VS_RDMA_ACCEPT) {
                caller_refused(c, VS_REASON_DECLINED_BY_PEER);
            } else if (hs != VS_RDMA_FAILED) {
                fail(c, VS_REASON_DECLINED_BY_PEER);
            }
        }
        break;
    default:
        break;
    }
    vs_rdma_bump(c);
    pthread_mutex_unlock(&c->ctl_lock);
}

/* A message arrived while the CQ was polled: set-up messages wait for the
 * set-up (under ctl); stream messages act at once. (qp_lock) */
void vs_rdma_on_msg(struct vs_rdma_conn *c, const struct vs_rdma_msg *m)
{
    switch (m->type) {
    case VS_RDMA_MSG_PROOF:
    case VS_RDMA_MSG_RING:
        if (!atomic_load(&c->setup_msg_in)) {
            c->setup_msg = *m;
            atomic_store_explicit(&c->setup_msg_in, true, memory_order_release);
        }
        break;
    case VS_RDMA_MSG_SWITCH:
        vs_stream_peer_switched(&c->st, m->a);
        break;
    case VS_RDMA_MSG_SHUT:
        if (!atomic_load(&c->rx_shut_known)) {
            c->rx_shut_at = m->a;
            atomic_store_explicit(&c->rx_shut_known, true, memory_order_release);
        }
        break;
    case VS_RDMA_MSG_CUT:
        vs_rdma_cut_in(c, m);
        break;
    case VS_RDMA_MSG_CREDIT_REQ:
        /* A: the credit the peer had seen. Announce the wait first, then
         * look at our tail (the reader stores its tail, then looks at the
         * wait): one of the two answers. */
        atomic_store(&c->peer_waits, true);
        if (__atomic_load_n(&c->rx_tail, __ATOMIC_SEQ_CST) != m->a && c->credit.mr &&
            atomic_exchange(&c->peer_waits, false) && vs_rdma_post_credit_locked(c, true) < 0)
            atomic_store(&c->peer_waits, true); /* the next read answers */
        break;
    case VS_RDMA_MSG_OFFER:
        if (!vs_rdma_offer_in(c, m))
            atomic_store(&c->st.violated, true);
        break;
    case VS_RDMA_MSG_RX_WAIT:
        atomic_store(&c->peer_reading, true);
        break;
    case VS_RDMA_MSG_GROW:
        vs_rdma_on_grow(c, m);
        break;
    case VS_RDMA_MSG_REGION:
        vs_rdma_on_region(c, m);
        break;
    case VS_RDMA_MSG_EPOCH:
        vs_rdma_on_epoch(c, m);
        break;
    default:
        atomic_store(&c->st.violated, true);
        break;
    }
    vs_rdma_bump(c);
}

/* ------------------------------------------------------- process events */

/* The set-up's last message (the connector's proof, the accepter's ring),
 * if it came: acted on. Whether it came. */
static bool take_setup_msg(struct vs_rdma_conn *c, int hs)
{
    vs_rdma_poll(c);
    if (!atomic_load_explicit(&c->setup_msg_in, memory_order_acquire))
        return false;
    struct vs_rdma_msg m = c->setup_msg;
    if (hs == VS_RDMA_ACCEPT)
        connector_proof(c, &m);
    else
        accepter_ring(c, &m);
    return true;
}

/* How long a set-up that leaves waits for its CUT to be placed. */
#define SETUP_LEAVE_NS 5000000000L

/* An accepter that gave the connector its ring and waits for the
 * connector's gives up. The connector may be on RDMA already and writing
 * into our ring: CUT says we read none of it and wrote none (it resends
 * all of it on TCP). The queue pair stays until close: a disconnection
 * must not overtake the CUT. (Found: a fork failed such a set-up without a
 * word, and the connector's program waited for ever; so did a set-up that
 * ran out of time while the connector's process was stopped, fdlimit.sh.)
 * (ctl) */
static void leave_waiting_ring(struct vs_rdma_conn *c, const char *reason)
{
    struct vs_rdma_msg m = {.type = VS_RDMA_MSG_CUT};
    bool placed = vs_rdma_post_msg_waiting(c, &m, SETUP_LEAVE_NS) == 0 &&
                  vs_rdma_wait_placed(c, SETUP_LEAVE_NS);
    atomic_store(&c->st.rx_back_on_tcp, true);
    vs_rdma_proof_wipe(&c->proof);
    vs_rdma_conn_fail(c, reason);
    vs_debug("rdma: left a set-up waiting for the connector's ring (%s), CUT %s", reason,
             placed ? "placed" : "not placed");
}

bool vs_rdma_setup_leave(struct vs_rdma_conn *c, const char *reason)
{
    pthread_mutex_lock(&c->ctl_lock);
    int hs = atomic_load(&c->hs);
    if (hs == VS_RDMA_ACCEPT || hs == VS_RDMA_WAIT_RING) {
        /* Its last message may be in: then it ends on RDMA, and leaves
         * with a CUT like any connection there. */
        take_setup_msg(c, hs);
        hs = atomic_load(&c->hs);
    }
    if (hs == VS_RDMA_WAIT_RING && !atomic_load(&c->broken)) {
        leave_waiting_ring(c, reason);
    } else if (hs == VS_RDMA_YOUNG) {
        vs_rdma_conn_fail(c, reason); /* the peer has nothing of ours to wait for */
    } else if (hs != VS_RDMA_DONE && hs != VS_RDMA_FAILED) {
        /* Nobody switched yet: the disconnection (or the rendezvous gone)
         * ends the peer's set-up at once, not at its time limit. */
        fail(c, reason);
    }
    pthread_mutex_unlock(&c->ctl_lock);
    return hs == VS_RDMA_DONE;
}

/* --------------------------------------------------------------- progress */

/* Nobody answered in time: a peer without vsocket (remembered), or one
 * that closed already. */
static void no_answer(struct vs_rdma_conn *c)
{
    vs_rdma_peer_cache_remember(c->accepter, &c->peer);
    fail(c, VS_REASON_PEER_NOT_VSOCKET);
}

/* rdma_cm's steps (address, route, connect) are answered by events read at
 * the program's calls: a set-up takes more calls than shm's, so its
 * deadlines are longer (stream.h has shm's). */
#define VS_RDMA_ACCEPTER_NS 2000000000L
#define VS_RDMA_CONNECTOR_NS 3000000000L
/* Once the two ends talk, each sends its part (PROOF, RING) at one of its
 * program's calls: a process busy with a thousand set-ups at once took
 * more than the shared 2 s for a dozen of them under emulation. The
 * connection works on TCP meanwhile, so waiting costs only the wait. */
#define VS_RDMA_MESSAGES_GRACE_NS 5000000000L

static void start(struct vs_rdma_conn *c)
{
    if (fds_short())
        return fail(c, VS_REASON_NO_DESCRIPTORS);
    vs_upgrade_start(&c->up, c->accepter ? VS_RDMA_ACCEPTER_NS : VS_RDMA_CONNECTOR_NS);
    vs_debug("rdma: the set-up starts (%s)", c->accepter ? "accepter" : "connector");
    if (c->accepter)
        accepter_call(c);
    else
        connector_listen(c);
}

void vs_rdma_progress(struct vs_rdma_conn *c, int fd)
{
    if (!vs_rdma_active(c) || vs_rdma_done(c))
        return;
    if (atomic_load(&c->hs) == VS_RDMA_YOUNG && !vs_upgrade_lives(&c->up, &c->st))
        return;
    vs_rdma_cq_home(c);
    /* Events first, outside our lock (dev.c takes it per event). */
    vs_rdma_dev_events();
    if (pthread_mutex_trylock(&c->ctl_lock) != 0)
        return;
    int hs = atomic_load(&c->hs);
    if (hs == VS_RDMA_YOUNG) {
        /* Held with another process since a fork: not before it lets go. */
        int alone = vs_rdma_forked_alone(c);
        if (alone > 0)
            start(c);
        else if (alone < 0)
            fail(c, VS_REASON_LEFT_BY_FORK);
        else if (!c->share_said) {
            c->share_said = true;
            vs_info("rdma: a connection held with another process since a fork: its upgrade "
                    "waits until this process holds it alone");
            if (c->stat)
                vs_stats_set_reason(c->stat, VS_REASON_SHARED_AFTER_FORK);
        }
    }
    hs = atomic_load(&c->hs);
    if (hs == VS_RDMA_ACCEPT || hs == VS_RDMA_WAIT_RING) {
        bool broken = atomic_load(&c->broken);
        if (!take_setup_msg(c, hs) &&
            (broken || vs_now_ns() > c->up.deadline_ns + VS_RDMA_MESSAGES_GRACE_NS)) {
            if (hs == VS_RDMA_WAIT_RING && !broken)
                leave_waiting_ring(c, VS_REASON_HANDSHAKE_TIMEOUT);
            else
                fail(c, VS_REASON_HANDSHAKE_TIMEOUT);
        }
    } else if (hs == VS_RDMA_RETRY && !c->accepter) {
        /* Our address was taken: not the peer's silence. Past the set-up's
         * time, connector_listen gives up (rendezvous-unavailable). */
        if (vs_now_ns() >= c->next_try_ns)
            connector_listen(c);
    } else if (hs == VS_RDMA_RETRY || hs == VS_RDMA_LISTEN) {
        if (vs_upgrade_peer_silent(&c->up, &c->st, fd))
            no_answer(c);
        else if (hs == VS_RDMA_RETRY && vs_now_ns() >= c->next_try_ns)
            accepter_call(c);
    } else if ((hs == VS_RDMA_RESOLVE || hs == VS_RDMA_CONNECT) &&
               vs_now_ns() > c->up.deadline_ns + VS_UPGRADE_GIVE_UP_NS) {
        fail(c, VS_REASON_HANDSHAKE_TIMEOUT);
    }
    if (atomic_load(&c->hs) != hs)
        vs_rdma_bump(c);
    pthread_mutex_unlock(&c->ctl_lock);
}

/* A set-up under way holds no descriptor of its own (its completion
 * channel is its thread's, cq.h): nothing to give back. Only none starts
 * for a while, as a thread's first set-up opens its channel. */
unsigned vs_rdma_fds_short(void)
{
    if (vs_now_ns() > atomic_load(&fds_short_until))
        vs_info("rdma: the program met its descriptor limit: no set-up starts for %ld s",
                FDS_SHORT_NS / 1000000000L);
    atomic_store(&fds_short_until, vs_now_ns() + FDS_SHORT_NS);
    return 0;
}

/* A credit immediate: the peer read some of our data (the word says how
 * far); a sender waiting for space looks again. (qp_lock) */
void vs_rdma_on_credit(struct vs_rdma_conn *c)
{
    atomic_store(&c->credit_asked, false);
    atomic_store(&c->asks_unanswered, 0);
    vs_rdma_bump(c);
}
