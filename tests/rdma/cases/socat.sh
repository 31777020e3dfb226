#!/usr/bin/env bash
# socat, both ends under vsocket on RDMA (VSOCKET_TRANSPORTS=rdma): a 4 MiB
# random file uploaded one way (client -> server, fed in 100 KiB pieces so
# the transfer lasts a few seconds), then echoed through a socat echo server
# (PIPE, no fork) and back; then echoed by a forking socat server (`fork`:
# the parent accepts and closes its copy, a child serves) to two clients at
# once. Checked as kernel TCP would give it: the file the server wrote and
# the files that came back have the original's size and sha256. `vsocket
# stat` shows each connection on rdma on both ends while it runs (for the
# forking server: at its children, src/transport/rdma/forked.c): a client's
# input ends only once the shell has looked.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port_u=7207
port_e=7208
port_f=7209
size=$((4 << 20))
piece=102400
case_setup socat
# paced FILE RELEASE: FILE on stdout, 100 KiB at a time, 0.1 s apart; the
# end of input (which ends the connection) only once RELEASE exists: the
# shell has seen the connection on rdma (a fresh run's busy guest once took
# longer to run `vsocket stat` than the transfer lasted).
paced() {
  local i n=$(((size + piece - 1) / piece))
  for ((i = 0; i < n; i++)); do
    dd if="$1" bs=$piece skip=$i count=1 status=none
    sleep 0.1
  done
  while [ ! -e "$2" ]; do sleep 0.1; done
}
# check NAME FILE: FILE is the original, byte for byte
check() {
  local got
  got=$(sha256sum <"$2" | cut -d' ' -f1)
  { [ "$(stat -c %s "$2")" = "$size" ] && [ "$got" = "$want" ]; } ||
    { echo "$1: $(stat -c %s "$2") bytes, sha256 $got; the original: $size bytes, $want"; exit 1; }
  echo "$1: $size bytes, sha256 $want identical"
}

head -c $size /dev/urandom >"$tmp/file"
want=$(sha256sum <"$tmp/file" | cut -d' ' -f1)

# 1. Upload: client -> server -> file.
vs_run socat -u "TCP-LISTEN:$port_u,bind=$IP,reuseaddr" "CREATE:$tmp/uploaded" >"$tmp/up-server.log" 2>&1 &
up_srv=$!
pids+=("$up_srv")
wait_port $port_u
paced "$tmp/file" "$tmp/up-seen" | vs_run socat -u STDIN "TCP:$IP:$port_u" >"$tmp/up-client.log" 2>&1 &
up_cli=$!
pids+=("$up_cli")
seen=0
expect_rdma_rows 2 || seen=1
touch "$tmp/up-seen"
[ "$seen" = 0 ] || exit 1
rc=0
wait "$up_cli" || rc=$?
[ "$rc" = 0 ] || { echo "upload client exit $rc"; exit 1; }
wait "$up_srv" || rc=$?
[ "$rc" = 0 ] || { echo "upload server exit $rc"; exit 1; }
check upload "$tmp/uploaded"

# 2. Echo: client -> socat echo server (PIPE) -> client; -t: wait for the
# echo's end after our input's, however slow.
vs_run socat -t 60 "TCP-LISTEN:$port_e,bind=$IP,reuseaddr" PIPE >"$tmp/echo-server.log" 2>&1 &
echo_srv=$!
pids+=("$echo_srv")
wait_port $port_e
paced "$tmp/file" "$tmp/echo-seen" | vs_run socat -t 60 "STDIN!!CREATE:$tmp/echoed" "TCP:$IP:$port_e" >"$tmp/echo-client.log" 2>&1 &
echo_cli=$!
pids+=("$echo_cli")
expect_rdma_rows 2 || seen=1
touch "$tmp/echo-seen"
[ "$seen" = 0 ] || exit 1
wait "$echo_cli" || rc=$?
[ "$rc" = 0 ] || { echo "echo client exit $rc"; exit 1; }
wait "$echo_srv" || rc=$?
[ "$rc" = 0 ] || { echo "echo server exit $rc"; exit 1; }
check echo "$tmp/echoed"

# 3. Fork per connection: two clients at once, each served by a child.
vs_run socat -t 60 "TCP-LISTEN:$port_f,bind=$IP,reuseaddr,fork" PIPE >"$tmp/fork-server.log" 2>&1 &
pids+=("$!")
wait_port $port_f
fork_cli=()
for k in 1 2; do
  paced "$tmp/file" "$tmp/fork-seen" | vs_run socat -t 60 "STDIN!!CREATE:$tmp/forked$k" "TCP:$IP:$port_f" >"$tmp/fork-client$k.log" 2>&1 &
  fork_cli+=("$!")
  pids+=("$!")
done
# Both ends of both connections: the clients' and the server's children's.
on_rdma=0
end=$((SECONDS + 120))
while [ "$SECONDS" -lt "$end" ]; do
  on_rdma=$("$TOOL" stat 2>/dev/null | grep -F "$IP:$port_f " | grep -c ' rdma ' || true)
  [ "$on_rdma" -ge 4 ] && break
  sleep 0.2
done
"$TOOL" stat 2>/dev/null | grep -F "$IP:$port_f " || true
[ "$on_rdma" -ge 4 ] || { touch "$tmp/fork-seen"; echo "forking echo server: $on_rdma ends on rdma, expected 4"; exit 1; }
# The children serve: their rows say so, whenever the parent closed its copy.
not_connected=$("$TOOL" stat 2>/dev/null | awk -v l="$IP:$port_f" '$5 == l && $7 == "rdma" && $4 != "connected"')
[ -z "$not_connected" ] || { echo "forking echo server: children's rows not connected: $not_connected"; exit 1; }
touch "$tmp/fork-seen"
for k in 1 2; do
  wait "${fork_cli[k - 1]}" || rc=$?
  [ "$rc" = 0 ] || { echo "forking echo client $k exit $rc"; exit 1; }
  check "forking echo $k" "$tmp/forked$k"
done
echo "socat over rdma: upload, echo and forking echo of 4 MiB OK"
