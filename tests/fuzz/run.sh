#!/usr/bin/env bash
# A short fuzzing run of one target, as the suite runs it:
#   run.sh TARGET SEED_DIR WORK_DIR SECONDS
# New inputs go to WORK_DIR/corpus (the checked-in seeds are only read);
# a crash leaves its input in WORK_DIR/artifacts and fails the run.
set -euo pipefail
target=$1 seeds=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
# detect_leaks: the targets check their own descriptors and mappings, and
# LeakSanitizer needs ptrace, which some sandboxes refuse.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds" >"$work/log" 2>&1 || status=$?
grep -E '^(#[0-9]+.*DONE|stat::|fuzz_stream: known)' "$work/log" || true
if [ "$status" -ne 0 ] || ls "$work/artifacts" | grep -q .; then
  tail -n 60 "$work/log"
  echo "run.sh: $(basename "$target") FAILED (status $status); reproducers:" >&2
  ls "$work/artifacts" >&2
  exit 1
fi
echo "run.sh: $(basename "$target") passed"
