/* fuzz_rdma_setup.c - libFuzzer target: the RDMA rendezvous (cm.c) of
 * either end against a hostile peer, on a fake device (rdma_fake.c): the
 * connect request's and answer's private data (vs_rdma_req, vs_rdma_rep,
 * a rejection's), the PROOF and RING messages with the peer's ring, and
 * rdma_cm's events in any order.
 *
 * The input is a program (fuzz_input.h): which end is under test, its
 * addresses and the bytes both ends carried on TCP before (the proof's
 * prefixes), then steps: an rdma_cm event with private data, a set-up
 * message, the program's call that advances the set-up
 * (vs_rdma_progress), the adapter completing our sends. The harness plays
 * the other end with its own struct vs_rdma_proof over the same bytes, so
 * it knows each proof an honest peer presents; any field may instead be
 * nudged or raw, any length short. Checks:
 *   - no remote access before proof: our ring and credit word are
 *     registered, and the set-up done, only after the peer presented the
 *     proof it owes (the MAC over the bytes and what both ends stated);
 *   - an honest peer gets through: the answer to its request, the proof we
 *     present and the ring we give are what it expects (so each end can
 *     check the other), and a set-up it completes ends on RDMA with its
 *     ring taken as stated; a ring size out of bounds or not a power of two
 *     is refused;
 *   - rejections say why (ADDRESS: another host called; DECLINE: malformed
 *     or another protocol; NOT_YET: nothing in common; BUSY: a caller is
 *     being checked), and a rejection of ours is final only when it says
 *     ADDRESS or DECLINE;
 *   - no ASan or UBSan report, no registration left at the end. */
#include <arpa/inet.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/reason.h"
#include "fuzz_input.h"
#include "rdma_fake.h"
#include "transport/rdma/dev.h"
#include "transport/rdma/rdma.h"

#define MAX_STEPS 256
#define MAX_CALLS 12 /* callers' ids (rdma_fake.c has 16) */

static uint8_t stream_byte(uint64_t off)
{
    return (uint8_t)((off * 0x9e3779b97f4a7c15ull) >> 56);
}

struct setup {
    struct vs_rdma_conn *c;
    bool accepter;                               /* the end under test */
    struct sockaddr_storage conn_addr, acc_addr; /* TCP addresses */
    struct vs_rdma_proof peer;                   /* the other end's */
    uint64_t c2a, a2c;                           /* bytes on TCP before */
    bool proved;                                 /* the peer presented the proof it owes us */
    bool msg_proved;        /* ... in the set-up message now in our CQ (connector) */
    struct vs_rdma_msg msg; /* that message, as sent */
    bool msg_ok;            /* it is one an honest peer sends */
    unsigned calls;
    struct rdma_cm_id *stranger; /* an id not the connection's */
};

static struct setup s;

static const struct sockaddr_storage *ours(void)
{
    return s.accepter ? &s.acc_addr : &s.conn_addr;
}

static const struct sockaddr_storage *theirs(void)
{
    return s.accepter ? &s.conn_addr : &s.acc_addr;
}

static bool exposed(void)
{
    return s.c->rx.mr || s.c->credit.mr;
}

static int hs(void)
{
    return atomic_load(&s.c->hs);
}

/* The last message we posted, as the peer receives it. */
static bool last_sent(struct vs_rdma_msg *m)
{
    if (!fake.sq_count)
        return false;
    const struct fake_wr *w = &fake.sq[(fake.sq_first + fake.sq_count - 1) % FAKE_QUEUE];
    if (w->opcode != IBV_WR_SEND || w->len != sizeof(*m))
        return false;
    memcpy(m, (void *)(uintptr_t)w->local, sizeof(*m));
    return true;
}

