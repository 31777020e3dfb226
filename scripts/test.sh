#!/usr/bin/env bash
# The whole test suite, as CI runs it (`make test` calls this):
#   1. install what is needed (Debian packages);
#   2. release build: unit tests, tool and preload tests (ctest), then the
#      compatibility suite (real programs under vsocket, pytest); the demo's
#      build (Release) compiles too;
#   3. the unit tests under valgrind;
#   4. the fuzz gate: each libFuzzer target (built with clang in build/fuzz)
#      replays its checked-in corpus and regression inputs, then runs a
#      bounded search with a fixed seed: the same verdict on every run
#      (tests/fuzz; docs/design/fuzzing.md; the open-ended search is
#      `make fuzz`);
#   5. the same ctest and compatibility suite on an ASan+UBSan build;
#   6. the RDMA stage in a Soft-RoCE guest (VSOCKET_SKIP_RDMA=1 skips it, loudly).
# A core dumped during a stage fails it and its backtrace is printed
# (scripts/cores.sh). Exits non-zero when any stage fails; the last line
# counts stages.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

passed=0 failed=0 skipped=0
failures=()
stage() {
  local name=$1
  shift
  echo
  echo "=== stage: $name ==="
  local start=$SECONDS
  local ok=true
  "$@" || ok=false
  cores_report || ok=false
  if $ok; then
    passed=$((passed + 1))
    echo "=== stage $name: PASSED ($((SECONDS - start)) s) ==="
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "=== stage $name: FAILED ($((SECONDS - start)) s) ==="
  fi
}

pytest_cmd() {
  # The suite needs pytest; Debian's python3-pytest is installed by
  # install-deps, but the first python3 on PATH may be another interpreter.
  if python3 -c 'import pytest' 2>/dev/null; then
    python3 -m pytest "$@"
  else
    /usr/bin/python3 -m pytest "$@"
  fi
}

build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null && cmake --build "$dir"
}

compat() {
  local dir=$1
  VSOCKET_BUILD_DIR="$root/$dir" pytest_cmd -q -p no:cacheprovider tests/compat
}

scripts/install-deps.sh all || { echo "install-deps failed"; exit 1; }

# A program that crashes in a test fails its stage with its backtrace, even
# when the test itself did not notice (a forked child, a server's worker).
source scripts/cores.sh
cores_setup "$root/build/cores"

# VSOCKET_FUZZ=ON: install-deps put clang and libFuzzer there, so a build
# without the fuzz targets is an error, not a silent skip.
stage build build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVSOCKET_FUZZ=ON
# The build `make demo` makes (scripts/demo.sh: Release, -O3): -O3 sees
# warnings -O2 does not, and -Werror made the README's first command fail
# on a fresh clone while every test passed.
stage build-release build build-release -DCMAKE_BUILD_TYPE=Release
stage ctest ctest --test-dir build --output-on-failure
stage compat compat build
stage valgrind ctest --test-dir build -L unit -T memcheck --output-on-failure
stage fuzz ctest --test-dir build/fuzz -L gate --output-on-failure --no-tests=error
stage build-asan build build-asan -DCMAKE_BUILD_TYPE=Debug -DVSOCKET_SANITIZE=ON -DVSOCKET_FUZZ=OFF
stage ctest-asan ctest --test-dir build-asan --output-on-failure
stage compat-asan compat build-asan
if [ -x tests/rdma/stage.sh ]; then
  stage rdma tests/rdma/stage.sh
  [ "${VSOCKET_SKIP_RDMA:-0}" = 1 ] && skipped=$((skipped + 1))
fi

echo
[ ${#failures[@]} -gt 0 ] && echo "failed stages: ${failures[*]}"
[ "$skipped" -gt 0 ] && echo "SKIPPED: the RDMA stage (VSOCKET_SKIP_RDMA=1): RDMA was NOT tested"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
