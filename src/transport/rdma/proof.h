/* proof.h - how the two ends of a TCP connection prove to each other, over
 * rdma_cm, that they hold it (docs/design/rdma-transport.md, "Threat
 * model").
 *
 * Both ends keep the first VS_RDMA_PROOF_BYTES bytes of each direction of
 * the TCP stream. Each states how much it sent and received; the proof of
 * a side is an HMAC-SHA-256 keyed with the prefixes both ends have (the
 * shorter of sender's and receiver's count, per direction) over its role,
 * the connection's two addresses and both sides' fresh nonces. Only a
 * process that saw the stream can make it; a fresh nonce per attempt
 * stops replays; the addresses stop a proof made for one connection from
 * serving another. */
#ifndef VSOCKET_RDMA_PROOF_H
#define VSOCKET_RDMA_PROOF_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/sha256.h"

#define VS_RDMA_PROOF_BYTES 256

struct vs_rdma_proof {
    uint8_t sent[VS_RDMA_PROOF_BYTES], rcvd[VS_RDMA_PROOF_BYTES];
    uint64_t nonce_a, nonce_c; /* accepter's, connector's */
    /* What each side stated it had sent and received on TCP. */
    uint64_t a_tx, a_rx, c_tx, c_rx;
};

/* After N bytes of IOV went out on TCP (received) at stream offset AT. */
void vs_rdma_proof_sent(struct vs_rdma_proof *p, uint64_t at, const struct iovec *iov, int iovcnt,
                        size_t n);
void vs_rdma_proof_rcvd(struct vs_rdma_proof *p, uint64_t at, const struct iovec *iov, int iovcnt,
                        size_t n);

/* Bytes the proof covers: 0 means the two ends have nothing in common yet. */
uint64_t vs_rdma_proof_covered(const struct vs_rdma_proof *p);

/* The proof of the accepter (FOR_ACCEPTER) or of the connector, as seen by
 * a side that is the accepter (I_AM_ACCEPTER) or not. CONNECTOR and
 * ACCEPTER: the TCP addresses of the two ends. */
void vs_rdma_proof_mac(const struct vs_rdma_proof *p, bool i_am_accepter, bool for_accepter,
                       const struct sockaddr_storage *connector,
                       const struct sockaddr_storage *accepter, uint8_t out[VS_SHA256_LEN]);

/* A fresh nonce (getrandom). */
uint64_t vs_rdma_nonce(void);

/* The prefixes are no longer needed: wipe them. */
void vs_rdma_proof_wipe(struct vs_rdma_proof *p);

#endif