/* Our ring and credit word as a PROOF or RING of ours states them. */
static void check_ring_sent(const struct vs_rdma_msg *m)
{
    struct vs_rdma_conn *c = s.c;
    FZ_CHECK(m->a == (uintptr_t)c->rx.mem && m->b == c->rx_size && m->rkey == c->rx.mr->rkey &&
                 m->credit_addr == (uintptr_t)c->credit.mem && m->credit_rkey == c->credit.mr->rkey,
             "our ring stated as %#lx, %lu bytes", (unsigned long)m->a, (unsigned long)m->b);
}

/* An accepter that checked the connector's proof presents its own. */
static void check_proof_sent(void)
{
    struct vs_rdma_msg m;
    FZ_CHECK(last_sent(&m) && m.type == VS_RDMA_MSG_PROOF, "no PROOF sent");
    uint8_t want[VS_SHA256_LEN];
    vs_rdma_proof_mac(&s.peer, false, true, &s.conn_addr, &s.acc_addr, want);
    FZ_CHECK(memcmp(want, m.mac, sizeof(want)) == 0,
             "the accepter's proof is not the one the connector computes");
    check_ring_sent(&m);
}

/* ------------------------------------------------------- private data */

/* Private data of LEN bytes (fuzzed) from the struct at P of SIZE bytes. */
static void pdata(struct vs_rdma_event *e, const void *p, size_t size, uint8_t mode,
                  struct fz_in *in)
{
    size_t len = size;
    if (mode & 0x80)
        len = fz_u8(in) % (sizeof(e->pdata) + 1);
    memset(e->pdata, 0, sizeof(e->pdata));
    memcpy(e->pdata, p, len < size ? len : size);
    e->pdata_len = (uint8_t)len;
}

/* Magic and version as the peer states them. */
static void header(uint32_t *magic, uint16_t *version, uint8_t mode, struct fz_in *in)
{
    *magic = mode & 0x10 ? (uint32_t)fz_le(in, 4) : VS_RDMA_MAGIC;
    *version = mode & 0x20 ? fz_u16(in) : VS_RDMA_VERSION;
}

static bool header_ok(uint32_t magic, uint16_t version)
{
    return magic == VS_RDMA_MAGIC && version == VS_RDMA_VERSION;
}

/* Another address than A's, same family. */
static void other_host(struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        ((struct sockaddr_in *)a)->sin_addr.s_addr ^= htonl(0x00ff0000);
    else
        ((struct sockaddr_in6 *)a)->sin6_addr.s6_addr[0] ^= 0xff;
}

/* The accepter's call on a connector under test: the request, then what
 * came of it. */
