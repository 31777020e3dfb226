#!/usr/bin/env bash
# The accepter's set-up runs out of time waiting for the connector's RING,
# and the connector comes back before any word of a disconnection reaches
# it (tests/rdma/cases/accept-timeout.sh is the same order of events on one
# host). Before 88e83fe the accepter disconnected (rdma_cm DREQ) and
# destroyed its queue pair; a connector whose next call came before the
# DREQ took the accepter's PROOF, switched, and wrote into a queue pair that
# was gone, while the accepter read TCP: both programs hung (fdlimit.sh,
# once, under load). Since, the accepter sends CUT {0, 0} on the queue pair
# it keeps, and the connector, whatever it learns first, resends on TCP.
#
# "Before the DREQ" as an order of events: A drops the rdma_cm DREQs it
# sends to B (RoCE queue pair 1, CM class, attribute DREQ: a tc u32 filter
# on eth0) until B made its first call after the accepter left. Nothing
# else is touched: the handshake's messages, the queue pairs' traffic.
#   A: server (accepter), B: client (connector), driven by vs_steps:
#   1. B sends 64 bytes, calls until its set-up listens, then no call;
#   2. A reads them, calls until it has called B, then no call;
#   3. B calls until it accepted the call, then no call until A left;
#   4. A blocks in recv: PROOF and ring out, no RING
#      in 2 s + 5 s, the set-up leaves (handshake-timeout);
#   5. B makes one call, the drop is lifted; B sends 1 MiB and reads 1 MiB.
# Verdicts: each end's bytes right, both programs end; A's log in order
# (calling, proof and ring sent, left with the CUT placed) and no DREQ sent
# by A while B was away (its cm_tx_msgs/dreq); `vsocket stat`: A's end
# `kernel handshake-timeout`, B's end on the kernel. With the build before
# 88e83fe: A sends a DREQ (dropped), B switches, and the programs hang
# (caught by vs_steps --timeout).
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
# shellcheck source=/dev/null
. tests/rdma/lib.sh
STEPS=$BUILD/bin/vs_steps
port=7780
size=$((1 << 20))
S=$VSG_SYNC_DIR/$CASE # files both guests see
PORT1=/sys/class/infiniband/$VSG_DEV/ports/1
log=/tmp/at-$VSG_ROLE.log out=/tmp/at-$VSG_ROLE.out
rm -f "$log" "$out" /tmp/at-done /tmp/at-release
env_common=(VSOCKET_LOG_LEVEL=debug VSOCKET_LOG_FILE="$log" VSOCKET_UPGRADE_AFTER_BYTES=64
  VSOCKET_UPGRADE_AFTER_US=60000000)
pid=
cleanup() {
  [ -z "$pid" ] || { pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; }
  [ "$VSG_ROLE" != A ] || tc qdisc del dev "$VSG_IF" root 2>/dev/null || true
}
trap cleanup EXIT
fail() { # the reason last: the harness shows the output's tail
  for f in "$out" "$log"; do echo "--- $f"; tail -n 25 "$f" 2>/dev/null || true; done
  echo "FAIL ($VSG_ROLE): $*"
  exit 1
}
cm() { cat "$PORT1/$1"; }
# the program's exit code, its data line checked
verdict_data() {
  local rc=0
  touch /tmp/at-release
  wait "$pid" || rc=$?
  pid=
  [ "$rc" = 0 ] || fail "vs_steps exit $rc"
  grep "^STEPS-DATA role=$1 .*result=OK" "$out" || fail "data not right"
}

