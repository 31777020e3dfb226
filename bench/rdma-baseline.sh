#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called indirectly
# bench/rdma-baseline.sh — RDMA baseline in the Soft-RoCE guest (issue 3).
#
# One guest run (tools/rdma-guest/run) measures, on rxe0 over dummy0:
#   * the raw verbs ceiling: ib_write_bw, ib_write_lat, ib_send_lat, ib_read_lat;
#   * rstream over rsocket and over kernel TCP (rstream -T s);
#   * vsocket-sweep (tools/sweep) over kernel TCP and under rsocket's preload
#     (librspreload.so): ping-pong RTT and stream bandwidth, 2 B … 1 MiB;
#   * real programs under librspreload (iperf3, sockperf, redis-benchmark,
#     nginx + wrk): does it run at all, did the rxe counters move, and the
#     figure next to the same program over kernel TCP;
# and prints ratios between figures of this one run (under TCG emulation only
# ratios within one run mean anything).
#
# usage: bench/rdma-baseline.sh [--no-record] [--quick]
#   --no-record  do not write bench/RESULTS.md (default: replace the section
#                "## RDMA baseline in the Soft-RoCE guest (issue 3)")
#   --quick      fewer sizes and shorter runs (smoke test of the script)
# env: VSOCKET_SWEEP (path of vsocket-sweep; default build/bin/vsocket-sweep,
#      built with cmake if missing), VSOCKET_RDMA_BENCH_TIMEOUT (guest run
#      limit, default 1800 s), VSOCKET_RDMA_GUEST_* (see tools/rdma-guest/run).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
IP=10.77.0.1
DEV=rxe0
CNT=/sys/class/infiniband/$DEV/ports/1/hw_counters
RSPRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
SECTION="## RDMA baseline in the Soft-RoCE guest (issue 3)"