static void call_connector(struct fz_in *in)
{
    uint8_t mode = fz_u8(in), how = fz_u8(in);
    struct vs_rdma_req req = {.nonce = 0x5eed0000u + fz_u8(in)};
    header(&req.magic, &req.version, mode, in);
    req.tx = fz_stated(s.a2c, mode, in);
    req.rx = fz_stated(s.c2a, mode >> 2, in);
    struct sockaddr_storage from = s.acc_addr;
    if (how & 1) /* another host */
        other_host(&from);
    struct vs_rdma_event e = {.type = RDMA_CM_EVENT_CONNECT_REQUEST};
    pdata(&e, &req, sizeof(req), mode, in);
    if (++s.calls > MAX_CALLS)
        return; /* the fake has that many ids */
    e.id = fake_id(&s.conn_addr, &from);
    int before = hs();
    fake.rejected = fake.accepted = false;
    fake.stale = how & 2; /* the caller gave up on this request meanwhile */
    vs_rdma_on_cm_event(s.c, &e);
    fake.stale = false;
    FZ_TRACE("call: %u bytes, magic %#x version %u, tx %lu rx %lu%s%s: %s %u, state %d\n",
             e.pdata_len, req.magic, req.version, (unsigned long)req.tx, (unsigned long)req.rx,
             how & 1 ? " from another host" : "", how & 2 ? ", gone stale" : "",
             fake.accepted ? "accepted" : "rejected, code", fake.accepted ? 0 : fake.reject_code,
             hs());
    /* What the connector must answer, in the order it checks. */
    uint16_t want = VS_RDMA_REJECT_NONE;
    /* This caller's view; ours only if it is the one accepted. */
    struct vs_rdma_proof caller = s.peer, *p = &caller;
    p->nonce_a = req.nonce;
    p->a_tx = req.tx;
    p->a_rx = req.rx;
    p->c_tx = s.c2a;
    p->c_rx = s.a2c;
    if (before != VS_RDMA_LISTEN)
        want = VS_RDMA_REJECT_BUSY;
    else if (how & 1)
        want = VS_RDMA_REJECT_ADDRESS;
    else if (e.pdata_len < sizeof(req) || !header_ok(req.magic, req.version))
        want = VS_RDMA_REJECT_DECLINE;
    else if (vs_rdma_proof_covered(p) == 0)
        want = VS_RDMA_REJECT_NOT_YET;
    else if (how & 2) /* no queue pair for it: the caller's next call */
        want = VS_RDMA_REJECT_BUSY;
    if (want != VS_RDMA_REJECT_NONE) {
        FZ_CHECK(fake.rejected && fake.reject_code == want && hs() == before,
                 "a call answered %s %u (state %d), not rejected %u",
                 fake.accepted ? "accepted" : "rejected", fake.reject_code, hs(), want);
        return;
    }
    FZ_CHECK(fake.accepted && hs() == VS_RDMA_ACCEPT && !exposed(),
             "a good call: accepted %d, state %d, exposed %d", fake.accepted, hs(), exposed());
    struct vs_rdma_rep rep;
    FZ_CHECK(fake.pdata_len == sizeof(rep), "an answer of %u bytes", fake.pdata_len);
    memcpy(&rep, fake.pdata, sizeof(rep));
    FZ_CHECK(header_ok(rep.magic, rep.version) && rep.tx == s.c2a && rep.rx == s.a2c,
             "the answer states %lu and %lu, sent %lu and received %lu", (unsigned long)rep.tx,
             (unsigned long)rep.rx, (unsigned long)s.c2a, (unsigned long)s.a2c);
    p->nonce_c = rep.nonce;
    s.peer = caller;
    uint8_t want_mac[VS_SHA256_LEN];
    vs_rdma_proof_mac(p, true, false, &s.conn_addr, &s.acc_addr, want_mac);
    FZ_CHECK(memcmp(want_mac, rep.mac, sizeof(want_mac)) == 0,
             "the connector's proof is not the one its caller computes");
}

/* The connector's answer to an accepter under test (ESTABLISHED), or its
 * rejection (REJECTED). */
