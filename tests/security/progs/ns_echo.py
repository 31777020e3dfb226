"""One end of an echo, for peers in pid namespaces of their own
(test_pid_namespace.py), run under `vsocket run`, possibly inside
`unshare --pid --fork --mount-proc` (a container).

  ns_echo.py server          listens on 127.0.0.1 (ephemeral port), prints
                             {"ev": "listening", "port": P}, echoes one
                             connection (an 8-byte length N, then N bytes)
  ns_echo.py client PORT N   connects, sends N random bytes, reads them back

Each end then prints {"ev": "done", "pid": its pid as it sees it, "fd": ...,
"ok": the echo was exact, "stat": its socket's record as `vsocket stat`
shows it from inside its own namespace}, and exits when stdin says "exit".
"""

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))
from streams import recv_exactly  # noqa: E402

VSOCKET = os.environ["VSOCKET"]


def emit(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def own_record(conn: socket.socket) -> dict:
    """Our socket's record once its set-up is over (bounded: a hang fails).
    A set-up moves on in the program's calls: one that cannot block each
    time."""
    fd = conn.fileno()
    rec: dict = {}
    for _ in range(300):
        try:
            conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
        r = subprocess.run([VSOCKET, "stat", "--json", "--pid", str(os.getpid())],
                           capture_output=True, text=True, timeout=30)
        procs = json.loads(r.stdout).get("processes", []) if r.returncode == 0 else []
        socks = [s for p in procs for s in p.get("sockets", []) if s.get("fd") == fd]
        rec = socks[0] if socks else {"missing": r.stderr.strip()}
        if rec.get("reason") != "upgrade-pending" and "missing" not in rec:
            break
        time.sleep(0.1)
    return rec


def finish(conn: socket.socket, ok: bool):
    emit(ev="done", pid=os.getpid(), fd=conn.fileno(), ok=ok, stat=own_record(conn))
    sys.stdin.readline()
    conn.close()


def server():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    emit(ev="listening", port=ls.getsockname()[1])
    conn, _ = ls.accept()
    (n,) = struct.unpack("<Q", recv_exactly(conn, 8))
    while n:
        data = conn.recv(min(n, 1 << 16))
        if not data:
            break
        conn.sendall(data)
        n -= len(data)
    finish(conn, n == 0)


def client(port: int, n: int):
    conn = socket.create_connection(("127.0.0.1", port))
    data = os.urandom(n)
    conn.sendall(struct.pack("<Q", n) + data)
    back = recv_exactly(conn, n)
    finish(conn, hashlib.sha256(back).digest() == hashlib.sha256(data).digest())


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server()
    else:
        client(int(sys.argv[2]), int(sys.argv[3]))
