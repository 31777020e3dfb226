/* upgrade.h - when a transport starts the set-up of a connection, and when
 * it stops waiting for a silent peer: the policy every transport shares
 * (stream.h has the protocol). */
#ifndef VSOCKET_UPGRADE_H
#define VSOCKET_UPGRADE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/transport_id.h"
#include "transport/stream.h"

struct vs_sock;

/* How often a silent peer is looked at past the deadline, and how often an
 * accepter calls the connector's rendezvous again. */
#define VS_RENDEZVOUS_RETRY_NS 1000000L
/* A connection shows it will live with this many calls (and enough age). */
#define VS_UPGRADE_MIN_CALLS 8

struct vs_upgrade {
    long born_ns;                 /* connect or accept */
    _Atomic unsigned young_calls; /* calls on the socket before the set-up started */
    long deadline_ns;             /* give the set-up up after this (ctl) */
    long next_check_ns;           /* the next look for a silent peer (ctl) */
    unsigned calls_seen;          /* past the deadline: 1 + peer calls seen since (ctl) */
    uint64_t in_mark;             /* bytes received from the peer when last counted (ctl) */
};

/* Whether transport T may be offered S's connection: T is enabled, S is a
 * TCP stream not taken by a transport yet, and was never put in an epoll
 * set before (its kernel registration would not follow). */
bool vs_upgrade_eligible(const struct vs_sock *s, enum vs_transport t);

void vs_upgrade_init(struct vs_upgrade *u);

/* Whether the connection has shown it will live (VSOCKET_UPGRADE_AFTER_*). */
bool vs_upgrade_lives(struct vs_upgrade *u, struct vs_stream *st);

/* The set-up starts now; its deadline is LIMIT_NS away. */
void vs_upgrade_start(struct vs_upgrade *u, long limit_ns);

/* The two ends talk: the messages get VS_UPGRADE_MESSAGES_NS. */
void vs_upgrade_messages(struct vs_upgrade *u);

/* What the statistics show of S's set-up, each said once. The connection
 * was shown on transport T and its peer left it (a revert: exec, stdio,
 * splice): now on the kernel. */
void vs_upgrade_show_peer_left(struct vs_sock *s, enum vs_transport t, struct vs_stream *st);

/* The set-up is under way (S->conn_shown becomes SHOWN, the transport's
 * value for it), with the time by which it ends. */
void vs_upgrade_show_pending(struct vs_sock *s, const struct vs_upgrade *u, int shown);

/* Whether to stop waiting for the peer's part of the rendezvous (the TCP
 * socket is FD): see upgrade.c. */
bool vs_upgrade_peer_silent(struct vs_upgrade *u, struct vs_stream *st, int fd);

#endif
