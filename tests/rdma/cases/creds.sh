#!/usr/bin/env bash
# A server that changes its credentials while a connection is on RDMA, as
# rsync's daemon does after accepting (setgid, setgroups, setuid, here to
# the same ids: the kernel makes new credentials all the same, and from
# then on refuses the process every command on an RDMA device file it
# opened before; Soft-RoCE rings its send doorbell through one). Found:
# rsync pushes reset, the daemon's CUT refused with EACCES.
# A Python echo server (root) and a client, both under vsocket on RDMA:
#  1. connection A reaches rdma at both ends (`vsocket stat`);
#  2. the server calls setgroups, setgid, setuid between two echoes: A
#     leaves for TCP first (reason credentials-changed), and the client's
#     round trips, before, across and after it, come back byte for byte;
#  3. a new connection B to the same server is served on TCP (its server
#     end: credentials-changed), every byte right.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7235
py=/usr/bin/python3
case_setup creds

cat >"$tmp/server.py" <<'PY'
import os, socket, sys
host, port, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((host, port))
ls.listen(4)
changed = False
for _ in range(2):
    c, _ = ls.accept()
    while True:
        data = c.recv(65536)
        if not data:
            break
        c.sendall(data)
        if not changed and os.path.exists(go):
            os.setgroups([0])
            os.setgid(0)
            os.setuid(0)
            changed = True
            print("credentials changed", flush=True)
    c.close()
PY
cat >"$tmp/client.py" <<'PY'
import hashlib, os, socket, sys
host, port, after, release = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def round_trip(s, size):
    chunk = os.urandom(size)
    s.sendall(chunk)
    back = b""
    while len(back) < size:
        data = s.recv(size - len(back))
        if not data:
            return False
        back += data
    return hashlib.sha256(back).digest() == hashlib.sha256(chunk).digest()

ok, trips = True, 0
a = socket.create_connection((host, port))
# Until the shell saw the change: small round trips, then larger ones
# (the ring's worth and more: some go back on TCP from the send copy).
while ok and not os.path.exists(after):
    ok = round_trip(a, 4096)
    trips += 1
for size in (1 << 16, 1 << 18, 1 << 20):
    ok = ok and round_trip(a, size)
a.close()
print(f"A: {trips} round trips and 3 large ones, {'same' if ok else 'DIFFERENT'}", flush=True)
b = socket.create_connection((host, port))
for size in (1, 4096, 1 << 18):
    ok = ok and round_trip(b, size)
print("PASS" if ok else "FAIL", flush=True)
while ok and not os.path.exists(release):
    ok = round_trip(b, 64)
b.close()
sys.exit(0 if ok else 1)
PY

vs_run VSOCKET_LOG_LEVEL="${CREDS_LOG_LEVEL:-info}" VSOCKET_LOG_FILE="$tmp/server-vs.log" \
  $py "$tmp/server.py" "$IP" $port "$tmp/go" >"$tmp/server.log" 2>&1 &
pids+=("$!")
wait_port $port
vs_run VSOCKET_LOG_LEVEL="${CREDS_LOG_LEVEL:-info}" VSOCKET_LOG_FILE="$tmp/client-vs.log" \
  $py "$tmp/client.py" "$IP" $port "$tmp/after" "$tmp/release" >"$tmp/client.log" 2>&1 &
cli=$!
pids+=("$cli")
expect_rdma_rows 2
touch "$tmp/go"
wait_grep "credentials changed" "$tmp/server.log"
touch "$tmp/after"
wait_grep '^(PASS|FAIL)$' "$tmp/client.log" 300
out=$("$TOOL" stat --all 2>/dev/null || true)
client_verdict "$cli" "$tmp/client.log" "$tmp/release" || exit 1
n=$(grep -c -- credentials-changed <<<"$out" || true)
[ "$n" -ge 2 ] || { echo "FAIL: $n server ends with reason credentials-changed, expected 2:"; echo "$out"; exit 1; }
echo "$out"
echo "PASS"
