/* reclaim.h - a connection's rings give their memory back when idle
 * (reclaim.c; the mechanism is vs_ring_reclaim, memory/ring.h). */
#ifndef VSOCKET_SHM_RECLAIM_H
#define VSOCKET_SHM_RECLAIM_H

#include "core/sock.h"
#include "memory/ring.h"

struct vs_shm_conn;

/* How long a ring must have been unchanged before its pages go back.
 * Giving them back costs a system call, and a page fault per 4 KiB the
 * next time the connection moves data: a connection in use (a request
 * every few milliseconds, a stream that pauses) must keep them. The kernel
 * frees an idle socket's buffers at once; a tenth of a second later is
 * close enough for memory that nobody uses. */
#define VS_SHM_IDLE_NS 100000000L

/* The program waits and C has been quiet for a while (a slice of a
 * blocking call, a nap of poll or epoll): give back what C's rings no
 * longer need (the transmit ring as its producer, the receive ring as its
 * consumer, whatever the peer's program does), and now and then look at
 * every connection of the process, for those nobody waits on. May make
 * system calls. HELD: C's ring whose side's lock the caller holds (a
 * blocking call asleep on it), or NULL. */
void vs_shm_idle(struct vs_shm_conn *c, const struct vs_ring *held);

/* The same for socket S (transport.h: the idle operation). */
void vs_shm_idle_sock(struct vs_sock *s);

#endif
