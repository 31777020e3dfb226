/* fuzz_rdma_msg.c - libFuzzer target: the receive side of a connection on
 * RDMA fed by a hostile peer: verbs.c's completions (data written with an
 * immediate, credit immediates, messages of any type, length and content),
 * cm.c's vs_rdma_on_msg, zcopy.c's offers and the RDMA READs that pull
 * them, as they are, on a fake device (rdma_fake.c).
 *
 * The input is a program (fuzz_input.h). The harness plays the peer and
 * the adapter: the peer writes into our ring and sends messages, honestly
 * (within the credit we gave it, in stream order) or not; the adapter
 * completes our work requests in order, a READ with the bytes of the
 * offer it pulls. The harness also plays our reader, as io.c reads the
 * ring and credits the peer. Checks:
 *   - an honest peer is never taken for a liar (st.violated), and what it
 *     wrote is readable, byte for byte (the stream's byte at each offset);
 *   - whatever the peer says: no more readable than the ring holds; every
 *     READ lands in the ring at its bytes' place, inside an offer the peer
 *     made, without overwriting a byte not yet read; credit writes go to
 *     the peer's credit word and say how far we read; the send and receive
 *     queues never overflow; at most VS_RDMA_OFFERS offers and
 *     VS_RDMA_READS READs; the first SHUT's offset is the end kept; a
 *     GROW is answered with the ring granted or none; a move to another
 *     ring (EPOCH, grow.c, whatever its fields) keeps these checks;
 *   - a peer that asked for credit is answered, once the adapter took our
 *     sends, whether or not we read again; a wait for our sends to be done
 *     ends then;
 *   - no ASan or UBSan report, no registration left at the end, no bytes
 *     of growth still counted against the process's budget. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "fuzz_input.h"
#include "rdma_fake.h"

#define MAX_STEPS 1024
#define PEER_CREDIT_ADDR 0x7f0000001000ull
#define PEER_CREDIT_RKEY 0x77u
/* The peer's offers' keys: OFFER_RKEY + the offer's index. */
#define OFFER_RKEY 0x9000u

#define STREAM_STEP 0x9e3779b97f4a7c15ull

/* The stream's byte at offset OFF: no period, so a misplaced byte shows. */
static uint8_t stream_byte(uint64_t off)
{
    return (uint8_t)((off * STREAM_STEP) >> 56);
}

/* The stream's N bytes from offset FROM, written at DST. The product is
 * advanced by addition ((off + 1) * STEP = off * STEP + STEP): a product
 * and a masked index per byte were most of this target's time. No
 * coverage: its loop's counter (a store per byte) says only how many bytes
 * went, modulo 256. */
FZ_NO_COVERAGE static void fill_stream(unsigned char *dst, uint64_t from, uint64_t n)
{
    uint64_t v = from * STREAM_STEP;
    for (uint64_t i = 0; i < n; i++, v += STREAM_STEP)
        dst[i] = (uint8_t)(v >> 56);
}

/* The index of the first of SRC's N bytes that is not the stream's from
 * offset FROM; N if all are. No coverage, as fill_stream. */
FZ_NO_COVERAGE static uint64_t stream_diff(const unsigned char *src, uint64_t from, uint64_t n)
{
    uint64_t v = from * STREAM_STEP, i;
    for (i = 0; i < n; i++, v += STREAM_STEP)
        if (src[i] != (uint8_t)(v >> 56))
            break;
    return i;
}

struct sent_offer {
    uint64_t pos, len, addr;
    uint32_t rkey;
};

/* The peer (and what it was told), and our reader. */
struct model {
    struct vs_rdma_conn *c;
    uint64_t size;      /* our ring's */
    uint64_t written;   /* stream bytes the peer wrote or offered */
    uint64_t credit;    /* how far we read, as our credit writes told it */
    uint64_t offer_end; /* the end of its last offer: it waits there */
    bool lied;          /* it did what an honest peer never does */
    bool scribbled;     /* it wrote ring bytes out of place: content unknown */
    bool broken;        /* a completion failed: the queue pair is dead */
    bool shut, cut;
    uint64_t shut_at;
    unsigned n_offers; /* offers sent: offers[0 .. n_offers) */
    uint64_t asked;    /* the credit its last CREDIT_REQ said it had seen */
};

