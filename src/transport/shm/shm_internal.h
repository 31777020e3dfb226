/* shm_internal.h - helpers shared by the files of transport/shm. */
#ifndef VSOCKET_SHM_INTERNAL_H
#define VSOCKET_SHM_INTERNAL_H

#include <stdbool.h>

#include "core/sock.h"
#include "memory/ring.h"

/* Advances a pending handshake and shows the outcome in the statistics.
 * Costs one atomic load once the handshake is over. */
void vs_shm_sync(struct vs_sock *s, int fd);

/* Whether the operation of our role on RING can proceed (data or end of
 * stream for the consumer, space or reader gone for the producer). */
bool vs_shm_ring_ready(struct vs_ring *ring, bool want_data);

/* Busy-polls RING for VSOCKET_POLL_US at most; true as soon as it is ready. */
bool vs_shm_spin(struct vs_ring *ring, bool want_data, long asked_ns);

/* The peer left the rings (REVERT): resend what it did not read on TCP
 * and continue there, if the transmit side is free now. */
struct vs_shm_conn;
void vs_shm_revert_if_asked(struct vs_shm_conn *c, int fd);

#endif
