#!/usr/bin/env bash
# sockperf TCP ping-pong for 5 s, both ends under vsocket on RDMA
# (VSOCKET_TRANSPORTS=rdma). Checked against what kernel TCP gives for the
# same run: exit 0, a latency summary, no dropped, duplicated or
# out-of-order message, the client got an answer to every ping but at most
# the last one (in flight when the timer ended the test), and the server read
# and echoed exactly the bytes the client says it sent (the server's own
# counters, from `vsocket stat --all --json`, on its closed connection).
# `vsocket stat` shows the connection on rdma while the test runs.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7202
size=64
case_setup sockperf

vs_run sockperf server --tcp -i "$IP" -p $port >"$tmp/srv.log" 2>&1 &
srv=$!
pids+=("$srv")
wait_port $port
vs_run sockperf ping-pong --tcp -i "$IP" -p $port -t 5 -m $size >"$tmp/cli.log" 2>&1 &
cli=$!
pids+=("$cli")
expect_rdma_rows 2
rc=0
wait "$cli" || rc=$?
log=$tmp/cli.log
grep -E 'Total Run|Valid Duration|dropped|Summary|percentile 50.000|percentile 99.000' "$log" || true
[ "$rc" = 0 ] || { echo "sockperf client exit $rc"; tail -20 "$log"; exit 1; }
grep -q 'Summary: Latency is [0-9.]* usec' "$log" || { echo "no latency summary"; tail -20 "$log"; exit 1; }
grep -q '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' "$log" ||
  { echo "dropped/duplicated/out-of-order messages"; exit 1; }
if grep -qiE 'error|fail' "$log"; then echo "errors in the client output:"; grep -iE 'error|fail' "$log"; exit 1; fi
read -r sent recvd < <(sed -n 's/.*\[Total Run\].*SentMessages=\([0-9]*\); ReceivedMessages=\([0-9]*\).*/\1 \2/p' "$log")
{ [ -n "${sent:-}" ] && [ "$sent" -gt 100 ]; } || { echo "no [Total Run] line or too few messages"; exit 1; }
{ [ "$recvd" -le "$sent" ] && [ "$recvd" -ge $((sent - 1)) ]; } ||
  { echo "client sent $sent messages but received $recvd answers"; exit 1; }
read -r vsent vrecvd < <(sed -n 's/.*\[Valid Duration\].*SentMessages=\([0-9]*\); ReceivedMessages=\([0-9]*\).*/\1 \2/p' "$log")
[ "${vsent:-x}" = "${vrecvd:-y}" ] || { echo "valid duration: sent $vsent, received $vrecvd"; exit 1; }

# The server's side of the finished connection (it is still alive: --all
# shows the closed connection with its counters).
row=$("$TOOL" stat --all --json | jq -c --arg l "$IP:$port" \
  '[.processes[].sockets[] | select(.local == $l and .state != "listening")] | last')
echo "server connection: $row"
[ "$(jq -r .transport <<<"$row")" = rdma ] || { echo "the server's connection did not end on rdma"; exit 1; }
want=$((sent * size))
for k in rx_bytes tx_bytes; do
  got=$(jq -r ".$k" <<<"$row")
  [ "$got" = "$want" ] || { echo "server $k=$got, the client sent $sent x $size = $want bytes"; exit 1; }
done
echo "sockperf over rdma: $sent pings, $recvd answers, server echoed $want bytes OK"