if [ "$VSG_ROLE" = A ]; then
  # A DREQ to B: UDP 4791, BTH destination queue pair 1 (at 32: IP 20 +
  # UDP 8 + 4), MAD class 7 (CM, at 48: + BTH 12 + DETH 8), attribute
  # 0x0015 (DREQ, at 64).
  tc qdisc replace dev "$VSG_IF" root handle 1: prio
  tc filter add dev "$VSG_IF" parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff \
    match ip dport 4791 0xffff match u32 0x00000001 0x00ffffff at 32 \
    match u32 0x00070000 0x00ff0000 at 48 match u32 0x00150000 0xffff0000 at 64 action drop
  dreq0=$(cm cm_tx_msgs/dreq)
  vs_run env "${env_common[@]}" "$STEPS" server "$A_IP:$port" --timeout 200 \
    quiet-until "$S.c-listening" recv 64 \
    calls-until "$log" "rdma: calling the connector" touch "$S.s-called" \
    quiet-until "$S.c-silent" recv $size send $size \
    touch /tmp/at-done quiet-until /tmp/at-release close >"$out" 2>&1 &
  pid=$!
  wait_port $port
  barrier listening 240
  wait_while $pid 120 grep -q 'rdma: the set-up ended on TCP' "$log" || fail "the accepter's set-up never ended"
  # Read while B is away: once the programs close, ss no longer says
  # "established".
  peer=$(ss -tnH state established "( sport = :$port )" | awk 'NR == 1 { print $4 }')
  [ -n "$peer" ] || fail "ss shows no connection on port $port"
  touch "$S.left"
  wait_file "$S.b-called" 120 || fail "B did not come back"
  dreq1=$(cm cm_tx_msgs/dreq)
  dropped=$(tc -s filter show dev "$VSG_IF" | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -n1)
  tc qdisc del dev "$VSG_IF" root
  echo "A: while B was away: $((dreq1 - dreq0)) DREQ sent, ${dropped:-?} dropped"
  # Bounded by the program's --timeout: a hang ends it (STEPS-TIMEOUT).
  wait_while $pid 240 test -e /tmp/at-done || fail "the server did not finish its data"
  row=$(conn_row "$A_IP:$port" "$peer")
  echo "A: vsocket stat: '$row'"
  verdict_data server
  order=$(grep -n -e 'rdma: calling the connector' -e 'rdma: proof and ring sent' \
    -e "left a set-up waiting for the connector's ring (handshake-timeout), CUT placed" "$log" |
    cut -d: -f1 | tr '\n' ' ')
  read -r a b c <<<"$order"
  [ -n "$c" ] && [ "$a" -lt "$b" ] && [ "$b" -lt "$c" ] ||
    fail "the log lacks, in order: calling, proof and ring sent, left with its CUT placed"
  [ "$dreq1" = "$dreq0" ] || fail "A sent a DREQ while B was away: it should keep its queue pair"
  [ "$row" = "kernel handshake-timeout" ] || fail "A's end: '$row', expected 'kernel handshake-timeout'"
  grep -e 'rdma:' -e 'fd [0-9]*:' "$log" | sed 's/^/  A: /'
  echo "A: PASS"
  exit 0
fi

barrier listening 240
dreq0=$(cm cm_rx_msgs/dreq)
vs_run env "${env_common[@]}" "$STEPS" client "$A_IP:$port" --timeout 200 \
  send 64 calls-until "$log" "rdma: the set-up starts (connector)" touch "$S.c-listening" \
  quiet-until "$S.s-called" \
  calls-until "$log" "rdma: a caller accepted" touch "$S.c-silent" \
  quiet-until "$S.left" call touch "$S.b-called" send $size recv $size \
  touch /tmp/at-done quiet-until /tmp/at-release close >"$out" 2>&1 &
pid=$!
wait_while $pid 120 test -e "$S.c-silent" || fail "the connector never accepted the accepter's call"
conn=$(local_of_conn_to $port) # while established: A may close first
[ -n "$conn" ] || fail "ss shows no connection to port $port"
wait_while $pid 240 test -e /tmp/at-done || fail "the client did not finish its data"
row=$(conn_row "$conn" "$A_IP:$port")
echo "B: DREQs received before the end: $(($(cm cm_rx_msgs/dreq) - dreq0)); vsocket stat: '$row'"
verdict_data client
[[ $row == kernel* ]] || fail "B's end: '$row', expected the kernel"
grep -e 'rdma:' -e 'fd [0-9]*:' "$log" | sed 's/^/  B: /'
echo "B: PASS"
