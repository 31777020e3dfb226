"""The accepting end, run under `vsocket run`.

Listens on 127.0.0.1 (ephemeral port), prints {"ev": "listening"}, and accepts
only when its stdin says "accept" (the test first attacks the client's
rendezvous while the server has not accepted yet), and greets only when it
says "greet" (meanwhile the client sits in recv()). Then: sends b"G", reads an
8-byte little-endian length N and echoes N bytes back, prints
{"ev": "echoed"}, and waits for "exit" on stdin before it closes ("poke"
meanwhile: one non-blocking recv, as client.py's).
Every event is one JSON line on stdout.
"""

import json
import os
import socket
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))
from streams import recv_exactly  # noqa: E402


def emit(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def wait_for(word):
    for line in sys.stdin:
        if line.strip() == word:
            return
    raise SystemExit(f"stdin closed while waiting for {word!r}")


def main():
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    emit(ev="listening", port=ls.getsockname()[1], pid=os.getpid())
    wait_for("accept")
    c, addr = ls.accept()
    emit(ev="accepted", fd=c.fileno(), peer=list(addr), local=list(c.getsockname()))
    wait_for("greet")
    c.sendall(b"G")
    (n,) = struct.unpack("<Q", recv_exactly(c, 8))
    left = n
    while left:
        b = c.recv(min(left, 1 << 16))
        if not b:
            raise EOFError(f"end of stream with {left} of {n} bytes to echo")
        c.sendall(b)
        left -= len(b)
    emit(ev="echoed", n=n)
    for line in sys.stdin:
        if line.strip() == "exit":
            break
        if line.strip() == "poke":  # answers client.py's poke(): "q" per "p"
            try:
                got = len(c.recv(64, socket.MSG_DONTWAIT))
            except BlockingIOError:
                got = 0
            if got:
                c.sendall(b"q" * got)
            emit(ev="poked", got=got)
    c.close()
    ls.close()
    emit(ev="bye")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # reported to the test, which fails with it
        emit(ev="error", error=f"{type(e).__name__}: {e}")
        sys.exit(1)
