#!/usr/bin/env bash
# shellcheck disable=SC2317  # helper functions are called indirectly (run_case "$@")
# tests/rdma/stage.sh — the RDMA test stage (issue 3).
#
# Boots the Soft-RoCE guest (tools/rdma-guest/run) once and runs, inside it,
# client and server on the one rxe device: verbs (perftest, ibv_rc_pingpong),
# rdma_cm (rping, rstream) and any extra cases in tests/rdma/cases/*.sh. Each
# case passes only if its programs succeed AND the rxe0 packet counters
# (/sys/class/infiniband/rxe0/ports/1/hw_counters/{sent,rcvd}_pkts) moved.
#
# Never passes silently: if the guest cannot start, the stage fails. The only
# way to skip it is VSOCKET_SKIP_RDMA=1, which prints a loud SKIPPED banner.
# Last line of output: "rdma: N passed, M failed".
#
# Env: VSOCKET_SKIP_RDMA=1          skip (exit 0, banner)
#      VSOCKET_RDMA_STAGE_TIMEOUT   whole guest run limit, seconds (default 1200)
#      VSOCKET_RDMA_CASE_TIMEOUT    per program limit in the guest (default 60; a
#                                   case file may ask for more with a line
#                                   "# rdma-case-timeout: SECONDS")
#      everything tools/rdma-guest/run reads (VSOCKET_RDMA_GUEST_*).
# Extra cases: tests/rdma/cases/*.sh run in the guest, as root, with cwd = the
# checkout, IP=10.77.0.1 and DEV=rxe0 exported; exit 0 = success.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
IP=10.77.0.1
DEV=rxe0
CNT=/sys/class/infiniband/$DEV/ports/1/hw_counters

# ============================================================ guest side
if [ "${1:-}" = --in-guest ]; then
  case_timeout=${VSOCKET_RDMA_CASE_TIMEOUT:-60}
  export IP DEV
  work=$(mktemp -d /tmp/rdma-stage.XXXXXX)
  passed=0 failed=0
  counters() { echo "$(cat "$CNT/sent_pkts") $(cat "$CNT/rcvd_pkts")"; }
  t() { timeout -k 5 "$case_timeout" "$@"; }
  # server_client NAME "SERVER CMD" "CLIENT CMD": start the server, give it a
  # moment, run the client (retried: the server may still be starting).
  server_client() {
    local srv=$1 cli=$2 spid rc=1 try
    t bash -c "$srv" >"$work/server.log" 2>&1 &
    spid=$!
    for try in 1 2 3 4 5 6; do
      sleep 0.5
      if t bash -c "$cli" >"$work/client.log" 2>&1; then rc=0; break; fi
      kill -0 "$spid" 2>/dev/null || break
      echo "  (client attempt $try failed, retrying)"
    done
    if [ "$rc" = 0 ]; then wait "$spid" || rc=$?; else kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null || true; fi
    return "$rc"
  }
  run_case() {
    local name=$1; shift
    local before after s0 r0 s1 r1 rc=0
    before=$(counters)
    "$@" || rc=$?
    after=$(counters)
    read -r s0 r0 <<<"$before"; read -r s1 r1 <<<"$after"
    local ds=$((s1 - s0)) dr=$((r1 - r0))
    if [ "$rc" = 0 ] && [ "$ds" -gt 0 ] && [ "$dr" -gt 0 ]; then
      passed=$((passed + 1))
      echo "PASS $name  (rxe0 sent_pkts +$ds, rcvd_pkts +$dr)"
    else
      failed=$((failed + 1))
      if [ "$rc" != 0 ]; then echo "FAIL $name: exit $rc (rxe0 sent +$ds, rcvd +$dr)"
      else echo "FAIL $name: programs succeeded but rxe0 counters did not move (sent +$ds, rcvd +$dr): not RDMA traffic"; fi
      for f in server client; do
        [ -s "$work/$f.log" ] && { echo "  --- $f output (tail)"; tail -n 15 "$work/$f.log" | sed 's/^/  | /'; }
      done
    fi
    rm -f "$work/server.log" "$work/client.log"
  }
  echo "rdma stage in guest: $(uname -r), $(nproc) vCPUs, device $DEV on dummy0 $IP"
  [ -r "$CNT/sent_pkts" ] || { echo "FAIL setup: $CNT missing"; echo "RDMA-STAGE-COUNTS 0 1"; exit 1; }
  run_case "verbs RC send latency (ib_send_lat -x 1, 2 B)" server_client \
    "ib_send_lat -d $DEV -x 1 -s 2 -n 500" "ib_send_lat -d $DEV -x 1 -s 2 -n 500 $IP"
  run_case "verbs RC write bandwidth (ib_write_bw -x 1, 64 KiB)" server_client \
    "ib_write_bw -d $DEV -x 1 -s 65536 -n 200" "ib_write_bw -d $DEV -x 1 -s 65536 -n 200 $IP"
  run_case "verbs RC read latency (ib_read_lat -x 1, 64 B)" server_client \
    "ib_read_lat -d $DEV -x 1 -s 64 -n 200" "ib_read_lat -d $DEV -x 1 -s 64 -n 200 $IP"
  run_case "verbs UD send (ib_send_lat -c UD -x 1, 64 B)" server_client \
    "ib_send_lat -d $DEV -c UD -x 1 -s 64 -n 200" "ib_send_lat -d $DEV -c UD -x 1 -s 64 -n 200 $IP"
  run_case "verbs RC ping-pong (ibv_rc_pingpong -g 1)" server_client \
    "ibv_rc_pingpong -d $DEV -g 1 -n 200 -s 4096" "ibv_rc_pingpong -d $DEV -g 1 -n 200 -s 4096 $IP"
  run_case "rdma_cm (rping, 20 pings)" server_client \
    "rping -s -a $IP -C 20" "rping -c -a $IP -C 20 -v"
  run_case "rsocket stream (rstream, 4 KiB x 200)" server_client \
    "rstream -b $IP -S 4096 -C 200" "rstream -s $IP -S 4096 -C 200"
  for c in "$repo"/tests/rdma/cases/*.sh; do
    [ -e "$c" ] || continue
    ct=$(sed -n 's/^# rdma-case-timeout: *\([0-9][0-9]*\).*/\1/p' "$c" | head -n1)
    [ -n "$ct" ] && [ "$ct" -gt "$case_timeout" ] || ct=$case_timeout
    run_case "case $(basename "$c")" timeout -k 5 "$ct" bash "$c"
  done
  rm -rf "$work"
  echo "RDMA-STAGE-COUNTS $passed $failed"
  [ "$failed" = 0 ]
  exit
