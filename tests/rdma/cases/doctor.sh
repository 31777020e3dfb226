#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted $0 and backquotes are meant literally (bash -c, regexes)
# tests/rdma/cases/doctor.sh - `vsocket doctor --rdma` on a real device: the
# Soft-RoCE guest's rxe0 (run by tests/rdma/stage.sh in the guest, as root,
# cwd = checkout, IP and DEV exported; by hand:
#   tools/rdma-guest/run -- bash tests/rdma/cases/doctor.sh).
# It must say usable and name the device, port, GID index and address; name
# the locked-memory limit when it holds no connection; name the port DOWN
# while its interface is down and the missing GID while it has no address;
# and the device must then carry rdma_cm traffic (rping), which moves the
# rxe0 counters the stage checks.
# The UD part (docs/doctor.md, "UD"): its figures agree with ibv_devinfo and
# are sane, rdma_cm's RDMA_PS_UDP id listens, the self-test passes; the MTU
# follows the interface's (1500 -> 1024, 9000 -> 4096, self-test at each);
# a locked-memory limit that holds an RDMA connection but not the UD
# endpoint's slots makes UD, only UD, not usable; not checked when RDMA is
# not usable.
set -u
IP=${IP:-10.77.0.1}
DEV=${DEV:-rxe0}
vs=${VSOCKET_BUILD_DIR:-build}/bin/vsocket
failed=0
[ -x "$vs" ] || { echo "FAIL: $vs not built (build on the host first)"; exit 1; }

# check NAME CODE PATTERN COMMAND...: exit code CODE and PATTERN in the output.
check() {
  local name=$1 code=$2 pattern=$3 out rc
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$code" ] && grep -qE -- "$pattern" <<<"$out"; then
    echo "ok   $name: $(grep -E -- "$pattern" <<<"$out" | head -n1)"
  else
    failed=$((failed + 1))
    printf 'FAIL %s: exit %s (want %s), no /%s/ in:\n%s\n' "$name" "$rc" "$code" "$pattern" "$out"
  fi
}

usable="^rdma: usable \\(device $DEV port 1 ACTIVE, GID index [0-9]+ ${IP//./\\.}\\)"
echo "--- vsocket doctor --rdma"
"$vs" doctor --rdma
check usable 0 "$usable" "$vs" doctor --rdma
check port-line 0 "^  OK       $DEV port 1: ACTIVE, RoCE on dummy0, GID index [0-9]+ ${IP//./\\.} \\(RoCE v2\\)" \
  "$vs" doctor --rdma
check rdma_cm 0 '^  OK       /dev/infiniband/rdma_cm: read-write' "$vs" doctor --rdma
check full-doctor-says-usable 0 "$usable" sh -c '"$0" doctor; exit 0' "$vs"
# Another user: the device nodes are 0666 in the guest, the limit inherited.
if id nobody >/dev/null 2>&1; then
  check as-nobody 0 "$usable" setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
    "$vs" doctor --rdma
fi

# ---- UD
# ud_figures: the UD verdict's figures from one doctor run, as
# "MTU INLINE QP_WR CQE"; empty when it does not say usable.
ud_re="^ud: usable \\($DEV port 1: MTU ([0-9]+), max_inline_data ([0-9]+), max_qp_wr ([0-9]+), max_cqe ([0-9]+)\\)$"
ud_figures() {
  local line
  line=$("$vs" doctor --rdma 2>&1 | grep -E "$ud_re")
  [[ $line =~ $ud_re ]] && echo "${BASH_REMATCH[*]:1}"
}
# devinfo FIELD: FIELD of ibv_devinfo -v for DEV (the first number after it).
devinfo() { ibv_devinfo -d "$DEV" -v | awk -v f="$1:" '$1 == f { print $2; exit }'; }
# check_ud_figures NAME WANT_MTU
check_ud_figures() {
  local name=$1 want=$2 mtu inl qpwr cqe
  read -r mtu inl qpwr cqe <<<"$(ud_figures)"
  echo "     $name: MTU ${mtu:-?} max_inline_data ${inl:-?} max_qp_wr ${qpwr:-?} max_cqe ${cqe:-?}; ibv_devinfo: active_mtu $(devinfo active_mtu) max_qp_wr $(devinfo max_qp_wr) max_cqe $(devinfo max_cqe)"
  if [ -n "$mtu" ] && [ "$mtu" = "$want" ] && [ "$mtu" = "$(devinfo active_mtu)" ] &&
    [ "$inl" -gt 0 ] && [ "$inl" -le "$mtu" ] &&
    [ "$qpwr" -ge 1024 ] && [ "$qpwr" = "$(devinfo max_qp_wr)" ] &&
    [ "$cqe" -ge 1024 ] && [ "$cqe" = "$(devinfo max_cqe)" ]; then
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name: want MTU $want = ibv_devinfo's, 0 < inline <= MTU, queues >= 1024 and = ibv_devinfo's"
    "$vs" doctor --rdma
  fi
}
check_ud_figures ud-figures 1024
check ud-self-test 0 '^  OK       self-test: 1024 bytes and [0-9]+ inline from one UD QP to another over GID index [0-9]+, received intact$' \
  "$vs" doctor --rdma
