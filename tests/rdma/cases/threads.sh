#!/usr/bin/env bash
# A thread-per-connection server and client (issue 24 goal 3): every
# thread's connection completes on the thread's own completion channel. A
# connection used to join the group of whichever thread happened to read
# the rdma_cm event that set it up, so that a server's 8 workers shared 2
# channels and woke each other on every message.
#
# Under vsocket on RDMA: `isolation server` (a thread per connection) and a
# Python client of 8 threads, one connection each, echoing 64-byte messages
# (each checked) until the shell has looked. Once `vsocket stat` shows the
# 16 ends on rdma, each process must hold at least 9 event descriptors
# (anon_inode:[infinibandevent]): a completion channel per thread that makes
# the calls, and the device's asynchronous events.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7230
conns=8
case_setup threads

cat >"$tmp/client.py" <<'PY'
import os, socket, sys, threading, time
host, port, n, release = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
bad = []

def pinger(i):
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"p")
    k = 0
    # Busy until the shell has looked (a set-up moves on when the program
    # calls in); at least 100 round trips each.
    while k < 100 or not os.path.exists(release):
        msg = (b"%02d:%08d:" % (i, k)).ljust(64, b".")
        s.sendall(msg)
        back = b""
        while len(back) < 64:
            data = s.recv(64 - len(back))
            if not data:
                break
            back += data
        if back != msg:
            bad.append(f"thread {i}: round trip {k} came back {back[:20]!r}")
            break
        k += 1
    s.close()

threads = [threading.Thread(target=pinger, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
print(f"{n} threads started", flush=True)
for t in threads:
    t.join()
print("\n".join(bad) if bad else "PASS", flush=True)
sys.exit(1 if bad else 0)
PY

# Event descriptors held by the program that `vs_run CMD &` (a subshell,
# or CMD itself when bash ran it in place) started as PID.
channels() {
  local p
  p=$(pgrep -P "$1" | head -n1)
  find "/proc/${p:-$1}/fd" -lname 'anon_inode:\[infinibandevent\]' 2>/dev/null | wc -l
}

vs_run "$BUILD/bin/isolation" server --port $port >"$tmp/server.log" 2>&1 &
srv=$!
pids+=("$srv")
wait_port $port
vs_run python3 "$tmp/client.py" "$IP" $port $conns "$tmp/release" >"$tmp/client.log" 2>&1 &
cli=$!
pids+=("$cli")
rows=0
expect_rdma_rows $((2 * conns)) || rows=1
srv_ch=$(channels "$srv") cli_ch=$(channels "$cli")
want=$((conns + 1))
echo "event descriptors: server $srv_ch, client $cli_ch (want >= $want each)"
client_verdict "$cli" "$tmp/client.log" "$tmp/release" || exit 1
[ "$rows" = 0 ] || { "$TOOL" stat --all; exit 1; }
[ "$srv_ch" -ge $want ] && [ "$cli_ch" -ge $want ] || {
  echo "FAIL: the threads' connections share completion channels"
  exit 1
}
echo "each thread's connection on its own channel"
