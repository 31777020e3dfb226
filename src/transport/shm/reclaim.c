/* reclaim.c - when a connection's rings give their memory back.
 *
 * Only the producer of a ring may free its pages (it alone knows that no
 * write is in flight: it holds the sending side's lock), so each process
 * looks after its transmit rings; the peer looks after ours. Nothing runs
 * on the data path: the program's own waits call in, the blocking calls at
 * each slice (io.c), poll at each nap and epoll at its once-a-second look
 * at quiet records (readiness/). Each also walks every connection of the
 * process now and then, for connections nobody waits on (a client that
 * keeps a pool of connections and blocks on one). A process that never
 * enters vsocket again keeps its rings as they are. */
#include <stdatomic.h>

#include "core/clock.h"
#include "transport/shm/conn.h"
#include "transport/shm/reclaim.h"

/* How often one process walks all its connections: the walk touches each
 * connection's state, about a microsecond for a hundred of them. */
#define SCAN_NS 250000000L

static _Atomic long last_scan;

/* Under the sending side's lock, if free: a sender in the middle of a
 * write (or asleep on a full ring) has nothing to give back anyway. Not a
 * ring another holder set up after a fork: this process does not map it. */
static void reclaim_tx(struct vs_shm_conn *c, long now)
{
    if (!atomic_load_explicit(&c->tx_ready, memory_order_acquire) || !c->held->tx_mapped ||
        !vs_plock_trylock(&c->tx_lock))
        return;
    vs_ring_reclaim(&c->tx, now, VS_SHM_IDLE_NS);
    vs_plock_unlock(&c->tx_lock);
}

static void reclaim_one(struct vs_shm_conn *c, void *arg)
{
    reclaim_tx(c, *(long *)arg);
}

void vs_shm_idle(struct vs_shm_conn *c)
{
    long now = vs_now_ns(), last = atomic_load_explicit(&last_scan, memory_order_relaxed);
    if (c)
        reclaim_tx(c, now);
    if (now - last < SCAN_NS || !atomic_compare_exchange_strong(&last_scan, &last, now))
        return;
    vs_shm_conn_each(reclaim_one, &now);
}

void vs_shm_idle_sock(struct vs_sock *s)
{
    if (s->conn)
        vs_shm_idle(s->conn);
}
