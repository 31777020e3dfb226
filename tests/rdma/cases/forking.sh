#!/usr/bin/env bash
# rdma-case-timeout: 600
# Fork-per-connection servers (PostgreSQL, inetd-style daemons, Python's
# socketserver.ForkingTCPServer): the parent accepts, forks, and closes its
# copy while the child serves. The connection is young at the fork, so it
# need not leave for TCP: its upgrade starts once one process holds it alone
# (src/transport/rdma/forked.c). A client opens 3 connections at once and
# checks every echoed byte (random sizes up to 64 KiB, sha256 of the lot).
#  1. close: ForkingTCPServer; the server's children and the client reach
#     rdma on all 3 connections (6 rows in `vsocket stat`);
#  2. hold: the parent keeps each copy 0.3 s without using it (well within
#     the client's 3 s rendezvous: a parent that holds its copy longer leaves
#     the connection on TCP): the children's upgrades wait for it (their log
#     says so); once it closed them, the connections reach rdma at both ends;
#  3. taint: the parent writes a greeting after the fork, then the child
#     serves: two processes moved bytes since the fork, so the connections
#     stay on TCP with left-by-fork, and every byte is right;
#  4. late: the child echoes a first message, then the parent writes a byte
#     and closes its copy: the child must not upgrade at its own counts,
#     which miss the parent's byte (left-by-fork, every byte right).
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
conns=3
case_setup forking

cat >"$tmp/server.py" <<'PY'
import os, signal, socket, socketserver, sys, time
host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
signal.signal(signal.SIGCHLD, signal.SIG_IGN)

def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)

if mode == "close":
    class Echo(socketserver.BaseRequestHandler):
        def handle(self):
            echo(self.request)
    socketserver.ForkingTCPServer.allow_reuse_address = True
    with socketserver.ForkingTCPServer((host, port), Echo) as srv:
        print("serving", flush=True)
        srv.serve_forever()
    sys.exit(0)

if mode == "late":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(64)
    print("serving", flush=True)
    while True:
        c, _ = ls.accept()
        r, w = os.pipe()
        if os.fork() == 0:
            ls.close()
            os.close(r)
            c.sendall(c.recv(5))
            os.write(w, b"x")  # echoed: the parent's turn
            echo(c)
            os._exit(0)
        os.close(w)
        os.read(r, 1)
        os.close(r)
        c.sendall(b"P")
        c.close()

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(64)
print("serving", flush=True)
held = 0
while True:
    c, _ = ls.accept()
    if os.fork() == 0:
        ls.close()
        if mode == "taint":
            time.sleep(0.3)  # after the parent's greeting
        echo(c)
        os._exit(0)
    if mode == "taint":
        c.sendall(b"P")
        c.close()
    else:  # hold: keep the copy unused a moment (bookkeeping), then close it
        time.sleep(0.3)
        c.close()
        held += 1
        if held == 3:
            print("released", flush=True)
PY
cat >"$tmp/client.py" <<'PY'
import hashlib, os, random, socket, sys, threading, time
host, port, n, greeting, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
errors, lock = [], threading.Lock()
from streams import recv_exactly
def run(i):
    try:
        s = socket.create_connection((host, port))
        if greeting == "late":  # an echo from the child, then the parent's byte
            s.sendall(b"hello")
            if recv_exactly(s, 5) != b"hello" or recv_exactly(s, 1) != b"P":
                raise ValueError("no echo then greeting")
        elif greeting == "first" and recv_exactly(s, 1) != b"P":
            raise ValueError("no greeting")
        rng = random.Random(i)
        sent, back = hashlib.sha256(), hashlib.sha256()
        for r in range(rounds):
            msg = rng.randbytes(rng.randint(1, 65536))
            sent.update(msg)
            s.sendall(msg)
            back.update(recv_exactly(s, len(msg)))
            if r == rounds // 2:
                time.sleep(1.0)  # the upgrade ends meanwhile
        if sent.digest() != back.digest():
            raise ValueError("echoed bytes differ")
        with lock:
            print(f"conn {i}: {rounds} round trips, sha256 {sent.hexdigest()[:16]} ok", flush=True)
        time.sleep(float(sys.argv[6]))  # held open: `vsocket stat` looks
        s.close()
    except Exception as e:
        with lock:
            errors.append(f"conn {i}: {e!r}")
ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print("errors:", errors, flush=True)
sys.exit(1 if errors else 0)
PY