static struct model m;

/* Every offer the peer sent, found by its key. A step sends at most one,
 * so MAX_STEPS hold all of an input's: any of them may still be in our
 * table and pulled (an old offer outlives any number of lies after it).
 * Keeping only the first 64 made the 65th offer's READ look like one
 * outside every offer (fuzzing.md, F7). Outside the model, so that its
 * reset does not clear 32 KiB per input: only offers below n_offers are
 * read, and each was written by this input. */
static struct sent_offer offers[MAX_STEPS];

static bool before(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b) < 0;
}

/* ------------------------------------------------- what we post, checked */

static const struct sent_offer *offer_of(uint32_t rkey)
{
    uint32_t i = rkey - OFFER_RKEY; /* wraps for a key below: none */
    return i < m.n_offers ? &offers[i] : NULL;
}

static void check_read(const struct fake_wr *w)
{
    struct vs_rdma_conn *c = m.c;
    /* The ring as it is now: a move (EPOCH) may come in the same poll. */
    uintptr_t ring = (uintptr_t)c->rx.mem;
    uint64_t size = c->rx_size;
    FZ_CHECK(w->len > 0 && w->local >= ring && w->local - ring + w->len <= size &&
                 w->lkey == c->rx.mr->lkey,
             "a READ of %u bytes at ring offset %ld", w->len, (long)(w->local - ring));
    const struct sent_offer *o = offer_of(w->rkey);
    FZ_CHECK(o && w->remote >= o->addr && w->remote - o->addr + w->len <= o->len,
             "a READ of %u bytes at %#lx (rkey %#x) outside every offer", w->len,
             (unsigned long)w->remote, w->rkey);
    uint64_t at = o->pos + (w->remote - o->addr), tail = c->rx_tail;
    FZ_CHECK((at & (size - 1)) == w->local - ring,
             "a READ of stream bytes at %lu into ring offset %lu", (unsigned long)at,
             (unsigned long)(w->local - ring));
    FZ_CHECK(!before(at, tail) && at + w->len - tail <= size,
             "a READ of [%lu, +%u) with the tail at %lu overwrites bytes not read",
             (unsigned long)at, w->len, (unsigned long)tail);
}

static void check_credit(const struct fake_wr *w)
{
    FZ_CHECK(w->remote == PEER_CREDIT_ADDR && w->rkey == PEER_CREDIT_RKEY && w->len == 8,
             "a write of %u bytes to %#lx, not the credit word", w->len, (unsigned long)w->remote);
    FZ_CHECK(w->value == m.c->rx_tail, "credit %lu, read %lu", (unsigned long)w->value,
             (unsigned long)m.c->rx_tail);
    FZ_CHECK(w->opcode == IBV_WR_RDMA_WRITE || ntohl(w->imm) == VS_RDMA_IMM_CREDIT,
             "a credit immediate of %#x", ntohl(w->imm));
}

/* The answer to a GROW: the ring granted (registered, not the one we
 * read), or none. */
static void check_region(const struct fake_wr *w)
{
    struct vs_rdma_msg msg;
    FZ_CHECK(w->len == sizeof(msg), "a message of %u bytes", w->len);
    memcpy(&msg, (const void *)(uintptr_t)w->local, sizeof(msg));
    FZ_CHECK(msg.type == VS_RDMA_MSG_REGION, "the receive side sent message %u", msg.type);
    const struct vs_rdma_area *g = &m.c->rx_granted;
    FZ_CHECK(msg.b == 0 || (g->mr && msg.a == (uintptr_t)g->mem && msg.b == g->size &&
                            msg.rkey == g->mr->rkey && g->mem != m.c->rx.mem &&
                            msg.b <= vs_config.rdma_ring_max),
             "REGION {%#lx, %lu} is not the ring granted", (unsigned long)msg.a,
             (unsigned long)msg.b);
}

