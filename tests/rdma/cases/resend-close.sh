#!/usr/bin/env bash
# A socket closed while its resend waits for TCP's room: close returns at
# once, as the kernel's does with bytes in its buffers, and the rest goes on
# TCP afterwards (at the process's next close or, here, its exit), then the
# FIN: the peer reads every byte and the end of the stream. (Before: close
# waited for the peer to read, up to 30 s, then reset the connection; a
# peer that reads only once the close returned lost the rest.)
#
# Put there by an order of events (1 MiB rings, 16 KiB TCP buffers):
#  1. 64 bytes each way, then calls until both logs say upgraded;
#  2. the client fills the server's ring and sends without blocking every
#     20 ms until its log says the rest goes on TCP (the server reads
#     nothing: a spill, with a resend some 30 times what TCP holds);
#  3. the client closes, says so, and exits; only then does the server
#     read the client's stream to its end, comparing every byte.
# rdma-case-timeout: 600
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7273
case_setup resend-close
steps_env=(VSOCKET_LOG_LEVEL=info VSOCKET_RDMA_RING=1048576 VSOCKET_RDMA_RING_MAX=1048576)

steps_start server --bufs 16384 recv 64 send 64 calls-until "$tmp/vs-server.log" "upgraded to rdma on" \
  quiet-until "$tmp/closed" finish
spid=$steps_pid
wait_port $port
steps_start client --bufs 16384 send 64 recv 64 calls-until "$tmp/vs-client.log" "upgraded to rdma on" \
  fill push-until "$tmp/vs-client.log" "goes on TCP" close-at-once touch "$tmp/closed"
steps_verdict $steps_pid $spid spilled
echo "resend-close: closed with a resend 30x TCP's buffers pending, close did not wait, every byte came"
