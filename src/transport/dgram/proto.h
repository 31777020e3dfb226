/* proto.h - the wire formats of UDP over UD and shm (docs/design/udp.md §3.3,
 * §3.4, §5.1): pure encoders and parsers, no I/O.
 *
 * Three kinds of message, all little-endian with fixed layouts:
 *  - control datagrams on the program's own kernel UDP socket (CHALLENGE,
 *    RETRACT), recognised by an 8-byte magic;
 *  - the rendezvous's rdma_cm private data (OFFER in the SIDR request,
 *    ANSWER in its reply);
 *  - the 32-byte header of every UD message (40 for a fragment).
 * Every parser reads at most LEN bytes, trusts nothing of the peer's, and
 * gives back only fields that passed its checks. An address on the wire is
 * 20 bytes: family (AF_INET or AF_INET6, 2), port (2, host value), and 16
 * bytes of IPv6 address, IPv4 as its v4-mapped form. */
#ifndef VSOCKET_DGRAM_PROTO_H
#define VSOCKET_DGRAM_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define VS_UDP_VERSION 1
#define VS_UDP_NONCE 16 /* nonces, challenges, tokens */
#define VS_UDP_GID 16
/* The largest UDP payload over IPv4, and so the largest datagram. */
#define VS_UDP_DATAGRAM_MAX 65507

enum vs_udp_verdict {
    VS_UDP_OK,            /* ours, well-formed: its fields are filled in */
    VS_UDP_NOT_OURS,      /* the program's: deliver untouched */
    VS_UDP_MALFORMED,     /* ours, wrong: consume, count, ignore */
    VS_UDP_OTHER_VERSION, /* ours, from a vsocket of another version */
};

/* ------------------------------------------- control, on the kernel socket */

#define VS_UDP_CTL_MAGIC "\xffVSKUDP" /* and a zero: 8 bytes */
#define VS_UDP_CTL_HEAD 12            /* magic, version, type, length */
#define VS_UDP_CHALLENGE_LEN 64
#define VS_UDP_RETRACT_LEN 48

enum { VS_UDP_CTL_CHALLENGE = 1, VS_UDP_CTL_RETRACT = 2 };

struct vs_udp_ctl {
    uint8_t type;
    uint32_t slot;              /* the sender's peer slot for the pair, 0: none */
    uint8_t echo[VS_UDP_NONCE]; /* a nonce the receiver issued, or the pair's token */
    uint8_t body[VS_UDP_NONCE]; /* CHALLENGE: the challenge; RETRACT: the incarnation */
};

/* Writes M into BUF (room for VS_UDP_CHALLENGE_LEN); its length, 0 for an
 * unknown type. */
size_t vs_udp_ctl_encode(const struct vs_udp_ctl *m, uint8_t *buf);
enum vs_udp_verdict vs_udp_ctl_parse(const uint8_t *buf, size_t len, struct vs_udp_ctl *out);

/* ------------------------------------------------- rendezvous (SIDR data) */

#define VS_UDP_RV_MAGIC "VSU1"
#define VS_UDP_OFFER_LEN 92
#define VS_UDP_ANSWER_LEN 52
#define VS_UDP_ADDR_LEN 20

/* UD addressing of one endpoint. */
struct vs_udp_ud_addr {
    uint8_t gid[VS_UDP_GID];
    uint32_t qpn;  /* 24 bits */
    uint32_t qkey; /* top bit clear: a set one is the kernel's privileged range */
    uint32_t slot; /* the sender's peer slot for the pair */
};

struct vs_udp_offer {
    uint8_t flags;
    struct sockaddr_storage from; /* the initiator's socket */
    struct sockaddr_storage to;   /* the responder's, as the initiator sends to it */
    struct vs_udp_ud_addr ud;
    uint8_t nonce[VS_UDP_NONCE];
};

enum { VS_UDP_ANSWER_OK, VS_UDP_ANSWER_CROSSING, VS_UDP_ANSWER_BUSY, VS_UDP_ANSWER_VERSION };

struct vs_udp_answer {
    uint8_t status;
    struct vs_udp_ud_addr ud;
    uint8_t nonce[VS_UDP_NONCE];
};