# ====================================================================== guest
if [ "${1:-}" = --in-guest ]; then
  # A benchmark should report what it could measure: one failing tool must
  # not abort the rest (every step is bounded by a timeout instead).
  set +e
  quick=${2:-0}
  sweep=$3
  if [ "$quick" = 1 ]; then SIZES=(2 1024 65536); T=1; else SIZES=(2 64 1024 16384 65536 1048576); T=2; fi
  work=$(mktemp -d /tmp/rdma-bench.XXXXXX)
  declare -A V   # results: V[key]=value
  cnt() { echo $(($(cat "$CNT/sent_pkts") + $(cat "$CNT/rcvd_pkts"))); }
  to() { timeout -k 3 "$@"; }
  log() { echo "[$(date +%T)] $*" >&2; }
  # bg NAME CMD...: start a server in the background, remember its pid.
  declare -A PID
  bg() { local n=$1; shift; "$@" >"$work/$n.srv" 2>&1 & PID[$n]=$!; }
  stop() {
    local p=${PID[$1]:-}
    [ -n "$p" ] || return 0
    kill "$p" 2>/dev/null && sleep 0.3
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
    PID[$1]=""
    return 0
  }
  # retry SECONDS CMD...: run a client until it succeeds (server may still start)
  retry() { local tmo=$1 _i; shift; for _i in 1 2 3 4 5; do to "$tmo" "$@" && return 0; sleep 1; done; return 1; }
  iters_for() { # iterations for perftest at a size
    if [ "$1" -ge 1048576 ]; then echo 30; elif [ "$1" -ge 65536 ]; then echo 100; else echo 300; fi
  }
  fmt() { printf '%.*f' "$1" "$2"; }
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }

  log "guest: $(uname -r), $(nproc) vCPUs, sizes ${SIZES[*]}"

  # ---------------------------------------------------------------- perftest
  for tool in ib_write_bw ib_write_lat ib_send_lat ib_read_lat; do
    for s in "${SIZES[@]}"; do
      n=$(iters_for "$s")
      log "$tool -s $s -n $n"
      bg pt "$tool" -d $DEV -x 1 -s "$s" -n "$n" -F
      sleep 0.5
      if retry 60 "$tool" -d $DEV -x 1 -s "$s" -n "$n" -F $IP >"$work/pt.cli" 2>&1; then
        if [ "$tool" = ib_write_bw ]; then
          # "#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate"
          V[$tool,$s]=$(awk -v s="$s" '$1 == s && NF >= 5 { printf "%.4f", $4 * 8 / 1000 }' "$work/pt.cli")
        else
          # "#bytes #iter t_min t_max t_typical t_avg t_stdev p99 p99.9"
          # t_typical (perftest's median): far less sensitive than t_avg to
          # the vCPU threads being descheduled on a busy host.
          V[$tool,$s]=$(awk -v s="$s" '$1 == s && NF >= 8 { printf "%.1f", $5 }' "$work/pt.cli")
        fi
      else
        log "$tool -s $s failed:"; tail -n 5 "$work/pt.cli" >&2
      fi
      stop pt
    done
  done

  # ---------------------------------------------------------------- rstream
  # latency: -C 1 -I N (usec/xfer = one round trip); bandwidth: -C N -I 1.
  for mode in rs tcp; do
    opt=(); [ $mode = tcp ] && opt=(-T s)
    for s in "${SIZES[@]}"; do
      if [ "$s" -ge 1048576 ]; then li=20; bc=30; elif [ "$s" -ge 65536 ]; then li=100; bc=100; else li=300; bc=1000; fi
      log "rstream $mode -S $s"
      c0=$(cnt)
      bg rst rstream "${opt[@]}" -b $IP -S "$s" -C 1 -I "$li"
      sleep 0.5
      if retry 60 rstream "${opt[@]}" -s $IP -S "$s" -C 1 -I "$li" >"$work/rst.cli" 2>&1; then
        V[rstream_lat_$mode,$s]=$(awk '$1 == "custom" && NF >= 8 { v = $8 } END { print v }' "$work/rst.cli")
      fi
      stop rst
      bg rst rstream "${opt[@]}" -b $IP -S "$s" -C "$bc" -I 1
      sleep 0.5
      if retry 60 rstream "${opt[@]}" -s $IP -S "$s" -C "$bc" -I 1 >"$work/rst.cli" 2>&1; then
        V[rstream_bw_$mode,$s]=$(awk '$1 == "custom" && NF >= 8 { v = $7 } END { print v }' "$work/rst.cli")
      fi
      stop rst
      V[rstream_pkts_$mode,$s]=$(($(cnt) - c0))
    done
  done

  # ---------------------------------------------------------------- vsocket-sweep
  sizes_csv=$(IFS=,; echo "${SIZES[*]}")
  port=7300
  for mode in tcp rs; do
    pre=(); [ $mode = rs ] && pre=(env "LD_PRELOAD=$RSPRELOAD")
    for test in pingpong stream; do
      port=$((port + 1))
      log "vsocket-sweep $test over $mode"
      c0=$(cnt)
      bg sw "${pre[@]}" "$sweep" server --port $port --bind $IP
      sleep 1
      if to 300 "${pre[@]}" "$sweep" client --host $IP --port $port --mode $test --sizes "$sizes_csv" \
           --seconds "$T" >"$work/sw.cli" 2>&1; then :; else
        log "sweep $test $mode failed: $(tail -n 3 "$work/sw.cli")"
        V[sweep_err_$mode,$test]=$(grep -v '^pingpong \|^stream \|^#' "$work/sw.cli" | head -n1 | cut -c1-100)
      fi
      stop sw
      V[sweep_pkts_$mode,$test]=$(($(cnt) - c0))
      cat "$work/sw.cli" >&2
      while read -r line; do
        s=$(sed -n 's/.*size=\([0-9]*\).*/\1/p' <<<"$line")
        [ -n "$s" ] || continue
        if [ $test = pingpong ]; then
          V[sw_avg_$mode,$s]=$(sed -n 's/.*avg_us=\([0-9.]*\).*/\1/p' <<<"$line")
          V[sw_p99_$mode,$s]=$(sed -n 's/.*p99_us=\([0-9.]*\).*/\1/p' <<<"$line")
        else
          V[sw_gbps_$mode,$s]=$(sed -n 's/.*gbps=\([0-9.]*\).*/\1/p' <<<"$line")
        fi
      done <"$work/sw.cli"
    done
  done

  # ---------------------------------------------------------------- real programs
  # prog_run NAME MODE: MODE tcp|rs; sets V[prog_fig_MODE,NAME], V[prog_pkts_MODE,NAME], V[prog_note_MODE,NAME]
  mkdir -p "$work/www"
  head -c 1024 /dev/zero | tr '\0' x >"$work/www/1k.html"
  cat >"$work/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1;
error_log $work/nginx.err; pid $work/nginx.pid;
events { worker_connections 256; }
http { access_log off;
  client_body_temp_path $work/nb; proxy_temp_path $work/np; fastcgi_temp_path $work/nf;
  uwsgi_temp_path $work/nu; scgi_temp_path $work/ns;
  server { listen $IP:8088; root $work/www; } }
