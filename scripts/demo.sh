#!/usr/bin/env bash
# vsocket demonstration: on a bare Debian 12 machine, installs what is needed,
# builds vsocket (Release), then runs real programs - redis, nginx + wrk,
# iperf3, sockperf - without and with vsocket and prints a comparison table
# (bench/programs does the measuring; see bench/README.md). Then the same
# kind of programs between two hosts: two Soft-RoCE guests joined by a link
# (tools/rdma-guest/pair, bench/rdma/pair-demo), kernel TCP on the link
# against vsocket with its default settings on RDMA.
#
# Usage: scripts/demo.sh [--no-install] [--no-build] [--no-guests] [--peer IP]
#                        [bench/programs options...]
#   e.g. scripts/demo.sh --rounds 1        (quicker)
#   --no-guests   skip the two-host part (no emulated guests)
#   --peer IP     the two-host part against a real host instead of the guests:
#                 this machine runs the clients, the host at IP the servers,
#                 started there first with `bench/rdma/pair-demo --serve IP`
#                 (an RDMA device on each; its TCP ports 13000-13099 reachable)
# Environment: VSOCKET_BUILD_DIR   build directory (default <repo>/build)
# Exit code: 0 if every program ran with and without vsocket, non-zero otherwise
# (1 a program failed, 3 dependency installation failed, 4 the build failed,
# 5 the two-host part failed).
# Takes about a minute after the build for one host, and 4 to 6 more minutes
# for the two guests (booting them, then each program 5 s per transport).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${VSOCKET_BUILD_DIR:-$repo/build}
export VSOCKET_BUILD_DIR=$build

install=1 do_build=1 guests=1 peer=
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) install=0 ;;
    --no-build) do_build=0 ;;
    --no-guests) guests=0 ;;
    --peer) peer=${2:?--peer IP}; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1") ;;
  esac
  shift
done

if [ $install -eq 1 ]; then
  echo "== demo: installing dependencies (scripts/install-deps.sh test, and rdma-guest for the guests)"
  scripts/install-deps.sh test || { echo "demo: dependency installation failed" >&2; exit 3; }
  if [ $guests -eq 1 ] && [ -z "$peer" ]; then
    scripts/install-deps.sh rdma-guest || { echo "demo: dependency installation failed" >&2; exit 3; }
  fi
fi

if [ $do_build -eq 1 ]; then
  echo "== demo: building vsocket (Release) in $build"
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$build"; } || { echo "demo: build failed" >&2; exit 4; }
fi

echo "== demo: running programs without and with vsocket (one host: shared memory)"
rc=0
python3 "$repo/bench/programs" ${args[@]+"${args[@]}"} || rc=$?
[ $guests -eq 1 ] || [ -n "$peer" ] || exit $rc

# A figure's ratio, vsocket over kernel, as the one-host table gives it.
ratio() {
  awk -v k="$1" -v v="$2" 'BEGIN { if (k + 0 <= 0 || v + 0 <= 0) print "-"; else printf "%.3f\n", v / k }'
}

echo
if [ -n "$peer" ]; then
  echo "== demo: two hosts: servers on $peer (bench/rdma/pair-demo --serve there), clients here;"
  echo "   kernel TCP, then vsocket with its defaults"
  pair=(bench/rdma/pair-demo --peer "$peer")
else
  echo "== demo: two hosts: two Soft-RoCE guests joined by a link (tools/rdma-guest/pair), servers in"
  echo "   guest A, clients in guest B; kernel TCP on the link, then vsocket with its defaults (RDMA)"
  pair=(tools/rdma-guest/pair --timeout 900 --a bench/rdma/pair-demo --b bench/rdma/pair-demo)
fi
log="$build/demo-pair.log"
rm -f "$log" "$log.rows"
start=$SECONDS
rows=()
declare -A transport
set +e
"${pair[@]}" 2>&1 |
  while IFS= read -r line; do
    case "$line" in
      "[B] PROGRESS|"* | "PROGRESS|"*) echo "   ${line#*PROGRESS|} ($((SECONDS - start)) s)" ;;
      "[B] DEMO|"* | "[A] TRANSPORT|"* | "DEMO|"* | "TRANSPORT|"*) echo "${line#\[?\] }" >>"$log.rows" ;;
    esac
    echo "$line" >>"$log"
  done
prc=${PIPESTATUS[0]}
set -e
if [ -f "$log.rows" ]; then
  while IFS='|' read -r kind key rest; do
    if [ "$kind" = TRANSPORT ]; then transport[$key]=$rest; else rows+=("$key|$rest"); fi
  done <"$log.rows"
fi
rm -f "$log.rows"
if [ "$prc" -ne 0 ] || [ ${#rows[@]} -eq 0 ]; then
  echo "demo: the two-host part failed (exit $prc); its output: $log" >&2
  exit 5
fi
printf '\n%-22s %-40s %10s %10s %10s  %s\n' program metric "kernel TCP" vsocket "ratio v/k" \
  "vsocket transport of the server's connections"
for r in "${rows[@]}"; do
  IFS='|' read -r key prog what unit better k v <<<"$r"
  printf '%-22s %-40s %10s %10s %10s  %s\n' "$prog" "$what ($unit, ${better}er is better)" "${k:--}" \
    "${v:--}" "$(ratio "$k" "$v")" "${transport[$key]:-?}"
done
echo
if [ -z "$peer" ]; then
  echo "Figures from emulated guests (qemu TCG, ~100x slower than the host, Soft-RoCE in software):"
  echo "only the ratios mean anything."
fi
echo "Two-host part: $((SECONDS - start)) s; its output: $log"
exit $rc