/* BUF: room for VS_UDP_OFFER_LEN / VS_UDP_ANSWER_LEN. Returns the length
 * written, 0 when an address is neither IPv4 nor IPv6. */
size_t vs_udp_offer_encode(const struct vs_udp_offer *m, uint8_t *buf);
size_t vs_udp_answer_encode(const struct vs_udp_answer *m, uint8_t *buf);
/* BOUND: the responder socket's own address; the offer's "to" must be it,
 * or any address on its port when BOUND is a wildcard. */
enum vs_udp_verdict vs_udp_offer_parse(const uint8_t *buf, size_t len,
                                       const struct sockaddr_storage *bound,
                                       struct vs_udp_offer *out);
enum vs_udp_verdict vs_udp_answer_parse(const uint8_t *buf, size_t len, struct vs_udp_answer *out);

/* ----------------------------- shm pair set-up, on the pair's unix socket */

/* Every message is 56 bytes: magic "VSUS" 4, version 1, type 1, status 1,
 * reserved 1, fd 8 (the sender's descriptor number of its UDP socket, for
 * the proof), then for HELLO the initiator's address as the responder will
 * see it (20) and the responder's as the initiator sends to it (20), zero
 * otherwise. udp.md §7. */
#define VS_UDP_HS_MAGIC "VSUS"
#define VS_UDP_HS_LEN 56

enum { VS_UDP_HS_HELLO = 1, VS_UDP_HS_ACCEPT, VS_UDP_HS_READY, VS_UDP_HS_DECLINE };
/* DECLINE's status. */
enum { VS_UDP_HS_REFUSED, VS_UDP_HS_CROSSING, VS_UDP_HS_BUSY };

struct vs_udp_hs {
    uint8_t type;
    uint8_t status;
    uint64_t fd;
    struct sockaddr_storage from, to; /* HELLO only */
};

/* BUF: room for VS_UDP_HS_LEN. The length, 0 when a HELLO's address is
 * neither IPv4 nor IPv6. */
size_t vs_udp_hs_encode(const struct vs_udp_hs *m, uint8_t *buf);
/* BOUND as for vs_udp_offer_parse: a HELLO's "to" must name it. */
enum vs_udp_verdict vs_udp_hs_parse(const uint8_t *buf, size_t len,
                                    const struct sockaddr_storage *bound, struct vs_udp_hs *out);

/* ------------------------------------------------------ the UD message head */

#define VS_UDP_HEAD_LEN 32
#define VS_UDP_FRAG_HEAD_LEN 40

enum {
    VS_UDP_MSG_DATA = 1,
    VS_UDP_MSG_FRAG,
    VS_UDP_MSG_CONFIRM,
    VS_UDP_MSG_CREDIT,
    VS_UDP_MSG_RETRACT,
};

struct vs_udp_head {
    uint8_t type;
    uint32_t slot;  /* the receiver's peer slot: index << 8 | generation */
    uint32_t seq;   /* per pair, wraps */
    uint32_t value; /* DATA: payload length; FRAG: datagram id; CREDIT: credit */
    uint8_t token[VS_UDP_NONCE];
    /* FRAG only */
    uint16_t frag_index, frag_count;
    uint32_t frag_total;
};

/* Returns the header's length (32, or 40 for FRAG), 0 for an unknown type. */
size_t vs_udp_head_encode(const struct vs_udp_head *h, uint8_t *buf);
/* A UD message of LEN bytes (after the GRH) whose payloads are at most
 * PAYLOAD_MAX bytes: its header, checked against the message's length.
 * *PAYLOAD: where the datagram's bytes start. Never VS_UDP_NOT_OURS. */
enum vs_udp_verdict vs_udp_head_parse(const uint8_t *buf, size_t len, size_t payload_max,
                                      struct vs_udp_head *out, size_t *payload);

/* An address as the wire and the peer table key it: 16 bytes of IPv6
 * (IPv4 v4-mapped) and the port (host order); false for another family. */
bool vs_udp_addr_key(const struct sockaddr_storage *ss, uint8_t addr[16], uint16_t *port);

/* Equal in time that does not depend on where they differ. */
bool vs_udp_token_equal(const uint8_t a[VS_UDP_NONCE], const uint8_t b[VS_UDP_NONCE]);

#endif
