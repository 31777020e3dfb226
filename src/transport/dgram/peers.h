/* peers.h - a UDP socket's table of peers (docs/design/udp.md §3.6): which
 * addresses it talks to on a path other than the kernel's, each in a slot
 * the peer's messages name.
 *
 * One block of memory the caller provides (the socket's shared page, so
 * that it survives fork): a header, an open-addressed index (linear
 * probing, twice the slots, a per-table seed so that peers cannot choose
 * colliding addresses), and the slots. A slot's id is its index and a
 * generation bumped at every reuse: a message naming an old peer's id
 * finds nothing. Addresses are keys as the kernel delivers them: an IPv4
 * peer seen through a v4-mapped IPv6 address is the same peer.
 * Not thread-safe: the caller holds the socket's lock. */
#ifndef VSOCKET_DGRAM_PEERS_H
#define VSOCKET_DGRAM_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The most peers a table holds (VSOCKET_UDP_PEERS's ceiling). */
#define VS_UDP_PEERS_MAX 65536

struct vs_udp_peer {
    uint8_t addr[16]; /* IPv6, IPv4 v4-mapped */
    uint16_t port;    /* host order */
    uint8_t used;
    uint8_t gen;
    uint32_t state;   /* the caller's: its path, kernel, discovering, ... */
    uint64_t last_ns; /* the caller's: the last datagram either way */
};

struct vs_udp_peers; /* the block's header */

/* Bytes a table of CAP slots takes (CAP in 1 .. VS_UDP_PEERS_MAX). */
size_t vs_udp_peers_size(uint32_t cap);
/* Lays out an empty table of CAP slots in MEM (vs_udp_peers_size bytes,
 * 8-aligned); SEED keys its hash. */
struct vs_udp_peers *vs_udp_peers_init(void *mem, uint32_t cap, uint64_t seed);

uint32_t vs_udp_peers_count(const struct vs_udp_peers *t);
/* The slot of ADDR, or -1. */
int vs_udp_peers_find(const struct vs_udp_peers *t, const struct sockaddr_storage *addr);
/* The slot of ADDR, added (state 0) if it was not there; -ENOSPC when the
 * table is full, -EAFNOSUPPORT for another family. */
int vs_udp_peers_add(struct vs_udp_peers *t, const struct sockaddr_storage *addr);
/* Frees SLOT: its id names nothing from now on. */
void vs_udp_peers_remove(struct vs_udp_peers *t, int slot);
struct vs_udp_peer *vs_udp_peers_at(struct vs_udp_peers *t, int slot);
/* The id a peer puts in its messages (index << 8 | generation), and back:
 * the slot, or -1 when the id is not a live slot's. */
uint32_t vs_udp_peers_id(const struct vs_udp_peers *t, int slot);
int vs_udp_peers_by_id(const struct vs_udp_peers *t, uint32_t id);
/* The first used slot at or after FROM, or -1: for walks (idle expiry). */
int vs_udp_peers_next(const struct vs_udp_peers *t, int from);

#endif
