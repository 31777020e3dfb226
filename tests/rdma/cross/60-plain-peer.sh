#!/usr/bin/env bash
# A peer without vsocket on the other host, both ways: the connection stays
# on TCP, the data is intact, and the vsocket side says why
# (peer-not-vsocket), then remembers the destination (peer-not-vsocket-cached).
#  1. server plain in A, client under vsocket in B (B is the connector);
#  2. server under vsocket in A, client plain in B (A is the accepter: its
#     rdma_cm calls to B are refused, which moves the rxe counters).
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
# shellcheck source=/dev/null
. tests/rdma/lib.sh
# Long enough (~25 MB) that the verdict (the 3 s set-up deadline, then the
# peer seen silent) lands while the connections are open, even under TCG.
stress_args=(--mode blocking --conns 2 --udp-flows 0 --messages 200 --max-size 256K --seconds 200)
# Each side checks its own statistics (closed sockets too: the verdict may
# land as the short run ends).
check_reasons() {
  local i out
  for ((i = 0; i < 150; i++)); do
    out=$("$TOOL" stat --all 2>/dev/null || true)
    if grep -q 'peer-not-vsocket' <<<"$out" && ! grep -q ' rdma ' <<<"$out"; then
      echo "$out"
      return 0
    fi
    sleep 0.2
  done
  echo "no connection settled on peer-not-vsocket (or one is on rdma):"
  echo "$out"
  return 1
}
if [ "$VSG_ROLE" = A ]; then
  plain "$STRESS" server --port 7610 --bind "$A_IP" --once >/tmp/p1.log 2>&1 &
  wait_port 7610
  barrier one-ready 240
  barrier one-done 300
  wait || true
  VSOCKET_UPGRADE_AFTER_US=0 vs_run "$STRESS" server --port 7611 --bind "$A_IP" --once \
    >/tmp/p2.log 2>&1 &
  srv=$!
  wait_port 7611
  barrier two-ready 240
  ok=0
  check_reasons || ok=1
  barrier two-done 300
  wait $srv || ok=1
  exit $ok
fi
barrier one-ready 240
VSOCKET_UPGRADE_AFTER_US=0 vs_run "$STRESS" client --host "$A_IP" --port 7610 "${stress_args[@]}" \
  >/tmp/p1c.log 2>&1 &
cli=$!
ok=0
check_reasons || ok=1
wait $cli || { echo "B: plain-server run failed"; tail -5 /tmp/p1c.log; ok=1; }
barrier one-done 300
barrier two-ready 240
plain "$STRESS" client --host "$A_IP" --port 7611 "${stress_args[@]}" >/tmp/p2c.log 2>&1 ||
  { echo "B: plain-client run failed"; tail -5 /tmp/p2c.log; ok=1; }
barrier two-done 300
grep -h '^stress:' /tmp/p1c.log /tmp/p2c.log || true
exit $ok
