#!/usr/bin/env bash
# tests/rdma/cases/small-ring.sh - the semantics of writes and reads over rdma
# on a ring of one page (VSOCKET_RDMA_RING=4096), where nearly every send
# meets a full ring: a blocking send that returned a short count there
# (fixed in rdma/io.c: vs_rdma_sendmsg sends the rest) failed at once,
# where the default ring showed it only when four threads filled it by
# chance. Fails on the build before the fix, passes after.
# rdma-case-timeout: 600
export VSOCKET_RDMA_RING=4096
export VSOCKET_SEMANTICS_SELECT="two_threads_send or blocking_and_partial or msg_waitall or both_write_before_reading or scatter_gather"
exec bash "$(dirname "$0")/semantics.sh"
