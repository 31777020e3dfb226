/* fuzz_ring.c - libFuzzer target: a ring pair in one process, driven by the
 * input as a program of ring operations and of a hostile peer's writes into
 * the shared header and data (ring_prog.c).
 *
 * The first byte picks the window, which end creates the ring, and whether
 * it can grow (then a second byte picks the most it may hold: the ladder
 * of regions, growth and reclaim are in play); the other end attaches a
 * duplicate of its memfd, as the peer would attach the descriptor it
 * received. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "ring_prog.h"

/* Creates RC's ring and attaches AT to a duplicate of its memfd. */
static void make_pair(struct vs_ring *rc, enum vs_ring_role role, struct vs_ring *at,
                      uint64_t window, uint64_t most)
{
    int rc_create = vs_ring_create(rc, vs_ring_size_for(window, most, most), role);
    FZ_CHECK(rc_create == 0, "vs_ring_create(%lu, %lu): %d", (unsigned long)window,
             (unsigned long)most, rc_create);
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
    uint64_t window = (uint64_t)VS_RING_MIN_CAPACITY << (setup % 5); /* 4 .. 64 KiB */
    uint64_t most = window;
    if (setup & 0x20) {
        /* Up to 512 KiB, so that the span (under twice the top region)
         * stays below the stream pattern's period (ring_prog.c). */
        uint8_t g = fz_u8(&in);
        most = window << (g % 8);
        if (most > (512u << 10))
            most = 512u << 10;
        if (g & 0x80) /* not a power of two: the top region holds more */
            most -= most / 4;
        if (most < window)
            most = window;
    }
    struct vs_ring cons, prod;
    memset(&cons, 0, sizeof(cons));
    memset(&prod, 0, sizeof(prod));
    if (setup & 0x80)
        make_pair(&prod, VS_RING_PRODUCER, &cons, window, most);
    else
        make_pair(&cons, VS_RING_CONSUMER, &prod, window, most);
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
