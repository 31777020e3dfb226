#!/usr/bin/env bash
# Both ends under vsocket on RDMA (VSOCKET_TRANSPORTS=rdma, two processes of
# the guest): vsocket-stress in every mode, 4 connections, sizes up to 1 MiB,
# checksummed: 0 lost, 0 corrupt, 0 reordered; `vsocket stat` must show the
# data connections on rdma (rxe0) while they run. Then the peer killed
# mid-transfer: the client sees EOF/ECONNRESET, never a hang or a wrong byte.
source "$(dirname "$0")/../lib.sh"
port=7101
vs_run "$STRESS" server --port $port --bind "$IP" >/tmp/stress-srv.log 2>&1 &
srv=$!
# vs_run in the background is a subshell: stop its child too.
trap 'pkill -P $srv 2>/dev/null || true; kill $srv 2>/dev/null || true' EXIT
wait_port $port
vs_run "$STRESS" client --host "$IP" --port $port --mode all --conns 4 --udp-flows 0 \
  --messages 100 --max-size 1M --seconds 150 >/tmp/stress-cli.log 2>&1 &
cli=$!
expect_rdma_rows 4
rc=0
wait $cli || rc=$?
grep -E '^stress:' /tmp/stress-cli.log
[ "$rc" = 0 ] || { echo "vsocket-stress over RDMA failed (exit $rc)"; tail -20 /tmp/stress-cli.log; exit 1; }
[ "$(grep -c 'result=PASS' /tmp/stress-cli.log)" = 5 ] || { echo "not 5 modes passed"; exit 1; }
# The server serves until killed: gone now, it died (a stage run failed here
# once without a word: `pkill -P` found no child and set -e ended the case).
if ! pkill -P $srv 2>/dev/null; then
  rc=0
  wait $srv || rc=$?
  echo "the stress server died after the client's 5 modes (exit $rc):"
  tail -20 /tmp/stress-srv.log
  exit 1
fi
kill $srv 2>/dev/null || true
wait $srv 2>/dev/null || true

# Peer killed: a fresh server, killed by the client 0.5 s into the transfer.
port=7102
vs_run "$STRESS" server --port $port --bind "$IP" --once >/tmp/stress-srv2.log 2>&1 &
srv=$!
wait_port $port
rc=0
vs_run "$STRESS" client --host "$IP" --port $port --mode blocking --conns 2 --udp-flows 0 \
  --messages 2000 --max-size 256K --kill-peer-after 500 --seconds 90 >/tmp/stress-kill.log 2>&1 || rc=$?
tail -5 /tmp/stress-kill.log
[ "$rc" = 0 ] && grep -q 'peer=killed' /tmp/stress-kill.log ||
  { echo "peer-killed run failed (exit $rc)"; tail -20 /tmp/stress-kill.log; exit 1; }
grep -q 'upgraded to rdma' /tmp/stress-kill.log 2>/dev/null || true
echo "stress over rdma: 5 modes PASS, peer killed PASS"
exit 0
