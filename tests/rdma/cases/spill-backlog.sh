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
STEPS=$BUILD/bin/vs_steps
case_setup spill-backlog
slog=$tmp/vs-server.log clog=$tmp/vs-client.log
fail() { echo "FAIL: $*"; exit 1; }
env_common=(VSOCKET_LOG_LEVEL=info VSOCKET_RDMA_RING=65536 VSOCKET_RDMA_RING_MAX=65536)

vs_run env "${env_common[@]}" VSOCKET_LOG_FILE="$slog" "$STEPS" server "$IP:$port" --timeout 280 \
  recv 64 fill touch "$tmp/backlog" calls-until "$slog" "upgraded to rdma on" fill touch "$tmp/filled" \
  quiet-until "$tmp/spilled" finish >"$tmp/server.out" 2>&1 &
spid=$!
pids+=($spid)
wait_port $port
vs_run env "${env_common[@]}" VSOCKET_LOG_FILE="$clog" "$STEPS" client "$IP:$port" --timeout 280 \
  send 64 quiet-until "$tmp/backlog" calls-until "$clog" "upgraded to rdma on" fill \
  quiet-until "$tmp/filled" push-until "$clog" "goes on TCP" touch "$tmp/spilled" \
  finish >"$tmp/client.out" 2>&1 &
cpid=$!
pids+=($cpid)

rc=0
wait $cpid || rc=$?
wait $spid || rc=$?
grep -E '^STEP fill|^STEPS-' "$tmp/server.out" "$tmp/client.out" || true
grep -h "goes on TCP\|stays on the kernel" "$clog" "$slog" || true
[ "$rc" = 0 ] || fail "a program failed (exit $rc)"
grep -q "goes on TCP" "$clog" || fail "the client never left RDMA"
# Each end's stream arrived whole: its length and checksum as the peer sent it.
sent_c=$(sed -n 's/.*role=client sent=\([0-9]*\) sent_fnv=\([0-9a-f]*\).*/\1 \2/p' "$tmp/client.out")
rcvd_s=$(sed -n 's/.*role=server .*rcvd=\([0-9]*\) rcvd_fnv=\([0-9a-f]*\).*/\1 \2/p' "$tmp/server.out")
sent_s=$(sed -n 's/.*role=server sent=\([0-9]*\) sent_fnv=\([0-9a-f]*\).*/\1 \2/p' "$tmp/server.out")
rcvd_c=$(sed -n 's/.*role=client .*rcvd=\([0-9]*\) rcvd_fnv=\([0-9a-f]*\).*/\1 \2/p' "$tmp/client.out")
[ -n "$sent_c" ] && [ "$sent_c" = "$rcvd_s" ] || fail "client sent '$sent_c', server received '$rcvd_s'"
[ -n "$sent_s" ] && [ "$sent_s" = "$rcvd_c" ] || fail "server sent '$sent_s', client received '$rcvd_c'"
echo "spill-backlog: left RDMA with a TCP backlog unread, every byte right both ways"
