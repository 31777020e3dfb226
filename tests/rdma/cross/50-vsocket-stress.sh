#!/usr/bin/env bash
# vsocket between two hosts: vsocket-stress server under vsocket in A, client
# under vsocket in B (every mode, checksummed). Each guest checks with its own
# `vsocket stat` that the data connections are on rdma while they run.
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
# shellcheck source=/dev/null
. tests/rdma/lib.sh
# The case needs its connections to stay on RDMA; an emulated reader that
# pauses 200 ms (the guest busy with `vsocket stat`) would make a streaming
# writer leave for TCP (left-for-buffering: correct, but not what is tested).
SPILL_MS=10000
port=7600
if [ "$VSG_ROLE" = A ]; then
  vs_run VSOCKET_RDMA_SPILL_MS=$SPILL_MS "$STRESS" server --port $port --bind "$A_IP" >/tmp/x-srv.log 2>&1 &
  srv=$!
  trap 'kill $srv 2>/dev/null || true' EXIT
  wait_port $port
  barrier started 60
  barrier running 120
  ok=0
  expect_rdma_rows 2 120 || ok=1
  barrier done 300
  exit $ok
  exit 0
fi
barrier started 60
vs_run VSOCKET_RDMA_SPILL_MS=$SPILL_MS "$STRESS" client --host "$A_IP" --port $port --mode all --conns 2 --udp-flows 0 \
  --messages 20 --max-size 256K --seconds 250 >/tmp/x-cli.log 2>&1 &
cli=$!
barrier running 120
rows=0
expect_rdma_rows 2 120 || rows=1
rc=0
wait $cli || rc=$?
grep -E '^stress:' /tmp/x-cli.log || true
barrier done 300
[ "$rows" = 0 ] || exit 1
[ "$rc" = 0 ] && [ "$(grep -c 'result=PASS' /tmp/x-cli.log)" = 5 ] ||
  { echo "B: vsocket-stress across hosts failed (exit $rc)"; tail -20 /tmp/x-cli.log; exit 1; }
