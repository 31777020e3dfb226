#!/usr/bin/env bash
# iperf3, both ends under vsocket on RDMA (VSOCKET_TRANSPORTS=rdma): a 10 s
# test each way (normal and -R), JSON results checked against what kernel
# TCP gives for the same run: the receiver's byte count is the same in the
# client's and the server's report, the sender's too (both ends agree), the
# receiver got most of what was sent (iperf3 stops counting at TEST_END, so
# on kernel TCP too "sent" exceeds "received" by what was still in flight:
# a few MiB), and `vsocket stat` shows the connections on rdma while the
# test runs.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7201
case_setup iperf3

# jnum FILE FILTER: a number from iperf3's JSON
jnum() { jq -r "$2 // 0 | floor" "$1"; }

one() { # LABEL [CLIENT ARGS...]
  local label=$1 srv cli rc=0
  shift
  vs_run iperf3 -s -1 -B "$IP" -p $port -J >"$tmp/srv.json" 2>"$tmp/srv.err" &
  srv=$!
  pids+=("$srv")
  wait_port $port
  # 10 s: the set-up must end while the test runs (`vsocket stat` looks),
  # and on a loaded host it took up to 3 s.
  vs_run iperf3 -c "$IP" -p $port -t 10 -J "$@" >"$tmp/cli.json" 2>"$tmp/cli.err" &
  cli=$!
  pids+=("$cli")
  expect_rdma_rows 2
  wait "$cli" || rc=$?
  [ "$rc" = 0 ] || { echo "$label: iperf3 client exit $rc"; cat "$tmp/cli.err"; head -c 2000 "$tmp/cli.json"; return 1; }
  wait "$srv" || rc=$?
  [ "$rc" = 0 ] || { echo "$label: iperf3 server exit $rc"; cat "$tmp/srv.err"; head -c 2000 "$tmp/srv.json"; return 1; }
  local err
  for f in cli srv; do
    err=$(jq -r '.error // empty' "$tmp/$f.json")
    [ -z "$err" ] || { echo "$label: iperf3 $f error: $err"; return 1; }
  done
  # Sender: the client (normal) or the server (-R). Both reports carry both
  # sums; the receiver's own count is the truth for "received".
  local c_sent c_recv s_sent s_recv
  c_sent=$(jnum "$tmp/cli.json" .end.sum_sent.bytes)
  c_recv=$(jnum "$tmp/cli.json" .end.sum_received.bytes)
  s_sent=$(jnum "$tmp/srv.json" .end.sum_sent.bytes)
  s_recv=$(jnum "$tmp/srv.json" .end.sum_received.bytes)
  echo "$label: client report sent=$c_sent received=$c_recv; server report sent=$s_sent received=$s_recv"
  local sent recv other
  if [ "$label" = reverse ]; then
    sent=$s_sent recv=$c_recv other=$c_sent # the client's copy of the server's sent
  else
    sent=$c_sent recv=$s_recv other=$c_recv # the client's copy of the server's received
  fi
  if [ "$label" = reverse ]; then
    [ "$other" = "$sent" ] || { echo "$label: server sent $sent, the client's report says $other"; return 1; }
  else
    [ "$other" = "$recv" ] || { echo "$label: server received $recv, the client's report says $other"; return 1; }
  fi
  [ "$recv" -gt $((1 << 20)) ] || { echo "$label: only $recv bytes received"; return 1; }
  [ "$sent" -ge "$recv" ] || { echo "$label: received $recv > sent $sent"; return 1; }
  [ $((sent - recv)) -le $((32 << 20)) ] ||
    { echo "$label: sent $sent, received $recv: $((sent - recv)) bytes lost (> 32 MiB in flight)"; return 1; }
  echo "$label: $recv bytes received of $sent sent ($((sent - recv)) in flight at TEST_END) OK"
}

one normal
one reverse -R
echo "iperf3 over rdma: normal and reverse OK"