static void answer_accepter(struct fz_in *in, bool reject)
{
    uint8_t mode = fz_u8(in), flip = fz_u8(in);
    struct vs_rdma_proof *p = &s.peer;
    struct vs_rdma_rep rep = {.nonce = p->nonce_c};
    header(&rep.magic, &rep.version, mode, in);
    rep.code = reject ? fz_u8(in) % 6 : 0;
    /* A connector may state other counts and prove with them: only the
     * bytes it must know are the covered prefix. */
    rep.tx = fz_stated(s.c2a, mode, in);
    rep.rx = fz_stated(s.a2c, mode >> 2, in);
    struct vs_rdma_proof stated = *p;
    stated.c_tx = rep.tx;
    stated.c_rx = rep.rx;
    vs_rdma_proof_mac(&stated, false, false, &s.conn_addr, &s.acc_addr, rep.mac);
    if (flip & 1)
        rep.mac[flip % VS_SHA256_LEN] ^= 1 + (flip >> 5);
    struct vs_rdma_event e = {.type = reject ? RDMA_CM_EVENT_REJECTED : RDMA_CM_EVENT_ESTABLISHED,
                              .id = s.c->id};
    pdata(&e, &rep, sizeof(rep), mode, in);
    int before = hs();
    bool well_formed = e.pdata_len >= sizeof(rep) && header_ok(rep.magic, rep.version);
    bool mac_right = !(flip & 1);
    vs_rdma_on_cm_event(s.c, &e);
    FZ_TRACE("%s: %u bytes, magic %#x version %u code %u, tx %lu rx %lu, mac %s: state %d -> %d\n",
             reject ? "rejected" : "established", e.pdata_len, rep.magic, rep.version, rep.code,
             (unsigned long)rep.tx, (unsigned long)rep.rx, mac_right ? "right" : "wrong", before,
             hs());
    if (before != VS_RDMA_CONNECT || !e.id)
        return; /* not for this state: ignored */
    if (reject) {
        bool final = e.pdata_len >= sizeof(rep) && rep.magic == VS_RDMA_MAGIC &&
                     (rep.code == VS_RDMA_REJECT_ADDRESS || rep.code == VS_RDMA_REJECT_DECLINE);
        FZ_CHECK(hs() == (final ? VS_RDMA_FAILED : VS_RDMA_RETRY), "rejected (code %u): state %d",
                 rep.code, hs());
        return;
    }
    bool covered = vs_rdma_proof_covered(&stated) > 0;
    if (well_formed && mac_right && covered) {
        s.proved = true;
        *p = stated;
        FZ_CHECK(hs() == VS_RDMA_WAIT_RING && exposed(), "a proven answer: state %d", hs());
        check_proof_sent();
    } else {
        FZ_CHECK(hs() == VS_RDMA_FAILED && !exposed(), "a %s answer: state %d",
                 well_formed ? "false" : "malformed", hs());
    }
}

/* The accepter under test calls (its route is resolved): its request. */
static void route_resolved(void)
{
    if (!s.c->id)
        return; /* gone with a retry: a new call would make a new one */
    int before = hs();
    fake.connected = false;
    vs_rdma_on_cm_event(
        s.c, &(struct vs_rdma_event){.type = RDMA_CM_EVENT_ROUTE_RESOLVED, .id = s.c->id});
    FZ_TRACE("route resolved: state %d -> %d\n", before, hs());
    if (before != VS_RDMA_RESOLVE)
        return;
    FZ_CHECK(fake.connected && hs() == VS_RDMA_CONNECT && !exposed(),
             "a call: connected %d, state %d", fake.connected, hs());
    struct vs_rdma_req req;
    FZ_CHECK(fake.pdata_len == sizeof(req), "a request of %u bytes", fake.pdata_len);
    memcpy(&req, fake.pdata, sizeof(req));
    FZ_CHECK(header_ok(req.magic, req.version) && req.tx == s.a2c && req.rx == s.c2a,
             "the request states %lu and %lu, sent %lu and received %lu", (unsigned long)req.tx,
             (unsigned long)req.rx, (unsigned long)s.a2c, (unsigned long)s.c2a);
    s.peer.nonce_a = req.nonce;
    s.peer.a_tx = req.tx;
    s.peer.a_rx = req.rx;
    s.peer.nonce_c = 0xc0ffee;
    s.peer.c_tx = s.c2a;
    s.peer.c_rx = s.a2c;
}

