/* dev.h - what the rdma transport keeps per process: the rdma_cm event
 * channel every connection's set-up uses. Created at the first connection that tries RDMA; a child
 * after fork starts without them. */
#ifndef VSOCKET_RDMA_DEV_H
#define VSOCKET_RDMA_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* The event channel, or NULL when rdma_cm cannot be used (no device, no
 * rdma_ucm): *WHY then says so (a reason of core/reason.h). */
struct rdma_event_channel *vs_rdma_dev_channel(const char **why);

/* Whether this machine has an RDMA device at all (a look at sysfs). */
bool vs_rdma_dev_channel_possible(void);

/* Reads every rdma_cm event waiting and hands each to its connection
 * (cm.c: vs_rdma_on_cm_event). Never blocks. */
void vs_rdma_dev_events(void);

/* One rdma_cm event, copied: the event itself is acknowledged before its
 * connection acts on it (rdma_destroy_id waits for acknowledgements). */
struct vs_rdma_event {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id *id;
    uint8_t pdata[196];
    uint8_t pdata_len;
};

/* Serialises event dispatch with connections letting go of their ids: a
 * connection's ids are destroyed under it. Order: cm lock, then ctl. */
void vs_rdma_dev_lock(void);
void vs_rdma_dev_unlock(void);

/* The program changes its credentials: the kernel refuses every command
 * on a device file (uverbs, rdma_cm) opened before, to a process whose
 * credentials changed since (ib_safe_file_access; even setuid to the same
 * uid makes new credentials), and librdmacm keeps its device contexts for
 * the life of the process. So no set-up starts from then on (*WHY).
 * Whether this call retired it (open, and not retired before); unretire:
 * the change failed. */
bool vs_rdma_dev_retire(const char *why);
void vs_rdma_dev_unretire(void);

/* fork: librdmacm's state (device contexts, the event channel) belongs to
 * the parent; a child of a process that used it cannot use RDMA. */
void vs_rdma_dev_fork_child(void);

#endif
