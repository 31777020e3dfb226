/* peer_cache.c - destinations without vsocket, remembered for a while so
 * that later connections to them pay nothing (conn.h). */
#include <pthread.h>
#include <string.h>

#include "config/config.h"
#include "core/clock.h"
#include "transport/rdma/conn.h"

/* A small table, oldest entry replaced: a process talks to few plain
 * destinations at once, and forgetting one costs one more try. */
#define SLOTS 64

struct entry {
    uint8_t key[18]; /* address (IPv6 or mapped IPv4) and port (0: any) */
    long until_ns;
    unsigned verdicts; /* no answer this many times in a row */
};

/* A loaded peer that runs vsocket can miss one rendezvous (thousands of
 * set-ups at once); a peer without vsocket misses every one. */
#define VERDICTS 2

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry table[SLOTS];
static unsigned next_slot;

static void make_key(bool accepter, const struct sockaddr_storage *ss, uint8_t key[18])
{
    memset(key, 0, 18);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const void *)ss;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &in->sin_addr, 4);
        if (!accepter)
            memcpy(key + 16, &in->sin_port, 2);
    } else {
        const struct sockaddr_in6 *in6 = (const void *)ss;
        memcpy(key, &in6->sin6_addr, 16);
        if (!accepter)
            memcpy(key + 16, &in6->sin6_port, 2);
    }
}

void vs_rdma_peer_cache_remember(bool accepter, const struct sockaddr_storage *peer)
{
    if (!vs_config.rdma_peer_cache_s)
        return;
    struct entry e;
    make_key(accepter, peer, e.key);
    e.until_ns = vs_now_ns() + (long)vs_config.rdma_peer_cache_s * 1000000000L;
    pthread_mutex_lock(&lock);
    unsigned slot = next_slot;
    e.verdicts = 1;
    for (unsigned i = 0; i < SLOTS; i++)
        if (memcmp(table[i].key, e.key, sizeof(e.key)) == 0) {
            slot = i;
            e.verdicts = table[i].verdicts + 1;
        }
    if (slot == next_slot)
        next_slot = (next_slot + 1) % SLOTS;
    table[slot] = e;
    pthread_mutex_unlock(&lock);
}

bool vs_rdma_peer_cache_plain(bool accepter, const struct sockaddr_storage *peer)
{
    uint8_t key[18];
    make_key(accepter, peer, key);
    long now = vs_now_ns();
    bool plain = false;
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < SLOTS && !plain; i++)
        plain = table[i].until_ns > now && table[i].verdicts >= VERDICTS &&
                memcmp(table[i].key, key, sizeof(key)) == 0;
    pthread_mutex_unlock(&lock);
    return plain;
}

void vs_rdma_peer_cache_forget(bool accepter, const struct sockaddr_storage *peer)
{
    uint8_t key[18];
    make_key(accepter, peer, key);
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < SLOTS; i++)
        if (memcmp(table[i].key, key, sizeof(key)) == 0)
            table[i].verdicts = 0;
    pthread_mutex_unlock(&lock);
}
