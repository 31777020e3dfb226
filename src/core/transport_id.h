/* transport_id.h - which transports there are: their numbers, their names,
 * and which of them this build contains. Below every layer that names a
 * transport: the configuration, the statistics, the socket, the tool. */
#ifndef VSOCKET_TRANSPORT_ID_H
#define VSOCKET_TRANSPORT_ID_H

#include <stdbool.h>
#include <stddef.h>

enum vs_transport {
    VS_TRANSPORT_KERNEL, /* the ordinary kernel socket: always available */
    VS_TRANSPORT_SHM,    /* same host, shared-memory rings */
    VS_TRANSPORT_RDMA,   /* another host, RDMA RC/UD queue pairs */
    VS_TRANSPORT_COUNT
};

#define VS_TRANSPORT_BIT(t) (1u << (t))

const char *vs_transport_name(enum vs_transport t);

/* The transport called NAME (LEN bytes, not terminated), or -1. */
int vs_transport_by_name(const char *name, size_t len);

/* Whether this build contains the transport's implementation. */
bool vs_transport_built(enum vs_transport t);

/* Bit mask of the transports this build contains. */
unsigned vs_transports_built(void);

#endif