/* Any other event, ours or another id's. */
static void other_event(struct fz_in *in)
{
    static const enum rdma_cm_event_type types[] = {
        RDMA_CM_EVENT_ADDR_RESOLVED,  RDMA_CM_EVENT_ADDR_ERROR,    RDMA_CM_EVENT_ROUTE_ERROR,
        RDMA_CM_EVENT_UNREACHABLE,    RDMA_CM_EVENT_CONNECT_ERROR, RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL, RDMA_CM_EVENT_ESTABLISHED,   RDMA_CM_EVENT_REJECTED,
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
    };
    uint8_t t = fz_u8(in), which = fz_u8(in);
    struct vs_rdma_event e = {.type = types[t % (sizeof(types) / sizeof(types[0]))], .status = -1};
    e.id = which & 1 && s.c->id ? s.c->id : s.stranger;
    e.pdata_len = (uint8_t)(fz_u8(in) % (sizeof(e.pdata) + 1));
    for (unsigned i = 0; i < e.pdata_len; i++)
        e.pdata[i] = fz_u8(in);
    int before = hs();
    bool mine = e.id == s.c->id;
    vs_rdma_on_cm_event(s.c, &e);
    FZ_TRACE("event %d (%s id): state %d -> %d\n", e.type, mine ? "our" : "another", before, hs());
    if (e.type == RDMA_CM_EVENT_ESTABLISHED && before == VS_RDMA_CONNECT && mine)
        FZ_CHECK(hs() == VS_RDMA_FAILED && !exposed(), "raw private data accepted: state %d", hs());
}

/* --------------------------------------------------- set-up messages */

/* The peer's PROOF (to a connector) or RING (to an accepter), into the
 * oldest receive buffer: honest, or of another type, with another proof,
 * a ring of another size, or short. */
static void setup_msg(struct fz_in *in)
{
    uint8_t mode = fz_u8(in), flip = fz_u8(in);
    struct vs_rdma_msg m;
    memset(&m, 0, sizeof(m));
    bool proof = !s.accepter;
    m.type = mode & 0x40 ? fz_u16(in) : proof ? VS_RDMA_MSG_PROOF : VS_RDMA_MSG_RING;
    m.a = 0x7e0000000000ull;
    m.rkey = 0x4242;
    m.credit_addr = 0x7e0000100000ull;
    m.credit_rkey = 0x4343;
    uint64_t size = 4096ull << fz_u8(in) % 18; /* 4 KiB .. 512 MiB */
    m.b = fz_stated(size, mode, in);
    if (proof) {
        vs_rdma_proof_mac(&s.peer, true, true, &s.conn_addr, &s.acc_addr, m.mac);
        if (flip & 1)
            m.mac[flip % VS_SHA256_LEN] ^= 1 + (flip >> 5);
    }
    uint32_t len = mode & 0x80 ? fz_u8(in) : sizeof(m), slot;
    if (!s.c->qp || !fake_take_recv(&slot))
        return;
    memcpy((char *)s.c->msgs.mem + (uint64_t)slot * VS_RDMA_MSG_SIZE, &m, sizeof(m));
    fake_complete(&(struct vs_rdma_wc){.wr = slot, .byte_len = len, .opcode = IBV_WC_RECV});
    /* The first complete one is the set-up's (vs_rdma_on_msg keeps it). */
    if (len >= sizeof(m) && (m.type == VS_RDMA_MSG_PROOF || m.type == VS_RDMA_MSG_RING) &&
        !atomic_load(&s.c->setup_msg_in) && !s.msg.type) {
        s.msg = m;
        s.msg_proved = proof && !(flip & 1) && m.type == VS_RDMA_MSG_PROOF;
        s.msg_ok = m.type == (proof ? VS_RDMA_MSG_PROOF : VS_RDMA_MSG_RING) &&
                   m.b >= VS_RDMA_RING_MIN && m.b <= VS_RDMA_RING_MAX && !(m.b & (m.b - 1));
    }
    FZ_TRACE("message %u, ring of %lu, %u bytes%s\n", m.type, (unsigned long)m.b, len,
             proof && flip & 1 ? ", wrong proof" : "");
}

