/* ring_prog.h - a fuzz input run as a program against a ring: public ring
 * operations interleaved with a hostile peer's writes into the shared
 * mapping, every result checked.
 *
 * The harness knows nothing of the header's layout: a peer's write is a
 * fuzzer-chosen value at a fuzzer-chosen byte offset of the header (the
 * bytes from the mapping's start to the data, r->data - r->sh) or of the
 * data area. Until the first write that changes a byte, the exact stream
 * model holds (every byte read is the byte written at that offset, counts
 * as ring.h documents them); after it, only bounds hold: a byte count
 * within the request or a negative errno the operation documents, and no
 * write outside the caller's buffers (ASan, canaries). */
#ifndef VSOCKET_FUZZ_RING_PROG_H
#define VSOCKET_FUZZ_RING_PROG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fuzz_input.h"
#include "memory/ring.h"

struct ring_prog {
    struct vs_ring *cons, *prod; /* either may be NULL: that end is not ours */
    unsigned char *view;         /* the shared mapping, where the peer writes; NULL: none */
    size_t view_size;
    /* The exact model, valid while !poisoned. */
    uint64_t written, read;
    bool writer_closed, reader_closed;
    bool writer_reset; /* the last close_writer reset (ECONNRESET at the end) */
    bool poisoned;
    /* The producer's geometry (ring_prog_run() fills it in): the window,
     * the top region, the limit the model expects, and whether writes may
     * stop at a region's end (a ring that can grow). */
    uint64_t window, top, limit;
    bool elastic;
    long now_ns; /* the clock vs_ring_reclaim() and vs_ring_reclaim_consumed() are given */
};

/* Runs the rest of IN as steps on P. */
void ring_prog_run(struct ring_prog *p, struct fz_in *in);

/* Around one input: fails the run if a descriptor or a memfd mapping
 * outlived it. */
void fz_leaks_begin(void);
void fz_leaks_end(void);

#endif
