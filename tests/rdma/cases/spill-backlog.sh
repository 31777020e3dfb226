#!/usr/bin/env bash
# A connection that leaves RDMA (a spill) while its TCP backlog is still
# unread: the end that left must read the bytes the peer sent on TCP before
# its switch point while it waits for the peer's resend, or a full TCP
# receive queue of them keeps that resend out and both programs wait for
# good (found: a stress run in poll mode, one connection of four never
# ended; fixed in rdma/io.c, early_tcp_read).
#
# Put there by an order of events, not by luck (a small ring, 64 KiB, so
# that the client's own resend fits in the server's TCP buffers):
#  1. the client sends 64 bytes (the set-up's proof needs a few), then
#     the server fills the connection on TCP (sends until one would block)
#     while the client makes no call: the client's TCP receive queue is full;
#  2. both make calls until the set-up is done (both logs say so);
#  3. both fill the other's ring (each switches to RDMA: the server's
#     switch point lies past everything the client's queue holds);
#  4. the server makes no call; the client sends on until its log says the
#     rest goes on TCP (the server read nothing for 200 ms);
#  5. both shut down and read the other's stream to its end, comparing
#     every byte; each end's sent bytes are the other's received bytes.
# Before the fix: both ends wait until vs_steps's timeout (STEPS-TIMEOUT).
# rdma-case-timeout: 600
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7271
case_setup spill-backlog
steps_env=(VSOCKET_LOG_LEVEL=info VSOCKET_RDMA_RING=65536 VSOCKET_RDMA_RING_MAX=65536)

steps_start server recv 64 fill touch "$tmp/backlog" calls-until "$tmp/vs-server.log" \
  "upgraded to rdma on" fill touch "$tmp/filled" quiet-until "$tmp/spilled" finish
spid=$steps_pid
wait_port $port
steps_start client send 64 quiet-until "$tmp/backlog" calls-until "$tmp/vs-client.log" "upgraded to rdma on" \
  fill quiet-until "$tmp/filled" push-until "$tmp/vs-client.log" "goes on TCP" touch "$tmp/spilled" finish
steps_verdict $steps_pid $spid spilled
echo "spill-backlog: left RDMA with a TCP backlog unread, every byte right both ways"
