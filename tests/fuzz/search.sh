#!/usr/bin/env bash
# The open-ended search (`make fuzz`): each target built in BUILD_DIR/fuzz,
# one after the other, for LIMIT (seconds, or runs=N) with a random seed,
# from its checked-in corpus and regression inputs:
#   tests/fuzz/search.sh [BUILD_DIR] [LIMIT] [TARGET...]
# (defaults: build, 300, every fuzz_* there). What a search finds is in
# BUILD_DIR/fuzz/search/<target>/artifacts: fix it, then add the input to
# tests/fuzz/regressions/<target>/ so that the suite's gate replays it.
# The corpus each search grew (BUILD_DIR/fuzz/search/<target>/corpus) is
# kept, and the next search starts from it. Exits non-zero if any found
# something. Long searches: see docs/design/fuzzing.md.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
limit=${2:-300}
shift 2 2>/dev/null || shift $#
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in "$build"/fuzz/fuzz_*; do
    [ -x "$t" ] && targets+=("$(basename "$t")")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "search.sh: no fuzz targets in $build/fuzz (build with -DVSOCKET_FUZZ=ON)" >&2
  exit 1
fi
failed=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  echo "== $t: $limit"
  "$here/run.sh" search "$build/fuzz/$t" "$build/fuzz/search/$name" "$limit" \
    "$here/corpus/$name" "$here/regressions/$name" || failed+=("$t")
done
[ ${#failed[@]} -eq 0 ] || { echo "search.sh: found something: ${failed[*]}" >&2; exit 1; }
