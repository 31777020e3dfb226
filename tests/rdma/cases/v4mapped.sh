#!/usr/bin/env bash
# IPv6 sockets talking to IPv4 peers through v4-mapped addresses
# (::ffff:a.b.c.d), as every JVM program does (issue 21: both ends stayed on
# kernel TCP, "no-rdma-device"). Under vsocket on RDMA
# (VSOCKET_TRANSPORTS=rdma), one Python client process with two AF_INET6
# connections to ::ffff:$IP: one to a dual-stack AF_INET6 server (both ends
# mapped), one to an AF_INET server (one end mapped, the other native, whose
# proofs must agree). Each echoes 256 KiB; what came back must be what was
# sent, and `vsocket stat` must show the four ends on rdma while the
# connections are open (the client keeps them busy until the shell has
# looked).
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port6=7210
port4=7211
total=$((256 << 10))
py=/usr/bin/python3
case_setup v4mapped

cat >"$tmp/server.py" <<'PY'
import socket, sys, threading
family, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET6 if family == "6" else socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if family == "6":
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind((host, port))
s.listen(8)
def echo(c):
    while True:
        data = c.recv(65536)
        if not data:
            break
        c.sendall(data)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
PY
cat >"$tmp/client.py" <<'PY'
import hashlib, os, socket, sys, time
host, total, release = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ports = [int(p) for p in sys.argv[4:]]
ok, conns = True, []
for port in ports:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.connect(("::ffff:" + host, port))
    conns.append(s)
    print(f"port {port}: connected from {s.getsockname()[0]} to {s.getpeername()[0]}", flush=True)
# Round trips of 4 KiB, so that each connection lives past the upgrade.
for s, port in zip(conns, ports):
    sent, got, n = hashlib.sha256(), hashlib.sha256(), 0
    while n < total:
        chunk = os.urandom(4096)
        sent.update(chunk)
        s.sendall(chunk)
        back = b""
        while len(back) < len(chunk):
            data = s.recv(len(chunk) - len(back))
            if not data:
                break
            back += data
        got.update(back)
        n += len(chunk)
        if len(back) < len(chunk):
            break
    same = sent.digest() == got.digest()
    print(f"port {port}: echoed {n} bytes, {'same' if same else 'DIFFERENT'}", flush=True)
    ok = ok and same and n == total
print("PASS" if ok else "FAIL", flush=True)
# Open, and used (a set-up moves on when the program calls in), until the
# shell has looked at `vsocket stat`.
while not os.path.exists(release):
    for s in conns:
        s.sendall(b"x")
        if s.recv(1) != b"x":
            ok = False
    time.sleep(0.05)
for s in conns:
    s.close()
sys.exit(0 if ok else 1)
PY

vs_run $py "$tmp/server.py" 6 :: $port6 >"$tmp/server6.log" 2>&1 &
pids+=("$!")
vs_run $py "$tmp/server.py" 4 "$IP" $port4 >"$tmp/server4.log" 2>&1 &
pids+=("$!")
wait_port $port6
wait_port $port4
vs_run $py "$tmp/client.py" "$IP" $total "$tmp/release" $port6 $port4 >"$tmp/client.log" 2>&1 &
cli=$!
pids+=("$cli")
for _ in $(seq 400); do
  grep -qE '^(PASS|FAIL)$' "$tmp/client.log" && break
  kill -0 "$cli" 2>/dev/null || break
  sleep 0.5
done
rows=0
expect_rdma_rows 4 || rows=1
client_verdict "$cli" "$tmp/client.log" "$tmp/release" || exit 1
[ "$rows" = 0 ] || { "$TOOL" stat --all; exit 1; }
echo "v4-mapped connections on rdma"