fi

# ============================================================ host side
if [ "${VSOCKET_SKIP_RDMA:-0}" = 1 ]; then
  cat <<'EOF'
########################################################################
##                                                                    ##
##   RDMA STAGE: SKIPPED (VSOCKET_SKIP_RDMA=1)                        ##
##   Nothing was tested over RDMA. Unset VSOCKET_SKIP_RDMA to run it. ##
##                                                                    ##
########################################################################
EOF
  echo "rdma: 0 passed, 0 failed (SKIPPED)"
  exit 0
fi

log=$(mktemp "${TMPDIR:-/tmp}/rdma-stage.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$SECONDS
echo "== RDMA stage: booting the Soft-RoCE guest (tools/rdma-guest/run) =="
rc=0
"$repo/tools/rdma-guest/run" --timeout "${VSOCKET_RDMA_STAGE_TIMEOUT:-1200}" -C "$repo" -- \
  bash "$here/stage.sh" --in-guest 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
counts=$(sed -n 's/^RDMA-STAGE-COUNTS \([0-9]*\) \([0-9]*\)$/\1 \2/p' "$log" | tail -n1)
if [ -z "$counts" ]; then
  case $rc in
    201) why="qemu or another host tool is missing and could not be installed" ;;
    202) why="the guest kernel could not be downloaded/unpacked" ;;
    203) why="the guest failed to boot" ;;
    204) why="the guest timed out" ;;
    205) why="Soft-RoCE (rxe0) could not be set up in the guest" ;;
    *) why="the guest run ended with exit $rc before reporting results" ;;
  esac
  echo "RDMA STAGE: FAILED — $why (set VSOCKET_SKIP_RDMA=1 to skip the stage explicitly)"
  echo "rdma: 0 passed, 1 failed"
  exit 1
fi
read -r passed failed <<<"$counts"
[ "$rc" = 0 ] || [ "$failed" -gt 0 ] || failed=$((failed + 1))
echo "RDMA stage took $((SECONDS - start)) s"
echo "rdma: $passed passed, $failed failed"
[ "$failed" = 0 ]
