/* rdma_fake.h - an RDMA device that is not there, for the RDMA targets: the
 * parts of libibverbs and librdmacm that transport/rdma/{cm,verbs,zcopy}.c
 * call, and the rest of the library those files call into, faked.
 *
 * The real cm.c, verbs.c and zcopy.c are linked as they are; only what
 * lies under them is this file: a queue pair whose work requests are
 * recorded (and completed when the harness says so), a completion queue
 * the harness fills with what the peer's actions would bring, registered
 * memory that is plain memory. So a harness plays the peer and the
 * adapter, and the code under test cannot tell. The rest of the library
 * (io.c, leave.c, conn.c, cq.c, dev.c, upgrade.c, ...) is not linked: its
 * functions here fail the run if called, unless the harness's paths reach
 * them (a few are recorded instead). */
#ifndef VSOCKET_FUZZ_RDMA_FAKE_H
#define VSOCKET_FUZZ_RDMA_FAKE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport/rdma/conn.h"

/* A send work request as the code posted it. */
struct fake_wr {
    int opcode; /* enum ibv_wr_opcode */
    bool signaled;
    uint32_t wr;    /* the low half of its id: what its completion carries */
    uint64_t local; /* its one scatter/gather entry */
    uint32_t len, lkey;
    uint64_t remote;    /* RDMA WRITE, READ */
    uint32_t rkey, imm; /* imm in network order */
    uint64_t value;     /* the first 8 bytes of a credit write when posted */
};

#define FAKE_QUEUE 1024 /* > twice the deepest queue pair */

struct fake {
    /* Sends posted and not yet completed by the "adapter", oldest first. */
    struct fake_wr sq[FAKE_QUEUE];
    unsigned sq_first, sq_count;
    /* Receive buffers posted (their slots), oldest first: the peer's next
     * SEND or WRITE with immediate takes the oldest. */
    uint32_t rq[FAKE_QUEUE];
    unsigned rq_first, rq_count;
    /* Completions waiting to be taken (vs_rdma_cq_take). */
    struct vs_rdma_wc cq[FAKE_QUEUE];
    unsigned cq_first, cq_count;
    unsigned max_wr; /* the queue pair's depth, as created */
    /* What set-up did (cm.c): the rejection's code and the private data
     * of the last accept, connect or reject. */
    bool rejected, accepted, connected, disconnected;
    uint16_t reject_code;
    uint8_t pdata[256];
    uint8_t pdata_len;
    /* rdma_create_qp fails while this is set (no inline data: the retry). */
    bool no_inline;
    /* The connection manager dropped the request being answered: its id
     * gives a queue pair no attributes (EINVAL, with or without inline). */
    bool stale;
    /* Called at every send posted, before it is queued: the harness's checks. */
    void (*on_post)(const struct fake_wr *wr);
};

extern struct fake fake;

/* Work requests per queue: VSOCKET_RDMA_QP_DEPTH's least (16), a few
 * more, and its default (256). */
static const unsigned fake_depths[8] = {16, 17, 20, 32, 48, 64, 128, 256};

/* Forgets everything: a new input. */
void fake_reset(void);
/* The id of a connection, on the fake device, with our and the peer's
 * addresses. */
struct rdma_cm_id *fake_id(const struct sockaddr_storage *local,
                           const struct sockaddr_storage *peer);
/* The oldest receive buffer posted, taken; false if none (the peer would
 * get "receiver not ready" and retry later). */
bool fake_take_recv(uint32_t *slot);
/* The oldest send posted, taken; false if none. */
bool fake_take_send(struct fake_wr *out);
/* Queues a completion. */
void fake_complete(const struct vs_rdma_wc *wc);
/* Memory regions registered and not deregistered. */
unsigned fake_regions(void);
/* verbs.c's areas mapped and not unmapped. */
unsigned fake_mappings(void);

/* verbs.c's mmap, munmap and madvise: it is compiled with these names for
 * those (CMakeLists.txt), so that its areas of up to FAKE_KEEP_MAX bytes
 * are kept for the next input (rdma_fake.c). */
#define FAKE_KEEP_MAX (64ul << 10)
void *fz_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int fz_munmap(void *addr, size_t len);
int fz_madvise(void *addr, size_t len, int advice);

#endif
