#!/usr/bin/env bash
# rdma-case-timeout: 900
# Deployed as a service is: a server that binds as root and serves as an
# unprivileged user (nginx workers as www-data), a client run by another user,
# and a locked-memory limit (RLIMIT_MEMLOCK) that the unprivileged user cannot
# lift: RDMA pins memory against it once CAP_IPC_LOCK is gone.
# A Python echo server binds as root, sets RLIMIT_MEMLOCK, drops to nobody;
# a client runs as daemon (setpriv) under its own limit (prlimit), opens 4
# connections at once, echoes 512 KiB of random bytes on each, then keeps
# them busy with small checked round trips until told to stop.
#  1. no limit at either end: all 4 connections reach rdma at both ends
#     (`vsocket stat`, 8 rows), every byte back as sent;
#  2. the client limited to 1 MiB (the room for about one connection, as
#     `vsocket doctor` says): the connections that find no room stay on the
#     kernel with reason no-resources, and every byte still comes back right.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port_u=7231
port_l=7232
conns=4
size=$((512 << 10))
case_setup privdrop
chmod 755 "$tmp"
# Processes of other users write their statistics files here.
chmod 1777 "$VSOCKET_STATS_DIR"

cat >"$tmp/server.py" <<'PY'
import os, resource, socket, sys, threading
host, port, memlock = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(64)
if memlock >= 0:
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (memlock, memlock))
os.setgroups([]); os.setgid(65534); os.setuid(65534)
print("serving as uid", os.getuid(), flush=True)
say = threading.Lock()  # one line per connection, not interleaved
def echo(c):
    n = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
        n += len(d)
    with say:
        print("echoed", n, flush=True)
    c.close()
while True:
    c, _ = ls.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
PY
cat >"$tmp/client.py" <<'PY'
import hashlib, os, socket, sys, threading, time
host, port, n, size, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
errors, done = [], []
from streams import recv_exactly
def one(i):
    try:
        s = socket.create_connection((host, port))
        data = os.urandom(size)
        t = threading.Thread(target=s.sendall, args=(data,))
        t.start()
        got = recv_exactly(s, size)
        t.join()
        if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
            raise ValueError("the echo differs from what was sent")
        rounds = 0
        deadline = time.monotonic() + 60
        while not os.path.exists(stop) and time.monotonic() < deadline:
            msg = os.urandom(100)
            s.sendall(msg)
            if recv_exactly(s, 100) != msg:
                raise ValueError(f"round trip {rounds} came back different")
            rounds += 1
            time.sleep(0.05)
        s.close()
        done.append(rounds)
    except Exception as e:
        errors.append(f"connection {i}: {e!r}")
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(f"uid {os.getuid()}: {len(done)} of {n} connections right, round trips {done}")
for e in errors: print("error", e)
print("PASS" if len(done) == n and not errors else "FAIL")
PY

# run_pair NAME PORT SERVER_MEMLOCK CLIENT_MEMLOCK: starts both, leaves $cli running.
run_pair() {
  local name=$1 p=$2
  vs_run python3 "$tmp/server.py" "$IP" "$p" "$3" >"$tmp/$name-server.log" 2>&1 &
  pids+=("$!")
  wait_port "$p"
  vs_run setpriv --reuid=daemon --regid=daemon --clear-groups prlimit --memlock="$4" \
    python3 "$tmp/client.py" "$IP" "$p" $conns $size "$tmp/$name.stop" >"$tmp/$name-client.log" 2>&1 &
  cli=$!
  pids+=("$cli")
}
# finish NAME: stops the client's round trips, checks what it saw.
finish() {
  local rc=0
  touch "$tmp/$1.stop"
  wait "$cli" || rc=$?
  cat "$tmp/$1-client.log"
  { [ "$rc" = 0 ] && grep -qx PASS "$tmp/$1-client.log"; } || { echo "$1: client failed (exit $rc)"; exit 1; }
  for i in $(seq 100); do [ "$(grep -c '^echoed' "$tmp/$1-server.log")" -ge $conns ] && break; sleep 0.2; done
  [ "$(grep -c '^echoed' "$tmp/$1-server.log")" = $conns ] || { echo "$1: server: $(cat "$tmp/$1-server.log")"; exit 1; }
  grep -q "serving as uid 65534" "$tmp/$1-server.log" || { echo "$1: the server did not drop to nobody"; exit 1; }
}

run_pair unlimited $port_u -1 unlimited
# Bounds only a hang crosses: beside other guests a fresh run's client
# (setpriv, prlimit, python3 under emulation) took over 120 s to connect.
expect_rdma_rows $((2 * conns)) 600
finish unlimited
echo "unlimited: $conns connections between nobody and daemon on rdma at both ends"

run_pair limited $port_l -1 $((1 << 20))
# Wait until every set-up has ended one way or the other (none pending).
end=$((SECONDS + 600))
while :; do
  out=$("$TOOL" stat 2>/dev/null || true)
  mine=$(grep -c ":$port_l " <<<"$out" || true)
  pending=$(grep -cE ":$port_l .*upgrade-(pending|deferred)" <<<"$out" || true)
  [ "$mine" -ge $((2 * conns)) ] && [ "$pending" = 0 ] && break
  [ "$SECONDS" -lt "$end" ] || { echo "set-ups still pending after 600 s:"; echo "$out"; exit 1; }
  sleep 0.5
done
echo "$out" | grep -E "PID|:$port_l "
grep -qE ":$port_l .* kernel .* no-resources" <<<"$out" ||
  { echo "limited: no connection stayed on the kernel for want of locked memory"; exit 1; }
finish limited
echo "limited: connections without locked memory stayed on the kernel (no-resources), all bytes right"
