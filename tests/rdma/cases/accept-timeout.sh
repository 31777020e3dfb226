#!/usr/bin/env bash
# The accepter's set-up runs out of time while it waits for the connector's
# RING (src/transport/rdma/cm.c, leave_waiting_ring): it leaves with CUT
# {0, 0} and keeps its queue pair, so a connector that was merely slow
# comes back, finds the CUT and stays on TCP. (Before 88e83fe the accepter
# hung up without a word: the connector came back, took the accepter's
# PROOF, switched, and wrote into a ring nobody read; fdlimit.sh hung so
# once, by chance.)
#
# Put there by an order of events, not by luck: the set-up advances only at
# the programs' calls, and vs_steps makes exactly the calls the case asks
# for, each end watching its own debug log:
#  1. client (connector): sends 64 bytes, calls until its set-up started
#     (it listens on its rendezvous), then no socket call;
#  2. server (accepter): reads them, calls until it has called the
#     connector (its request is on the way), then no socket call;
#  3. client: calls until it accepted the call (the accepter's PROOF cannot
#     have come: the accepter makes no call), then no socket call until
#     the accepter left;
#  4. server: a blocking recv of 1 MiB, whose sleeps run the set-up: the
#     accepter sends PROOF and its ring, waits for the connector's RING
#     that cannot come, and leaves (2 s + 5 s limit, handshake-timeout);
#  5. client: sends 1 MiB, then reads the server's 1 MiB, closes.
# Verdicts (each can fail): every byte right both ways, both programs end
# (no hang); the accepter's log says PROOF sent, then the set-up left with
# its CUT placed; `vsocket stat`: the accepter's end `kernel
# handshake-timeout`, the connector's end on the kernel.
# The build before 88e83fe passes the data here: its accepter disconnects,
# and the connector reads DISCONNECTED before its queue pair, refuses the
# caller and stays on TCP. It went wrong only when the connector's call came
# before the DREQ: tests/rdma/cross/80-accept-timeout-dreq-lost.sh.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7251
size=$((1 << 20))
STEPS=$BUILD/bin/vs_steps
case_setup accept-timeout
slog=$tmp/vs-server.log clog=$tmp/vs-client.log
fail() { echo "FAIL: $*"; exit 1; }
# Both set-ups start once 64 bytes moved, an event (not after an age).
env_common=(VSOCKET_LOG_LEVEL=debug VSOCKET_UPGRADE_AFTER_BYTES=64 VSOCKET_UPGRADE_AFTER_US=60000000)
t0=$SECONDS

vs_run env "${env_common[@]}" VSOCKET_LOG_FILE="$slog" "$STEPS" server "$IP:$port" --timeout 200 \
  quiet-until "$tmp/c.listening" recv 64 \
  calls-until "$slog" "rdma: calling the connector" touch "$tmp/s.called" \
  quiet-until "$tmp/c.silent" recv $size send $size \
  touch "$tmp/s.done" quiet-until "$tmp/release" close >"$tmp/server.out" 2>&1 &
spid=$!
pids+=($spid)
wait_port $port
vs_run env "${env_common[@]}" VSOCKET_LOG_FILE="$clog" "$STEPS" client "$IP:$port" --timeout 200 \
  send 64 calls-until "$clog" "rdma: the set-up starts (connector)" touch "$tmp/c.listening" \
  quiet-until "$tmp/s.called" \
  calls-until "$clog" "rdma: a caller accepted" touch "$tmp/c.silent" \
  quiet-until "$tmp/s.left" send $size recv $size \
  touch "$tmp/c.done" quiet-until "$tmp/release" close >"$tmp/client.out" 2>&1 &
cpid=$!
pids+=($cpid)

wait_while $cpid 120 test -e "$tmp/c.silent" || fail "the connector never accepted the accepter's call"
echo "connector: accepted the call, now silent ($((SECONDS - t0)) s)"
conn=$(local_of_conn_to $port)
[ -n "$conn" ] || fail "ss shows no connection to port $port"
# A bound for a hang only: the accepter's limit is 7 s of its own clock.
wait_while $spid 120 grep -q 'rdma: the set-up ended on TCP' "$slog" || fail "the accepter's set-up never ended"
grep 'rdma: the set-up ended on TCP' "$slog"
echo "accepter: left ($((SECONDS - t0)) s); the connector comes back"
touch "$tmp/s.left"

# Bounded by the programs' --timeout: a hang ends them (STEPS-TIMEOUT).
wait_while $cpid 240 test -e "$tmp/c.done" || fail "the client did not finish its data"
wait_while $spid 240 test -e "$tmp/s.done" || fail "the server did not finish its data"
grep '^STEPS-' "$tmp/client.out" "$tmp/server.out" || true
srow=$(conn_row "$IP:$port" "$conn")
crow=$(conn_row "$conn" "$IP:$port")
echo "vsocket stat: accepter '$srow', connector '$crow'"
touch "$tmp/release"
rc=0
wait $cpid || rc=$?
[ "$rc" = 0 ] || fail "client exit $rc"
wait $spid || rc=$?
[ "$rc" = 0 ] || fail "server exit $rc"
grep -q "^STEPS-DATA role=client sent=$((size + 64)) .*rcvd=$size .*result=OK" "$tmp/client.out" ||
  fail "client: data not right"
grep -q "^STEPS-DATA role=server sent=$size .*rcvd=$((size + 64)) .*result=OK" "$tmp/server.out" ||
  fail "server: data not right"

# The path the case is about was taken, in this order.
order=$(grep -n -e 'rdma: calling the connector' -e 'rdma: proof and ring sent' \
  -e "left a set-up waiting for the connector's ring (handshake-timeout), CUT placed" "$slog" |
  cut -d: -f1 | tr '\n' ' ')
read -r a b c <<<"$order"
[ -n "$c" ] && [ "$a" -lt "$b" ] && [ "$b" -lt "$c" ] ||
  fail "the accepter's log lacks, in order: calling, proof and ring sent, left with its CUT placed"
[ "$srow" = "kernel handshake-timeout" ] || fail "accepter's end: '$srow', expected 'kernel handshake-timeout'"
[[ $crow == kernel* ]] || fail "connector's end: '$crow', expected the kernel"
echo "--- accepter's log:"
grep -e 'rdma:' -e 'fd [0-9]*:' "$slog" | sed 's/^/  /'
echo "--- connector's log:"
grep -e 'rdma:' -e 'fd [0-9]*:' "$clog" | sed 's/^/  /'
echo "accept-timeout: PASS ($((SECONDS - t0)) s)"
