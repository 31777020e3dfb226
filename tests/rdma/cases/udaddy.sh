#!/usr/bin/env bash
# librdmacm's udaddy on rxe0: UD queue pairs whose addresses travel in
# rdma_cm's SIDR (the client's REQ to the server's RDMA_PS_UDP id, the
# server's REP with its QPN and Q_Key), the lookup vsocket's UDP over UD is
# to find its peers with (docs/design/udp.md §3, step 0 of §13). No vsocket
# here: this shows the fabric does what the design assumes.
#   1. Nothing listens: the client's lookup is answered, not timed out:
#      RDMA_CM_EVENT_UNREACHABLE (a SIDR REP with status 1,
#      IB_SIDR_UNSUPPORTED: no listener), exit not 0.
#   2. One pair of ids, 10 datagrams of 100 B each way.
#   3. Four pairs of ids, 50 datagrams each way of the port's active MTU
#      (read from ibv_devinfo): the largest UD message.
# A run passes when server and client both exit 0 and say "test complete"
# and "return status 0" (udaddy checks that every datagram arrived; it does
# not check their bytes: `vsocket doctor --rdma`'s self-test does).
# By hand: tools/rdma-guest/run -- bash tests/rdma/cases/udaddy.sh
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
DEV=${DEV:-rxe0}
port=7174 # udaddy's, fixed
case_setup udaddy

# listening: whether an RDMA_PS_UDP id listens on IP:port (rdma_cm's own
# table, so the client starts after the server's rdma_listen, not after a
# guess of how long that takes).
listening() {
  rdma res show cm_id | grep -E "state LISTEN ps UDP .*src-addr ${IP//./\\.}:$port " >/dev/null
}

# run NAME ARGS...: udaddy server and client with ARGS; both must succeed.
run() {
  local name=$1 i rc=0 src=0
  shift
  timeout 120 udaddy -b "$IP" "$@" >"$tmp/$name-server.log" 2>&1 &
  local server=$!
  pids+=("$server")
  for ((i = 0; i < 1200; i++)); do listening && break; sleep 0.1; done
  listening || { echo "$name: the server does not listen after 120 s"; cat "$tmp/$name-server.log"; exit 1; }
  timeout 120 udaddy -s "$IP" "$@" >"$tmp/$name-client.log" 2>&1 || rc=$?
  wait "$server" || src=$?
  for side in server client; do
    echo "  --- $name $side"
    sed 's/^/  | /' "$tmp/$name-$side.log"
  done
  if [ "$rc" != 0 ] || [ "$src" != 0 ]; then
    echo "FAIL $name: client exit $rc, server exit $src"
    exit 1
  fi
  for side in server client; do
    grep -qx 'test complete' "$tmp/$name-$side.log" && grep -qx 'return status 0' "$tmp/$name-$side.log" ||
      { echo "FAIL $name: the $side did not report 'test complete' and 'return status 0'"; exit 1; }
  done
  grep -q 'initiating data transfers' "$tmp/$name-client.log" ||
    { echo "FAIL $name: the client never got the SIDR answer (no 'initiating data transfers')"; exit 1; }
  echo "ok   $name: udaddy $*"
}

# 1. No listener: an answer, not a timeout. Its time is shown, not judged.
if listening; then echo "something already listens on $IP:$port"; exit 1; fi
start=$(date +%s%N)
rc=0
timeout 120 udaddy -s "$IP" -C 1 >"$tmp/none.log" 2>&1 || rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
sed 's/^/  | /' "$tmp/none.log"
if [ "$rc" = 0 ] || [ "$rc" = 124 ] || ! grep -q 'RDMA_CM_EVENT_UNREACHABLE' "$tmp/none.log"; then
  echo "FAIL no-listener: exit $rc, expected an RDMA_CM_EVENT_UNREACHABLE and a failure"
  exit 1
fi
echo "ok   no-listener: RDMA_CM_EVENT_UNREACHABLE, exit $rc, ${ms} ms (process start included)"

# 2 and 3.
run one -C 10
mtu=$(ibv_devinfo -d "$DEV" -v | awk '$1 == "active_mtu:" { print $2; exit }')
[[ $mtu =~ ^[0-9]+$ ]] || { echo "cannot read $DEV's active MTU from ibv_devinfo: '$mtu'"; exit 1; }
run four-mtu -c 4 -C 50 -S "$mtu"
echo "udaddy case: passed (active MTU $mtu)"
