#!/usr/bin/env bash
# Deployed between two hosts: a server that binds as root and serves as
# nobody (nginx workers as www-data) in A, a client run by another user
# (daemon) in B, both under vsocket (issue 21: such servers were
# `peer-proof-failed`). Two connections, each echoes 256 KiB of random bytes
# (checked by digest) and then makes small checked round trips for a while.
# Verdict from each end's log: every connection upgraded to rdma, none stayed
# on the kernel or left rdma.
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
# shellcheck source=/dev/null
. tests/rdma/lib.sh
port=7760 conns=2 size=$((256 << 10))
dir=/tmp/pd-$VSG_ROLE
rm -rf "$dir"
mkdir -p "$dir"
chmod 1777 "$dir"
# The log file is named by pid, and an exec keeps the pid: set it only in
# the image that runs as the user (root's file would be closed to it).
log_env=(env VSOCKET_LOG_LEVEL=info VSOCKET_LOG_FILE="$dir/%p.log")
# Not a PATH lookup: root's python3 may be a shim in its home.
py=/usr/bin/python3

if [ "$VSG_ROLE" = A ]; then
  cat >"$dir/server.py" <<'PY'
import os, socket, sys, threading
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen(16)
os.setgroups([]); os.setgid(65534); os.setuid(65534)
print("serving as uid", os.getuid(), flush=True)
def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = ls.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
PY
  vs_run "${log_env[@]}" $py "$dir/server.py" "$A_IP" $port >"$dir/server.out" 2>&1 &
  srv=$!
  trap 'kill $srv 2>/dev/null || true' EXIT
  wait_port $port
  barrier up 240
  barrier done 300
  grep -q "serving as uid 65534" "$dir/server.out" || { echo "A: the server did not drop to nobody"; exit 1; }
  logs_on_rdma A $conns "$dir"/*.log
  exit $?
fi

cat >"$dir/client.py" <<'PY'
import hashlib, os, socket, sys, threading, time
host, port, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
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
        for r in range(100):
            msg = os.urandom(100)
            s.sendall(msg)
            if recv_exactly(s, 100) != msg:
                raise ValueError(f"round trip {r} came back different")
            time.sleep(0.05)
        s.close()
        done.append(i)
    except Exception as e:
        errors.append(f"connection {i}: {e!r}")
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(f"uid {os.getuid()}: {len(done)} of {n} connections right")
for e in errors: print("error", e)
print("PASS" if len(done) == n and not errors else "FAIL")
PY
cp tests/lib/streams.py "$dir/"
chmod 644 "$dir/client.py" "$dir/streams.py"
barrier up 240
rc=0
vs_run setpriv --reuid=daemon --regid=daemon --clear-groups \
  "${log_env[@]}" $py "$dir/client.py" "$A_IP" $port $conns $size >"$dir/client.out" 2>&1 || rc=$?
barrier done 300
cat "$dir/client.out"
{ [ "$rc" = 0 ] && grep -qx PASS "$dir/client.out"; } || { echo "B: the client failed (exit $rc)"; exit 1; }
logs_on_rdma B $conns "$dir"/*.log
