/* ring_pair.h - a producer and a consumer of one ring in this process (the
 * consumer attaches a duplicate of the producer's memfd, as a peer would
 * attach the one it received): for the ring's unit tests. */
#ifndef VSOCKET_RING_PAIR_H
#define VSOCKET_RING_PAIR_H

#include <unistd.h>

#include "memory/ring.h"

/* 0, or -1 with nothing left open. */
static inline int pair_sized(struct vs_ring *p, struct vs_ring *c, struct vs_ring_size size)
{
    if (vs_ring_create(p, size, VS_RING_PRODUCER) != 0)
        return -1;
    int fd = dup(p->fd);
    if (vs_ring_attach(c, fd, VS_RING_CONSUMER) != 0) {
        close(fd);
        vs_ring_destroy(p);
        return -1;
    }
    return 0;
}

#endif
