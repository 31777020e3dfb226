/* proto.h - what the two ends of an RDMA connection say to each other.
 *
 * Rendezvous (rdma_cm, never the TCP stream): the connector listens on its
 * own TCP address and port in rdma_cm's TCP port space; the accepter, which
 * knows that address as its TCP peer, connects there. The connect request
 * and its answer carry the private data below; then, on the new queue
 * pair, the accepter proves it holds the other end (PROOF, with its ring)
 * and the connector answers with its own ring (RING). Until a side has
 * checked the other's proof it gives no remote access to anything.
 *
 * Data path, per direction: the sender copies bytes into its send copy and
 * RDMA-writes them, with an immediate that carries their length, into the
 * receiver's ring at the same offset (stream position modulo the ring
 * size). The receiver learns of them from the completion (so a byte is
 * never read before it is placed), reads them out, and RDMA-writes how far
 * it consumed into the sender's credit word: batched at a quarter of the
 * ring, with an immediate when the sender asked for credit (CREDIT_REQ).
 * Large sends (VSOCKET_RDMA_ZCOPY) are not copied: the sender registers
 * the program's buffer for remote reading, offers it (OFFER, in stream
 * order), and the receiver pulls it with RDMA READ into the place its
 * bytes have in the ring; the send returns once the receiver's credit
 * covers it, and the registration goes. Positions count offered bytes as
 * ring bytes, so credit and revert arithmetic stay the same.
 * Messages below travel as SENDs into small receive buffers; stream
 * offsets follow transport/stream.h. */
#ifndef VSOCKET_RDMA_PROTO_H
#define VSOCKET_RDMA_PROTO_H

#include <stdint.h>

#include "core/sha256.h"

#define VS_RDMA_MAGIC 0x7673524du /* "vsRM" */
/* 4: rings grow (GROW, REGION, EPOCH); a peer of another version stays on
 * TCP. */
#define VS_RDMA_VERSION 4

/* Immediate data: the top bit tells a credit from a data write. */
#define VS_RDMA_IMM_CREDIT 0x80000000u

enum vs_rdma_msg_type {
    VS_RDMA_MSG_PROOF = 1,  /* accepter: proof, its ring and credit word */
    VS_RDMA_MSG_RING,       /* connector: its ring and credit word */
    VS_RDMA_MSG_SWITCH,     /* a: our transport data starts at stream offset a */
    VS_RDMA_MSG_SHUT,       /* a: our transport data ends at a (SHUT_WR, close) */
    VS_RDMA_MSG_REVERT,     /* version 2; a leaving end says CUT since version 3 */
    VS_RDMA_MSG_CREDIT_REQ, /* we wait for space: answer with a credit immediate */
    VS_RDMA_MSG_OFFER,      /* a: stream position, b: length, credit_addr: address, rkey */
    VS_RDMA_MSG_RX_WAIT,    /* we sleep in a read of a: large sends may be offered */
    VS_RDMA_MSG_CUT,        /* we leave RDMA (leave.c). a: consumed of yours, resend
                             * the rest on TCP; b: what you had credited us. Our
                             * transport data ends where you stopped reading (what you
                             * pulled or were written past it is void); TCP carries
                             * ours from b on: skip what you read past b */
    VS_RDMA_MSG_GROW,       /* a: the ring size we would write into (grow.c) */
    VS_RDMA_MSG_REGION,     /* its answer. a: address, b: size (0: declined), rkey */
    VS_RDMA_MSG_EPOCH,      /* a: from this stream position (all before it credited),
                             * our writes go into your ring of size b: the one you
                             * granted last, or your first */
};

/* A message: fits the receive buffers (VS_RDMA_MSG_SIZE). */
struct vs_rdma_msg {
    uint16_t type;
    uint16_t pad;
    uint32_t rkey;        /* PROOF, RING: of the ring */
    uint64_t a, b;        /* offsets; PROOF, RING: ring address, size */
    uint64_t credit_addr; /* PROOF, RING */
    uint32_t credit_rkey;
    uint32_t pad2;
    uint8_t mac[VS_SHA256_LEN]; /* PROOF */
};

#define VS_RDMA_MSG_SIZE 128

/* Connect request (rdma_cm allows 56 bytes on RC). */
struct vs_rdma_req {
    uint32_t magic;
    uint16_t version;
    uint16_t pad;
    uint64_t nonce;
    /* How many bytes the accepter had sent and received on TCP when it
     * called: the proof covers the prefixes both ends have. */
    uint64_t tx, rx;
};

/* Its answer (accept: up to 196 bytes), or a rejection's (148 bytes). */
struct vs_rdma_rep {
    uint32_t magic;
    uint16_t version;
    uint16_t code; /* rejection: enum vs_rdma_reject */
    uint64_t nonce;
    uint64_t tx, rx;
    uint8_t mac[VS_SHA256_LEN];
};

enum vs_rdma_reject {
    VS_RDMA_REJECT_NONE,
    VS_RDMA_REJECT_NOT_YET, /* no byte in common yet: call again later */
    VS_RDMA_REJECT_ADDRESS, /* you are not our TCP peer */
    VS_RDMA_REJECT_BUSY,    /* another caller is being checked */
    VS_RDMA_REJECT_DECLINE, /* we cannot (resources): stay on TCP */
};

#endif
