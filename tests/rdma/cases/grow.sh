#!/usr/bin/env bash
# Rings that grow (src/transport/rdma/grow.c): a stream whose reader keeps
# up but whose ring is full asks for a larger ring, moves into it at a
# position where everything was read, and after a pause moves back to the
# first ring; every byte right both ways (vs_steps compares each).
#
# Put there by an order of events, not by luck:
#  1. the server reads 1 MiB (four rings of 256 KiB: the reader keeps up),
#     then makes no socket call;
#  2. the client, sending 16 MiB, finds the ring full: it asks for a larger
#     one (its log says so);
#  3. then the server reads on: it grants the ring, the client moves into it
#     once the server read everything before (both logs say so);
#  4. the server has read all 16 MiB; after a pause of 2 s (the product's
#     pause is 1 s) the client sends 1 MB more: it moves back to the first
#     ring (both logs say so).
# The spill time is raised: a writer whose reader stops for this case's
# step 1 must not leave RDMA (that is cases/semantics.sh's subject).
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7261
STEPS=$BUILD/bin/vs_steps
case_setup grow
slog=$tmp/vs-server.log clog=$tmp/vs-client.log
fail() { echo "FAIL: $*"; exit 1; }
env_common=(VSOCKET_LOG_LEVEL=debug VSOCKET_RDMA_SPILL_MS=600000 VSOCKET_UPGRADE_AFTER_BYTES=64
  VSOCKET_UPGRADE_AFTER_US=60000000)
first=$((1 << 20)) total=$((16 << 20)) more=1000000

vs_run env "${env_common[@]}" VSOCKET_LOG_FILE="$slog" "$STEPS" server "$IP:$port" --timeout 280 \
  recv 64 send 64 recv $first quiet-until "$tmp/asked" recv $((total - first)) touch "$tmp/read" \
  recv $more close >"$tmp/server.out" 2>&1 &
spid=$!
pids+=($spid)
wait_port $port
vs_run env "${env_common[@]}" VSOCKET_LOG_FILE="$clog" "$STEPS" client "$IP:$port" --timeout 280 \
  send 64 recv 64 calls-until "$clog" "upgraded to rdma on" send $total quiet-until "$tmp/paused" \
  send $more close >"$tmp/client.out" 2>&1 &
cpid=$!
pids+=($cpid)

wait_while $cpid 240 grep -q "limits the stream: asking for" "$clog" ||
  fail "the client never asked for a larger ring"
grep "asking for" "$clog" | head -1
touch "$tmp/asked"
wait_while $spid 240 test -e "$tmp/read" || fail "the server did not read the 16 MiB"
grep -E "go into the peer's ring|into our ring" "$clog" "$slog" || true
sleep 2
touch "$tmp/paused"
rc=0
wait $cpid || rc=$?
wait $spid || rc=$?
grep '^STEPS-' "$tmp/client.out" "$tmp/server.out" || true
[ "$rc" = 0 ] || fail "a program failed (exit $rc)"
[ "$(grep -c 'result=OK' "$tmp/client.out" "$tmp/server.out" | awk -F: '{s += $2} END {print s}')" = 2 ] ||
  fail "not every byte came as sent"
grep -q "goes on TCP\|left rdma\|leaves rdma" "$clog" "$slog" && fail "the connection left RDMA"
grep -q "go into the peer's ring of 1024 KiB" "$clog" || fail "the client never moved into a larger ring"
grep -q "into our ring of 1024 KiB" "$slog" || fail "the server never saw the move"
# The last move of each end is back to the first ring.
grep "go into the peer's ring" "$clog" | tail -1 | grep -q "of 256 KiB" ||
  fail "the client did not move back to the first ring after the pause"
grep "into our ring" "$slog" | tail -1 | grep -q "of 256 KiB" ||
  fail "the server did not see the move back"
echo "grow: moved up and back, every byte right"
