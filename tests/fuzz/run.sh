#!/usr/bin/env bash
# A fuzzing run of one target, as the suite runs it:
#   run.sh TARGET SEED_DIR WORK_DIR SECONDS      (the suite: 20)
#   run.sh TARGET SEED_DIR WORK_DIR runs=N       (a long run: 10000000)
# VS_FUZZ_ARGS adds libFuzzer flags (e.g. -max_len=1024).
# New inputs go to WORK_DIR/corpus (the checked-in seeds are only read);
# a crash leaves its input in WORK_DIR/artifacts and fails the run.
set -euo pipefail
target=$1 seeds=$2 work=$3 limit=$4
case "$limit" in
  runs=*) limit_flag=-runs=${limit#runs=} ;;
  *) limit_flag=-max_total_time=$limit ;;
esac
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
# LeakSanitizer watches the heap; the targets check descriptors and memfd
# mappings themselves (ring_prog.c).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
start=$SECONDS
# shellcheck disable=SC2086 # VS_FUZZ_ARGS is a list of flags
"$target" "$limit_flag" ${VS_FUZZ_ARGS:-} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds" >"$work/log" 2>&1 || status=$?
grep -E '^(INFO: Loaded .*counters|#[0-9]+.*DONE|stat::|fuzz_stream: known)' "$work/log" || true
if [ "$status" -ne 0 ] || ls "$work/artifacts" | grep -q .; then
  tail -n 60 "$work/log"
  echo "run.sh: $(basename "$target") FAILED (status $status); reproducers:" >&2
  ls "$work/artifacts" >&2
  exit 1
fi
echo "run.sh: $(basename "$target") passed in $((SECONDS - start)) s"