/* The program's call: the set-up takes the message in, if any. */
static void progress(void)
{
    struct vs_rdma_conn *c = s.c;
    int before = hs();
    /* A retry waits 10 ms: not on this clock (the verdict would depend on
     * the machine's speed). */
    c->next_try_ns = LONG_MAX;
    struct vs_rdma_msg m = s.msg;
    bool took = (before == VS_RDMA_ACCEPT || before == VS_RDMA_WAIT_RING) && m.type;
    unsigned bad = c->bad_proofs;
    vs_rdma_progress(c, -1);
    FZ_TRACE("progress: state %d -> %d\n", before, hs());
    if (hs() == VS_RDMA_DONE && before != VS_RDMA_DONE) {
        FZ_CHECK(took && s.msg_ok, "on RDMA after a set-up message of type %u, ring %lu", m.type,
                 (unsigned long)m.b);
        if (!s.accepter)
            s.proved = s.msg_proved;
        FZ_CHECK(c->peer_ring_addr == m.a && c->peer_ring_rkey == m.rkey &&
                     c->peer_credit_addr == m.credit_addr && c->peer_credit_rkey == m.credit_rkey &&
                     c->tx_size == m.b && c->tx.mem,
                 "the peer's ring taken as %#lx, %lu bytes", (unsigned long)c->peer_ring_addr,
                 (unsigned long)c->tx_size);
        if (!s.accepter) {
            struct vs_rdma_msg ring;
            FZ_CHECK(last_sent(&ring) && ring.type == VS_RDMA_MSG_RING, "no RING sent");
            check_ring_sent(&ring);
        }
    }
    if (took && hs() != before) {
        /* It was taken: a proof that fails sends the connector back to
         * listening (a few times), anything else wrong fails the set-up. */
        if (!s.accepter && !s.msg_proved)
            FZ_CHECK(hs() == (bad + 1 >= 3 ? VS_RDMA_FAILED : VS_RDMA_LISTEN) && !exposed(),
                     "a false proof: state %d, exposed %d", hs(), exposed());
        else if (!s.msg_ok)
            /* The peer's fault, said as such (F5: a connector said
             * no-resources for a ring size no honest peer states). */
            FZ_CHECK(hs() == VS_RDMA_FAILED &&
                         strcmp(c->fail_reason, VS_REASON_HANDSHAKE_MALFORMED) == 0,
                     "a bad set-up message: state %d, reason %s", hs(),
                     hs() == VS_RDMA_FAILED ? c->fail_reason : "none");
        memset(&s.msg, 0, sizeof(s.msg));
    }
}

/* The adapter completes our oldest send, or fails it (the pair breaks). */
static void adapter(struct fz_in *in)
{
    uint8_t mode = fz_u8(in);
    struct fake_wr w;
    if (!fake_take_send(&w))
        return;
    bool fail = mode % 8 == 7;
    if (w.signaled || fail)
        fake_complete(&(struct vs_rdma_wc){
            .wr = w.wr, .opcode = IBV_WC_SEND, .status = fail ? IBV_WC_RETRY_EXC_ERR : 0});
    FZ_TRACE("adapter: send %u %s\n", w.wr, fail ? "failed" : "done");
}

/* ------------------------------------------------------------- the run */

static void check(void)
{
    /* No remote access to anything before the peer proved it holds the
     * TCP connection. */
    FZ_CHECK(!exposed() || s.proved,
             "our ring is registered for a peer that has not proved itself (state %d)", hs());
    FZ_CHECK(hs() != VS_RDMA_DONE || s.proved, "on RDMA with a peer that has not proved itself");
}

static void step(struct fz_in *in)
{
    switch (fz_u8(in) % 6) {
    case 0:
        if (s.accepter)
            answer_accepter(in, fz_u8(in) & 1);
        else
            call_connector(in);
        break;
    case 1:
        if (s.accepter)
            route_resolved();
        else
            other_event(in);
        break;
    case 2:
        setup_msg(in);
        break;
    case 3:
        progress();
        break;
    case 4:
        adapter(in);
        break;
    default:
        other_event(in);
        break;
    }
    /* The queue pair gone (a caller refused, a retry, a failure), the
     * message in its CQ went with it: the next one is the set-up's. */
    if (!s.c->qp)
        memset(&s.msg, 0, sizeof(s.msg));
    check();
}

