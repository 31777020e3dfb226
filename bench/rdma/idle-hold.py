#!/usr/bin/env python3
"""bench/rdma/idle-hold.py HOST PORT N READY STOP

Opens N connections to a redis server, sends PING on each three times (so
that each connection calls into vsocket and its upgrade ends), creates the
file READY, then holds them idle until the file STOP exists."""
import os
import socket
import sys
import time


def main():
    host, port, n, ready, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]
    conns = [socket.create_connection((host, port)) for _ in range(n)]
    for _ in range(3):
        for s in conns:
            s.sendall(b"PING\r\n")
        for s in conns:
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(64)
                if not chunk:
                    sys.exit("idle-hold: the server closed a connection")
                reply += chunk
            if reply != b"+PONG\r\n":
                sys.exit(f"idle-hold: unexpected reply {reply!r}")
        time.sleep(0.5)
    open(ready, "w").close()
    while not os.path.exists(stop):
        time.sleep(0.2)


if __name__ == "__main__":
    main()