EOF
  prog_run() {
    local name=$1 mode=$2 pre=() c0 fig="" note=""
    [ "$mode" = rs ] && pre=(env "LD_PRELOAD=$RSPRELOAD")
    log "$name over $mode"
    c0=$(cnt)
    case $name in
      iperf3)
        bg p "${pre[@]}" iperf3 -s -B $IP -p 5211 -1
        sleep 1
        if to 25 "${pre[@]}" iperf3 -c $IP -p 5211 -t 5 -f g >"$work/p.cli" 2>&1; then
          fig=$(awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") print $(i - 1) }' "$work/p.cli" | tail -n1)
          [ -n "$fig" ] && fig="$fig Gb/s"
        fi ;;
      sockperf)
        bg p "${pre[@]}" sockperf sr --tcp -i $IP -p 11121
        sleep 1.5
        if to 40 "${pre[@]}" sockperf pp --tcp -i $IP -p 11121 -t 5 -m 64 >"$work/p.cli" 2>&1; then
          fig=$(sed -n 's/.*avg-latency=\([0-9.]*\).*/\1/p' "$work/p.cli" | tail -n1)
          [ -n "$fig" ] && fig="$fig µs (½ RTT, 64 B)"
        fi ;;
      redis)
        bg p "${pre[@]}" redis-server --port 6390 --bind $IP --save "" --appendonly no --protected-mode no
        local _i; for _i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.5; to 5 redis-cli -h $IP -p 6390 ping >/dev/null 2>&1 && break; done
        if to 30 "${pre[@]}" redis-benchmark -h $IP -p 6390 -n 3000 -c 4 -t set,get --csv >"$work/p.cli" 2>&1; then
          fig=$(awk -F'"' '$2 == "GET" { printf "GET %.0f req/s", $4 }' "$work/p.cli")
        fi ;;
      nginx)
        bg p "${pre[@]}" nginx -p "$work" -e "$work/nginx.err" -c "$work/nginx.conf"
        sleep 1.5
        if to 40 "${pre[@]}" wrk -t1 -c4 -d5s "http://$IP:8088/1k.html" >"$work/p.cli" 2>&1; then
          fig=$(awk '/^Requests\/sec:/ { printf "%.0f req/s (1 KiB)", $2 }' "$work/p.cli")
          grep -q 'Socket errors\|Non-2xx' "$work/p.cli" && note="errors reported by wrk"
        fi ;;
    esac
    local srv_rc=running
    if ! kill -0 "${PID[p]}" 2>/dev/null; then wait "${PID[p]}"; srv_rc=$?; PID[p]=""; fi
    stop p
    V[prog_pkts_$mode,$name]=$(($(cnt) - c0))
    [ "$name" = nginx ] && cat "$work/nginx.err" >>"$work/p.srv" 2>/dev/null
    if [ -z "$fig" ]; then
      local pat='error|fail|refused|not supported|not permitted|unable|timeout|closed|fault'
      local srv_msg cli_msg
      srv_msg=$(grep -iE "$pat" "$work/p.srv" 2>/dev/null | head -n1)
      cli_msg=$(grep -iE "$pat" "$work/p.cli" 2>/dev/null | head -n1)
      if [ "$srv_rc" != running ]; then
        note="server died (exit $srv_rc$([ "$srv_rc" -gt 128 ] 2>/dev/null && echo ", signal $((srv_rc - 128))")): ${srv_msg:-$cli_msg}"
      else
        note="server running; client: ${cli_msg:-no result within the time limit}"
      fi
      note=$(printf '%s' "$note" | tr -d '\033' | sed 's/\[[0-9;]*m//g; s/|/\//g; s/  */ /g' | cut -c1-110)
    fi
    rm -f "$work/nginx.err"
    V[prog_fig_$mode,$name]=${fig:--}
    V[prog_note_$mode,$name]=$note
    { echo "--- $name $mode client:"; tail -n 8 "$work/p.cli"; echo "--- server:"; tail -n 5 "$work/p.srv"; } >&2 2>/dev/null || true
    rm -f "$work/p.cli"
  }
  for prog in iperf3 sockperf redis nginx; do
    prog_run $prog tcp
    prog_run $prog rs
  done

  # ---------------------------------------------------------------- report
  g() { echo "${V[$1]:--}"; }
  echo "---BEGIN-RESULTS---"
  echo "Guest: kernel $(uname -r), $(nproc) vCPUs (TCG), rxe0 on dummy0 $IP; run $(date -u +%Y-%m-%dT%H:%MZ)."
  echo
  echo "**Raw verbs ceiling** (perftest, RC, GID index 1; \`_lat\` = perftest's t_typical, i.e. median: half round trip for write/send, full round trip for read):"
  echo
  echo "| size (B) | ib_write_bw Gb/s | ib_write_lat µs | ib_send_lat µs | ib_read_lat µs |"
  echo "|---:|---:|---:|---:|---:|"
  for s in "${SIZES[@]}"; do
    echo "| $s | $(g "ib_write_bw,$s") | $(g "ib_write_lat,$s") | $(g "ib_send_lat,$s") | $(g "ib_read_lat,$s") |"
  done
  echo
  echo "**Socket level, same program over kernel TCP and over rsocket** (vsocket-sweep with librspreload.so; rstream native vs \`-T s\`). RTT = round trip, avg µs; ratio = kernel ÷ rsocket for time, rsocket ÷ kernel for bandwidth (> 1: rsocket better):"
  echo
  echo "| size (B) | sweep RTT TCP | sweep RTT rsocket | ratio | sweep p99 TCP | sweep p99 rsocket | rstream RTT TCP | rstream RTT rsocket | ratio | sweep Gb/s TCP | sweep Gb/s rsocket | ratio | rstream Gb/s TCP | rstream Gb/s rsocket | ratio |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for s in "${SIZES[@]}"; do
    a=$(g "sw_avg_tcp,$s"); b=$(g "sw_avg_rs,$s")
    c=$(g "rstream_lat_tcp,$s"); d=$(g "rstream_lat_rs,$s")
    e=$(g "sw_gbps_tcp,$s"); f=$(g "sw_gbps_rs,$s")
    h=$(g "rstream_bw_tcp,$s"); k=$(g "rstream_bw_rs,$s")
    echo "| $s | $a | $b | $(ratio "$a" "$b") | $(g "sw_p99_tcp,$s") | $(g "sw_p99_rs,$s") | $c | $d | $(ratio "$c" "$d") | $e | $f | $(ratio "$f" "$e") | $h | $k | $(ratio "$k" "$h") |"
  done
  echo
  for mode in tcp rs; do for test in pingpong stream; do
    [ -n "${V[sweep_err_$mode,$test]:-}" ] &&
      echo "vsocket-sweep $test over $([ $mode = rs ] && echo rsocket || echo 'kernel TCP') failed after the sizes shown: \`${V[sweep_err_$mode,$test]}\`"$'\n'
  done; done
  echo "rxe0 packets (sent+rcvd) during the sweep runs: TCP pingpong $(g sweep_pkts_tcp,pingpong), stream $(g sweep_pkts_tcp,stream); rsocket pingpong $(g sweep_pkts_rs,pingpong), stream $(g sweep_pkts_rs,stream)."
  echo
  echo "**Real programs under rsocket's preload** (both ends \`LD_PRELOAD=librspreload.so\`; \"rxe pkts\" = sent+rcvd on rxe0 during the run; runs over rsocket only if a result came back AND rxe pkts moved):"
  echo
  echo "| program | kernel TCP | rxe pkts | rsocket preload | rxe pkts | over rsocket? | ratio | note |"
  echo "|---|---|---:|---|---:|---|---:|---|"
  for prog in iperf3 sockperf redis nginx; do
    ft=$(g "prog_fig_tcp,$prog"); fr=$(g "prog_fig_rs,$prog"); pr=$(g "prog_pkts_rs,$prog")
    ok=no
    if [ "$fr" != - ] && [ "$pr" -gt 100 ]; then ok=yes; elif [ "$fr" != - ]; then ok="no (fell back to kernel TCP)"; fi
    nt=$(awk '{print $1}' <<<"$ft"); nr=$(awk '{print $1}' <<<"$fr")
    [ "$prog" = redis ] && { nt=$(awk '{print $2}' <<<"$ft"); nr=$(awk '{print $2}' <<<"$fr"); }
    if [ "$prog" = sockperf ]; then r=$(ratio "$nt" "$nr"); else r=$(ratio "$nr" "$nt"); fi
    [ "$ok" = yes ] || r=-
    label=$prog; [ "$prog" = redis ] && label="redis-benchmark"; [ "$prog" = nginx ] && label="nginx + wrk"
    echo "| $label | $ft | $(g "prog_pkts_tcp,$prog") | $fr | $pr | $ok | $r | $(g "prog_note_rs,$prog") |"
  done
  echo
  s0=${SIZES[0]}
  echo "Ratios of this run: rsocket RTT ÷ 2×ib_send_lat at ${s0} B = $(ratio "$(g "sw_avg_rs,$s0")" "$(awk -v x="$(g "ib_send_lat,$s0")" 'BEGIN{ if (x == "-") print "-"; else print 2 * x }')");" \
       "kernel TCP RTT ÷ rsocket RTT at ${s0} B = $(ratio "$(g "sw_avg_tcp,$s0")" "$(g "sw_avg_rs,$s0")");" \
       "ib_write_bw ÷ rsocket stream at 64 KiB = $(ratio "$(g "ib_write_bw,65536")" "$(g "sw_gbps_rs,65536")");" \
       "rsocket stream ÷ kernel TCP stream at 64 KiB = $(ratio "$(g "sw_gbps_rs,65536")" "$(g "sw_gbps_tcp,65536")")."
  echo "---END-RESULTS---"
  rm -rf "$work"
  exit 0
