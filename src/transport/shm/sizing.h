/* sizing.h - how large a connection's rings are and how much they may hold
 * (sizing.c; vs_shm_ring_capacity() is in conn.h, for the handshake). */
#ifndef VSOCKET_SHM_SIZING_H
#define VSOCKET_SHM_SIZING_H

#include <stdint.h>

#include "memory/ring.h"

/* The most one direction of a connection may buffer: VSOCKET_SHM_RING_MAX,
 * or by default the largest receive buffer plus the largest send buffer
 * the kernel allows. */
uint64_t vs_shm_ring_ceiling(void);

/* The most our transmit ring may hold: the receiver's share PEER_RCV (from
 * its ring's header) plus what the kernel would hold in FD's send buffer,
 * within the ceiling. */
uint64_t vs_shm_tx_limit(int fd, uint64_t peer_rcv);

#endif
