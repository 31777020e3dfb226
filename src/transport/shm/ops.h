/* ops.h - the same-host transport's table (transport/transport.h), for the
 * registry. Everything else of transport/shm is its own business. */
#ifndef VSOCKET_SHM_OPS_H
#define VSOCKET_SHM_OPS_H

#include "transport/transport.h"

extern const struct vs_transport_ops vs_shm_ops;

#endif
