/* fuzz_ring.c - libFuzzer target: a ring pair in one process, driven by the
 * input as a program of ring operations and of a hostile peer's writes into
 * the shared header and data (ring_prog.c).
 *
 * The first byte picks the capacity and which end creates the ring; the
 * other end attaches a duplicate of its memfd, as the peer would attach the
 * descriptor it received. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "ring_prog.h"

/* Creates RC's ring and attaches AT to a duplicate of its memfd. */
static void make_pair(struct vs_ring *rc, enum vs_ring_role role, struct vs_ring *at,
                      uint64_t capacity)
{
    int rc_create = vs_ring_create(rc, vs_ring_size_for(capacity, capacity, capacity), role);
    FZ_CHECK(rc_create == 0, "vs_ring_create(%lu): %d", (unsigned long)capacity, rc_create);
    int fd = fcntl(rc->fd, F_DUPFD_CLOEXEC, 0);
    FZ_CHECK(fd >= 0, "dup");
    enum vs_ring_role other = role == VS_RING_CONSUMER ? VS_RING_PRODUCER : VS_RING_CONSUMER;
    int rc_attach = vs_ring_attach(at, fd, other);
    FZ_CHECK(rc_attach == 0, "vs_ring_attach of a fresh ring: %d", rc_attach);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_in in = {data, size};
    fz_leaks_begin();
    uint8_t setup = fz_u8(&in);
    uint64_t capacity = (uint64_t)VS_RING_MIN_CAPACITY << (setup % 5); /* 4 .. 64 KiB */
    struct vs_ring cons, prod;
    memset(&cons, 0, sizeof(cons));
    memset(&prod, 0, sizeof(prod));
    if (setup & 0x80)
        make_pair(&prod, VS_RING_PRODUCER, &cons, capacity);
    else
        make_pair(&cons, VS_RING_CONSUMER, &prod, capacity);
    struct ring_prog p = {.cons = &cons, .prod = &prod};
    /* The peer writes through its own mapping of the same file: either one
     * of ours serves, as both map all of it. */
    struct vs_ring *peer = setup & 0x40 ? &cons : &prod;
    p.view = (unsigned char *)peer->sh;
    p.view_size = peer->map_size;
    ring_prog_run(&p, &in);
    vs_ring_destroy(&cons);
    vs_ring_destroy(&prod);
    fz_leaks_end();
    return 0;
}
