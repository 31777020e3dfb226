/* ops.h - the rdma transport's table (transport/transport.h), for the
 * registry. Everything else of transport/rdma is its own business. */
#ifndef VSOCKET_RDMA_OPS_H
#define VSOCKET_RDMA_OPS_H

#include "transport/transport.h"

extern const struct vs_transport_ops vs_rdma_ops;

#endif
