/* dgram_ring.h - datagrams over a byte ring (ring.h): one record per
 * datagram, written whole or not at all, read whole or truncated, never
 * merged with its neighbours (docs/design/udp.md §5.3, §7).
 *
 * A record is a 16-byte head {u32 len, u32 tag, u64 stamp}, the datagram's
 * LEN bytes, and zeros up to a multiple of 8. TAG and STAMP are the
 * caller's (the sender's peer slot, a receive time): carried, not read.
 * The producer is not trusted: a head whose length is impossible, or a
 * record the ring cannot hold, is -EPROTO, never a read past the record. */
#ifndef VSOCKET_DGRAM_RING_H
#define VSOCKET_DGRAM_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "memory/ring.h"

#define VS_DGRAM_HEAD 16
/* The largest datagram: UDP's largest payload over IPv4. */
#define VS_DGRAM_MAX 65507

struct vs_dgram_meta {
    uint32_t len; /* the datagram's whole length */
    uint32_t tag;
    uint64_t stamp;
};

/* The ring bytes a datagram of LEN bytes takes. */
size_t vs_dgram_charge(size_t len);

/* Producer: writes the datagram in IOV (M->len is ignored: the iov's total
 * is the length) as one record. 0; -EAGAIN when the ring cannot take it
 * whole now (UDP drops it: the caller counts); -EBUSY when the consumer is
 * giving the ring's pages back at this moment (nothing written: the ring
 * is empty, try again); -EMSGSIZE over VS_DGRAM_MAX; -EPIPE, -EPROTO as
 * vs_ring_write. */
int vs_dgram_put(struct vs_ring *r, const struct vs_dgram_meta *m, const struct iovec *iov,
                 int iovcnt);

/* Consumer: the next datagram's length, -EAGAIN when none is whole yet, 0
 * bytes at end of stream are reported as -EPIPE, -EPROTO. */
ssize_t vs_dgram_next_len(struct vs_ring *r);

/* Consumer: copies the next datagram into IOV (as much as fits; the rest
 * is dropped, as UDP truncates), its head into *M. VS_RING_PEEK leaves it
 * in the ring. Bytes copied; -EAGAIN, -EPIPE, -EPROTO as above. */
ssize_t vs_dgram_take(struct vs_ring *r, struct vs_dgram_meta *m, const struct iovec *iov,
                      int iovcnt, int flags);

#endif
