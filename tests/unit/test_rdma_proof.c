/* test_rdma_proof.c - the rdma transport's proof of connection ownership
 * (transport/rdma/proof.c) and its cache of plain destinations
 * (transport/rdma/peer_cache.c): pure logic, no device needed. */
#include <arpa/inet.h>
#include <string.h>

#include "check.h"
#include "config/config.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/proof.h"

static struct sockaddr_storage addr(const char *ip, int port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in = (void *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &in->sin_addr);
    return ss;
}

/* The two ends of one connection: the connector sent C2A (LC bytes) and the
 * accepter A2C (LA bytes), each kept by its sender and by its receiver. */
struct pair {
    struct vs_rdma_proof con, acc;
    struct sockaddr_storage c_addr, a_addr;
};

static void exchange(struct pair *p, const char *c2a, size_t lc, const char *a2c, size_t la)
{
    memset(p, 0, sizeof(*p));
    p->c_addr = addr("10.77.1.2", 40000);
    p->a_addr = addr("10.77.1.1", 7600);
    struct iovec v1 = {(void *)c2a, lc}, v2 = {(void *)a2c, la};
    vs_rdma_proof_sent(&p->con, 0, &v1, 1, lc);
    vs_rdma_proof_rcvd(&p->acc, 0, &v1, 1, lc);
    vs_rdma_proof_sent(&p->acc, 0, &v2, 1, la);
    vs_rdma_proof_rcvd(&p->con, 0, &v2, 1, la);
    /* What each states, as the rendezvous carries it to the other. */
    uint64_t nonces[2] = {0x1111, 0x2222};
    struct vs_rdma_proof *both[2] = {&p->con, &p->acc};
    for (int i = 0; i < 2; i++) {
        both[i]->nonce_a = nonces[0];
        both[i]->nonce_c = nonces[1];
        both[i]->a_tx = la;
        both[i]->a_rx = lc;
        both[i]->c_tx = lc;
        both[i]->c_rx = la;
    }
}

static bool macs_agree(struct pair *p, bool for_accepter)
{
    uint8_t a[VS_SHA256_LEN], c[VS_SHA256_LEN];
    vs_rdma_proof_mac(&p->acc, true, for_accepter, &p->c_addr, &p->a_addr, a);
    vs_rdma_proof_mac(&p->con, false, for_accepter, &p->c_addr, &p->a_addr, c);
    return memcmp(a, c, sizeof(a)) == 0;
}

static void test_proof(void)
{
    struct pair p;
    const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n", rep[] = "HTTP/1.1 200 OK\r\n\r\nhello";
    exchange(&p, req, sizeof(req) - 1, rep, sizeof(rep) - 1);
    CHECK(macs_agree(&p, true));
    CHECK(macs_agree(&p, false));
    CHECK_EQ(vs_rdma_proof_covered(&p.con), sizeof(req) - 1 + sizeof(rep) - 1);

    /* The two roles' proofs differ: one cannot be replayed as the other. */
    uint8_t a[VS_SHA256_LEN], c[VS_SHA256_LEN];
    vs_rdma_proof_mac(&p.acc, true, true, &p.c_addr, &p.a_addr, a);
    vs_rdma_proof_mac(&p.acc, true, false, &p.c_addr, &p.a_addr, c);
    CHECK(memcmp(a, c, sizeof(a)) != 0);

    /* A side that saw one other byte cannot make the proof. */
    p.acc.rcvd[3] ^= 1;
    CHECK(!macs_agree(&p, true));
    p.acc.rcvd[3] ^= 1;
    CHECK(macs_agree(&p, true));

    /* Another connection (address), another nonce: another proof. */
    struct sockaddr_storage other = addr("10.77.1.2", 40001);
    vs_rdma_proof_mac(&p.acc, true, true, &other, &p.a_addr, c);
    CHECK(memcmp(a, c, sizeof(a)) != 0);
    p.acc.nonce_c++;
    CHECK(!macs_agree(&p, true));
    p.acc.nonce_c--;

    /* The receiver read fewer bytes than were sent: both use its count. */
    exchange(&p, req, sizeof(req) - 1, rep, sizeof(rep) - 1);
    p.con.a_rx = p.acc.a_rx = 5;
    CHECK(macs_agree(&p, true));
    CHECK_EQ(vs_rdma_proof_covered(&p.acc), 5 + sizeof(rep) - 1);

    /* Nothing in common yet: nothing covered (the connector asks for later). */
    exchange(&p, "", 0, "", 0);
    CHECK_EQ(vs_rdma_proof_covered(&p.con), 0);

    /* Past VS_RDMA_PROOF_BYTES only the prefix counts, and stays agreed. */
    static char big[3 * VS_RDMA_PROOF_BYTES];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)(i * 7);
    exchange(&p, big, sizeof(big), rep, 4);
    CHECK_EQ(vs_rdma_proof_covered(&p.con), VS_RDMA_PROOF_BYTES + 4);
    CHECK(macs_agree(&p, false));

    /* Kept in pieces at their stream offsets, as the data path keeps them. */
    struct vs_rdma_proof pieces;
    memset(&pieces, 0, sizeof(pieces));
    struct iovec v = {big, 100};
    vs_rdma_proof_sent(&pieces, 0, &v, 1, 100);
    v.iov_base = big + 100;
    v.iov_len = 400;
    vs_rdma_proof_sent(&pieces, 100, &v, 1, 400);
    CHECK(memcmp(pieces.sent, big, VS_RDMA_PROOF_BYTES) == 0);

    vs_rdma_proof_wipe(&p.con);
    static const uint8_t zero[VS_RDMA_PROOF_BYTES];
    CHECK(memcmp(p.con.sent, zero, sizeof(zero)) == 0);
    CHECK(memcmp(p.con.rcvd, zero, sizeof(zero)) == 0);
}

static void test_peer_cache(void)
{
    vs_config_defaults(&vs_config);
    struct sockaddr_storage srv = addr("10.77.1.1", 7600), srv2 = addr("10.77.1.1", 7601);
    /* One silent rendezvous proves nothing (a loaded peer); two do. */
    CHECK(!vs_rdma_peer_cache_plain(false, &srv));
    vs_rdma_peer_cache_remember(false, &srv);
    CHECK(!vs_rdma_peer_cache_plain(false, &srv));
    vs_rdma_peer_cache_remember(false, &srv);
    CHECK(vs_rdma_peer_cache_plain(false, &srv));
    /* A connector's destination is a service: another port is not it. */
    CHECK(!vs_rdma_peer_cache_plain(false, &srv2));
    /* A success forgets what was said. */
    vs_rdma_peer_cache_forget(false, &srv);
    CHECK(!vs_rdma_peer_cache_plain(false, &srv));
    /* An accepter's peer is a host: any port. */
    struct sockaddr_storage cli = addr("10.77.1.2", 40000), cli2 = addr("10.77.1.2", 40002);
    vs_rdma_peer_cache_remember(true, &cli);
    vs_rdma_peer_cache_remember(true, &cli);
    CHECK(vs_rdma_peer_cache_plain(true, &cli2));
    /* 0 turns the cache off. */
    vs_config.rdma_peer_cache_s = 0;
    struct sockaddr_storage third = addr("10.77.1.3", 1);
    vs_rdma_peer_cache_remember(false, &third);
    vs_rdma_peer_cache_remember(false, &third);
    CHECK(!vs_rdma_peer_cache_plain(false, &third));
}

int main(void)
{
    test_proof();
    test_peer_cache();
    return check_finish("test_rdma_proof");
}
