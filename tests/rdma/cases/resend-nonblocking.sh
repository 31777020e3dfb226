#!/usr/bin/env bash
# Leaving RDMA with more to resend than TCP's buffers take: a send that
# must not block (MSG_DONTWAIT) sends what TCP takes and returns; the rest
# follows at the next calls, and the peer's own resend (its answer to our
# CUT) goes the same way, so two ends that each have a resend waiting for
# the other's reads never wait on each other. (Before: the spilling end
# blocked in its non-blocking send until the peer read, and a peer busy
# elsewhere, or answering with a resend of its own, never did.)
#
# Put there by an order of events, not by luck (1 MiB rings, 16 KiB TCP
# buffers: each resend is some 30 times what TCP holds):
#  1. 64 bytes each way, then calls until both logs say upgraded;
#  2. both fill the other's ring, and the server makes no call from then on;
#  3. the client sends without blocking every 20 ms until its log says the
#     rest goes on TCP (the server read nothing for 200 ms: a spill);
#  4. both shut down and read the other's stream to its end, comparing
#     every byte (the server answers the client's CUT with its own resend).
# Before the fix: the client's non-blocking send never returns
# (STEPS-TIMEOUT in step push-until).
# rdma-case-timeout: 600
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7272
case_setup resend-nonblocking
steps_env=(VSOCKET_LOG_LEVEL=info VSOCKET_RDMA_RING=1048576 VSOCKET_RDMA_RING_MAX=1048576)

steps_start server --bufs 16384 recv 64 send 64 calls-until "$tmp/vs-server.log" "upgraded to rdma on" \
  quiet-until "$tmp/up" fill touch "$tmp/filled" quiet-until "$tmp/spilled" finish
spid=$steps_pid
wait_port $port
steps_start client --bufs 16384 send 64 recv 64 calls-until "$tmp/vs-client.log" "upgraded to rdma on" \
  touch "$tmp/up" quiet-until "$tmp/filled" fill push-until "$tmp/vs-client.log" "goes on TCP" \
  touch "$tmp/spilled" finish
steps_verdict $steps_pid $spid spilled
echo "resend-nonblocking: resends 30x TCP's buffers both ways, no send blocked, every byte right"
