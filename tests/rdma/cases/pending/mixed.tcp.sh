#!/usr/bin/env bash
# One end under vsocket (VSOCKET_TRANSPORTS=rdma), the other plain, in both
# orders: vsocket-stress --mode blocking must PASS (0 lost, 0 corrupt, 0
# reordered), and the vsocket end's connections must stay on the kernel and
# end with reason peer-not-vsocket (the first one to try; later connections
# to the same peer may skip the try: peer-not-vsocket-cached), never on
# rdma; vsocket-stress's idle control connection stays upgrade-deferred.
# Seen on the way: upgrade-deferred, then peer-not-vsocket after 1-2 s.
# This case must NOT use RDMA: the rxe0 counters may not move (see stage.sh
# on *.tcp.sh cases).
# shellcheck source=SCRIPTDIR/../../lib.sh
source "$(dirname "$0")/../../lib.sh"
port=7209
case_setup mixed
stress_args=(--mode blocking --conns 2 --udp-flows 0 --messages 300 --max-size 256K --seconds 60)

# reasons: "transport reason" of the vsocket side's TCP connections to/from
# the stress port (open and, with --all, closed ones), one per line.
reasons() {
  "$TOOL" stat --all --json 2>/dev/null | jq -r --arg l "$IP:$port" \
    '.processes[].sockets[] | select(.proto == "tcp" and .state != "listening" and (.local == $l or .peer == $l)) | "\(.transport) \(.reason)"' || true
}
# watch_reasons PID: while PID runs, each distinct "transport reason" line
# once (and the last snapshot in $tmp/last)
watch_reasons() {
  local seen="" r snap
  while kill -0 "$1" 2>/dev/null; do
    snap=$(reasons)
    [ -z "$snap" ] || printf '%s\n' "$snap" >"$tmp/last"
    while read -r r; do
      [ -n "$r" ] && ! grep -qxF -- "$r" <<<"$seen" && { seen+="$r"$'\n'; echo "  seen: $r" >&2; }
    done <<<"$snap"
    sleep 0.2
  done
  printf '%s' "$seen"
}
# final_ok LINES: none on rdma, at least one peer-not-vsocket, nothing but
# peer-not-vsocket(-cached) as the reasons of the ended state
final_ok() {
  local lines=$1 also=${2:-}
  [ -n "$lines" ] || { echo "no connection of the vsocket side seen"; return 1; }
  if grep -q '^rdma' <<<"$lines"; then echo "a connection went on rdma with a plain peer:"; echo "$lines"; return 1; fi
  grep -qx 'kernel peer-not-vsocket' <<<"$lines" || { echo "no connection ended with peer-not-vsocket:"; echo "$lines"; return 1; }
  # upgrade-deferred: vsocket-stress's idle control connection (an idle
  # connection never starts its upgrade).
  if grep -vqxE 'kernel (peer-not-vsocket(-cached)?|upgrade-deferred'"$also"')' <<<"$lines"; then echo "other final reasons:"; echo "$lines"; return 1; fi
}

# 1. vsocket client, plain server: the client's connections, watched while
# it runs (its statistics go with it).
plain "$STRESS" server --port $port --bind "$IP" --once >"$tmp/srv1.log" 2>&1 &
pids+=("$!")
wait_port $port
vs_run "$STRESS" client --host "$IP" --port $port "${stress_args[@]}" >"$tmp/cli1.log" 2>&1 &
cli=$!
pids+=("$cli")
echo "vsocket client -> plain server:"
seen=$(watch_reasons "$cli")
rc=0
wait "$cli" || rc=$?
grep -E '^stress:' "$tmp/cli1.log" || true
{ [ "$rc" = 0 ] && grep -q 'result=PASS' "$tmp/cli1.log"; } || { echo "stress client failed (exit $rc)"; exit 1; }
echo "client's connections, last seen: $(tr '\n' ';' <"$tmp/last")"
# (the last snapshot can be up to 2 s old: a connection whose set-up began
# just before may still show upgrade-pending)
final_ok "$(cat "$tmp/last")" '|upgrade-pending'

if grep -q '^rdma' <<<"$seen"; then echo "a connection was on rdma with a plain peer"; exit 1; fi
echo "vsocket client -> plain server: PASS, reasons seen: $(tr '\n' ';' <<<"$seen")"

# 2. plain client, vsocket server: the server lives on, its closed
# connections keep their final reason (--all).
port=$((port + 100))
vs_run "$STRESS" server --port $port --bind "$IP" >"$tmp/srv2.log" 2>&1 &
pids+=("$!")
wait_port $port
plain "$STRESS" client --host "$IP" --port $port "${stress_args[@]}" >"$tmp/cli2.log" 2>&1 &
cli=$!
pids+=("$cli")
echo "plain client -> vsocket server:"
seen=$(watch_reasons "$cli")
rc=0
wait "$cli" || rc=$?
grep -E '^stress:' "$tmp/cli2.log" || true
{ [ "$rc" = 0 ] && grep -q 'result=PASS' "$tmp/cli2.log"; } || { echo "stress client failed (exit $rc)"; exit 1; }
final=$(reasons)
echo "server's connections after the run: $(tr '\n' ';' <<<"$final")"
final_ok "$final"
if grep -q '^rdma' <<<"$seen"; then echo "a connection was on rdma with a plain peer"; exit 1; fi
echo "plain client -> vsocket server: PASS, reasons seen: $(tr '\n' ';' <<<"$seen")"
echo "mixed: both orders PASS on the kernel, peer-not-vsocket"