check ud-rdma-cm 0 "^  OK       rdma_cm: an RDMA_PS_UDP id binds and listens on ${IP//./\\.} port [0-9]+ \\(device $DEV\\)$" \
  "$vs" doctor --rdma
check ud-locked-memory 0 '^  OK       locked memory: the UD endpoint registers 1064 KiB \(1024 receive slots of 1064 B\); RLIMIT_MEMLOCK unlimited$' \
  "$vs" doctor --rdma
if id nobody >/dev/null 2>&1; then
  check ud-as-nobody 0 "^ud: usable \\($DEV port 1: MTU 1024," setpriv --reuid=nobody \
    --regid="$(id -g nobody)" --clear-groups "$vs" doctor --rdma
fi
# rxe's active MTU is the largest IB MTU that fits the interface's MTU.
ip link set dummy0 mtu 9000
check_ud_figures ud-figures-mtu-9000 4096
check ud-self-test-4096 0 '^  OK       self-test: 4096 bytes and [0-9]+ inline .* received intact$' "$vs" doctor --rdma
ip link set dummy0 mtu 1500
check_ud_figures ud-figures-mtu-1500-again 1024
# 600 KiB: one RDMA connection (528 KiB) but not the endpoint's 1064 KiB.
check ud-memlock-no-cap 0 '^  PROBLEM  locked memory limit too small for the endpoint: the UD endpoint registers 1064 KiB .*RLIMIT_MEMLOCK is 600 KiB' \
  setpriv --bounding-set -ipc_lock bash -c 'ulimit -l 600 && exec "$0" doctor --rdma' "$vs"
check ud-memlock-no-cap-verdict 0 '^ud: not usable: locked memory limit too small for the endpoint$' \
  setpriv --bounding-set -ipc_lock bash -c 'ulimit -l 600 && exec "$0" doctor --rdma' "$vs"
check ud-memlock-root 0 "^ud: usable \\($DEV port 1: MTU 1024, .*\\), 1 warning above$" \
  bash -c 'ulimit -l 600 && exec "$0" doctor --rdma' "$vs"

# 64 KiB of locked memory holds no connection. Root's CAP_IPC_LOCK lifts the
# limit (a WARN says so); without it, not usable.
check memlock-root 0 'WARN     locked memory limit too small for one connection: RLIMIT_MEMLOCK 64 KiB holds 0 connections.*CAP_IPC_LOCK' \
  bash -c 'ulimit -l 64 && exec "$0" doctor --rdma' "$vs"
check memlock-no-cap 4 '^rdma: not usable: locked memory limit too small for one connection$' \
  setpriv --bounding-set -ipc_lock bash -c 'ulimit -l 64 && exec "$0" doctor --rdma' "$vs"

# The port follows its interface: down, doctor names it and the fix.
ip link set dummy0 down
check port-down 4 "^rdma: not usable: $DEV port 1 is DOWN" "$vs" doctor --rdma
check port-down-fix 4 'ip link set dummy0 up' "$vs" doctor --rdma
check port-down-ud 4 '^ud: not checked: RDMA is not usable' "$vs" doctor --rdma
ip link set dummy0 up
for _ in $(seq 50); do "$vs" doctor --rdma >/dev/null 2>&1 && break; sleep 0.2; done
check port-up-again 0 "$usable" "$vs" doctor --rdma

# Without an IPv4 address on the interface the port has no IPv4 GID.
ip addr flush dev dummy0
check no-gid 4 "^rdma: not usable: $DEV port 1 has no IPv4 RoCE v2 GID" "$vs" doctor --rdma
ip addr add "$IP/24" dev dummy0
for _ in $(seq 50); do "$vs" doctor --rdma >/dev/null 2>&1 && break; sleep 0.2; done
check gid-again 0 "$usable" "$vs" doctor --rdma

# Traffic over what doctor called usable (rdma_cm, as vsocket will).
cnt=/sys/class/infiniband/$DEV/ports/1/hw_counters
before=$(cat "$cnt/sent_pkts")
timeout 60 rping -s -a "$IP" -C 3 >/tmp/doctor-rping-server.log 2>&1 &
server=$!
# The data is the test: rping's client sometimes fails its own teardown
# after the last ping under emulation ("rdma_get_cm_event: Bad file
# descriptor") and its one-shot server then refuses a retry.
ok=0
for try in 1 2 3 4 5 6; do
  sleep 0.5
  out=$(timeout 60 rping -c -a "$IP" -C 3 -v 2>&1)
  rc=$?
  echo "$out"
  if [ $rc = 0 ] || grep -q "ping data: rdma-ping-2:" <<<"$out"; then ok=1; break; fi
  echo "  (rping client attempt $try failed, retrying)"
done
wait "$server" 2>/dev/null || true
if [ $ok = 1 ]; then
  echo "ok   rping: 3 pings verified, $DEV sent_pkts +$(($(cat "$cnt/sent_pkts") - before))"
else
  failed=$((failed + 1))
  echo "FAIL rping"; cat /tmp/doctor-rping-server.log
fi

echo "doctor case: $failed failed"
[ "$failed" -eq 0 ]
