/* transport.h - what the layers above (interpose, readiness) ask of all
 * the transports at once, and what the transports tell them: the table of
 * one transport is core/transport_ops.h. */
#ifndef VSOCKET_TRANSPORT_H
#define VSOCKET_TRANSPORT_H

#include "core/sock.h"
#include "core/transport_ops.h"

/* transport/registry.c: the transports built in, in order of preference,
 * each given once at load (interpose/init.c). */
void vs_transports_register(const struct vs_transport_ops *ops);
/* The datagram layer's table (UDP sockets), given once at load. */
void vs_transports_register_dgram(const struct vs_transport_ops *ops);
/* A UDP socket was created (socket()) or adopted (inherited through exec):
 * the datagram layer may take it. */
void vs_transports_offer_dgram(struct vs_sock *s, int fd);
void vs_transports_offer_connect(struct vs_sock *s, int fd, const struct sockaddr *peer,
                                 socklen_t len);
void vs_transports_offer_accept(struct vs_sock *s, int fd);
void vs_transports_fork_prepare(void);
void vs_transports_fork_parent(void);
void vs_transports_fork_child(void);
void vs_transports_fork_failed(void);
void vs_transports_before_exec(void);
void vs_transports_exec_failed(void);
void vs_transports_leave_all(const char *reason);
void vs_transports_before_creds(void);
void vs_transports_after_creds(bool changed);
unsigned vs_transports_fds_short(void);

#endif
