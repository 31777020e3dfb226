#!/usr/bin/env bash
# Host death: an RDMA writer in A, its peer's whole host (guest B's qemu) is
# killed by the host mid-transfer. Passes when A's RDMA stack reports it:
# rxe1's retry_exceeded_err counter moves (the write request's transport
# retries ran out) within 60 s of the kill.
#
# Soft-RoCE treats retry_cnt 7 as "retry forever" (rxe_comp.c), and perftest,
# ibv_rc_pingpong and rping use 7: with them a dead peer is never noticed.
# Here the connection is made with rdma_cm (-R) and --retry_count 3, and a
# 0.5 s ack timeout (-u 17: 4.096 us * 2^17) so that the slow emulated peer
# does not trip the retries while it is alive.
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
opts=(-R -d "$VSG_DEV" -x 1 -s 65536 -D 120)
if [ "$VSG_ROLE" = B ]; then
  ib_write_bw "${opts[@]}" &
  sleep 1
  barrier server-started 240
  barrier traffic-flows 90
  echo "B: traffic flows, asking the host to kill this guest"
  "$VSG_TOOLS/kill-guest" B
  sleep 120
  exit 1  # not reached: the guest is gone
fi
barrier server-started 240
log=$(mktemp)
cpid=""
trap 'if [ -n "$cpid" ]; then kill -KILL "$cpid" 2>/dev/null || true; fi; rm -f "$log"' EXIT
for try in 1 2 3 4 5 6; do
  r0=$(counter rcvd_pkts)
  ib_write_bw "${opts[@]}" -u 17 --retry_count 3 "$B_IP" >"$log" 2>&1 &
  cpid=$!
  # Traffic flows when acks come back.
  for _ in $(seq 1 40); do
    [ $(($(counter rcvd_pkts) - r0)) -lt 200 ] || break
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.5
  done
  [ $(($(counter rcvd_pkts) - r0)) -lt 200 ] || break
  echo "  (client attempt $try did not get going, retrying)"
  tail -n 3 "$log"
  kill -KILL "$cpid" 2>/dev/null || true
  wait "$cpid" 2>/dev/null || true
  cpid=""
  sleep 1
done
[ -n "$cpid" ] || { echo "A: the RDMA write stream never started"; exit 1; }
e0=$(counter retry_exceeded_err)
barrier traffic-flows 30
t0=$SECONDS
echo "A: traffic flows (retry_exceeded_err $e0), B is being killed"
until [ "$(counter retry_exceeded_err)" -gt "$e0" ]; do
  if [ $((SECONDS - t0)) -ge 60 ]; then
    echo "A: FAIL: no transport error 60 s after the peer's death (retry_exceeded_err still $e0, completer_retry_err $(counter completer_retry_err))"
    exit 1
  fi
  sleep 0.5
done
echo "A: the peer's death was seen after ~$((SECONDS - t0)) s (retry_exceeded_err $e0 -> $(counter retry_exceeded_err))"
