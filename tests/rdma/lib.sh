# tests/rdma/lib.sh — helpers for the vsocket cases of the RDMA stage
# (sourced by tests/rdma/cases/*.sh, which run in the Soft-RoCE guest as root
# with cwd = the checkout, IP and DEV exported by tests/rdma/stage.sh).
#
# vs_run CMD...         run CMD under the preload, RDMA forced between the
#                       processes of the guest (VSOCKET_TRANSPORTS=rdma)
# plain CMD...          run CMD without vsocket
# wait_port PORT [S]    until something listens on IP:PORT (default 120 s)
# expect_rdma_rows N [S] `vsocket stat` shows at least N connections on rdma
#                       (retries for S seconds, default 180); prints the table
# The waits' limits bound hangs only: the guest is ~100x slower than the
# host and shared; each wait returns as soon as its event happens.
# case_setup NAME       a scratch folder $tmp (with tests/lib/streams.py, for
#                       Python scripts there), a list $pids of background
#                       `vs_run ... &` subshells, and an EXIT trap that ends
#                       them (and their programs), shows the logs in $tmp on
#                       failure (the whole folder copied into $VS_CASE_KEEP if
#                       set) and removes $tmp
# expect_reason R       `vsocket stat --all` shows a connection with reason R
# steps_start ROLE STEP...  vs_steps ROLE (server, client) at $IP:$port under
#                       vsocket, in the background, with the environment in
#                       the array steps_env; its vsocket log $tmp/vs-ROLE.log,
#                       its output $tmp/ROLE.out, its pid in $steps_pid
# steps_verdict CPID SPID [spilled]  waits for the vs_steps client and server,
#                       shows their verdict lines and the leaving lines of
#                       their logs; fails unless both exited 0 and each end's
#                       stream (bytes, checksum) is what the other sent (and,
#                       with "spilled", the client's log says it left RDMA)
set -euo pipefail

BUILD=${VSOCKET_BUILD_DIR:-$PWD/build}
LIB=$BUILD/lib/libvsocket.so
TOOL=$BUILD/bin/vsocket
STRESS=$BUILD/bin/vsocket-stress
IP=${IP:-10.77.0.1}
export VSOCKET_STATS_DIR=${VSOCKET_STATS_DIR:-$(mktemp -d /tmp/vs-stats.XXXXXX)}
[ -e "$LIB" ] || { echo "no $LIB: build first (cmake --build build)"; exit 1; }

vs_run() { env LD_PRELOAD="$LIB" VSOCKET_TRANSPORTS=rdma "$@"; }
plain() { env -u LD_PRELOAD "$@"; }

wait_port() {
  local port=$1 limit=${2:-120} i
  for ((i = 0; i < limit * 10; i++)); do
    if ss -ltnH "sport = :$port" 2>/dev/null | grep -q .; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on port $port after ${limit}s"
  return 1
}

expect_rdma_rows() {
  # A deadline, not a number of tries: one `vsocket stat` takes 1-2 s in the
  # emulated guest, so 200 tries were minutes.
  local want=$1 n=0 out limit=${2:-180} end=$((SECONDS + ${2:-180}))
  while :; do
    out=$("$TOOL" stat 2>/dev/null || true)
    n=$(grep -c ' rdma ' <<<"$out" || true)
    [ "$n" -ge "$want" ] && { echo "$out"; return 0; }
    [ "$SECONDS" -lt "$end" ] || break
    sleep 0.1
  done
  echo "vsocket stat shows $n connections on rdma, expected at least $want (${limit} s):"
  echo "$out"
  return 1
}

expect_reason() {
  local reason=$1 out
  out=$("$TOOL" stat --all 2>/dev/null || true)
  grep -q -- "$reason" <<<"$out" && return 0
  echo "vsocket stat --all shows no connection with reason $reason:"
  echo "$out"
  return 1
}

# ---- impostor cases (tests/rdma/cases/impostor-*.sh, tests/rdma/README.md)
PAIR=$BUILD/bin/vs_pair
IMP=$BUILD/bin/rdma_impostor

# wait_file FILE [S]    until FILE exists (default 120 s)
wait_file() {
  local f=$1 limit=${2:-120} i
  for ((i = 0; i < limit * 10; i++)); do [ -e "$f" ] && return 0; sleep 0.1; done
  echo "no $f after ${limit}s"
  return 1
}

# client_verdict PID LOG RELEASE   lets go a client that keeps its connections
#                       busy until RELEASE exists, waits for it, shows LOG;
#                       fails unless it exited 0 having printed a line PASS
client_verdict() {
  local pid=$1 log=$2 rc=0
  touch "$3"
  wait "$pid" || rc=$?
  cat "$log"
  [ "$rc" = 0 ] && grep -qx PASS "$log" && return 0
  echo "FAIL: the client exited $rc"
  return 1
}