/* fake.on_post: the receive side posts only READs, credit writes and
 * answers to GROW. */
static void check_post(const struct fake_wr *w)
{
    FZ_TRACE("  post %d: %u bytes, remote %#lx rkey %#x%s\n", w->opcode, w->len,
             (unsigned long)w->remote, w->rkey, w->signaled ? ", signalled" : "");
    if (w->opcode == IBV_WR_RDMA_READ)
        check_read(w);
    else if (w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
        check_credit(w);
    else if (w->opcode == IBV_WR_SEND)
        check_region(w);
    else
        FZ_FAIL("the receive side posted a work request of opcode %d", w->opcode);
}

/* --------------------------------------------------------------- the peer */

/* What an honest peer may still write: the room our credit left, unless it
 * waits on an offer, shut down or left. */
static uint64_t honest_room(void)
{
    if (m.shut || m.cut || before(m.credit, m.offer_end))
        return 0;
    return m.size - (m.written - m.credit);
}

/* Places N stream bytes from FROM into our ring where they belong (an
 * RDMA WRITE), or at ring offset AT when misplaced (AT < size). */
static void place(uint64_t from, uint64_t n, uint64_t at)
{
    unsigned char *ring = m.c->rx.mem;
    if (n > m.size)
        n = m.size; /* the rest would overwrite these */
    at &= m.size - 1;
    uint64_t first = n < m.size - at ? n : m.size - at; /* up to the ring's end */
    fill_stream(ring + at, from, first);
    fill_stream(ring, from + first, n - first);
}

/* RDMA WRITE with immediate: N bytes into our ring, honest or not. Every
 * operand is read first, so that a step reads the same bytes whatever
 * state the peer is in. */
static void peer_write(struct fz_in *in)
{
    uint8_t mode = fz_u8(in);
    uint64_t v = mode % 4 == 2 ? fz_u8(in) : fz_le(in, mode % 4 == 3 ? 4 : 3);
    uint64_t at = mode & 4 ? fz_le(in, 3) : m.written;
    uint64_t room = honest_room();
    uint32_t imm;
    if (mode % 4 < 2) { /* honest: within the room */
        if (room == 0)
            return; /* it waits */
        imm = (uint32_t)(1 + v % room);
    } else if (mode % 4 == 2) { /* past the room, by a little */
        imm = (uint32_t)(m.size - (m.written - m.credit) + v);
    } else {
        imm = (uint32_t)v;
    }
    uint32_t slot;
    if (m.broken || !fake_take_recv(&slot))
        return; /* receiver not ready (it retries later), or the pair is dead */
    struct vs_rdma_wc wc = {
        .wr = slot, .byte_len = imm, .imm = htonl(imm), .opcode = IBV_WC_RECV_RDMA_WITH_IMM};
    if (imm & VS_RDMA_IMM_CREDIT) {
        wc.byte_len = 8; /* a credit immediate: our send side's news */
    } else {
        place(m.written, imm, at);
        if (imm > room || imm == 0) /* an honest peer writes something */
            m.lied = true;
        if (mode & 4)
            m.scribbled = true;
        m.written += imm;
    }
    FZ_TRACE("peer: write %u (room %lu)%s\n", imm, (unsigned long)room,
             mode & 4 ? " misplaced" : "");
    fake_complete(&wc);
}

static const uint16_t msg_types[] = {
    VS_RDMA_MSG_PROOF,  VS_RDMA_MSG_RING,       VS_RDMA_MSG_SWITCH, VS_RDMA_MSG_SHUT,
    VS_RDMA_MSG_REVERT, VS_RDMA_MSG_CREDIT_REQ, VS_RDMA_MSG_OFFER,  VS_RDMA_MSG_RX_WAIT,
    VS_RDMA_MSG_CUT,    VS_RDMA_MSG_GROW,       VS_RDMA_MSG_REGION, VS_RDMA_MSG_EPOCH,
};

#define N_TYPES (sizeof(msg_types) / sizeof(msg_types[0]))

/* Reads the fields of a message of type MSG->type from the input: each
 * the honest value, nudged, or raw. */
static void read_msg(struct vs_rdma_msg *msg, uint8_t mode, struct fz_in *in)
{
    switch (msg->type) {
    case VS_RDMA_MSG_OFFER:
        msg->a = fz_stated(m.written, mode, in);
        msg->b = fz_stated(1 + fz_le(in, 3), mode >> 2, in);
        msg->credit_addr = 0x100000000ull * (1 + m.n_offers);
        msg->rkey = OFFER_RKEY + m.n_offers;
        break;
    case VS_RDMA_MSG_SHUT:
        msg->a = fz_stated(m.written, mode, in);
        break;
    case VS_RDMA_MSG_CUT:
        msg->a = fz_stated(0, mode, in); /* of ours: we sent nothing */
        msg->b = fz_stated(m.credit, mode >> 2, in);
        break;
    case VS_RDMA_MSG_CREDIT_REQ:
        msg->a = fz_stated(m.credit, mode, in);
        break;
    case VS_RDMA_MSG_RX_WAIT:
        break;
    case VS_RDMA_MSG_GROW: /* a ring size: a power of two, or not */
        msg->a = mode & 1 ? fz_u64(in) : 1ull << (fz_u8(in) % 48);
        break;
    case VS_RDMA_MSG_EPOCH: /* a move at the head, into a ring granted or not */
        msg->a = fz_stated(m.written, mode, in);
        msg->b = mode & 0x40 ? fz_u64(in) : 1ull << (fz_u8(in) % 48);
        break;
    default: /* SWITCH (fuzz_stream's concern), PROOF and RING after the
              * set-up, REVERT (version 2), unknown */
        msg->a = fz_u64(in);
        msg->b = fz_u64(in);
        break;
    }
}

/* The peer sent MSG: what it now holds. Whether an honest peer sends it. */
static bool sent_msg(const struct vs_rdma_msg *msg)
{
    switch (msg->type) {
    case VS_RDMA_MSG_OFFER: {
        FZ_CHECK(m.n_offers < MAX_STEPS, "more offers than steps");
        offers[m.n_offers++] = (struct sent_offer){msg->a, msg->b, msg->credit_addr, msg->rkey};
        bool honest = msg->a == m.written && msg->b > 0 && msg->b <= (1ull << 40) && !m.shut &&
                      !m.cut && !before(m.credit, m.offer_end);
        if (honest) {
            m.written += msg->b;
            m.offer_end = m.written;
        }
        return honest;
    }
    case VS_RDMA_MSG_SHUT: {
        bool honest = msg->a == m.written && !m.shut && !m.cut;
        if (!m.shut)
            m.shut_at = msg->a;
        m.shut = true;
        return honest;
    }
    case VS_RDMA_MSG_CUT: {
        bool honest = msg->b == m.credit && !m.cut;
        m.cut = true;
        return honest;
    }
    case VS_RDMA_MSG_CREDIT_REQ: /* its value only decides whether we answer */
        m.asked = msg->a;
        return true;
    case VS_RDMA_MSG_RX_WAIT:
    case VS_RDMA_MSG_SWITCH:
        return true;
    default:
        return false;
    }
}

/* A SEND: a message into the oldest receive buffer. */
static void peer_send(struct fz_in *in)
{
    uint8_t t = fz_u8(in), mode = fz_u8(in);
    struct vs_rdma_msg msg;
    memset(&msg, 0, sizeof(msg));
    msg.type = t % (N_TYPES + 1) < N_TYPES ? msg_types[t % (N_TYPES + 1)] : fz_u16(in);
    read_msg(&msg, mode, in);
    uint32_t len = mode & 0x80 ? fz_u8(in) : sizeof(msg); /* short, or long */
    uint32_t slot;
    if (m.broken || !fake_take_recv(&slot))
        return; /* receiver not ready, or the pair is dead: not sent */
    /* A short message is one the code must drop (and mark the peer a
     * liar for): it changes nothing the peer holds. */
    bool honest = len >= sizeof(msg) && sent_msg(&msg);
    if (!honest)
        m.lied = true;
    memcpy((char *)m.c->msgs.mem + (uint64_t)slot * VS_RDMA_MSG_SIZE, &msg, sizeof(msg));
    FZ_TRACE("peer: message %u a %lu b %lu, %u bytes%s\n", msg.type, (unsigned long)msg.a,
             (unsigned long)msg.b, len, honest ? "" : " (a lie)");
    fake_complete(&(struct vs_rdma_wc){.wr = slot, .byte_len = len, .opcode = IBV_WC_RECV});
}

/* An RDMA WRITE without immediate anywhere in our ring: nothing tells us. */
static void peer_scribble(struct fz_in *in)
{
    uint64_t at = fz_le(in, 3) & (m.size - 1);
    uint8_t n = fz_u8(in);
    for (unsigned i = 0; i < n; i++) {
        uint8_t b = fz_u8(in);
        if (!m.broken)
            ((unsigned char *)m.c->rx.mem)[(at + i) & (m.size - 1)] = b;
    }
    m.scribbled = true;
    FZ_TRACE("peer: scribble %u at %lu\n", n, (unsigned long)at);
}

/* ------------------------------------------------------------ the adapter */

/* Our oldest send is done: a READ brings the offer's bytes (or the peer's
 * garbage), a credit write reaches the peer. Or it fails, and the queue
 * pair is in error for good: as on a real RC queue pair, every work
 * request after it then completes flushed, signalled or not, and the peer
 * can no longer reach us. */
static void adapter_send_done(struct fz_in *in)
{
    uint8_t mode = fz_u8(in);
    struct fake_wr w;
    if (!fake_take_send(&w))
        return;
    int op = w.opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
    if (m.broken || mode % 16 == 15) {
        m.broken = true;
        fake_complete(&(struct vs_rdma_wc){
            .wr = w.wr, .opcode = (uint16_t)op, .status = IBV_WC_WR_FLUSH_ERR});
        FZ_TRACE("adapter: send %u failed\n", w.wr);
        return;
    }
    if (w.opcode == IBV_WR_RDMA_READ) {
        const struct sent_offer *o = offer_of(w.rkey);
        uint64_t at = o->pos + (w.remote - o->addr);
        /* check_read: the READ lies inside the ring, in one piece. */
        if (mode & 16) {
            memset((void *)(uintptr_t)w.local, 0xee, w.len);
            m.scribbled = true;
        } else {
            fill_stream((unsigned char *)(uintptr_t)w.local, at, w.len);
        }
    } else {
        m.credit = w.value;
    }
    FZ_TRACE("adapter: send %u done (opcode %d)\n", w.wr, w.opcode);
    if (w.signaled)
        fake_complete(&(struct vs_rdma_wc){.wr = w.wr, .opcode = (uint16_t)op});
}

/* A receive flushed in error (the peer's side broke the pair). */
static void adapter_recv_failed(void)
{
    uint32_t slot;
    if (!fake_take_recv(&slot))
        return;
    m.broken = true;
    fake_complete(
        &(struct vs_rdma_wc){.wr = slot, .opcode = IBV_WC_RECV, .status = IBV_WC_WR_FLUSH_ERR});
    FZ_TRACE("adapter: receive %u flushed\n", slot);
}

/* ------------------------------------------------------------- our reader */

/* The N bytes of the ring from stream offset FROM (at most the ring) are
 * the stream's. */
static void check_stream(uint64_t from, uint64_t n)
{
    const unsigned char *ring = m.c->rx.mem;
    uint64_t at = from & (m.size - 1);
    uint64_t first = n < m.size - at ? n : m.size - at, i = stream_diff(ring + at, from, first);
    if (i == first && first < n)
        i = first + stream_diff(ring, from + first, n - first);
    FZ_CHECK(i == n, "stream byte %lu: got %#x want %#x", (unsigned long)(from + i),
             ring[(from + i) & (m.size - 1)], stream_byte(from + i));
}

static void credit(bool wake);

/* As io.c reads: what the ring holds at the tail, checked where it lies
 * (io.c copies it out; the copy is not under test here); then the offers
 * consumed go and the peer may hear how far we read. */
static void reader(struct fz_in *in)
{
    struct vs_rdma_conn *c = m.c;
    uint8_t mode = fz_u8(in);
    uint64_t want = fz_le(in, 3);
    if (mode & 1) {
        vs_rdma_poll(c);
        m.size = c->rx_size; /* a move (EPOCH) changes the geometry */
    }
    uint64_t avail = vs_rdma_rx_avail(c), tail = c->rx_tail;
    FZ_TRACE("reader: %lu readable at %lu\n", (unsigned long)avail, (unsigned long)tail);
    FZ_CHECK(avail <= m.size, "%lu bytes readable from a ring of %lu", (unsigned long)avail,
             (unsigned long)m.size);
    if (!m.lied && !m.broken && !m.cut && !fake.cq_count && !c->offer_count)
        FZ_CHECK(avail == m.written - tail, "%lu readable, the peer wrote %lu past the tail",
                 (unsigned long)avail, (unsigned long)(m.written - tail));
    uint64_t n = want < avail ? want : avail;
    if (!m.lied && !m.scribbled)
        check_stream(tail, n);
    if (mode & 2)
        return; /* a peek */
    __atomic_store_n(&c->rx_tail, tail + n, __ATOMIC_SEQ_CST);
    vs_rdma_offers_consumed(c);
    if (mode & 4)
        credit(mode & 8);
}

/* As io.c's send_credit: with a wake-up when the peer waits for one. */
static void credit(bool wake)
{
    struct vs_rdma_conn *c = m.c;
    bool asked = atomic_exchange(&c->peer_waits, false);
    if (vs_rdma_post_credit(c, wake || asked) < 0 && asked)
        atomic_store(&c->peer_waits, true);
}

/* The reader read its last: a peer that asked for credit past what we had
 * told it must have it, with its wake-up, once the adapter took every send
 * (nothing else would come: no next read, no next message). An answer
 * that met a full send queue and was left to a next read hung a writer
 * whose reader had emptied the ring (across two hosts, in CI). */
/* The adapter completes every send, and the connection is polled, until
 * nothing is left (an answer posted by a poll is completed too). */
static void adapter_drain(void)
{
    for (int i = 0; i < FAKE_QUEUE && !m.broken && (fake.sq_count || fake.cq_count); i++) {
        struct fake_wr w;
        if (fake_take_send(&w)) {
            if (w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
                m.credit = w.value;
            if (w.signaled)
                fake_complete(&(struct vs_rdma_wc){
                    .wr = w.wr,
                    .opcode = w.opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE});
        }
        vs_rdma_poll(m.c);
    }
}

static void check_answered(void)
{
    struct vs_rdma_conn *c = m.c;
    if (atomic_load(&c->peer_waits) && c->rx_tail != atomic_load(&c->rx_credited))
        credit(true); /* the last read's answer, as io.c gives it */
    adapter_drain();
    FZ_TRACE("end: waits %d tail %lu credited %lu sq %u cq %u\n", atomic_load(&c->peer_waits),
             (unsigned long)c->rx_tail, (unsigned long)atomic_load(&c->rx_credited), fake.sq_count,
             fake.cq_count);
    if (m.broken || atomic_load(&c->broken))
        return;
    FZ_CHECK(!atomic_load(&c->peer_waits) || c->rx_tail == m.asked,
             "the peer asked for credit at %lu, we read to %lu: never answered",
             (unsigned long)m.asked, (unsigned long)c->rx_tail);
    /* A wait for our sends to be done (a SHUT or CUT on a full queue,
     * close) ends once the adapter took them, however the last ones were
     * posted (a credit after the last signalled send completes unseen). */
    bool done = false;
    for (int i = 0; i < 4 && !done && !m.broken; i++) {
        done = vs_rdma_sends_done(c);
        adapter_drain();
    }
    FZ_CHECK(done || m.broken, "%u sends posted, %u seen done, after the adapter took all",
             c->sq_posted, c->sq_done);
}

/* ---------------------------------------------------------------- the run */

static void check_conn(void)
{
    struct vs_rdma_conn *c = m.c;
    FZ_CHECK(c->offer_count <= VS_RDMA_OFFERS && c->reads_in_flight <= VS_RDMA_READS,
             "%u offers, %u READs in flight", c->offer_count, c->reads_in_flight);
    FZ_CHECK(m.lied || !atomic_load(&c->st.violated), "an honest peer taken for a liar");
    if (atomic_load(&c->rx_shut_known))
        FZ_CHECK(c->rx_shut_at == m.shut_at, "shut at %lu, the first SHUT said %lu",
                 (unsigned long)c->rx_shut_at, (unsigned long)m.shut_at);
}

static void step(struct fz_in *in)
{
    switch (fz_u8(in) % 8) {
    case 0:
    case 1:
        peer_write(in);
        break;
    case 2:
        peer_send(in);
        break;
    case 3:
        adapter_send_done(in);
        break;
    case 4:
        vs_rdma_poll(m.c);
        break;
    case 5:
        reader(in);
        break;
    case 6:
        peer_scribble(in);
        break;
    default:
        adapter_recv_failed();
        break;
    }
    /* A move to another ring (EPOCH, grow.c) changes the geometry. */
    m.size = m.c->rx_size;
    check_conn();
}

/* A connection on RDMA, as cm.c leaves it, on the fake device: geometry
 * from the input's first byte. */
static struct vs_rdma_conn *connect_fake(struct fz_in *in)
{
    uint8_t g = fz_u8(in);
    fake_reset();
    vs_config.rdma_ring = 4096ul << (g & 7) % 5;       /* 4 .. 64 KiB */
    vs_config.rdma_ring_max = vs_config.rdma_ring * 4; /* a GROW may be granted */
    vs_config.rdma_qp_depth = fake_depths[(g >> 3) & 7];
    vs_config.rdma_inline = g & 0x80 ? 0 : 128;
    vs_config.rdma_zcopy = 1u << 16;
    fake.no_inline = g & 0x40; /* the device refuses inline data: the retry */
    struct vs_rdma_conn *c = calloc(1, sizeof(*c));
    FZ_CHECK(c, "calloc");
    struct sockaddr_storage here = {.ss_family = AF_INET}, there = {.ss_family = AF_INET};
    c->id = fake_id(&here, &there);
    int rc = vs_rdma_verbs_setup(c, c->id);
    FZ_CHECK(rc == 0, "vs_rdma_verbs_setup: %d", rc);
    rc = vs_rdma_expose(c);
    FZ_CHECK(rc == 0, "vs_rdma_expose: %d", rc);
    c->peer_credit_addr = PEER_CREDIT_ADDR;
    c->peer_credit_rkey = PEER_CREDIT_RKEY;
    atomic_store(&c->hs, VS_RDMA_DONE);
    atomic_store(&c->share, -1);
    atomic_store(&c->held, -1);
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_in in = {data, size};
    memset(&m, 0, sizeof(m));
    m.c = connect_fake(&in);
    m.size = m.c->rx_size;
    fake.on_post = check_post;
    for (int i = 0; i < MAX_STEPS && in.n > 0; i++)
        step(&in);
    check_answered();
    fake.on_post = NULL;
    vs_rdma_verbs_teardown(m.c);
    FZ_CHECK(fake_regions() == 0, "%u registrations left", fake_regions());
    FZ_CHECK(vs_rdma_grown_bytes() == 0, "%lu bytes of growth still counted",
             (unsigned long)vs_rdma_grown_bytes());
    FZ_CHECK(fake_mappings() == 0, "%u areas left", fake_mappings());
    free(m.c);
    return 0;
}