# rows MODE PORT: the connections' rows at both ends, as JSON lines.
rows() {
  "$TOOL" stat --all --json | jq -M -c --arg p "$IP:$1" \
    '.processes[].sockets[] | select(.proto == "tcp" and (.local == $p or .peer == $p)) | {transport, reason, state}'
}

run_mode() {
  local mode=$1 port=$2 greeting=none
  [ "$mode" = taint ] && greeting=first
  [ "$mode" = late ] && greeting=late
  VSOCKET_UPGRADE_AFTER_US=0 VSOCKET_LOG_LEVEL=info vs_run python3 "$tmp/server.py" "$IP" "$port" "$mode" \
    >"$tmp/server-$mode.log" 2>&1 &
  pids+=("$!")
  wait_port "$port"
  VSOCKET_UPGRADE_AFTER_US=0 vs_run python3 "$tmp/client.py" "$IP" "$port" $conns $greeting 60 8 \
    >"$tmp/client-$mode.log" 2>&1 &
  client=$!
  pids+=("$client")
}

# 1. close
run_mode close 7241
expect_rdma_rows $((2 * conns)) 400
wait "$client" || { cat "$tmp/client-close.log"; echo "FAIL: close: the client failed"; exit 1; }
cat "$tmp/client-close.log"
echo "close: ForkingTCPServer's children on rdma"

# 2. hold
run_mode hold 7242
wait_grep released "$tmp/server-hold.log" 60
on_rdma=0
for ((i = 0; i < 600; i++)); do
  on_rdma=$(rows 7242 | grep -c '"rdma"' || true)
  [ "$on_rdma" -ge $((2 * conns)) ] && break
  kill -0 "$client" 2>/dev/null || break
  sleep 0.2
done
[ "$on_rdma" -ge $((2 * conns)) ] || { rows 7242; echo "FAIL: hold: $on_rdma ends on rdma after the parent let go"; exit 1; }
wait "$client" || { cat "$tmp/client-hold.log"; echo "FAIL: hold: the client failed"; exit 1; }
rows 7242
waited=$(grep -c 'held with another process since a fork' "$tmp/server-hold.log" || true)
# A child that first calls after its parent let go has nothing to wait for.
[ "$waited" -ge 1 ] ||
  { echo "FAIL: hold: $waited of the children's upgrades said they waited for the parent"; exit 1; }
echo "hold: the upgrades waited while two processes held the connections, rdma once the children held them alone"

# expect_tainted MODE PORT: the connections stay on TCP, left-by-fork, bytes right.
expect_tainted() {
  local mode=$1 port=$2 i found
  # The rows while the client holds its connections (8 s after its last check).
  for ((i = 0; i < 1200; i++)); do
    [ "$(grep -c ' ok$' "$tmp/client-$mode.log" || true)" -ge $conns ] && break
    kill -0 "$client" 2>/dev/null || break
    sleep 0.1
  done
  found=$(rows "$port")
  echo "$found"
  wait "$client" || { cat "$tmp/client-$mode.log"; echo "FAIL: $mode: the client failed"; exit 1; }
  cat "$tmp/client-$mode.log"
  [ "$(grep -c '"rdma"' <<<"$found" || true)" = 0 ] ||
    { echo "FAIL: $mode: a connection whose bytes two processes moved reached rdma"; exit 1; }
  [ "$(grep -c left-by-fork <<<"$found" || true)" -ge $conns ] ||
    { echo "FAIL: $mode: the children's rows do not say left-by-fork"; exit 1; }
  echo "$mode: on TCP with left-by-fork, every byte right"
}

# 3. taint
run_mode taint 7243
expect_tainted taint 7243

# 4. late
run_mode late 7244
expect_tainted late 7244
echo "forking servers over rdma: OK"
