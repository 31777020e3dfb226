/* sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104).
 *
 * For the RDMA transport's proof of connection ownership, so that the
 * preload library needs no OpenSSL. Not a general crypto library: no other
 * hashes, no hardware acceleration, no side-channel hardening beyond
 * vs_equal_ct() and wiping key material when an HMAC is finished. */
#ifndef VSOCKET_SHA256_H
#define VSOCKET_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VS_SHA256_LEN 32
#define VS_SHA256_BLOCK 64

/* Incremental SHA-256 state. */
struct vs_sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[VS_SHA256_BLOCK];
    size_t fill; /* bytes waiting in buf */
};

void vs_sha256_init(struct vs_sha256 *h);
void vs_sha256_update(struct vs_sha256 *h, const void *data, size_t len);
/* Writes the digest and wipes the state; init again to reuse it. */
void vs_sha256_final(struct vs_sha256 *h, uint8_t out[VS_SHA256_LEN]);
/* One-shot SHA-256 of LEN bytes at DATA. */
void vs_sha256(const void *data, size_t len, uint8_t out[VS_SHA256_LEN]);

/* Incremental HMAC-SHA-256 state: the inner hash, and the outer key pad. */
struct vs_hmac {
    struct vs_sha256 inner;
    uint8_t opad[VS_SHA256_BLOCK];
};

/* Any key length; a key longer than a block is hashed first (RFC 2104). */
void vs_hmac_init(struct vs_hmac *m, const void *key, size_t keylen);
void vs_hmac_update(struct vs_hmac *m, const void *data, size_t len);
/* Writes the MAC and wipes the state (key pads included). */
void vs_hmac_final(struct vs_hmac *m, uint8_t out[VS_SHA256_LEN]);

/* Whether LEN bytes at A and B are equal, in time that depends only on LEN. */
bool vs_equal_ct(const void *a, const void *b, size_t len);

#endif
