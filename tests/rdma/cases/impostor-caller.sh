#!/usr/bin/env bash
# Caller impostor (docs/design/rdma-transport.md, "Threat model"): a third
# process of the host, which does NOT hold the TCP connection, reads the
# connector's TCP address from `ss -tn`, connects to its rdma_cm rendezvous
# with a well-formed vs_rdma_req and sends a forged PROOF (random MAC, a
# fake ring of its own). The connector must hang up on it, never send it its
# ring, never write the fake ring, and the data must stay byte-exact.
#
# A: the accepting end runs WITHOUT vsocket, so only the impostor calls
#    (up to 3 times): every call that got through is refused; after 3 the
#    connector ends on TCP with peer-proof-failed. (Under emulation a third
#    call does not always get through in time: rdma_cm's hang-up of the
#    second was seen lost, the connector's CM then drops a caller reusing
#    the queue pair number. Two refused calls are then the test.)
# B: both ends under vsocket, the impostor first: the server (the accepter,
#    its set-up delayed by VSOCKET_UPGRADE_AFTER_US=6 s, longer than the first
#    echo) echoes the client's first bytes, then makes no socket call, so its
#    set-up cannot start, until the impostor is done (vs_pair --start-file):
#    an order of events, not a race. The impostor is refused once, then the
#    real accepter proves itself and the connection upgrades to rdma.
# Each variant: 1 MiB echoed and compared byte for byte (vs_pair).
source "$(dirname "$0")/../lib.sh"
# The honest connection must still be on RDMA after its data: not a check
# of the spill (a reader stalled 200 ms sends the rest on TCP, which a
# guest beside a loaded host's other work did: "kernel left-for-buffering").
export VSOCKET_RDMA_SPILL_MS=600000
W=$(mktemp -d /tmp/imp-caller.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
dump() { for f in "$W"/*.log; do echo "--- $f"; tail -n 25 "$f"; done; }
fail() { echo "FAIL: $*"; dump; exit 1; }
refusal='cannot prove it holds the peer socket'

# ------------------------------------------------------------------ A
echo "== A: accepter without vsocket, the impostor is the only caller"
port=7201
plain "$PAIR" server --bind "$IP" --port $port --once 1 --timeout 150 >"$W/a-srv.log" 2>&1 &
pids+=($!)
wait_port $port
VSOCKET_UPGRADE_AFTER_US=0 VSOCKET_LOG_LEVEL=info vs_run "$PAIR" client --conn "$IP:$port" \
  --bytes 1048576 --ready-file "$W/a.ready" --go-file "$W/a.go" --hold-file "$W/a.hold" \
  --timeout 150 >"$W/a-cli.log" 2>&1 &
cli=$!
pids+=($cli)
wait_file "$W/a.ready" || fail "client not ready"
conn=$(local_of_conn_to $port)
[ -n "$conn" ] || fail "ss shows no connection to port $port"
echo "connector's TCP address (from ss): $conn"
t0=$SECONDS
rc=0
"$IMP" call "$IP" "${conn##*:}" --attempts 3 --timeout 60 >"$W/a-imp.log" 2>&1 || rc=$?
cat "$W/a-imp.log"
calls=$(sed -n 's/^CALL-SUMMARY accepted=\([0-9]*\) .*/\1/p' "$W/a-imp.log")
[ "${calls:-0}" -ge 2 ] || fail "the impostor got through ${calls:-0} times, expected 2 or 3"
[ "$rc" = 0 ] || fail "impostor: exit $rc (0 = every call refused, 1 = connector fooled, 3 = never got through)"
[ "$(grep -c '^CALL-RESULT .*connector hung up (refused)[^,]*, no RING, fake ring and credit word untouched' "$W/a-imp.log")" = "$calls" ] ||
  fail "not $calls clean refusals"
if [ "$calls" = 3 ]; then
  wait_row "$conn" "$IP:$port" '^kernel peer-proof-failed$' 20 || fail "connector not on TCP with peer-proof-failed"
else
  wait_row "$conn" "$IP:$port" '^kernel ' 20 || fail "connector not on TCP"
fi
n=$(grep -c "$refusal" "$W/a-cli.log" || true)
[ "$n" = "$calls" ] || fail "connector logged '$refusal' $n times, expected $calls"
echo "connector: refused $calls callers ('$refusal' x$n), now: $(conn_row "$conn" "$IP:$port") ($((SECONDS - t0)) s)"
touch "$W/a.go"
wait_grep '^PAIR-DATA ' "$W/a-cli.log" 60 || fail "no data result"
grep '^PAIR-DATA ' "$W/a-cli.log"
grep -q '^PAIR-DATA conn=0 .*result=OK' "$W/a-cli.log" || fail "data not byte-exact"
row=$(conn_row "$conn" "$IP:$port")
[[ $row == kernel* ]] || fail "after the data: '$row'"
[ "$calls" != 3 ] || [ "$row" = "kernel peer-proof-failed" ] || fail "after the data: '$row'"
touch "$W/a.hold"
wait $cli || fail "client exit $?"
grep -q 'upgraded to rdma' "$W/a-cli.log" && fail "the connector upgraded with nobody legitimate calling"
echo "A PASS: $calls forged proofs refused, 1 MiB byte-exact on TCP"

# ------------------------------------------------------------------ B
echo "== B: both ends under vsocket, the impostor calls before the real accepter"
port=7202
VSOCKET_UPGRADE_AFTER_US=6000000 VSOCKET_LOG_LEVEL=info vs_run "$PAIR" server --bind "$IP" \
  --port $port --once 1 --start-file "$W/b.start" --timeout 150 >"$W/b-srv.log" 2>&1 &
pids+=($!)
wait_port $port
# The impostor starts first (process start-up is slow in the guest) and
# calls the moment the client's --ready-file names the connection.
"$IMP" call "$IP" "@$W/b.ready:0" --attempts 1 --timeout 40 >"$W/b-imp.log" 2>&1 &
imp=$!
pids+=($imp)
sleep 1
VSOCKET_UPGRADE_AFTER_US=0 VSOCKET_LOG_LEVEL=info vs_run "$PAIR" client --conn "$IP:$port" \
  --bytes 1048576 --ready-file "$W/b.ready" --go-file "$W/b.go" --hold-file "$W/b.hold" \
  --timeout 150 >"$W/b-cli.log" 2>&1 &
cli=$!
pids+=($cli)
wait_file "$W/b.ready" || fail "client not ready"
conn=$(local_of_conn_to $port)
[ "$conn" = "$(awk '$1 == 0 { print $2 }' "$W/b.ready")" ] || fail "ss shows '$conn', not the client's connection"
echo "connector's TCP address (also in ss): $conn"
t0=$SECONDS
rc=0
wait $imp || rc=$?
cat "$W/b-imp.log"
[ "$rc" = 0 ] || fail "impostor: exit $rc (0 = refused, 1 = connector fooled, 3 = never got through)"
grep -q 'upgraded to rdma' "$W/b-cli.log" &&
  fail "the connection upgraded before the impostor was done: nothing tested"
echo "impostor refused after $((SECONDS - t0)) s; now the real accepter's turn"
touch "$W/b.start" # the server's set-up may start now
wait_row "$conn" "$IP:$port" '^rdma rxe0$' || fail "the real accepter did not get the upgrade"
n=$(grep -c "$refusal" "$W/b-cli.log" || true)
[ "$n" = 1 ] || fail "connector logged '$refusal' $n times, expected 1"
grep -q "$refusal" "$W/b-srv.log" && fail "the real accepter was refused"
touch "$W/b.go"
wait_grep '^PAIR-DATA ' "$W/b-cli.log" 90 || fail "no data result"
grep '^PAIR-DATA ' "$W/b-cli.log"
grep -q '^PAIR-DATA conn=0 .*result=OK' "$W/b-cli.log" || fail "data not byte-exact"
row=$(conn_row "$conn" "$IP:$port")
[ "$row" = "rdma rxe0" ] || fail "after the data: '$row'"
"$TOOL" stat | grep -F "$conn" || true
touch "$W/b.hold"
wait $cli || fail "client exit $?"
echo "B PASS: the impostor refused, the real accepter upgraded, 1 MiB byte-exact on rdma"
echo "impostor-caller: PASS"
