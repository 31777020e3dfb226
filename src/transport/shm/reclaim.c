/* reclaim.c - when a connection's rings give their memory back.
 *
 * Each process looks after both rings of its connections: its transmit
 * rings as their producer (under the sending side's lock, so no write of
 * ours is in flight), and its receive rings as their consumer, once read
 * to the end and quiet, through the ring's handshake with the producer
 * (memory/ring.c: begin_write): the writer's program may be asleep, busy
 * elsewhere or blocked in a call that is not ours, and its rings still go
 * back, as long as the process at the other end calls. Nothing runs on the
 * data path: the program's own waits call in, the blocking calls at each
 * slice (io.c), poll at each nap and epoll at its once-a-second look at
 * quiet records (readiness/). Each also walks every connection of the
 * process now and then, for connections nobody waits on (a client that
 * keeps a pool of connections and blocks on one). Rings whose two
 * processes both never enter vsocket again keep their pages. */
#include <stdatomic.h>

#include "core/clock.h"
#include "transport/shm/conn.h"
#include "transport/shm/proto.h"
#include "transport/shm/reclaim.h"

/* How often one process walks all its connections: the walk touches each
 * connection's state, about a microsecond for a hundred of them. */
#define SCAN_NS 250000000L

static _Atomic long last_scan;

/* Under the sending side's lock, if free: a sender in the middle of a
 * write (or asleep on a full ring) has nothing to give back anyway. */
static void reclaim_tx(struct vs_shm_conn *c, long now)
{
    if (!atomic_load_explicit(&c->tx_ready, memory_order_acquire) || !vs_plock_trylock(&c->tx_lock))
        return;
    vs_ring_reclaim(&c->tx, now, VS_SHM_IDLE_NS);
    vs_plock_unlock(&c->tx_lock);
}

/* Under the receiving side's lock: taken if free, or already ours (HELD: a
 * blocking recv asleep on this very ring, whose writer may be the one that
 * never calls again). The producer saw no room while we held the ring:
 * wake it if it went to sleep on that, as a read does. */
static void reclaim_rx(struct vs_shm_conn *c, long now, bool held)
{
    if (!atomic_load_explicit(&c->rx_ready, memory_order_acquire) ||
        (!held && !vs_plock_trylock(&c->rx_lock)))
        return;
    if (vs_ring_reclaim_consumed(&c->rx, now, VS_SHM_IDLE_NS) && vs_ring_producer_sleeping(&c->rx))
        vs_shm_send_msg(c, VS_MSG_WAKE, 0, 0);
    if (!held)
        vs_plock_unlock(&c->rx_lock);
}

static void reclaim_one(struct vs_shm_conn *c, void *arg)
{
    reclaim_tx(c, *(long *)arg);
    reclaim_rx(c, *(long *)arg, false);
}

void vs_shm_idle(struct vs_shm_conn *c, const struct vs_ring *held)
{
    long now = vs_now_ns(), last = atomic_load_explicit(&last_scan, memory_order_relaxed);
    if (c) {
        reclaim_tx(c, now);
        reclaim_rx(c, now, held == &c->rx);
    }
    if (now - last < SCAN_NS || !atomic_compare_exchange_strong(&last_scan, &last, now))
        return;
    vs_shm_conn_each(reclaim_one, &now);
}

void vs_shm_idle_sock(struct vs_sock *s)
{
    if (s->conn)
        vs_shm_idle(s->conn, NULL);
}
