"""The connecting end, run under `vsocket run`.

Usage: client.py SERVER_PORT [SOURCE_PORT] [SIZE] [MODE]

Connects to 127.0.0.1:SERVER_PORT (from 127.0.0.1:SOURCE_PORT when given and
not 0, so that a squatter can predict its rendezvous name), prints
{"ev": "connected"}, then blocks in recv() until the server's b"G": that
blocking call is what serves the rendezvous while the test attacks it. Then it
sends an 8-byte length and SIZE random bytes and reads them back: MODE
"pingpong" (default) one thread, 64 KiB out then its echo back; MODE "duplex"
a sender thread while the main thread reads the echo (test_bugs.py). Prints
{"ev": "echo", "ok": ...} with both sha256s and waits for "exit" on stdin
before it closes ("poke" on stdin meanwhile: poke()).
"""

import hashlib
import json
import os
import socket
import struct
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))
from streams import recv_exactly  # noqa: E402

CHUNK = 1 << 16


def emit(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def poke(s, send=True):
    """Takes the server's answers to earlier pokes ("q"), then (SEND) says
    "p": calls and bytes, which a set-up past its due time needs to settle
    (vsocket moves only when the program calls, and gives up on a peer only
    once it has seen that peer call)."""
    got = 0
    try:
        got = len(s.recv(64, socket.MSG_DONTWAIT))
    except BlockingIOError:
        pass
    if send:
        s.sendall(b"p")
    emit(ev="poked", got=got)


def main():
    port = int(sys.argv[1])
    src = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 4 << 20
    mode = sys.argv[4] if len(sys.argv) > 4 else "pingpong"
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if src:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", src))
    s.connect(("127.0.0.1", port))
    emit(ev="connected", fd=s.fileno(), pid=os.getpid(), local=list(s.getsockname()),
         peer=list(s.getpeername()))
    g = recv_exactly(s, 1)
    if g != b"G":
        raise ValueError(f"greeting {g!r} instead of b'G'")
    emit(ev="greeted")
    data = os.urandom(size)
    sent_sha = hashlib.sha256(data).hexdigest()
    h = hashlib.sha256()
    if mode == "pingpong":
        s.sendall(struct.pack("<Q", size))
        view = memoryview(data)
        for off in range(0, size, CHUNK):
            piece = view[off:off + CHUNK]
            s.sendall(piece)
            recv_exactly(s, len(piece), h)
    else:
        errors = []

        def sender():
            try:
                s.sendall(struct.pack("<Q", size))
                view = memoryview(data)
                for off in range(0, size, 1 << 18):
                    s.sendall(view[off:off + (1 << 18)])
            except Exception as e:
                errors.append(f"send: {type(e).__name__}: {e}")

        t = threading.Thread(target=sender)
        t.start()
        try:
            recv_exactly(s, size, h)
        finally:
            t.join()
        if errors:
            raise RuntimeError("; ".join(errors))
    got_sha = h.hexdigest()
    emit(ev="echo", ok=got_sha == sent_sha, n=size, sent_sha256=sent_sha, got_sha256=got_sha)
    for line in sys.stdin:
        if line.strip() == "exit":
            break
        if line.strip() in ("poke", "drain"):
            poke(s, send=line.strip() == "poke")
    s.close()
    emit(ev="bye")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        emit(ev="error", error=f"{type(e).__name__}: {e}")
        sys.exit(1)
