#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted $0 and backquotes are meant literally (bash -c, regexes)
# test_doctor_rdma.sh VSOCKET FAKE_IBVERBS FAKE_RDMACM - `vsocket doctor --rdma` on this host (no RDMA
# device: it must say so, not crash) and on fake sysfs trees
# (VSOCKET_DOCTOR_SYSROOT) shaped like the Soft-RoCE guest's rxe0: usable,
# port down, no IPv4 GID, no rdma_cm, locked memory too small. The UD part
# runs against the real libibverbs, which lists no fake device: it must say
# so (a PROBLEM and "ud: not usable") without touching the exit code; with
# stand-ins for both libraries (tests/tool/fake_verbs.c) whose first call
# aborts or hangs, the tool says so, the hung child is killed at its
# deadline, and nothing is left running.
# tests/rdma/cases/doctor.sh checks the real rxe0.
set -u
vs=$1
fake_ibverbs=${2:-}
fake_rdmacm=${3:-}
passed=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME CODE PATTERN -- COMMAND...: exit code CODE and every line of
# PATTERN (one extended regex per line) in stdout+stderr.
expect() {
  local name=$1 code=$2 patterns=$3 p ok=1
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$code" ] || ok=0
  while IFS= read -r p; do
    [ -z "$p" ] || grep -qE -- "$p" <<<"$out" || { ok=0; echo "  (missing: $p)"; }
  done <<<"$patterns"
  if [ $ok = 1 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    printf 'FAIL %s: exit %s (want %s), output:\n%s\n' "$name" "$rc" "$code" "$out"
  fi
}

# fake_rxe DIR: rxe0 on dummy0, port 1 ACTIVE, GID 0 link-local, GID 1
# 10.77.0.1 (RoCE v2), 6 empty slots; uverbs0 and rdma_cm read-write.
fake_rxe() {
  local r=$1 p=$1/sys/class/infiniband/rxe0/ports/1 i
  mkdir -p "$p/gids" "$p/gid_attrs/types" "$p/gid_attrs/ndevs" \
    "$r/sys/class/infiniband_verbs/uverbs0" "$r/dev/infiniband"
  echo "1: CA" >"$r/sys/class/infiniband/rxe0/node_type"
  echo dummy0 >"$r/sys/class/infiniband/rxe0/parent"
  echo "4: ACTIVE" >"$p/state"
  echo Ethernet >"$p/link_layer"
  echo fe80:0000:0000:0000:d4b5:29ff:fedb:d2b3 >"$p/gids/0"
  echo 0000:0000:0000:0000:0000:ffff:0a4d:0001 >"$p/gids/1"
  for i in 2 3 4 5 6 7; do echo 0000:0000:0000:0000:0000:0000:0000:0000 >"$p/gids/$i"; done
  for i in 0 1; do echo "RoCE v2" >"$p/gid_attrs/types/$i"; echo dummy0 >"$p/gid_attrs/ndevs/$i"; done
  echo rxe0 >"$r/sys/class/infiniband_verbs/uverbs0/ibdev"
  touch "$r/dev/infiniband/uverbs0" "$r/dev/infiniband/rdma_cm"
  chmod 666 "$r/dev/infiniband/"*
}

# Small rings, so that any default RLIMIT_MEMLOCK (64 KiB and up) holds a
# connection and only the fake tree decides.
export VSOCKET_RDMA_RING=4096

# This host, as it is. Without a device (the CI machines): "no RDMA device".
out=$("$vs" doctor --rdma 2>&1); rc=$?
if ! grep -q '^rdma: \(usable\|not usable\)' <<<"$out" || { [ $rc -ne 0 ] && [ $rc -ne 4 ]; }; then
  failed=$((failed + 1)); printf 'FAIL host: exit %s\n%s\n' "$rc" "$out"
elif [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] && { [ $rc -ne 4 ] ||
  ! grep -q '^  PROBLEM  no RDMA device: .*modprobe rdma_rxe; rdma link add rxe0 type rxe netdev ETH' <<<"$out" ||
  ! grep -q '^rdma: not usable: no RDMA device' <<<"$out" ||
  ! grep -q '^ud: not checked: RDMA is not usable (the problems above)$' <<<"$out"; }; then
  failed=$((failed + 1)); printf 'FAIL host-no-device: exit %s\n%s\n' "$rc" "$out"
else
  passed=$((passed + 1))
fi

mkdir -p "$tmp/empty"
# The whole doctor counts it among what is missing.
expect host-full 4 'rdma: not usable: no RDMA device
things? missing' -- env VSOCKET_DOCTOR_SYSROOT="$tmp/empty" "$vs" doctor
expect no-device 4 '^  PROBLEM  no RDMA device: no /sys/class/infiniband
^  PROBLEM  no /dev/infiniband/rdma_cm: .*modprobe rdma_ucm
^rdma: not usable: no RDMA device \(and 1 more problem above\)$' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/empty" "$vs" doctor --rdma
mkdir -p "$tmp/empty/sys/class/infiniband"
expect no-device-empty 4 'no RDMA device: /sys/class/infiniband is empty' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/empty" "$vs" doctor --rdma

fake_rxe "$tmp/ok"
expect usable 0 '^  OK       device rxe0: node type CA$
^  OK       rxe0 port 1: ACTIVE, RoCE on dummy0, GID index 1 10\.77\.0\.1 \(RoCE v2\)$
^  OK       /dev/infiniband/uverbs0: read-write, for rxe0.s verbs$
^  OK       /dev/infiniband/rdma_cm: read-write
^rdma: usable \(device rxe0 port 1 ACTIVE, GID index 1 10\.77\.0\.1\)' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" "$vs" doctor --rdma

# The UD checks on a device libibverbs does not know (the tree's is fake and
# named so that no real one matches): a PROBLEM of their own, their own
# verdict, and the exit code still the RDMA section's.
fake_rxe "$tmp/ud"
mv "$tmp/ud/sys/class/infiniband/rxe0" "$tmp/ud/sys/class/infiniband/vsfake0"
echo vsfake0 >"$tmp/ud/sys/class/infiniband_verbs/uverbs0/ibdev"
expect ud-no-such-device 0 '^rdma: usable \(device vsfake0 port 1 ACTIVE, GID index 1 10\.77\.0\.1\)$
^UD \(datagrams for UDP over RDMA, one endpoint per process\):$
^  PROBLEM  libibverbs (lists no device: ibv_get_device_list: .+|cannot open the device: vsfake0 is not among the [0-9]+ devices? it lists, .*ibverbs-providers.*)$
^ud: not usable: libibverbs (lists no device|cannot open the device)$' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ud" "$vs" doctor --rdma
# The libraries misbehave: their first call aborts, or never returns (the
# child is killed after VSOCKET_DOCTOR_UD_LIMIT_S, 1 s here, and must then
# be gone). A provider file beside them, as the RDMA section wants.
if [ -n "$fake_ibverbs" ] && [ -n "$fake_rdmacm" ]; then
  mkdir -p "$tmp/fakelib/libibverbs"
  cp "$fake_ibverbs" "$tmp/fakelib/libibverbs.so.1"
  cp "$fake_rdmacm" "$tmp/fakelib/librdmacm.so.1"
  touch "$tmp/fakelib/libibverbs/libfake-rdmav34.so"
  # The abort is wanted: no core file of it (the test stages fail on any).
  ulimit -c 0
  expect ud-crash 0 "^rdma: usable \\(device vsfake0
^  PROBLEM  UD checks crashed: signal 6 \\(Aborted\\), inside libibverbs, librdmacm or the device's provider$
^ud: not usable: UD checks crashed$" -- \
    env LD_LIBRARY_PATH="$tmp/fakelib" FAKE_VERBS=abort VSOCKET_DOCTOR_SYSROOT="$tmp/ud" "$vs" doctor --rdma
  expect ud-hang 0 '^rdma: usable \(device vsfake0
^  PROBLEM  UD checks hung: killed after 1 s, inside libibverbs, librdmacm or the device.s driver$
^ud: not usable: UD checks hung$' -- \
    env LD_LIBRARY_PATH="$tmp/fakelib" FAKE_VERBS=hang FAKE_VERBS_PIDFILE="$tmp/hung.pid" \
    VSOCKET_DOCTOR_UD_LIMIT_S=1 VSOCKET_DOCTOR_SYSROOT="$tmp/ud" "$vs" doctor --rdma
  if [ ! -s "$tmp/hung.pid" ]; then
    failed=$((failed + 1)); echo "FAIL ud-hang-pid: the stand-in never ran (no $tmp/hung.pid)"
  elif kill -0 "$(cat "$tmp/hung.pid")" 2>/dev/null; then
    failed=$((failed + 1)); echo "FAIL ud-hang-gone: the hung child $(cat "$tmp/hung.pid") still runs"
  else
    passed=$((passed + 1))
  fi
fi
# Not usable RDMA: UD is not checked (no child, no verbs).
expect ud-not-checked 4 '^ud: not checked: RDMA is not usable \(the problems above\)$' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/empty" "$vs" doctor --rdma

fake_rxe "$tmp/down"
echo "1: DOWN" >"$tmp/down/sys/class/infiniband/rxe0/ports/1/state"
expect port-down 4 '^  PROBLEM  rxe0 port 1 is DOWN: .*ip link set dummy0 up
^rdma: not usable: rxe0 port 1 is DOWN$' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/down" "$vs" doctor --rdma

# Only the link-local GID: the interface has no IPv4 address.
fake_rxe "$tmp/nogid"
echo 0000:0000:0000:0000:0000:0000:0000:0000 >"$tmp/nogid/sys/class/infiniband/rxe0/ports/1/gids/1"
expect no-ipv4-gid 4 '^  PROBLEM  rxe0 port 1 has no IPv4 RoCE v2 GID: .*ip addr add ADDR/PREFIX dev dummy0
^rdma: not usable: rxe0 port 1 has no IPv4 RoCE v2 GID' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/nogid" "$vs" doctor --rdma

# A RoCE v1 GID for the address does not do: rdma_cm needs v2 here.
fake_rxe "$tmp/v1"
echo "IB/RoCE v1" >"$tmp/v1/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1"
expect roce-v1-only 4 'rdma: not usable: rxe0 port 1 has no IPv4 RoCE v2 GID' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/v1" "$vs" doctor --rdma

# A second device whose port is down does not spoil the first: a WARN.
fake_rxe "$tmp/two"
cp -r "$tmp/two/sys/class/infiniband/rxe0" "$tmp/two/sys/class/infiniband/rxe1"
echo "1: DOWN" >"$tmp/two/sys/class/infiniband/rxe1/ports/1/state"
expect second-down 0 '^  WARN     rxe1 port 1 is DOWN
^  WARN     no verbs device node for rxe1: .*modprobe ib_uverbs
^rdma: usable \(device rxe0 port 1 ACTIVE, GID index 1 10\.77\.0\.1\), 2 warnings above$' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/two" "$vs" doctor --rdma

fake_rxe "$tmp/nocm"
rm "$tmp/nocm/dev/infiniband/rdma_cm"
expect no-rdma-cm 4 '^  PROBLEM  no /dev/infiniband/rdma_cm: needed for rdma_cm.*`modprobe rdma_ucm`
^rdma: not usable: no /dev/infiniband/rdma_cm$' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/nocm" "$vs" doctor --rdma

fake_rxe "$tmp/nouverbs"
rm -r "$tmp/nouverbs/sys/class/infiniband_verbs"
expect no-uverbs 4 'rdma: not usable: no verbs device node for rxe0$' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/nouverbs" "$vs" doctor --rdma

# A device node this user may not open: its mode and group, and what to do.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
  fake_rxe "$tmp/perm"
  chmod 600 "$tmp/perm/dev/infiniband/rdma_cm"
  chmod 755 "$tmp"
  expect no-access 4 '^  PROBLEM  no read-write access to /dev/infiniband/rdma_cm: .*mode 0600, group root: add this user to that group
^rdma: not usable: no read-write access to /dev/infiniband/rdma_cm$' -- \
    env VSOCKET_DOCTOR_SYSROOT="$tmp/perm" setpriv --reuid=nobody --regid="$(id -g nobody)" \
    --clear-groups "$vs" doctor --rdma
  chmod 700 "$tmp"
fi

# Locked memory: 64 KiB holds no connection of 2 x 256 KiB rings. Root keeps
# CAP_IPC_LOCK, which lifts the limit: drop it, as a program without it.
drop_ipc_lock=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  drop_ipc_lock=(setpriv --bounding-set -ipc_lock)
fi
if [ "$(id -u)" != 0 ] || [ ${#drop_ipc_lock[@]} -gt 0 ]; then
  expect memlock-small 4 '^  PROBLEM  locked memory limit too small for one connection: RLIMIT_MEMLOCK 64 KiB holds 0 connections .*ulimit -l unlimited
^rdma: not usable: locked memory limit too small for one connection$' -- \
    env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" VSOCKET_RDMA_RING=262144 "${drop_ipc_lock[@]}" \
    bash -c 'ulimit -l 64 && exec "$0" doctor --rdma' "$vs"
  # 1 MiB: 7 connections of 144 KiB (64 KiB rings), fewer than 64: usable, with a WARN.
  expect memlock-few 0 '^  WARN     locked memory limit too small for many connections: RLIMIT_MEMLOCK 1024 KiB holds 7 connections
^rdma: usable .*, 1 warning above$' -- \
    env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" VSOCKET_RDMA_RING=65536 "${drop_ipc_lock[@]}" \
    bash -c 'ulimit -l 1024 && exec "$0" doctor --rdma' "$vs"
fi
if [ "$(id -u)" = 0 ]; then
  # With CAP_IPC_LOCK the limit does not bind this process: a WARN that says so.
  expect memlock-capable 0 'WARN     locked memory limit too small for one connection: .*CAP_IPC_LOCK
^rdma: usable' -- env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" VSOCKET_RDMA_RING=262144 \
    bash -c 'ulimit -l 64 && exec "$0" doctor --rdma' "$vs"
fi
if [ "$(ulimit -H -l)" = unlimited ]; then
  expect memlock-unlimited 0 '^  OK       locked memory \(RLIMIT_MEMLOCK\): unlimited$' -- \
    env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" bash -c 'ulimit -l unlimited && exec "$0" doctor --rdma' "$vs"
fi
# Descriptors: 2 per connection on RDMA against RLIMIT_NOFILE (exit code aside).
expect nofile-few 0 '^  WARN     open files limit too small for many connections: RLIMIT_NOFILE 100 holds ~50 connections on RDMA .*ulimit -n' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" bash -c 'ulimit -n 100 && "$0" doctor --rdma; exit 0' "$vs"
expect nofile-ok 0 '^  OK       open files: RLIMIT_NOFILE 600 holds ~300 connections on RDMA' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" bash -c 'ulimit -n 600 && "$0" doctor --rdma; exit 0' "$vs"
# The estimate per connection (exit code aside: it depends on this user's limit).
expect ring-1m 0 'each registers ~2064 KiB: 2 x 1024 KiB rings' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" VSOCKET_RDMA_RING=1048576 sh -c '"$0" doctor --rdma; exit 0' "$vs"
expect ring-bytes 0 'each registers ~144 KiB: 2 x 64 KiB rings' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" VSOCKET_RDMA_RING=65536 sh -c '"$0" doctor --rdma; exit 0' "$vs"
# As libvsocket: rounded up to a power of two; a suffix is refused (the default then).
expect ring-pow2 0 'each registers ~1040 KiB: 2 x 512 KiB rings' -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" VSOCKET_RDMA_RING=300000 sh -c '"$0" doctor --rdma; exit 0' "$vs"
expect ring-invalid 0 "^  WARN     VSOCKET_RDMA_RING is invalid: '1M': libvsocket takes a whole number of bytes from 4096 to 268435456 .* uses 256 KiB
each registers ~528 KiB" -- \
  env VSOCKET_DOCTOR_SYSROOT="$tmp/ok" VSOCKET_RDMA_RING=1M sh -c '"$0" doctor --rdma; exit 0' "$vs"

expect rdma-with-program 2 '--rdma examines the host, not a program' -- "$vs" doctor --rdma true
expect help 0 'With --rdma: 0 RDMA usable' -- "$vs" doctor --help

echo "tool_doctor_rdma: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