fi

# ====================================================================== host
record=1 quick=0
for a in "$@"; do
  case $a in
    --no-record) record=0 ;;
    --quick) quick=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "rdma-baseline: unknown option $a (see --help)" >&2; exit 2 ;;
  esac
done
sweep=${VSOCKET_SWEEP:-$repo/build/bin/vsocket-sweep}
if [ ! -x "$sweep" ]; then
  echo "rdma-baseline: building vsocket-sweep ($sweep missing)" >&2
  { cmake -S "$repo" -B "$repo/build" -G Ninja >/dev/null && cmake --build "$repo/build" --target vsocket-sweep >/dev/null; } ||
    { echo "rdma-baseline: error: cannot build vsocket-sweep; set VSOCKET_SWEEP" >&2; exit 1; }
fi
[ -r "$RSPRELOAD" ] || { echo "rdma-baseline: error: $RSPRELOAD missing (package librdmacm1)" >&2; exit 1; }

out=$(mktemp "${TMPDIR:-/tmp}/rdma-baseline.XXXXXX")
trap 'rm -f "$out" "$out.sec" "$out.new"' EXIT
load=$(cut -d' ' -f1-3 /proc/loadavg)
start=$SECONDS
rc=0
"$repo/tools/rdma-guest/run" --timeout "${VSOCKET_RDMA_BENCH_TIMEOUT:-1800}" -C "$repo" -- \
  bash "$here/rdma-baseline.sh" --in-guest "$quick" "$sweep" >"$out" || rc=$?
