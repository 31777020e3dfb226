#!/usr/bin/env bash
# rdma-case-timeout: 900
# A fork whose child does not use a connection changes nothing for the
# parent: its connections stay on rdma (registered memory is kept out of the
# child, src/transport/rdma/forked.c). Only a child that uses its copy makes
# the connection leave, through CUT, before its call goes on: byte-exact,
# both ends told. A Python selectors echo server and a Python client, both
# under vsocket, RDMA forced:
#  1. spawn: 100 connections set up and echo (sha256 per connection) while
#     the client runs, round after round, subprocess.run (its fork runs
#     vsocket's fork handlers: the first ones while every set-up is under
#     way), os.posix_spawn, os.system, and an os.fork whose child closes its
#     copies and exits; at the end all 100 connections are on rdma at both
#     ends (`vsocket stat`) and no row says left-by-fork;
#  2. turns: one connection on rdma; the client forks, and parent and child
#     take turns writing and reading it (a pipe passes the turn: the parent
#     waits in os.read while its child's first use, a select, makes it
#     leave); every
#     echo byte-exact; both ends end on TCP (left-by-fork, peer-left);
#  3. exit: one connection on rdma; the child only writes in an exit
#     handler; the parent reads that echo, then echoes on: byte-exact, TCP;
#  4. item5: the old behaviour of a fork (VSOCKET_RDMA_FORK_LEAVE=1: every
#     connection leaves first, as on kernels without copy-on-fork): 20
#     connections echo 256 KiB, a subprocess runs, they echo 64 KiB, twice:
#     it hung when a set-up had ended without a hold (no CUT said).
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
case_setup fork-carry
port=7311

cat >"$tmp/server.py" <<'PY'
import selectors, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
sel = selectors.DefaultSelector()
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(256)
ls.setblocking(False)
sel.register(ls, selectors.EVENT_READ)
out = {}
print("serving", flush=True)
while True:
    for key, ev in sel.select():
        s = key.fileobj
        if s is ls:
            c, _ = ls.accept()
            c.setblocking(False)
            out[c] = bytearray()
            sel.register(c, selectors.EVENT_READ)
            continue
        if ev & selectors.EVENT_READ:
            try:
                d = s.recv(262144)
            except BlockingIOError:
                d = None
            except ConnectionError:
                d = b""
            if d == b"":
                sel.unregister(s)
                s.close()
                del out[s]
                continue
            if d:
                out[s] += d
        if out[s]:
            try:
                del out[s][:s.send(out[s])]
            except BlockingIOError:
                pass
        sel.modify(s, selectors.EVENT_READ | (selectors.EVENT_WRITE if out[s] else 0))
PY

cat >"$tmp/client.py" <<'PY'
import atexit, hashlib, json, os, random, socket, subprocess, sys
from streams import recv_exactly
host, port, mode, tool = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def rows():
    """This process's connections to the server, as `vsocket stat` says."""
    r = subprocess.run([tool, "stat", "--all", "--json"], capture_output=True, check=True)
    out = []
    for p in json.loads(r.stdout)["processes"]:
        if p["pid"] == os.getpid():
            out += [(s["transport"], s["reason"]) for s in p["sockets"]
                    if s["proto"] == "tcp" and s["peer"] == f"{host}:{port}" and not s["closed"]]
    return out

class Conn:
    def __init__(self, i):
        self.s = socket.create_connection((host, port))
        self.rng = random.Random(i)
        self.sent, self.back = hashlib.sha256(), hashlib.sha256()
    def echo(self, most, exactly=False):
        msg = self.rng.randbytes(most if exactly else self.rng.randint(1, most))
        self.sent.update(msg)
        self.s.sendall(msg)
        recv_exactly(self.s, len(msg), self.back)
    def check(self, what):
        if self.sent.digest() != self.back.digest():
            raise SystemExit(f"FAIL {what}: echoed bytes differ")

