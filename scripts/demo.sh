#!/usr/bin/env bash
# vsocket demonstration: on a bare Debian 12 machine, installs what is needed,
# builds vsocket (Release), then runs real programs - redis, nginx + wrk,
# iperf3, sockperf - without and with vsocket and prints a comparison table
# (bench/programs does the measuring; see bench/README.md).
#
# Usage: scripts/demo.sh [--no-install] [--no-build] [bench/programs options...]
#   e.g. scripts/demo.sh --rounds 1        (quicker)
# Environment: VSOCKET_BUILD_DIR   build directory (default <repo>/build)
# Exit code: 0 if every program ran with and without vsocket, non-zero otherwise
# (1 a program failed, 3 dependency installation failed, 4 the build failed).
# Takes about a minute after the build.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${VSOCKET_BUILD_DIR:-$repo/build}
export VSOCKET_BUILD_DIR=$build

install=1 do_build=1
args=()
for a in "$@"; do
  case "$a" in
    --no-install) install=0 ;;
    --no-build) do_build=0 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$a") ;;
  esac
done

if [ $install -eq 1 ]; then
  echo "== demo: installing dependencies (scripts/install-deps.sh test)"
  scripts/install-deps.sh test || { echo "demo: dependency installation failed" >&2; exit 3; }
fi

if [ $do_build -eq 1 ]; then
  echo "== demo: building vsocket (Release) in $build"
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$build"; } || { echo "demo: build failed" >&2; exit 4; }
fi

echo "== demo: running programs without and with vsocket"
exec python3 "$repo/bench/programs" ${args[@]+"${args[@]}"}
