#!/usr/bin/env bash
# Squatter (docs/design/rdma-transport.md, "Threat model"): a process binds
# and listens with rdma_cm on the connector's TCP address (from `ss -tn`)
# BEFORE the connector starts its rendezvous, and answers the real
# accepter's call with a forged vs_rdma_rep (random MAC). The order is made
# by events, not by a delay racing the squatters' start: the client
# (upgrade delayed by VSOCKET_UPGRADE_AFTER_US=2 s, longer than its first
# ping-pong) writes its connections' addresses, then makes no socket call,
# so no set-up can start, until the squatters say they listen
# (vs_pair --start-file). Asserted:
#  * the accepter refuses it: 'cannot prove it holds the peer socket' and
#    `vsocket stat` reason peer-proof-failed on the accepter's connection;
#  * the accepter gave the squatter nothing: no PROOF (no ring) arrived;
#  * the squatter's RDMA WRITEs at every key `rdma res show mr` lists for
#    other processes all fail. Two connections, one squatter each:
#    conn 0's squatter writes at once when the accepter's RTU arrives,
#    conn 1's first waits for a PROOF (which would carry the ring: must not
#    come), then writes. Both find the accepter's queue pair gone already
#    (it is destroyed in the same call that read the forged answer):
#    "transport retry counter exceeded", the rest flushed;
#  * the connector finds its address taken: rendezvous-unavailable;
#  * 2 x 1 MiB echoed byte-exact (on TCP).
source "$(dirname "$0")/../lib.sh"
W=$(mktemp -d /tmp/imp-squat.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
dump() { for f in "$W"/*.log; do echo "--- $f"; tail -n 25 "$f"; done; }
fail() { echo "FAIL: $*"; dump; exit 1; }
step() { echo "[$((SECONDS - T0)) s] $*"; }
T0=$SECONDS
delay_us=${IMPOSTOR_SQUAT_DELAY_US:-2000000}

port=7211
VSOCKET_UPGRADE_AFTER_US=0 VSOCKET_LOG_LEVEL=info vs_run "$PAIR" server --bind "$IP" --port $port \
  --once 2 --timeout 150 >"$W/srv.log" 2>&1 &
pids+=($!)
wait_port $port
# The squatters start first (process start-up is slow in the guest) and
# bind the moment the client's --ready-file names its connections.
"$IMP" squat "$IP" "@$W/ready:0" --write-first --timeout 150 >"$W/squat0.log" 2>&1 &
sq0=$!
"$IMP" squat "$IP" "@$W/ready:1" --timeout 150 >"$W/squat1.log" 2>&1 &
sq1=$!
pids+=($sq0 $sq1)
sleep 1
VSOCKET_UPGRADE_AFTER_US=$delay_us VSOCKET_LOG_LEVEL=info vs_run "$PAIR" client --conn "$IP:$port" \
  --conn "$IP:$port" --bytes 1048576 --ready-file "$W/ready" --start-file "$W/start" \
  --go-file "$W/go" --hold-file "$W/hold" \
  --timeout 150 >"$W/cli.log" 2>&1 &
cli=$!
pids+=($cli)
t0=$SECONDS
wait_file "$W/ready" || fail "client not ready"
conns=()
mapfile -t conns < <(awk '{ print $2 }' "$W/ready")
# What any local process can see: the same addresses in ss.
seen=$(ss -tnH state established "( dport = :$port )" | awk '{ print $3 }' | sort | tr '\n' ' ')
want=$(printf '%s\n' "${conns[@]}" | sort | tr '\n' ' ')
[ "$seen" = "$want" ] || fail "ss shows '$seen', the client has '$want'"
echo "connectors' TCP addresses (also in ss): $seen; squatting on them"
for i in 0 1; do
  wait_grep '^SQUAT-(LISTENING|BIND-FAILED|LISTEN-FAILED)' "$W/squat$i.log" || fail "squatter $i silent"
  grep -q '^SQUAT-LISTENING' "$W/squat$i.log" ||
    fail "squatter $i could not listen (after $((SECONDS - t0)) s): nothing tested"
done
step "squatters listening"
touch "$W/start" # the client's set-ups may start now
grep -q 'upgraded to rdma' "$W/cli.log" && fail "a connection upgraded before the squatters listened: nothing tested"
for i in 0 1; do
  wait_grep '^SQUAT-SUMMARY' "$W/squat$i.log" || fail "the accepter never called squatter $i"
  echo "--- squatter $i"
  cat "$W/squat$i.log"
  grep -q '^SQUAT-REQUEST .*a vsocket accepter' "$W/squat$i.log" || fail "squatter $i: the caller was not the vsocket accepter"
  grep -q '^SQUAT-SUMMARY proof_given=0 writes_succeeded=0 writes_failed=[1-9]' "$W/squat$i.log" ||
    fail "squatter $i got a proof or a write through"
  grep -q '^SQUAT-GOT-PROOF' "$W/squat$i.log" && fail "squatter $i got a proof"
done
# No write got through: the accepter's queue pair lives only between its
# reading our answer and checking it (one call), so they find nobody
# ("transport retry counter exceeded", the rest flushed); one that found it
# would end in "remote access error" (its protection domain holds only its
# message buffers, local access).
for i in 0 1; do
  grep '^SQUAT-OP write' "$W/squat$i.log" |
    grep -v 'status=\(remote access error\|Work Request Flushed Error\|transport retry counter exceeded\) ' &&
    fail "squatter $i: a write ended in an unexpected status"
done
step "squatters done"
for c in "${conns[@]}"; do
  # The accepter (the server) refused the squatter's answer ...
  srv_row=$(wait_row "$IP:$port" "$c" '^kernel peer-proof-failed$') || fail "accepter of $c: $srv_row"
  # ... and the connector found its rendezvous taken.
  cli_row=$(wait_row "$c" "$IP:$port" '^kernel rendezvous-unavailable$') || fail "connector $c: $cli_row"
  echo "$c: accepter $srv_row; connector $cli_row"
done
n=$(grep -c 'the process that answered cannot prove it holds the peer socket' "$W/srv.log" || true)
[ "$n" = 2 ] || fail "the accepter logged $n refusals, expected 2"
n=$(grep -c 'cannot listen on the connection.s address: Address already in use' "$W/cli.log" || true)
[ "$n" = 2 ] || fail "the connector logged $n EADDRINUSE, expected 2"
step "stat checked, data"
touch "$W/go"
wait_grep '^PAIR-DATA conn=1 ' "$W/cli.log" || fail "no data result"
grep '^PAIR-DATA ' "$W/cli.log"
[ "$(grep -c '^PAIR-DATA conn=[01] .*result=OK' "$W/cli.log")" = 2 ] || fail "data not byte-exact"
step "data done"
touch "$W/hold"
wait $cli || fail "client exit $?"
step "client done"
for s in $sq0 $sq1; do
  kill -TERM $s 2>/dev/null || true
  rc=0
  wait $s || rc=$?
  [ "$rc" = 0 ] || fail "squatter exit $rc"
done
grep -q 'upgraded to rdma' "$W/cli.log" "$W/srv.log" && fail "something upgraded"
echo "impostor-squatter: PASS (forged answers refused, nothing given, guessed writes failed, rendezvous-unavailable, 2 x 1 MiB byte-exact)"
