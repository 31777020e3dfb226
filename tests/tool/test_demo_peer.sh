#!/usr/bin/env bash
# test_demo_peer.sh BUILD_DIR - `make demo`'s two-host part against a real
# peer (bench/rdma/pair-demo --serve IP on the server host, --peer IP on the
# client host), between two network namespaces joined by a veth pair: the
# synchronisation over the control port, every program's figure with and
# without vsocket, and the servers' transports, which reach the client side
# over the same channel. No RDMA device here: vsocket stays on the kernel,
# and the transport lines must say why. Exit 77 (skipped) without root, ip
# netns, or the programs.
set -u
build=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
for p in ip jq redis-server redis-benchmark iperf3 sockperf; do
  command -v $p >/dev/null || { echo "SKIP: $p not installed"; exit 77; }
done
a=vsdA$$ b=vsdB$$ va=vsdva$$ vb=vsdvb$$
cleanup() {
  [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null
  # Whatever still runs in the namespaces (a server left by a failure).
  ip netns pids $a 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids $b 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del $a 2>/dev/null
  ip netns del $b 2>/dev/null
  rm -rf "$tmp"
}
tmp=$(mktemp -d)
trap cleanup EXIT
ip netns add $a && ip netns add $b || { echo "SKIP: cannot make network namespaces"; exit 77; }
ip link add $va type veth peer name $vb && ip link set $va netns $a && ip link set $vb netns $b &&
  ip -n $a addr add 10.98.0.1/24 dev $va && ip -n $b addr add 10.98.0.2/24 dev $vb &&
  ip -n $a link set $va up && ip -n $b link set $vb up &&
  ip -n $a link set lo up && ip -n $b link set lo up || { echo "FAIL: the veth link"; exit 1; }

export VSOCKET_BUILD_DIR=$build PAIRDEMO_SECONDS=1
cd "$repo"
ip netns exec $a bench/rdma/pair-demo --serve 10.98.0.1 >"$tmp/a.out" 2>&1 &
srv=$!
rc=0
timeout 600 ip netns exec $b bench/rdma/pair-demo --peer 10.98.0.1 >"$tmp/b.out" 2>&1 || rc=$?
wait "$srv"
arc=$?
srv=
failed=0
fail() { echo "FAIL: $*"; failed=1; }
[ "$rc" = 0 ] || fail "the client side exited $rc"
[ "$arc" = 0 ] || fail "the server side exited $arc"
# Four figures, each with a number for the kernel and for vsocket.
n=$(grep -cE '^DEMO\|[a-z0-9]+\|[^|]+\|[^|]+\|[^|]+\|(high|low)\|[0-9.]+\|[0-9.]+$' "$tmp/b.out")
[ "$n" = 4 ] || fail "$n complete DEMO lines, not 4"
# The servers' transports, from the server host: kernel, with the reason.
for prog in redis iperf3 sockperf; do
  grep -qE "^TRANSPORT\|$prog\|.*kernel \(no-rdma-device\) [0-9]+" "$tmp/b.out" ||
    fail "no transport line for $prog saying kernel (no-rdma-device)"
done
if [ $failed = 0 ]; then
  echo "PASS: pair-demo --serve / --peer across two namespaces: 4 figures, 3 transport lines"
  exit 0
fi
echo "--- client side:"; cat "$tmp/b.out"; echo "--- server side:"; cat "$tmp/a.out"
exit 1
