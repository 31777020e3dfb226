/* proof.c - the proof that a side holds the TCP connection (proof.h). */
#include "transport/rdma/proof.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

static void keep(uint8_t *dst, uint64_t at, const struct iovec *iov, int iovcnt, size_t n)
{
    for (int i = 0; i < iovcnt && n > 0 && at < VS_RDMA_PROOF_BYTES; i++) {
        size_t len = iov[i].iov_len < n ? iov[i].iov_len : n;
        size_t room = VS_RDMA_PROOF_BYTES - (size_t)at;
        memcpy(dst + at, iov[i].iov_base, len < room ? len : room);
        at += len;
        n -= len;
    }
}

void vs_rdma_proof_sent(struct vs_rdma_proof *p, uint64_t at, const struct iovec *iov, int iovcnt,
                        size_t n)
{
    keep(p->sent, at, iov, iovcnt, n);
}

void vs_rdma_proof_rcvd(struct vs_rdma_proof *p, uint64_t at, const struct iovec *iov, int iovcnt,
                        size_t n)
{
    keep(p->rcvd, at, iov, iovcnt, n);
}

static uint64_t min3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t m = a < b ? a : b;
    return m < c ? m : c;
}

static uint64_t len_c2a(const struct vs_rdma_proof *p)
{
    return min3(VS_RDMA_PROOF_BYTES, p->c_tx, p->a_rx);
}

static uint64_t len_a2c(const struct vs_rdma_proof *p)
{
    return min3(VS_RDMA_PROOF_BYTES, p->a_tx, p->c_rx);
}

uint64_t vs_rdma_proof_covered(const struct vs_rdma_proof *p)
{
    return len_c2a(p) + len_a2c(p);
}

/* An address as 16 bytes of IPv6 (IPv4 mapped) and a port. */
static void put_addr(struct vs_hmac *m, const struct sockaddr_storage *ss)
{
    uint8_t out[18] = {0};
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)ss;
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &in->sin_addr, 4);
        memcpy(out + 16, &in->sin_port, 2);
    } else {
        const struct sockaddr_in6 *in6 = (const void *)ss;
        memcpy(out, &in6->sin6_addr, 16);
        memcpy(out + 16, &in6->sin6_port, 2);
    }
    vs_hmac_update(m, out, sizeof(out));
}

void vs_rdma_proof_mac(const struct vs_rdma_proof *p, bool i_am_accepter, bool for_accepter,
                       const struct sockaddr_storage *connector,
                       const struct sockaddr_storage *accepter, uint8_t out[VS_SHA256_LEN])
{
    /* The key: the connector-to-accepter prefix, then the other. Each side
     * holds one as sent and one as received. */
    uint64_t l1 = len_c2a(p), l2 = len_a2c(p);
    uint8_t key[2 * VS_RDMA_PROOF_BYTES];
    memcpy(key, i_am_accepter ? p->rcvd : p->sent, l1);
    memcpy(key + l1, i_am_accepter ? p->sent : p->rcvd, l2);
    struct vs_hmac m;
    vs_hmac_init(&m, key, l1 + l2);
    explicit_bzero(key, sizeof(key));
    static const char label_a[] = "vsocket-rdma-proof-accepter";
    static const char label_c[] = "vsocket-rdma-proof-connector";
    if (for_accepter)
        vs_hmac_update(&m, label_a, sizeof(label_a));
    else
        vs_hmac_update(&m, label_c, sizeof(label_c));
    put_addr(&m, connector);
    put_addr(&m, accepter);
    uint64_t words[6] = {p->nonce_a, p->nonce_c, p->a_tx, p->a_rx, p->c_tx, p->c_rx};
    vs_hmac_update(&m, words, sizeof(words));
    vs_hmac_final(&m, out);
}

uint64_t vs_rdma_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != sizeof(n)) {
        /* No entropy yet (early boot): the proof's secret is the stream,
         * the nonce only needs to differ between attempts. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        n ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
    }
    return n;
}

void vs_rdma_proof_wipe(struct vs_rdma_proof *p)
{
    explicit_bzero(p->sent, sizeof(p->sent));
    explicit_bzero(p->rcvd, sizeof(p->rcvd));
}