took=$((SECONDS - start))
if ! grep -q '^---END-RESULTS---' "$out"; then
  cat "$out"
  echo "rdma-baseline: error: the guest run failed (exit $rc) before reporting results" >&2
  exit 1
fi
sed -n '/^---BEGIN-RESULTS---$/,/^---END-RESULTS---$/p' "$out" | sed '1d;$d' >"$out.sec"
cat "$out.sec"
echo
echo "(guest run took ${took} s; host load average before: $load)"
[ "$record" = 1 ] || exit 0

results=$repo/bench/RESULTS.md
{
  echo "$SECTION"
  echo
  echo "Recorded by \`bench/rdma-baseline.sh\` (one run of \`tools/rdma-guest/run\`, ${took} s;" \
       "host: $(nproc) cores shared with other work, load average $load before the run)."
  echo "**Only ratios between figures of this one run mean anything**: the guest runs under qemu TCG" \
       "emulation (~100× slower than the host for CPU work) on a busy 2-core machine, so absolute" \
       "figures are not comparable with real hardware or with other runs. Kernel TCP here is the guest's" \
       "own stack to its own address 10.77.0.1 (which Linux routes through \`lo\`, the dummy0 address" \
       "being local); rsocket and perftest go through rxe0 on dummy0 (Soft-RoCE, RoCE v2)."
  echo
  echo "Reading the tables: compare within one tool. vsocket-sweep reads with blocking \`read()\`/\`recv()\` (the thread sleeps between messages, so every round trip pays emulated wake-ups, milliseconds on a busy TCG host), while perftest and rstream spin on completions; hence sweep RTTs far above rstream's for the same transport. A \`-\` is a run that gave no figure (see the notes), \`inf\` is perftest's own output."
  echo
  cat "$out.sec"
  echo
} >"$out.new"
if [ -f "$results" ]; then
  # Replace our section (from its heading to the next "## " heading), keep the rest.
  awk -v sec="$SECTION" -v new="$out.new" '
    $0 == sec { while ((getline l < new) > 0) print l; skip = 1; done = 1; next }
    skip && /^## / { skip = 0 }
    !skip { print }
    END { if (!done) { print ""; while ((getline l < new) > 0) print l } }' "$results" >"$results.tmp"
  mv "$results.tmp" "$results"
else
  { echo "# Benchmark results"; echo; cat "$out.new"; } >"$results"
fi
echo "rdma-baseline: recorded in bench/RESULTS.md ($SECTION)"
