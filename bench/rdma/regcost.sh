#!/usr/bin/env bash
# bench/rdma/regcost.sh — step 0 of docs/design/rdma-elastic-ring.md: what
# registration and one RDMA connection's kernel state cost, in ONE Soft-RoCE
# guest run (tools/rdma-guest/run).
#
#   1. bench/rdma/regcost (regcost.c): ibv_reg_mr/ibv_dereg_mr of 16 KiB …
#      16 MiB, fresh / free-list span / warm span, type-2 memory windows, a
#      QP's and a CQ's queue memory by depth and inline size;
#   2. N connections (bench/rdma/conns.c, one client process, one server
#      process) held idle, in several configurations, memory before and while
#      held: per process Pss, Rss, VmPin, and the Rss of the rxe queue
#      mappings (/dev/infiniband/uverbs*: QP send/receive queues and CQs,
#      vmalloc_user buffers the process maps); for the guest MemAvailable,
#      Slab, SUnreclaim, VmallocUsed, PageTables, and the slab caches that
#      grew most. Configurations: kernel TCP (what the TCP connection under
#      every vsocket connection costs), then vsocket rdma with
#        default   VSOCKET_RDMA_RING 256 KiB, VSOCKET_RDMA_QP_DEPTH 256
#        ring4k    ring 4 KiB (the least), depth 256: registered bytes shrink,
#                  QP and CQ stay
#        ring4k-d255, -d64, -d16: ring 4 KiB, depth 255 (rxe rounds a queue
#                  of D work requests up to the power of two above D, so 256
#                  takes 512 slots), 64, 16: the queues' share shrinks too
#      The differences between them isolate the QP/CQ share from the rings.
#
# usage: bench/rdma/regcost.sh [--conns N] [--iterations N] [--configs LIST]
# (N connections default 200, 0: none; iterations default 100, 0: no regcost;
# LIST: comma list of the configurations above, default all). Prints the raw lines
# and keeps them in <build>/bench-rdma/regcost-raw.txt; the figures are put in
# bench/RESULTS.md by hand. env: VSOCKET_BUILD_DIR (default <repo>/build).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
IP=10.77.0.1

