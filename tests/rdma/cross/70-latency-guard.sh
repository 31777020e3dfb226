#!/usr/bin/env bash
# vsocket's latency across hosts, against kernel TCP's on the same link in
# the same run (issue 21: with a fixed busy-poll, vsocket's 64 B round trip
# across two guests was 25-35x the kernel's). vsocket-sweep ping-pong, 64 B,
# plain in both guests, then under vsocket in both (its default settings,
# RDMA the only transport: vs_run); the vsocket run must have been on rdma
# (A's `vsocket stat --all` afterwards) and its average round trip at most
# RATIO x the kernel's. The ratio is loose: a regression of that kind is
# 10-35x, and the two runs share the host's load.
# Between two emulated guests an RC message is two frames (the data and its
# ACK) where TCP's reply carries its ACK, so vsocket's round trip is 1.2-3.4x
# the kernel's there (bench/RESULTS.md, 2026-11-26 and 2026-11-27): the limit
# is 5x, above that spread and far under the regression.
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
# shellcheck source=/dev/null
. tests/rdma/lib.sh
SWEEP=$BUILD/bin/vsocket-sweep
RATIO=${VSOCKET_CROSS_LATENCY_RATIO:-5}
kport=7700 vport=7701
# The warm-up (set-up to RDMA included) is not timed: 600 round trips of
# kernel TCP across the link outlast the set-up in the emulated guests.
args=(--mode pingpong --sizes 64 --warmup 600 --iters 600 --seconds 60)
if [ "$VSG_ROLE" = A ]; then
  plain "$SWEEP" server --port $kport --bind "$A_IP" >/tmp/lg-k.log 2>&1 &
  k=$!
  vs_run "$SWEEP" server --port $vport --bind "$A_IP" >/tmp/lg-v.log 2>&1 &
  v=$!
  trap 'kill $k $v 2>/dev/null || true' EXIT
  wait_port $kport
  wait_port $vport
  barrier up 240
  barrier done 300
  out=$("$TOOL" stat --all 2>&1 || true)
  grep -q " rdma " <<<"$out" || { echo "A: the vsocket run was not on rdma:"; echo "$out"; exit 1; }
  exit 0
fi
barrier up 240
avg() { sed -n 's/.* avg_us=\([0-9.]*\).*/\1/p' "$1"; }
krc=0 rc=0
plain "$SWEEP" client --host "$A_IP" --port $kport "${args[@]}" >/tmp/lg-kc.log 2>&1 || krc=$?
vs_run "$SWEEP" client --host "$A_IP" --port $vport "${args[@]}" >/tmp/lg-vc.log 2>&1 || rc=$?
barrier done 300
[ "$krc" = 0 ] || { echo "B: kernel run failed (exit $krc)"; cat /tmp/lg-kc.log; exit 1; }
kern=$(avg /tmp/lg-kc.log) vs=$(avg /tmp/lg-vc.log)
echo "64 B ping-pong across the link, avg round trip: kernel TCP ${kern:-?} us, vsocket ${vs:-?} us (limit ${RATIO}x)"
[ "$rc" = 0 ] && [ -n "$kern" ] && [ -n "$vs" ] || { echo "B: vsocket run failed (exit $rc)"; cat /tmp/lg-vc.log; exit 1; }
awk -v k="$kern" -v v="$vs" -v r="$RATIO" 'BEGIN { exit !(v <= r * k) }' ||
  { echo "B: vsocket's latency is more than ${RATIO}x the kernel's on the same link"; exit 1; }
