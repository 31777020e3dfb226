#!/usr/bin/env bash
# Host death under vsocket: a client in A streams to a server in B, both
# under vsocket on RDMA; once B's `vsocket stat` shows the connection on rdma,
# B's whole guest is killed by the host. A's blocked send must end with an
# error (EPIPE, ECONNRESET or ETIMEDOUT) within 60 s — never a hang (kernel
# TCP would retransmit for many minutes).
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
# shellcheck source=/dev/null
. tests/rdma/lib.sh
# The case needs its connections to stay on RDMA; an emulated reader that
# pauses 200 ms (the guest busy with `vsocket stat`) would make a streaming
# writer leave for TCP (left-for-buffering: correct, but not what is tested).
SPILL_MS=10000
port=7650
if [ "$VSG_ROLE" = B ]; then
  vs_run VSOCKET_RDMA_SPILL_MS=$SPILL_MS python3 -c '
import socket, sys
l = socket.create_server((sys.argv[1], int(sys.argv[2])))
c, _ = l.accept()
while c.recv(1 << 16):
    pass
' "$B_IP" $port &
  wait_port $port
  barrier server-started 240
  expect_rdma_rows 1 120
  barrier on-rdma 120
  echo "B: the connection is on rdma, asking the host to kill this guest"
  "$VSG_TOOLS/kill-guest" B
  sleep 120
  exit 1 # not reached: the guest is gone
fi
barrier server-started 240
vs_run VSOCKET_RDMA_SPILL_MS=$SPILL_MS python3 -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf = b"x" * 65536
try:
    while True:
        s.sendall(buf)
except OSError as e:
    print("A: send failed: %s (errno %d) at %.1f" % (e.strerror, e.errno, time.monotonic()), flush=True)
' "$B_IP" $port >/tmp/hd.log 2>&1 &
cli=$!
ok=0
expect_rdma_rows 1 120 || ok=1
barrier on-rdma 120
t0=$SECONDS
while kill -0 $cli 2>/dev/null; do
  if [ $((SECONDS - t0)) -ge 60 ]; then
    echo "A: FAIL: the send still blocks 60 s after the peer host died"
    kill -KILL $cli
    exit 1
  fi
  sleep 0.5
done
cat /tmp/hd.log
grep -q 'send failed' /tmp/hd.log || { echo "A: FAIL: the client ended without a send error"; exit 1; }
echo "A: the peer host's death ended the send after ~$((SECONDS - t0)) s"
exit $ok
