/* stats.h - publishing per-socket statistics (see stats_format.h).
 *
 * Every function is safe to call when statistics are off or the table is
 * full: records then come from a private scratch record that nobody reads, so
 * the data path never tests for NULL. */
#ifndef VSOCKET_STATS_H
#define VSOCKET_STATS_H

#include <stdatomic.h>
#include <sys/socket.h>

#include "config/stats_format.h"

/* A record for a new socket, marked live. */
struct vs_stats_record *vs_stats_open(int fd, int family, int type, unsigned transport,
                                      const char *reason);

/* Marks the record closed; it stays visible (`vsocket stat --all`) until
 * its slot is needed again. */
void vs_stats_close(struct vs_stats_record *r);

void vs_stats_set_state(struct vs_stats_record *r, enum vs_sock_state state);
void vs_stats_set_fd(struct vs_stats_record *r, int fd);
void vs_stats_set_reason(struct vs_stats_record *r, const char *reason);
/* A passing state (reason) that ends within IN_NS nanoseconds from now. */
void vs_stats_set_reason_due(struct vs_stats_record *r, const char *reason, long in_ns);
/* The transport now carrying the socket, and why (may be ""). */
void vs_stats_set_transport(struct vs_stats_record *r, unsigned transport, const char *reason);
/* Either address may be NULL (left unchanged). */
void vs_stats_set_addrs(struct vs_stats_record *r, const struct sockaddr *local,
                        const struct sockaddr *peer);

static inline void vs_stats_count_tx(struct vs_stats_record *r, size_t bytes, unsigned msgs)
{
    atomic_fetch_add_explicit(&r->tx_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->tx_msgs, msgs, memory_order_relaxed);
}

static inline void vs_stats_count_rx(struct vs_stats_record *r, size_t bytes, unsigned msgs)
{
    atomic_fetch_add_explicit(&r->rx_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->rx_msgs, msgs, memory_order_relaxed);
}

static inline void vs_stats_set_dgram_peers(struct vs_stats_record *r, unsigned peers)
{
    atomic_store_explicit(&r->dgram_peers, peers, memory_order_relaxed);
}

static inline void vs_stats_count_dgram_drop(struct vs_stats_record *r)
{
    atomic_fetch_add_explicit(&r->dgram_drops, 1, memory_order_relaxed);
}

/* fork: hold the allocation lock across the fork, then give the child a
 * segment of its own (same address, so record pointers stay valid). */
void vs_stats_fork_prepare(void);
void vs_stats_fork_parent(void);
void vs_stats_fork_child(void);

/* fork child: a record of a socket the child holds is live again, in the
 * socket's STATE (the parent may have closed its copy while we copied). */
void vs_stats_mark_live(struct vs_stats_record *r, enum vs_sock_state state);

/* Removes this process's segment (at exit). */
void vs_stats_exit(void);

#endif
