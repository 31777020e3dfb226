#!/usr/bin/env bash
# A slow link does not move a connection whose reader reads to TCP (issue
# 21). The link delays every frame 150 ms each way (netem on eth0 in both
# guests): a 300 ms round trip, more than the spill time (200 ms, the
# default) but under the adapter's ACK timeout (0.5 s). One vsocket-sweep
# stream of 64 KiB writes from B to A, both ends under vsocket with its
# default settings; A's reader reads all the time. Its writer waits for
# credit a round trip each time the ring is full: counted from the full ring
# that looked like a peer that does not read, and the connection left RDMA
# ("the peer has not read for 200 ms"). Counted from when the bytes are in
# the reader's memory, it stays. Verdict from both ends' logs: upgraded to
# rdma, and no line of leaving it. With the build before the fix (4c142c9)
# it fails so: "the peer has not read for 200 ms: the rest of this
# connection goes on TCP" (left-for-buffering).
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
# shellcheck source=/dev/null
. tests/rdma/lib.sh
SWEEP=$BUILD/bin/vsocket-sweep
DELAY_MS=${VSOCKET_CROSS_SLOW_LINK_MS:-150}
port=7750
log=/tmp/sl-$VSG_ROLE.log
rm -f "$log"
defaults() { env LD_PRELOAD="$LIB" VSOCKET_LOG_LEVEL=info VSOCKET_LOG_FILE="$log" "$@"; }

tc qdisc replace dev "$VSG_IF" root netem delay "${DELAY_MS}ms"
trap 'tc qdisc del dev "$VSG_IF" root 2>/dev/null || true' EXIT

if [ "$VSG_ROLE" = A ]; then
  defaults "$SWEEP" server --port $port --bind "$A_IP" >/tmp/sl-srv.out 2>&1 &
  srv=$!
  trap 'kill $srv 2>/dev/null || true; tc qdisc del dev "$VSG_IF" root 2>/dev/null || true' EXIT
  wait_port $port
  barrier up 240
  barrier done 600
  logs_on_rdma A 1 "$log"
  exit $?
fi
barrier up 240
p0=$(($(counter sent_pkts) + $(counter rcvd_pkts)))
rc=0
defaults "$SWEEP" client --host "$A_IP" --port $port --mode stream --sizes 65536 \
  --seconds 10 --stream-warmup 10 >/tmp/sl-cli.out 2>&1 || rc=$?
p1=$(($(counter sent_pkts) + $(counter rcvd_pkts)))
barrier done 600
grep '^stream' /tmp/sl-cli.out || true
echo "B: rxe1 packets during the run: $((p1 - p0))"
[ "$rc" = 0 ] || { echo "B: the stream failed (exit $rc)"; tail -5 /tmp/sl-cli.out; exit 1; }
logs_on_rdma B 1 "$log"