def spawn(k):
    """One of the ways programs start others, in turn."""
    way = k % 4
    if way == 0:
        subprocess.run(["true"], check=True)
    elif way == 1:
        pid = os.posix_spawn("/bin/true", ["true"], os.environ)
        os.waitpid(pid, 0)
    elif way == 2:
        if os.system("true") != 0:
            raise SystemExit("FAIL system()")
    else:
        pid = os.fork()
        if pid == 0:  # a child that never uses them: closes its copies, exits
            for c in conns:
                c.s.close()
            os._exit(0)
        os.waitpid(pid, 0)

if mode == "spawn":
    n = int(sys.argv[5])
    conns = [Conn(i) for i in range(n)]
    k = 0
    spawn(k)  # every set-up under way (or not yet begun)
    for rnd in range(60):
        for c in conns:
            c.echo(4096)
            if rnd == 0 and c is conns[n // 2]:
                k += 1
                spawn(k)  # half of them mid-set-up
        for _ in range(4):
            k += 1
            spawn(k)
        r = rows()
        on = sum(1 for t, _ in r if t == "rdma")
        print(f"round {rnd}: {on} of {len(r)} on rdma, {k} spawns", flush=True)
        if on == n and rnd >= 4:
            break
    for rnd in range(2):  # and on, once all are there
        for c in conns:
            c.echo(16384)
        for _ in range(4):
            k += 1
            spawn(k)
    for c in conns:
        c.check("spawn")
    r = rows()
    print("rows:", sorted(set(r)), flush=True)
    bad = [x for x in r if x[0] != "rdma"]
    if len(r) != n or bad:
        raise SystemExit(f"FAIL spawn: {len(bad)} of {len(r)} connections not on rdma after {k} spawns")
    print(f"spawn: {n} connections on rdma after {k} spawns, every byte right", flush=True)
    sys.stdout.flush()
    sys.stdin.read()  # held open while the server's rows are looked at
    sys.exit(0)

if mode == "item5":
    # Issue 19's item 5, with the old behaviour of a fork (every connection
    # leaves first): it hung once a set-up had ended without a hold.
    n = int(sys.argv[5])
    conns = [Conn(i) for i in range(n)]
    for rnd in range(2):
        for c in conns:
            c.echo(262144, exactly=True)
        subprocess.run([tool, "stat", "--json"], capture_output=True, check=True)
        for c in conns:
            c.echo(65536, exactly=True)
    for c in conns:
        c.check("item5")
    r = rows()
    print("rows:", sorted(set(r)), flush=True)
    if not any(reason == "left-by-fork" for _, reason in r):
        raise SystemExit("FAIL item5: no connection left at a fork (nothing tested)")
    print(f"item5: {n} connections, every byte right", flush=True)
    sys.stdin.read()
    sys.exit(0)

c = Conn(0)
for rnd in range(100):
    c.echo(65536)
    if rows() == [("rdma", "rxe0")] and rnd >= 2:
        break
print("on rdma before the fork:", rows(), flush=True)
if mode == "turns":
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    pid = os.fork()
    me = "child" if pid == 0 else "parent"
    wait_fd, pass_fd = (to_child, from_child) if pid == 0 else (to_parent, from_parent)
    if pid != 0:
        c.echo(65536)  # the parent first, still on rdma
        os.write(pass_fd, b"t")
    for turn in range(6):
        if not os.read(wait_fd, 1):
            raise SystemExit(f"FAIL turns: {me}: the other side went")
        if pid == 0 and turn == 0:  # the child's first use: readiness
            import select
            if not select.select([], [c.s], [], 60)[1]:
                raise SystemExit("FAIL turns: child: not writable")
        c.echo(65536)
        if os.environ.get("FORK_CARRY_TRACE"):
            print(f"{me} {os.getpid()}: turn {turn} echoed", file=sys.stderr, flush=True)
        os.write(pass_fd, b"t")
    if pid == 0:
        c.check("turns (child)")
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    if st:
        raise SystemExit("FAIL turns: the child failed")
    c.echo(65536)
    c.check("turns (parent)")
elif mode == "exit":
    pid = os.fork()
    if pid == 0:
        def bye():  # a library's exit handler that says goodbye
            c.s.sendall(b"goodbye from the child")
        atexit.register(bye)
        sys.exit(0)
    _, st = os.waitpid(pid, 0)
    if st or recv_exactly(c.s, 22) != b"goodbye from the child":
        raise SystemExit("FAIL exit: the child's exit handler's bytes")
    for _ in range(3):
        c.echo(65536)
    c.check("exit")
after = rows()
print(f"{mode}: after the child's use: {after}", flush=True)
if after != [("kernel", "left-by-fork")]:
    raise SystemExit(f"FAIL {mode}: expected kernel left-by-fork")
print(f"{mode}: every byte right, on TCP", flush=True)
sys.stdin.read()
PY

VSOCKET_UPGRADE_AFTER_US=0 vs_run python3 "$tmp/server.py" "$IP" $port >"$tmp/server.log" 2>&1 &
pids+=("$!")
wait_port $port
srv=$(pgrep -f "$tmp/server.py" | head -n1)

# server_rows: the server's connections, "TRANSPORT REASON" per line.
server_rows() {
  "$TOOL" stat --all --json | jq -r --argjson p "$srv" \
    '.processes[] | select(.pid == $p) | .sockets[] | select(.proto == "tcp" and .state != "listening" and .closed == false) | "\(.transport) \(.reason)"'
}

run() {  # run MODE ARGS...: the client, held open until its rows are seen
  local mode=$1 start=$SECONDS; shift
  mkfifo "$tmp/hold-$mode"
  VSOCKET_UPGRADE_AFTER_US=0 VSOCKET_LOG_LEVEL=${CLIENT_LOG:-warn} vs_run python3 "$tmp/client.py" "$IP" $port "$mode" "$TOOL" "$@" \
    <"$tmp/hold-$mode" >"$tmp/client-$mode.log" 2>&1 &
  client=$!
  pids+=("$client")
  exec 7>"$tmp/hold-$mode"
  # Only a hang crosses this (a mode takes 0.5-2.5 min in the guest).
  local until=$((SECONDS + 420))
  while kill -0 "$client" 2>/dev/null && [ $SECONDS -lt $until ]; do
    grep -qE 'every byte right' "$tmp/client-$mode.log" && break
    sleep 0.5
  done
  cat "$tmp/client-$mode.log"
  if ! grep -qE 'every byte right' "$tmp/client-$mode.log"; then
    kill -0 "$client" 2>/dev/null && { echo "FAIL $mode: hung (420 s)"; "$TOOL" stat --all; }
    echo "FAIL $mode: the client failed"
    exit 1
  fi
  srows=$(server_rows)
  exec 7>&-
  wait "$client" || true
  echo "server: $(sort <<<"$srows" | uniq -c | tr '\n' ';')"
  echo "$mode: $((SECONDS - start)) s"
}

modes=${FORK_CARRY_MODES:-spawn turns exit item5}
if [[ " $modes " == *" spawn "* ]]; then
run spawn 100
[ "$(grep -c '^rdma ' <<<"$srows")" = 100 ] || { echo "FAIL spawn: the server's ends are not all on rdma"; exit 1; }
grep -q left-by-fork "$tmp/server.log" && { echo "FAIL spawn: the server saw a connection leave"; exit 1; }
fi

if [[ " $modes " == *" turns "* ]]; then
run turns
[ "$(grep -c '^kernel ' <<<"$srows")" = 1 ] || { echo "FAIL turns: the server's end is not on TCP"; exit 1; }
fi

if [[ " $modes " == *" exit "* ]]; then
run exit
[ "$(grep -c '^kernel ' <<<"$srows")" = 1 ] || { echo "FAIL exit: the server's end is not on TCP"; exit 1; }
fi
if [[ " $modes " == *" item5 "* ]]; then
VSOCKET_RDMA_FORK_LEAVE=1 run item5 20
fi
echo "fork with connections on rdma: OK"
