/* fuzz_rdma_proof.c - libFuzzer target: the RDMA rendezvous's proof that a
 * caller holds the TCP connection (transport/rdma/proof.c), with the
 * peer's stated counts, nonce and addresses as a hostile peer sends them in
 * its connect request or answer (proto.h: vs_rdma_req, vs_rdma_rep).
 *
 * The input is a program (fuzz_input.h): the two directions' first bytes,
 * how each end kept them (pieces at stream offsets, as its TCP sends and
 * receives went), the nonces and addresses, then what each end states it
 * sent and received: honest, or raw 64-bit values. Both ends compute both
 * proofs. Checks:
 *   - the proof covers at most VS_RDMA_PROOF_BYTES per direction, and
 *     nothing when an end states it has nothing in common;
 *   - two ends that saw the same bytes and state the same counts compute
 *     the same proofs (each end can check the other's), and the accepter's
 *     differs from the connector's;
 *   - a byte the two ends saw differently inside the covered prefix, or a
 *     count stated differently, gives different proofs;
 *   - no ASan or UBSan report whatever the counts and offsets. */
#include <arpa/inet.h>
#include <string.h>

#include "fuzz_input.h"
#include "transport/rdma/proof.h"

#define STREAM_MAX 400 /* more than the proof keeps */

struct end {
    struct vs_rdma_proof p;
    uint64_t sent, rcvd; /* bytes kept so far, in stream order */
};

/* The end keeps N bytes of BUF at stream offset AT as its TCP calls would:
 * in up to three pieces of fuzzer-chosen sizes. */
static void keep(struct end *e, bool sent, uint64_t at, const uint8_t *buf, size_t n,
                 struct fz_in *in)
{
    size_t cut1 = fz_u8(in) % (n + 1), cut2 = fz_u8(in) % (n + 1);
    if (cut1 > cut2) {
        size_t t = cut1;
        cut1 = cut2;
        cut2 = t;
    }
    struct iovec iov[3] = {
        {(void *)buf, cut1}, {(void *)(buf + cut1), cut2 - cut1}, {(void *)(buf + cut2), n - cut2}};
    if (sent)
        vs_rdma_proof_sent(&e->p, at, iov, 3, n);
    else
        vs_rdma_proof_rcvd(&e->p, at, iov, 3, n);
}

/* One direction's bytes, fed to the sender's "sent" and the receiver's
 * "rcvd" in chunks; the receiver may see one byte changed (CHANGED, its
 * offset; -1: none). Returns the bytes fed. */
static uint64_t flow(struct end *from, struct end *to, struct fz_in *in, long changed)
{
    static uint8_t buf[STREAM_MAX], seen[STREAM_MAX];
    size_t len = fz_u16(in) % (STREAM_MAX + 1);
    for (size_t i = 0; i < len; i++)
        buf[i] = fz_u8(in);
    memcpy(seen, buf, len);
    if (changed >= 0 && (size_t)changed < len)
        seen[changed] ^= 0x5a;
    size_t done = 0;
    while (done < len) {
        size_t n = 1 + fz_u16(in) % (len - done);
        keep(from, true, done, buf + done, n, in);
        keep(to, false, done, seen + done, n, in);
        done += n;
    }
    return len;
}

/* An address of either family, or of one the code must still read safely. */
static void pick_addr(struct sockaddr_storage *ss, struct fz_in *in)
{
    memset(ss, 0, sizeof(*ss));
    uint8_t kind = fz_u8(in);
    if (kind % 3 == 0) {
        struct sockaddr_in *a = (void *)ss;
        a->sin_family = AF_INET;
        a->sin_port = fz_u16(in);
        uint32_t ip = (uint32_t)fz_le(in, 4);
        memcpy(&a->sin_addr, &ip, 4);
    } else {
        struct sockaddr_in6 *a = (void *)ss;
        a->sin6_family = kind % 3 == 1 ? AF_INET6 : (sa_family_t)fz_u16(in);
        a->sin6_port = fz_u16(in);
        for (int i = 0; i < 16; i++)
            a->sin6_addr.s6_addr[i] = fz_u8(in);
    }
}

/* What an end states: honest (its own count), or a raw value. */
static uint64_t state(uint64_t honest, uint8_t mode, int bit, struct fz_in *in)
{
    return mode & (1u << bit) ? fz_u64(in) : honest;
}