if [ "${1:-}" = --in-guest ]; then
  set +e
  build=$2 conns_bin=$3 N=$4 ITER=$5 CONFIGS=$6
  lib=$build/lib/libvsocket.so
  tool=$build/bin/vsocket
  work=$(mktemp -d /tmp/regcost.XXXXXX)
  export VSOCKET_STATS_DIR=$work/stats
  mkdir -p "$VSOCKET_STATS_DIR"
  ulimit -n 65536
  log() { echo "[$(date +%T)] $*" >&2; }
  echo "I guest=$(uname -r) vcpus=$(nproc) mem_mib=$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) memlock=$(ulimit -l)"
  if [ "$ITER" -gt 0 ]; then
    log "regcost -n $ITER"
    "$build/bin/regcost" -n "$ITER" | sed 's/^/R /'
  fi

  # mem PID: Pss Rss VmPin (KiB), Rss of the uverbs mappings (KiB), fds
  mem() {
    local p=$1
    echo "$(awk '/^Pss:/ {print $2}' /proc/$p/smaps_rollup) $(awk '/^Rss:/ {print $2}' /proc/$p/smaps_rollup)" \
      "$(awk '/^VmPin:/ {print $2}' /proc/$p/status)" \
      "$(awk '/^[0-9a-f]+-[0-9a-f]+ / { u = ($6 ~ /uverbs/) } u && /^Rss:/ { s += $2 } END { print s + 0 }' /proc/$p/smaps)" \
      "$(ls /proc/$p/fd | wc -l)"
  }
  sysmem() {
    awk '/^(MemAvailable|MemFree|Slab|SUnreclaim|VmallocUsed|PageTables|KernelStack):/ { printf "%s=%s ", $1, $2 } END { print "" }' /proc/meminfo | tr -d :
  }
  # slab caches: name bytes (active objects × object size)
  slabs() { awk 'NR > 2 { print $1, $2 * $4 }' /proc/slabinfo | sort; }
  declare -A PID
  bg() { local n=$1; shift; "$@" >"$work/$n.out" 2>&1 & PID[$n]=$!; }
  stop() {
    local p=${PID[$1]:-} i
    [ -n "$p" ] || return 0
    kill "$p" 2>/dev/null
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; PID[$1]=""
  }
  trap 'for k in "${!PID[@]}"; do stop "$k"; done' EXIT
  wait_port() { local i; for ((i = 0; i < 100; i++)); do ss -ltnH "sport = :$1" | grep -q . && return 0; sleep 0.2; done; return 1; }
  onrdma() { "$tool" stat 2>/dev/null | awk -v p="$1" '$1 == p && $4 == "connected" && $7 == "rdma"' | wc -l; }

  run_conns() { # NAME [ENV...]: kernel when no ENV
    local name=$1 port=$((7600 + RANDOM % 300)) pre i ok=0 t0 last="" t_last=0
    shift
    if [ $# -gt 0 ]; then
      pre=(env "LD_PRELOAD=$lib" VSOCKET_TRANSPORTS=rdma VSOCKET_UPGRADE_AFTER_US=0 VSOCKET_LOG_LEVEL=info "$@")
    else
      pre=(env -u LD_PRELOAD)
    fi
    log "conns $name: $N connections ($*)"
    rm -f "$work/go" "$work/stop"
    bg cs "${pre[@]}" "$conns_bin" server --port $port --bind $IP
    wait_port $port || { echo "N $name: server did not listen"; stop cs; return; }
    bg cc "${pre[@]}" "$conns_bin" client --host $IP --port $port -n "$N" --go "$work/go" --stop "$work/stop" --max-seconds 400
    for ((i = 0; i < 100; i++)); do grep -q '^ready' "$work/cc.out" && break; sleep 0.2; done
    sleep 1
    echo "M $name server before $(mem "${PID[cs]}")"
    echo "M $name client before $(mem "${PID[cc]}")"
    echo "M $name sys before $(sysmem)"
    slabs >"$work/slab0"
    t0=$SECONDS
    touch "$work/go"
    while [ $((SECONDS - t0)) -lt 400 ]; do
      sleep 2
      kill -0 "${PID[cc]}" 2>/dev/null || break
      grep -q '^connected' "$work/cc.out" || continue
      if [ $# -eq 0 ]; then grep -q '^round' "$work/cc.out" && { ok=1; break; }; continue; fi
      local nc ns
      nc=$(onrdma "${PID[cc]}") ns=$(onrdma "${PID[cs]}")
      log "  on rdma: client $nc, server $ns ($((SECONDS - t0)) s)"
      [ "$nc" -ge "$N" ] && [ "$ns" -ge "$N" ] && { ok=1; break; }
      # No progress for 40 s: say what the others are doing, measure anyway.
      if [ "$nc $ns" != "${last:-}" ]; then last="$nc $ns" t_last=$SECONDS
      elif [ $((SECONDS - t_last)) -ge 40 ]; then
        echo "N $name: stuck at client $nc, server $ns on rdma"
        "$tool" stat 2>/dev/null | awk '{ k[$4 " " $7 " " $NF]++ } END { for (x in k) print "N   stat:", k[x], x }'
        tail -n 3 "$work/cc.out" "$work/cs.out" | sed 's/^/N   /'
        grep -ihE 'warn|error|fail' "$work/cc.out" "$work/cs.out" | sort | uniq -c | sort -rn | head -n 5 | sed 's/^/N   log: /' | cut -c1-240
        break
      fi
    done
    touch "$work/stop"
    for ((i = 0; i < 150; i++)); do grep -q '^holding' "$work/cc.out" && break; sleep 0.2; done
    sleep 3
    echo "M $name opened $(sed -n 's/^connected n=\([0-9]*\).*/\1/p' "$work/cc.out") all_upgraded $ok seconds $((SECONDS - t0))"
    if kill -0 "${PID[cc]}" 2>/dev/null && kill -0 "${PID[cs]}" 2>/dev/null; then
      echo "M $name server after $(mem "${PID[cs]}")"
      echo "M $name client after $(mem "${PID[cc]}")"
      echo "M $name sys after $(sysmem)"
      slabs >"$work/slab1"
      join "$work/slab0" "$work/slab1" | awk '{ d = $3 - $2; if (d > 0) print d, $1 }' | sort -rn | head -n 12 |
        awk -v n="$name" '{ printf "M %s slab %s %d\n", n, $2, $1 }'
      # the client's mappings that grew, by name (anonymous: [anon])
      awk '/^[0-9a-f]+-[0-9a-f]+ / { m = ($6 == "" ? "[anon]" : $6) } /^Rss:/ { r[m] += $2 } END { for (k in r) print r[k], k }' \
        "/proc/${PID[cc]}/smaps" | sort -rn | head -n 6 | awk -v n="$name" '{ printf "M %s client_maps %s %d\n", n, $2, $1 }'
      # the client's uverbs mappings (one per QP send queue, receive queue,
      # CQ) by size: how many of each
      awk '/^[0-9a-f]+-[0-9a-f]+ / { u = ($6 ~ /uverbs/) } u && /^Size:/ { print $2 }' \
        "/proc/${PID[cc]}/smaps" | sort -n | uniq -c | awk -v n="$name" '{ printf "M %s uverbs_map_kib %s count %d\n", n, $2, $1 }'
    else
      echo "N $name: a process died: $(tail -n 3 "$work/cc.out" "$work/cs.out" | tr '\n' ' ' | cut -c1-300)"
    fi
    stop cc
    stop cs
    sleep 2
  }
  declare -A CONF=(
    [kernel]=""
    [default]="VSOCKET_RDMA_RING=262144 VSOCKET_RDMA_QP_DEPTH=256"
    [ring4k]="VSOCKET_RDMA_RING=4096 VSOCKET_RDMA_QP_DEPTH=256"
    [ring4k-d255]="VSOCKET_RDMA_RING=4096 VSOCKET_RDMA_QP_DEPTH=255"
    [ring4k-d64]="VSOCKET_RDMA_RING=4096 VSOCKET_RDMA_QP_DEPTH=64"
    [ring4k-d16]="VSOCKET_RDMA_RING=4096 VSOCKET_RDMA_QP_DEPTH=16"
  )
  if [ "$N" -gt 0 ]; then
    IFS=, read -r -a confs <<<"$CONFIGS"
    # shellcheck disable=SC2086  # the settings split into words
    for c in "${confs[@]}"; do run_conns "$c" ${CONF[$c]}; done
  fi
  echo "---END---"
  rm -rf "$work"
  exit 0
fi

N=200 ITER=100 CONFIGS=kernel,default,ring4k,ring4k-d255,ring4k-d64,ring4k-d16
while [ $# -gt 0 ]; do
  case $1 in
    --conns) N=$2; shift ;;
    --iterations) ITER=$2; shift ;;
    --configs) CONFIGS=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/rdma/regcost.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
build=${VSOCKET_BUILD_DIR:-$repo/build}
mkdir -p "$build/bench-rdma"
cmake --build "$build" --target regcost vsocket vsocket_tool >/dev/null 2>&1 || cmake --build "$build" >/dev/null
cc -O2 -Wall -o "$build/bench-rdma/conns" "$here/conns.c"
out=$build/bench-rdma/regcost-raw.txt
"$repo/tools/rdma-guest/run" --mem 3G --timeout "${VSOCKET_RDMA_BENCH_TIMEOUT:-1500}" -C "$repo" -- \
  bash "$here/regcost.sh" --in-guest "$build" "$build/bench-rdma/conns" "$N" "$ITER" "$CONFIGS" | tee "$out"
grep -q '^---END---' "$out" || { echo "bench/rdma/regcost.sh: the guest run did not end; raw output in $out" >&2; exit 1; }
