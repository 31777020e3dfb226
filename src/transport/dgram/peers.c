/* peers.c - a UDP socket's table of peers (peers.h). */
#include "transport/dgram/peers.h"
#include "transport/dgram/proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#define EMPTY 0 /* an index entry: 0, or a slot + 1 */

struct vs_udp_peers {
    uint32_t cap;     /* slots */
    uint32_t buckets; /* index entries: a power of two >= 2 * cap */
    uint32_t count;
    uint32_t free_hint;
    uint64_t seed;
    /* then uint32_t index[buckets], then struct vs_udp_peer slot[cap] */
};

static uint32_t *index_of(const struct vs_udp_peers *t)
{
    return (uint32_t *)(t + 1);
}

static struct vs_udp_peer *slots_of(const struct vs_udp_peers *t)
{
    uintptr_t at = (uintptr_t)(index_of(t) + t->buckets);
    return (struct vs_udp_peer *)((at + 7) & ~(uintptr_t)7);
}

static uint32_t buckets_for(uint32_t cap)
{
    uint32_t b = 2;
    while (b < 2 * cap)
        b <<= 1;
    return b;
}

size_t vs_udp_peers_size(uint32_t cap)
{
    size_t index = (size_t)buckets_for(cap) * sizeof(uint32_t);
    return sizeof(struct vs_udp_peers) + ((index + 7) & ~(size_t)7) +
           (size_t)cap * sizeof(struct vs_udp_peer);
}

struct vs_udp_peers *vs_udp_peers_init(void *mem, uint32_t cap, uint64_t seed)
{
    if (cap == 0 || cap > VS_UDP_PEERS_MAX)
        return NULL;
    memset(mem, 0, vs_udp_peers_size(cap));
    struct vs_udp_peers *t = mem;
    t->cap = cap;
    t->buckets = buckets_for(cap);
    t->seed = seed;
    return t;
}

uint32_t vs_udp_peers_count(const struct vs_udp_peers *t)
{
    return t->count;
}

/* A seeded mix of the key (splitmix64's finaliser over its words): peers
 * choose their ports, not where they land. */
static uint32_t bucket(const struct vs_udp_peers *t, const uint8_t addr[16], uint16_t port)
{
    uint64_t a, b;
    memcpy(&a, addr, 8);
    memcpy(&b, addr + 8, 8);
    uint64_t h = t->seed ^ (a * 0x9e3779b97f4a7c15ull) ^ (b + port);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return (uint32_t)h & (t->buckets - 1);
}

static bool same(const struct vs_udp_peer *p, const uint8_t addr[16], uint16_t port)
{
    return p->port == port && memcmp(p->addr, addr, 16) == 0;
}

/* The index entry of the key, or of the empty entry where it would go. */
static uint32_t probe(const struct vs_udp_peers *t, const uint8_t addr[16], uint16_t port)
{
    const uint32_t *ix = index_of(t);
    const struct vs_udp_peer *sl = slots_of(t);
    uint32_t b = bucket(t, addr, port);
    while (ix[b] != EMPTY && !same(&sl[ix[b] - 1], addr, port))
        b = (b + 1) & (t->buckets - 1);
    return b;
}

int vs_udp_peers_find(const struct vs_udp_peers *t, const struct sockaddr_storage *addr)
{
    uint8_t a[16];
    uint16_t port;
    if (!vs_udp_addr_key(addr, a, &port))
        return -1;
    uint32_t e = index_of(t)[probe(t, a, port)];
    return e == EMPTY ? -1 : (int)e - 1;
}

int vs_udp_peers_add(struct vs_udp_peers *t, const struct sockaddr_storage *addr)
{
    uint8_t a[16];
    uint16_t port;
    if (!vs_udp_addr_key(addr, a, &port))
        return -EAFNOSUPPORT;
    uint32_t *ix = index_of(t);
    uint32_t b = probe(t, a, port);
    if (ix[b] != EMPTY)
        return (int)ix[b] - 1;
    if (t->count == t->cap)
        return -ENOSPC;
    struct vs_udp_peer *sl = slots_of(t);
    uint32_t s = t->free_hint;
    while (sl[s].used)
        s = (s + 1) % t->cap;
    sl[s].used = 1;
    memcpy(sl[s].addr, a, 16);
    sl[s].port = port;
    sl[s].state = 0;
    sl[s].last_ns = 0;
    ix[b] = s + 1;
    t->count++;
    t->free_hint = (s + 1) % t->cap;
    return (int)s;
}

/* Linear probing's deletion: the entries after the hole that would not be
 * found across it move back into it (no tombstones, so a table that
 * churns never fills with them). */
static void unlink_entry(struct vs_udp_peers *t, uint32_t hole)
{
    uint32_t *ix = index_of(t);
    const struct vs_udp_peer *sl = slots_of(t);
    uint32_t mask = t->buckets - 1;
    ix[hole] = EMPTY;
    for (uint32_t b = (hole + 1) & mask; ix[b] != EMPTY; b = (b + 1) & mask) {
        const struct vs_udp_peer *p = &sl[ix[b] - 1];
        uint32_t home = bucket(t, p->addr, p->port);
        /* Stays if its home lies cyclically in (hole, b]. */
        bool stays = hole <= b ? (home > hole && home <= b) : (home > hole || home <= b);
        if (!stays) {
            ix[hole] = ix[b];
            ix[b] = EMPTY;
            hole = b;
        }
    }
}

void vs_udp_peers_remove(struct vs_udp_peers *t, int slot)
{
    struct vs_udp_peer *p = vs_udp_peers_at(t, slot);
    if (!p)
        return;
    unlink_entry(t, probe(t, p->addr, p->port));
    p->used = 0;
    p->gen++; /* the old id dies now: 256 reuses before it could name the slot again */
    t->count--;
}

struct vs_udp_peer *vs_udp_peers_at(struct vs_udp_peers *t, int slot)
{
    if (slot < 0 || (uint32_t)slot >= t->cap || !slots_of(t)[slot].used)
        return NULL;
    return &slots_of(t)[slot];
}

uint32_t vs_udp_peers_id(const struct vs_udp_peers *t, int slot)
{
    return (uint32_t)slot << 8 | slots_of(t)[slot].gen;
}

int vs_udp_peers_by_id(const struct vs_udp_peers *t, uint32_t id)
{
    uint32_t slot = id >> 8;
    if (slot >= t->cap)
        return -1;
    const struct vs_udp_peer *p = &slots_of(t)[slot];
    return p->used && p->gen == (uint8_t)id ? (int)slot : -1;
}

int vs_udp_peers_next(const struct vs_udp_peers *t, int from)
{
    const struct vs_udp_peer *sl = slots_of(t);
    for (uint32_t s = from < 0 ? 0 : (uint32_t)from; s < t->cap; s++)
        if (sl[s].used)
            return (int)s;
    return -1;
}
