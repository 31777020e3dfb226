/* sha256.c - SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104). */
#include "core/sha256.h"

#include <string.h>

/* FIPS 180-4 4.2.2: the first 32 bits of the fractional parts of the cube
 * roots of the first 64 primes. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static inline uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* FIPS 180-4 6.2.2: one 512-bit block into the hash value. */
static void compress(uint32_t st[8], const uint8_t block[VS_SHA256_BLOCK])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = s1 + w[t - 7] + s0 + w[t - 16];
    }

    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + S1 + ch + K[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    st[0] += a;
    st[1] += b;
    st[2] += c;
    st[3] += d;
    st[4] += e;
    st[5] += f;
    st[6] += g;
    st[7] += h;
    /* The schedule holds the message (an HMAC key pad, for one). */
    explicit_bzero(w, sizeof(w));
}

void vs_sha256_init(struct vs_sha256 *h)
{
    /* FIPS 180-4 5.3.3: the fractional parts of the square roots of the
     * first 8 primes. */
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(h->h, iv, sizeof(iv));
    h->len = 0;
    h->fill = 0;
}

void vs_sha256_update(struct vs_sha256 *h, const void *data, size_t len)
{
    const uint8_t *p = data;
    h->len += len;
    if (h->fill) {
        size_t n = VS_SHA256_BLOCK - h->fill;
        if (n > len)
            n = len;
        memcpy(h->buf + h->fill, p, n);
        h->fill += n;
        p += n;
        len -= n;
        if (h->fill < VS_SHA256_BLOCK)
            return;
        compress(h->h, h->buf);
        h->fill = 0;
    }
    for (; len >= VS_SHA256_BLOCK; p += VS_SHA256_BLOCK, len -= VS_SHA256_BLOCK)
        compress(h->h, p);
    if (len) {
        memcpy(h->buf, p, len);
        h->fill = len;
    }
}

void vs_sha256_final(struct vs_sha256 *h, uint8_t out[VS_SHA256_LEN])
{
    /* FIPS 180-4 5.1.1: a 1 bit, zeros to 56 bytes mod 64, the length in
     * bits as 64-bit big-endian. */
    uint64_t bits = h->len * 8;
    h->buf[h->fill++] = 0x80;
    if (h->fill > VS_SHA256_BLOCK - 8) {
        memset(h->buf + h->fill, 0, VS_SHA256_BLOCK - h->fill);
        compress(h->h, h->buf);
        h->fill = 0;
    }
    memset(h->buf + h->fill, 0, VS_SHA256_BLOCK - 8 - h->fill);
    store_be32(h->buf + VS_SHA256_BLOCK - 8, (uint32_t)(bits >> 32));
    store_be32(h->buf + VS_SHA256_BLOCK - 4, (uint32_t)bits);
    compress(h->h, h->buf);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, h->h[i]);
    explicit_bzero(h, sizeof(*h));
}

void vs_sha256(const void *data, size_t len, uint8_t out[VS_SHA256_LEN])
{
    struct vs_sha256 h;
    vs_sha256_init(&h);
    vs_sha256_update(&h, data, len);
    vs_sha256_final(&h, out);
}

/* RFC 2104: H(K ^ opad, H(K ^ ipad, text)), K zero-padded to a block and
 * hashed first when longer than one. */
void vs_hmac_init(struct vs_hmac *m, const void *key, size_t keylen)
{
    uint8_t k[VS_SHA256_BLOCK] = {0};
    if (keylen > VS_SHA256_BLOCK)
        vs_sha256(key, keylen, k);
    else if (keylen)
        memcpy(k, key, keylen);

    uint8_t ipad[VS_SHA256_BLOCK];
    for (int i = 0; i < VS_SHA256_BLOCK; i++) {
        ipad[i] = k[i] ^ 0x36;
        m->opad[i] = k[i] ^ 0x5c;
    }
    vs_sha256_init(&m->inner);
    vs_sha256_update(&m->inner, ipad, sizeof(ipad));
    explicit_bzero(k, sizeof(k));
    explicit_bzero(ipad, sizeof(ipad));
}

void vs_hmac_update(struct vs_hmac *m, const void *data, size_t len)
{
    vs_sha256_update(&m->inner, data, len);
}

void vs_hmac_final(struct vs_hmac *m, uint8_t out[VS_SHA256_LEN])
{
    uint8_t ih[VS_SHA256_LEN];
    vs_sha256_final(&m->inner, ih);
    struct vs_sha256 outer;
    vs_sha256_init(&outer);
    vs_sha256_update(&outer, m->opad, sizeof(m->opad));
    vs_sha256_update(&outer, ih, sizeof(ih));
    vs_sha256_final(&outer, out);
    explicit_bzero(ih, sizeof(ih));
    explicit_bzero(m, sizeof(*m));
}

bool vs_equal_ct(const void *a, const void *b, size_t len)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t d = 0;
    for (size_t i = 0; i < len; i++)
        d |= x[i] ^ y[i];
    return d == 0;
}
