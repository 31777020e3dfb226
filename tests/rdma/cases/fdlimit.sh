#!/usr/bin/env bash
# rdma-case-timeout: 900
# A process at its descriptor limit must not run out sooner than on the
# kernel. Here a server (ulimit -n 1024) accepts 300 connections from a
# client that is then stopped (SIGSTOP), so that the server's set-ups wait
# for it. The server then opens sockets until EMFILE: on the kernel it would
# get every number it does not hold. A set-up under way holds no descriptor
# of its own: its completion channel is its thread's, shared by all the
# connections that thread sets up (transport/rdma/cq.h); before that, each
# held one and the server opened 417 sockets here.
# Checked: the set-ups were under way (the client was stopped mid-way: the
# server's connections are pending in `vsocket stat`), the server held at
# most a few event descriptors (anon_inode: its threads' completion
# channels), it opened at least 1024 - 300 - 24 sockets (24: the
# interpreter's and vsocket's own few), and every connection echoed its
# bytes right.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7233
conns=300
case_setup fdlimit

cat >"$tmp/server.py" <<'PY'
import collections, os, select, socket, sys, time
host, port, n, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(1024)
conns = []
for _ in range(n):
    c, _ = ls.accept()
    conns.append(c)
for c in conns:  # the client's first byte, echoed
    c.sendall(c.recv(1))
while not os.path.exists(go):
    time.sleep(0.1)
# The client is stopped: calls on the connections drive the set-ups, which
# wait for it.
end = time.monotonic() + 5
while time.monotonic() < end:
    select.select(conns, [], [], 0.2)
kinds = collections.Counter(os.readlink(f"/proc/self/fd/{f}").split(":[")[0]
                            for f in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{f}"))
print("descriptors before:", dict(kinds), flush=True)
more = []
try:
    while len(more) < 4096:
        more.append(socket.socket())
except OSError as e:
    print("more sockets stopped:", e, flush=True)
print("more sockets:", len(more), flush=True)
for s in more:
    s.close()
print("server waits for the client", flush=True)
for c in conns:  # the client's second byte, once it runs again
    c.sendall(c.recv(1))
print("echoed", len(conns), flush=True)
PY
cat >"$tmp/client.py" <<'PY'
import socket, sys, time
host, port, n, ready = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
socks = [socket.create_connection((host, port)) for _ in range(n)]
for i, s in enumerate(socks):
    s.sendall(bytes([i % 251]))
for i, s in enumerate(socks):
    assert s.recv(1) == bytes([i % 251]), f"connection {i}: wrong echo"
time.sleep(0.2)
for s in socks:  # a call past the 5 ms mark: the set-up starts (listening)
    s.setblocking(False)
    try:
        s.recv(1)
    except BlockingIOError:
        pass
    s.setblocking(True)
open(ready, "w").close()
time.sleep(2)
for i, s in enumerate(socks):
    s.sendall(bytes([i % 241]))
bad = [i for i, s in enumerate(socks) if s.recv(1) != bytes([i % 241])]
print("client: second echo wrong on", bad if bad else "none")
print("PASS" if not bad else "FAIL")
PY

# Each process's own log (info: every set-up's outcome), shown on failure.
logged() { vs_run VSOCKET_LOG_LEVEL=info VSOCKET_LOG_FILE="$tmp/vs-%p.log" "$@"; }
(ulimit -n 1024 && logged python3 "$tmp/server.py" "$IP" $port $conns "$tmp/go" >"$tmp/server.log" 2>&1) &
srv=$!
pids+=("$srv")
wait_port $port
# The client listens for the set-up from its first call (no 5 ms wait);
# the server's set-ups start once it has called 8 times on a connection,
# in its select loop, after the client is stopped.
logged env VSOCKET_UPGRADE_AFTER_US=0 python3 "$tmp/client.py" "$IP" $port $conns "$tmp/ready" >"$tmp/client.log" 2>&1 &
cli=$!
pids+=("$cli")
wait_file "$tmp/ready" 120
cpid=$(pgrep -P "$cli" -f client.py || echo "$cli")
kill -STOP "$cpid"
touch "$tmp/go"
wait_grep "server waits for the client" "$tmp/server.log" 120 || { kill -CONT "$cpid"; exit 1; }
# The server's ends (local port $port): how many wait for their set-up
# (upgrade-pending, ",stalled" once due: the stopped client).
"$TOOL" stat --json >"$tmp/stat.json" || true
jq -c --arg p ":$port" '[.processes[].sockets[] | select(.local // "" | endswith($p)) | .reason]
  | group_by(.) | map({(.[0]): length}) | add' "$tmp/stat.json" || true
pending=$(jq --arg p ":$port" '[.processes[].sockets[] | select((.local // "" | endswith($p))
  and (.reason | startswith("upgrade-pending")))] | length' "$tmp/stat.json" || echo 0)
kill -CONT "$cpid"
# The client's last phase takes seconds; past the limit it hangs: say where
# each connection stood before the stage's timeout takes the evidence away.
end=$((SECONDS + 420))
while kill -0 "$cli" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 1; done
if kill -0 "$cli" 2>/dev/null; then
  echo "HANG: the client has not ended 420 s after it was let go; vsocket stat:"
  "$TOOL" stat >"$tmp/stat.txt" 2>&1
  awk 'NR > 1 { n[$1 " " $7 " " $NF]++ } END { for (k in n) print n[k], "pid transport reason:", k }' "$tmp/stat.txt"
  grep -v ' rdma ' "$tmp/stat.txt" | head -20
  for f in "$tmp"/vs-*.log; do echo "--- $f"; grep -v tracked "$f" | sort | uniq -c | sort -rn | head -15; done
  exit 1
fi
rc=0
wait "$cli" || rc=$?
wait "$srv" || true
cat "$tmp/server.log" "$tmp/client.log"
{ [ "$rc" = 0 ] && grep -qx PASS "$tmp/client.log"; } || { echo "client failed (exit $rc)"; exit 1; }
grep -qx "echoed $conns" "$tmp/server.log" || { echo "the server did not echo every connection"; exit 1; }
held=$(sed -n "s/.*'anon_inode': \([0-9]*\).*/\1/p" "$tmp/server.log")
[ "${pending:-0}" -ge $((conns / 2)) ] ||
  { echo "only ${pending:-0} set-ups were under way: the scenario did not happen"; exit 1; }
[ "${held:-0}" -le 8 ] ||
  { echo "the server held ${held} event descriptors for 300 set-ups: one per set-up?"; exit 1; }
more=$(sed -n 's/^more sockets: //p' "$tmp/server.log")
want=$((1024 - conns - 24))
[ "${more:-0}" -ge $want ] ||
  { echo "the server opened ${more:-0} more sockets, the kernel would give it $want or more"; exit 1; }
echo "fdlimit: $pending set-ups under way held ${held:-0} event descriptors; the server still opened $more sockets (kernel: >= $want)"