/* N bytes of one direction (C2A: connector to accepter), kept in P as
 * sent or received, in one piece. */
static void keep(struct vs_rdma_proof *p, bool sent, uint64_t n, bool c2a)
{
    uint8_t buf[300];
    uint64_t k = n < sizeof(buf) ? n : sizeof(buf);
    for (uint64_t i = 0; i < k; i++)
        buf[i] = stream_byte(c2a ? i : i + (1u << 20));
    struct iovec iov = {buf, k};
    if (sent)
        vs_rdma_proof_sent(p, 0, &iov, 1, k);
    else
        vs_rdma_proof_rcvd(p, 0, &iov, 1, k);
}

static void addresses(uint8_t g)
{
    memset(&s.conn_addr, 0, sizeof(s.conn_addr));
    memset(&s.acc_addr, 0, sizeof(s.acc_addr));
    if (g & 2) {
        struct sockaddr_in6 *c = (void *)&s.conn_addr, *a = (void *)&s.acc_addr;
        c->sin6_family = a->sin6_family = AF_INET6;
        c->sin6_addr.s6_addr[15] = 1;
        a->sin6_addr.s6_addr[15] = 2;
        c->sin6_port = htons(5000);
        a->sin6_port = htons(40000);
    } else {
        struct sockaddr_in *c = (void *)&s.conn_addr, *a = (void *)&s.acc_addr;
        c->sin_family = a->sin_family = AF_INET;
        c->sin_addr.s_addr = htonl(0x0a000001);
        a->sin_addr.s_addr = htonl(0x0a000002);
        c->sin_port = htons(5000);
        a->sin_port = htons(40000);
    }
}

static void start(struct fz_in *in)
{
    uint8_t g = fz_u8(in);
    fake_reset();
    memset(&s, 0, sizeof(s));
    vs_config.rdma_ring = 4096ul << (g >> 2 & 7) % 5;
    vs_config.rdma_qp_depth = fake_depths[g >> 5];
    vs_config.rdma_inline = 128;
    s.accepter = g & 1;
    addresses(g);
    s.c2a = fz_u16(in) % 300;
    s.a2c = fz_u16(in) % 300;
    struct vs_rdma_conn *c = s.c = calloc(1, sizeof(*c));
    FZ_CHECK(c, "calloc");
    c->accepter = s.accepter;
    c->local = *ours();
    c->peer = *theirs();
    c->st.tcp_tx = s.accepter ? s.a2c : s.c2a;
    c->st.tcp_rx = s.accepter ? s.c2a : s.a2c;
    /* Each end keeps what it sent and received, the same bytes. */
    struct vs_rdma_proof *conn = s.accepter ? &s.peer : &c->proof;
    struct vs_rdma_proof *acc = s.accepter ? &c->proof : &s.peer;
    keep(conn, true, s.c2a, true);
    keep(conn, false, s.a2c, false);
    keep(acc, true, s.a2c, false);
    keep(acc, false, s.c2a, true);
    c->up.deadline_ns = LONG_MAX / 2; /* no deadline passes */
    c->next_try_ns = LONG_MAX;
    atomic_store(&c->share, -1);
    atomic_store(&c->held, -1);
    s.stranger = fake_id(ours(), theirs());
    if (s.accepter) {
        c->id = fake_id(ours(), theirs());
        atomic_store(&c->hs, VS_RDMA_RESOLVE);
    } else {
        atomic_store(&c->hs, VS_RDMA_LISTEN);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_in in = {data, size};
    start(&in);
    for (int i = 0; i < MAX_STEPS && in.n > 0; i++)
        step(&in);
    vs_rdma_verbs_teardown(s.c);
    FZ_CHECK(fake_regions() == 0, "%u registrations left", fake_regions());
    FZ_CHECK(fake_mappings() == 0, "%u areas left", fake_mappings());
    free(s.c);
    return 0;
}