static uint64_t min3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t m = a < b ? a : b;
    return m < c ? m : c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_in in = {data, size};
    static struct end acc, con; /* accepter, connector */
    memset(&acc, 0, sizeof(acc));
    memset(&con, 0, sizeof(con));
    uint8_t setup = fz_u8(&in);
    /* One byte the receiving end saw differently, in one direction. */
    long changed = setup & 1 ? (long)fz_u16(&in) % STREAM_MAX : -1;
    bool change_c2a = setup & 2;
    uint64_t c2a = flow(&con, &acc, &in, change_c2a ? changed : -1);
    uint64_t a2c = flow(&acc, &con, &in, change_c2a ? -1 : changed);
    uint64_t nonce_a = fz_u64(&in), nonce_c = fz_u64(&in);
    struct sockaddr_storage caddr, aaddr;
    pick_addr(&caddr, &in);
    pick_addr(&aaddr, &in);
    /* The counts each end states: the accepter's in its request, the
     * connector's in its answer; each end uses its own and the peer's. */
    uint8_t lie = fz_u8(&in);
    uint64_t a_tx = state(a2c, lie, 0, &in), a_rx = state(c2a, lie, 1, &in);
    uint64_t c_tx = state(c2a, lie, 2, &in), c_rx = state(a2c, lie, 3, &in);
    struct end *ends[2] = {&acc, &con};
    for (int i = 0; i < 2; i++) {
        struct vs_rdma_proof *p = &ends[i]->p;
        p->nonce_a = nonce_a;
        p->nonce_c = nonce_c;
        p->a_tx = a_tx;
        p->a_rx = a_rx;
        p->c_tx = c_tx;
        p->c_rx = c_rx;
    }
    /* One end may hold another view of the peer's counts (a request or
     * answer that lied differently than what the other end holds). */
    if (setup & 4)
        con.p.a_tx ^= 1;

    uint64_t covered = vs_rdma_proof_covered(&acc.p);
    FZ_CHECK(covered <= 2 * VS_RDMA_PROOF_BYTES, "covered %lu", (unsigned long)covered);
    uint64_t want = min3(VS_RDMA_PROOF_BYTES, c_tx, a_rx) + min3(VS_RDMA_PROOF_BYTES, a_tx, c_rx);
    FZ_CHECK(covered == want, "covered %lu, want %lu", (unsigned long)covered, (unsigned long)want);

    uint8_t acc_a[VS_SHA256_LEN], acc_c[VS_SHA256_LEN], con_a[VS_SHA256_LEN], con_c[VS_SHA256_LEN];
    vs_rdma_proof_mac(&acc.p, true, true, &caddr, &aaddr, acc_a);
    vs_rdma_proof_mac(&acc.p, true, false, &caddr, &aaddr, acc_c);
    vs_rdma_proof_mac(&con.p, false, true, &caddr, &aaddr, con_a);
    vs_rdma_proof_mac(&con.p, false, false, &caddr, &aaddr, con_c);
    FZ_CHECK(memcmp(acc_a, acc_c, VS_SHA256_LEN) != 0, "the two roles' proofs are equal");

    /* Did the ends key their proofs with the same bytes? Only the covered
     * prefixes count, and only bytes the end actually kept (a count
     * beyond the bytes fed leaves zeros there on both ends). */
    bool same_bytes = true;
    if (changed >= 0) {
        uint64_t dir_len = change_c2a ? min3(VS_RDMA_PROOF_BYTES, c_tx, a_rx)
                                      : min3(VS_RDMA_PROOF_BYTES, a_tx, c_rx);
        uint64_t fed = change_c2a ? c2a : a2c;
        same_bytes = !((uint64_t)changed < dir_len && (uint64_t)changed < fed);
    }
    bool same_counts = !(setup & 4);
    bool same = same_bytes && same_counts;
    FZ_CHECK((memcmp(acc_a, con_a, VS_SHA256_LEN) == 0) == same,
             "accepter's proof: the ends %s (bytes %d, counts %d)", same ? "differ" : "agree",
             same_bytes, same_counts);
    FZ_CHECK((memcmp(acc_c, con_c, VS_SHA256_LEN) == 0) == same,
             "connector's proof: the ends %s (bytes %d, counts %d)", same ? "differ" : "agree",
             same_bytes, same_counts);
    vs_rdma_proof_wipe(&acc.p);
    vs_rdma_proof_wipe(&con.p);
    return 0;
}