# wait_grep PATTERN FILE [S]   until FILE has a line matching PATTERN (ERE)
wait_grep() {
  local pat=$1 f=$2 limit=${3:-120} i
  for ((i = 0; i < limit * 10; i++)); do grep -qE -- "$pat" "$f" 2>/dev/null && return 0; sleep 0.1; done
  echo "no /$pat/ in $f after ${limit}s"
  return 1
}

# wait_while PID S CMD...   until CMD succeeds; fails at once if PID (the
#                       program whose progress CMD looks for) ended, or after S s
wait_while() {
  local pid=$1 limit=$2 end=$((SECONDS + $2))
  shift 2
  # A deadline, not a number of tries: CMD may be `vsocket stat`, 1-2 s
  # each in the emulated guest (as expect_rdma_rows).
  while [ "$SECONDS" -lt "$end" ]; do
    "$@" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "the program ($pid) ended before: $*"; return 1; }
    sleep 0.1
  done
  echo "not after ${limit}s: $*"
  return 1
}

# conn_row LOCAL PEER   "TRANSPORT REASON" of that connection in `vsocket stat --all`
conn_row() {
  "$TOOL" stat --all 2>/dev/null | awk -v l="$1" -v p="$2" '$5 == l && $6 == p { print $7, $12; exit }'
}

# wait_row LOCAL PEER REGEX [S]   until conn_row matches REGEX; prints the row
wait_row() {
  local l=$1 p=$2 re=$3 limit=${4:-120} row=
  local end=$((SECONDS + limit))
  # A deadline (see wait_while): 1200 tries of `vsocket stat` were 30 min.
  while [ "$SECONDS" -lt "$end" ]; do
    row=$(conn_row "$l" "$p")
    if [[ $row =~ $re ]]; then echo "$row"; return 0; fi
    sleep 0.1
  done
  echo "connection $l -> $p: stat says '$row', expected /$re/"
  "$TOOL" stat --all 2>/dev/null || true
  return 1
}

# local_of_conn_to PORT   the local address of the (one) established connection to PORT
local_of_conn_to() {
  ss -tnH state established "( dport = :$1 )" | awk 'NR == 1 { print $3 }'
}

case_setup() {
  tmp=$(mktemp -d "/tmp/case-$1.XXXXXX")
  # Python helpers a case's scripts import from their own folder.
  cp "$(dirname "${BASH_SOURCE[0]}")/../lib/streams.py" "$tmp/"
  pids=()
  trap case_cleanup EXIT
}

case_cleanup() {
  local rc=$? p f
  # "vs_run CMD &" is a subshell running CMD: end CMD, then the subshell.
  for p in "${pids[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$rc" != 0 ]; then
    for f in "$tmp"/*; do
      # text files only (a case keeps its random payloads there too)
      [ -f "$f" ] && grep -Iq . "$f" && { echo "--- $(basename "$f") (tail)"; tail -n 20 "$f"; }
    done
    # VS_CASE_KEEP=DIR: the whole folder of a failed case kept there.
    [ -z "${VS_CASE_KEEP:-}" ] || { mkdir -p "$VS_CASE_KEEP" && cp -r "$tmp" "$VS_CASE_KEEP/"; }
  fi
  # A daemon's own children (rsync's per connection) may still be writing
  # their logs for a moment after it was stopped.
  rm -rf "$tmp" 2>/dev/null || { sleep 2; rm -rf "$tmp" || true; }
}

steps_start() {
  local role=$1
  shift
  vs_run env "${steps_env[@]}" VSOCKET_LOG_FILE="$tmp/vs-$role.log" "$BUILD/bin/vs_steps" "$role" \
    "$IP:$port" --timeout 280 "$@" >"$tmp/$role.out" 2>&1 &
  steps_pid=$!
  pids+=("$steps_pid")
}

steps_verdict() {
  local cpid=$1 spid=$2 rc=0 dir side end sent rcvd
  wait "$cpid" || rc=$?
  wait "$spid" || rc=$?
  grep -E '^STEP fill|^STEPS-' "$tmp/server.out" "$tmp/client.out" || true
  grep -h "goes on TCP\|stays on the kernel" "$tmp/vs-client.log" "$tmp/vs-server.log" || true
  [ "$rc" = 0 ] || { echo "FAIL: a program failed (exit $rc)"; return 1; }
  for dir in "client server" "server client"; do
    read -r side end <<<"$dir"
    sent=$(sed -n "s/.*role=$side sent=\([0-9]*\) sent_fnv=\([0-9a-f]*\).*/\1 \2/p" "$tmp/$side.out")
    rcvd=$(sed -n "s/.*role=$end .*rcvd=\([0-9]*\) rcvd_fnv=\([0-9a-f]*\).*/\1 \2/p" "$tmp/$end.out")
    [ -n "$sent" ] && [ "$sent" = "$rcvd" ] || { echo "FAIL: $side sent '$sent', $end received '$rcvd'"; return 1; }
  done
  [ "${3:-}" != spilled ] || grep -q "goes on TCP" "$tmp/vs-client.log" ||
    { echo "FAIL: the client never left RDMA"; return 1; }
}
