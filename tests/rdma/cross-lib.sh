# shellcheck shell=bash
# tests/rdma/cross-lib.sh — helpers for the cross-host cases in
# tests/rdma/cross/*.sh (sourced by a case: `. "$CROSS_LIB"`). See the header
# of tests/rdma/stage.sh for how cases are run.
#
# In a case: VSG_ROLE (A|B), VSG_SELF_IP, VSG_PEER_IP, VSG_DEV (rxe1),
# VSG_TOOLS, VSG_SYNC_DIR (from tools/rdma-guest/pair), CASE (the case's name,
# use it to make barrier names unique), A_IP / B_IP (below), CNT (rxe1's
# hw_counters folder), and the functions below.

export A_IP=10.77.1.1
export B_IP=10.77.1.2
export CNT=/sys/class/infiniband/${VSG_DEV:-rxe1}/ports/1/hw_counters

# barrier NAME [TIMEOUT]: both guests wait until both reached "$CASE.NAME".
# A barrier where one side starts a program waits 240 s: starting python or
# a server under the preload took over 60 s in a guest beside a busy host
# (a bound only a hang should cross; the case's own limit is 300 s).
barrier() { "$VSG_TOOLS/barrier" "$CASE.$1" "${2:-60}"; }

# counter NAME: one rxe1 hw counter (sent_pkts, rcvd_pkts, retry_exceeded_err…).
counter() { cat "$CNT/$1"; }

# server_client "SERVER CMD" "CLIENT CMD": the server runs in guest A, the
# client in guest B (bash -c strings, expanded in the guest: use $A_IP for the
# server's address). The client is retried (the server may still be starting
# when B passes the barrier). Returns the server's exit code in A and the
# client's in B.
server_client() {
  local srv=$1 cli=$2 pid rc=0 try
  if [ "$VSG_ROLE" = A ]; then
    bash -c "$srv" &
    pid=$!
    sleep 1
    barrier server-started 240 || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return 1; }
    wait "$pid" || rc=$?
    return "$rc"
  fi
  barrier server-started 240 || return 1
  for try in 1 2 3 4 5 6; do
    bash -c "$cli" && return 0
    rc=$?
    echo "  (client attempt $try failed with exit $rc, retrying)"
    sleep 1
  done
  return "$rc"
}

# logs_on_rdma WHO MIN LOG...: the vsocket logs (VSOCKET_LOG_LEVEL=info) say
# that at least MIN connections upgraded to rdma, and that none stayed on the
# kernel or left rdma; else their tail. With SETUP_AT_CLOSE_OK=1, a
# connection closed while its set-up was under way counts towards MIN: an
# end's set-up finishes only at its program's calls, and a short connection
# may make its last one before the peer's last set-up message arrives (an
# ordering the emulated pair's speed decides, not vsocket). With
# SETUP_SILENCE_OK=N, up to N set-ups that gave up on a peer silent past
# the set-up's deadlines (peer-not-vsocket, handshake-timeout: the guests'
# load decides it, and such a connection works on TCP) are allowed, said,
# and not counted towards MIN; any other reason still fails.
logs_on_rdma() {
  local who=$1 min=$2 up stays left closing
  shift 2
  up=$(cat "$@" 2>/dev/null | grep -c 'upgraded to rdma' || true)
  stays=$(cat "$@" 2>/dev/null | grep -c -E 'stays on the kernel' || true)
  closing=$(cat "$@" 2>/dev/null | grep -c -E 'set-up was under way' || true)
  left=$(cat "$@" 2>/dev/null | grep -c -E 'has not read|goes on TCP|went back to TCP|leaves? (the rings|rdma)' || true)
  echo "$who: $up connections upgraded to rdma, $stays stayed on the kernel, $closing closed during their set-up, $left left rdma"
  echo "$who: ms from connect to rdma: $(cat "$@" 2>/dev/null | grep -o '[0-9]* ms after' | cut -d' ' -f1 | xargs)"
  if [ "${SETUP_AT_CLOSE_OK:-0}" = 1 ]; then
    up=$((up + closing)) closing=0
  fi
  local silent
  silent=$(cat "$@" 2>/dev/null | grep -c -E 'stays on the kernel: (peer-not-vsocket|handshake-timeout)' || true)
  if [ "$silent" -gt 0 ] && [ "$silent" -le "${SETUP_SILENCE_OK:-0}" ]; then
    echo "$who: $silent set-up(s) gave up on a peer silent past the deadlines (the guests' load; allowed here)"
    stays=$((stays - silent)) min=$((min - silent))
  fi
  [ "$up" -ge "$min" ] && [ "$stays" = 0 ] && [ "$closing" = 0 ] && [ "$left" = 0 ] && return 0
  cat "$@" 2>/dev/null | grep -v tracked | tail -40
  echo "$who: expected at least $min connections on rdma that stay there: $up upgraded, $stays stayed," \
    "$closing closed during set-up, $left left rdma (the logs above)"
  return 1
}
