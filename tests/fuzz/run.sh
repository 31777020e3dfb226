#!/usr/bin/env bash
# Runs one libFuzzer target in one of three ways (docs/design/fuzzing.md):
#   run.sh replay TARGET DIR...
#       every input of the DIRs once, no fuzzing: the checked-in corpus and
#       the regression inputs (the suite's gate, first half);
#   run.sh gate TARGET WORK RUNS SEED DIR...
#       RUNS executions from the DIRs with the fixed random seed SEED: the
#       same inputs on every run, so the same verdict (the gate, second half);
#   run.sh search TARGET WORK LIMIT DIR...
#       the open-ended search (`make fuzz`): LIMIT is seconds, or runs=N
#       (a long run: runs=10000000); a random seed; WORK/corpus is kept
#       between searches, so that they build on each other.
# DIRs that do not exist are skipped. VS_FUZZ_ARGS adds libFuzzer flags
# (e.g. -max_len=1024). New inputs go to WORK/corpus (the checked-in
# directories are only read); a crash leaves its input in WORK/artifacts and
# fails the run: it is then fixed, and its input joins
# tests/fuzz/regressions/<target>/.
set -euo pipefail
mode=$1 target=$2
shift 2

# LeakSanitizer watches the heap; the targets check descriptors and memfd
# mappings themselves (ring_prog.c).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
name=$(basename "$target")
# -timeout: an input runs in milliseconds; only a hang takes a minute, even
# on a loaded machine.
common=(-timeout=60 -rss_limit_mb=2048)

existing() {
  for d in "$@"; do [ -d "$d" ] && echo "$d"; done
  return 0
}

if [ "$mode" = replay ]; then
  mapfile -t dirs < <(existing "$@")
  mapfile -t files < <([ ${#dirs[@]} -eq 0 ] || find "${dirs[@]}" -type f | sort)
  if [ ${#files[@]} -eq 0 ]; then
    echo "run.sh: $name: no inputs in $*" >&2
    exit 1
  fi
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  # Files, not directories: each runs once, in a fixed order, and the log
  # names the one that failed.
  if ! "$target" "${common[@]}" "${files[@]}" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "run.sh: $name FAILED on $(grep '^Running: ' "$log" | tail -n 1 | cut -d' ' -f2-)" >&2
    exit 1
  fi
  echo "run.sh: $name replayed ${#files[@]} inputs"
  exit 0
fi

work=$1 limit=$2
shift 2
case "$mode" in
  gate)
    seed=$1
    shift
    # Without the comparison tables: they record operands as the code ran,
    # pointers among them, which differ from run to run (ASLR) and would
    # steer the mutations differently each time. Without -reload: once a
    # second (a clock, not a count) libFuzzer rereads the work corpus and
    # runs what it does not hold, which shifts every later execution.
    flags=(-runs="$limit" -seed="$seed" -use_cmp=0 -use_memmem=0 -reload=0)
    rm -rf "$work"
    ;;
  search)
    case "$limit" in
      runs=*) flags=(-runs="${limit#runs=}") ;;
      *) flags=(-max_total_time="$limit") ;;
    esac
    rm -rf "$work/artifacts" "$work/log"
    ;;
  *)
    echo "usage: run.sh replay|gate|search TARGET ..." >&2
    exit 2
    ;;
esac
mkdir -p "$work/corpus" "$work/artifacts"
mapfile -t dirs < <(existing "$@")
status=0
start=$SECONDS
# shellcheck disable=SC2086 # VS_FUZZ_ARGS is a list of flags
"$target" "${flags[@]}" ${VS_FUZZ_ARGS:-} "${common[@]}" -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "${dirs[@]}" >"$work/log" 2>&1 ||
  status=$?
grep -E '^(INFO: Seed|INFO: Loaded .*counters|#[0-9]+.*DONE|stat::|fuzz_stream: known)' \
  "$work/log" || true
if [ "$status" -ne 0 ] || ls "$work/artifacts" | grep -q .; then
  tail -n 60 "$work/log"
  echo "run.sh: $name FAILED (status $status); reproducers (add each, once fixed, to" \
    "tests/fuzz/regressions/${name#fuzz_}/):" >&2
  ls -d "$work"/artifacts/* >&2 2>/dev/null || echo "  (none: see $work/log)" >&2
  exit 1
fi
echo "run.sh: $name passed in $((SECONDS - start)) s"
