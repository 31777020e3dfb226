/* cq.h - the completion queues and the completion channel that the
 * connections of one thread share.
 *
 * Each thread that makes connections' calls has a group per device: one
 * completion channel (one descriptor for all its connections: the watch fd
 * that readiness waits on) and as many completion queues as its
 * connections need, each with room reserved for every queue pair it
 * serves, so that it can never overflow. A completion names its connection
 * by the tag in the high half of its work request id; whoever polls a CQ
 * sorts what it finds into each connection's inbox, which the connection's
 * own calls read (vs_rdma_cq_take). Whoever reads the channel's events
 * wakes the other threads asleep on it: the event may have been theirs. */
#ifndef VSOCKET_RDMA_CQ_H
#define VSOCKET_RDMA_CQ_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

struct vs_rdma_conn;
struct vs_rdma_cqg;
struct vs_rdma_gcq;

/* A completion, as much of it as a connection uses. */
struct vs_rdma_wc {
    uint32_t wr; /* the low half of the work request id */
    uint32_t byte_len;
    uint32_t imm; /* network order, as in ibv_wc */
    uint16_t opcode;
    uint16_t status;
};

/* The calling thread makes C's calls: C's completions are for it
 * (vs_rdma_cq_attach). Called while C is being set up. */
void vs_rdma_cq_home(struct vs_rdma_conn *c);

/* Joins C to the group on CTX of the thread that made C's calls last: c->cq is the CQ its queue
 * pair must use, with room for 2 × c->depth completions. -errno. */
int vs_rdma_cq_attach(struct vs_rdma_conn *c, struct ibv_context *ctx);

/* Leaves the group, once C's queue pair is destroyed (or was never made):
 * its completions still in the CQ are dropped and its room is given back. */
void vs_rdma_cq_detach(struct vs_rdma_conn *c);

/* The work request id of C's work request LOW. */
uint64_t vs_rdma_cq_wr_id(const struct vs_rdma_conn *c, uint32_t low);

/* Up to MAX of C's completions, oldest first, after its CQ was sorted into
 * the inboxes. (qp_lock) */
int vs_rdma_cq_take(struct vs_rdma_conn *c, struct vs_rdma_wc *out, int max);

/* Arms C's CQ: its next completion rings the group's channel. */
void vs_rdma_cq_notify(struct vs_rdma_conn *c);

/* The group's channel descriptor (C's watch fd), or -1. */
int vs_rdma_cq_fd(const struct vs_rdma_conn *c);

/* The channel of FD rang (or may have): reads its events, sorts the CQs
 * that rang, and wakes whoever else sleeps on it. How many events. */
unsigned vs_rdma_cq_events(int fd);

/* The same for C's group, found without a search. */
unsigned vs_rdma_cq_drain(struct vs_rdma_conn *c);

/* A blocking call is about to sleep on G's channel (ppoll) / woke up
 * (READABLE: the sleep saw the eventfd readable): other threads that read
 * the channel meanwhile wake it through the calling thread's own eventfd,
 * which begin returns (-1: none, sleep in slices). */
int vs_rdma_cq_sleep_begin(struct vs_rdma_cqg *g);
void vs_rdma_cq_sleep_end(struct vs_rdma_cqg *g, int wake_fd, bool readable);

/* fork: the child's copies of the groups are the parent's resources. */
void vs_rdma_cq_fork_child(void);

#endif
