#!/usr/bin/env bash
# Line and branch coverage of the code under test reached by a corpus:
#   tests/fuzz/coverage.sh CORPUS_ROOT [BUILD_DIR]
# CORPUS_ROOT holds one directory per target (stream, ring, ring_attach,
# rdma_proof, rdma_setup, rdma_msg),
# e.g. tests/fuzz/corpus (the seeds) or the corpora of long runs. Builds the
# targets with llvm-cov instrumentation in BUILD_DIR (default build-fuzz-cov),
# replays each corpus once (no fuzzing) and prints llvm-cov's report for
# src/. Needs llvm-14 (llvm-profdata, llvm-cov): scripts/install-deps.sh fuzz.
set -euo pipefail
src_files() {
  echo "$root/src/memory/ring.c" "$root/src/memory/copy.c" "$root/src/transport/shm/proto.c" \
    "$root/src/transport/stream.h" "$root/src/transport/rdma/proof.c" "$root/src/core/sha256.c" \
    "$root/src/transport/rdma/cm.c" "$root/src/transport/rdma/verbs.c" \
    "$root/src/transport/rdma/zcopy.c"
}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
corpus=$(cd "$1" && pwd)
build=${2:-$root/build-fuzz-cov}
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DVSOCKET_FUZZ_COVERAGE=ON >/dev/null
cmake --build "$build" >/dev/null
for t in stream ring ring_attach rdma_proof rdma_setup rdma_msg; do
  [ -d "$corpus/$t" ] || continue
  rm -f "$build/$t.profraw"
  LLVM_PROFILE_FILE="$build/$t.profraw" "$build/fuzz_$t" -runs=0 "$corpus/$t" >/dev/null 2>&1
  llvm-profdata-14 merge -sparse "$build/$t.profraw" -o "$build/$t.profdata"
  echo "== fuzz_$t on $corpus/$t"
  # stream.h's functions are inline: their lines count where they are defined.
  llvm-cov-14 report "$build/fuzz_$t" -instr-profile="$build/$t.profdata" $(src_files)
done
# ring.c as both ring targets reach it together.
if [ -f "$build/ring.profraw" ] && [ -f "$build/ring_attach.profraw" ]; then
  llvm-profdata-14 merge -sparse "$build/ring.profraw" "$build/ring_attach.profraw" \
    -o "$build/rings.profdata"
  echo "== fuzz_ring + fuzz_ring_attach"
  llvm-cov-14 report "$build/fuzz_ring" -object "$build/fuzz_ring_attach" \
    -instr-profile="$build/rings.profdata" $(src_files)
fi
