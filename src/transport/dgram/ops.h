/* ops.h - the datagram layer's table (transport/transport.h), for the
 * registry. Everything else of transport/dgram is its own business. */
#ifndef VSOCKET_DGRAM_OPS_H
#define VSOCKET_DGRAM_OPS_H

#include "transport/transport.h"

extern const struct vs_transport_ops vs_dgram_ops;

#endif
