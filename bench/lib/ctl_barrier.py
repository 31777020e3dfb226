#!/usr/bin/env python3
"""bench/lib/ctl_barrier.py - a two-party barrier over one TCP connection,
for bench/rdma/pair-demo between two real hosts (no shared folder there).

  ctl_barrier.py serve PORT NAME TIMEOUT_S [BIND] [MESSAGE]
      listens on BIND:PORT (default all addresses) until the other host calls
      with NAME; answers MESSAGE (one line, may be empty)
  ctl_barrier.py call HOST PORT NAME TIMEOUT_S
      connects to HOST:PORT (again and again until the other side listens),
      says NAME, prints the answer's MESSAGE on stdout

Both sides call their barriers in the same order, each NAME once. Exit 0 when
both reached NAME, 1 on timeout or a NAME the other side did not expect, 2
on bad usage. A call with another NAME is refused (the server keeps
listening), so a stray connection cannot pass a barrier.
"""

import socket
import sys
import time


def serve(port: int, name: str, limit: float, bind: str, message: str) -> int:
    end = time.monotonic() + limit
    ls = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((bind, port))
    ls.listen(4)
    while True:
        left = end - time.monotonic()
        if left <= 0:
            print(f"ctl_barrier: waited {limit:g} s at '{name}': the other host never came",
                  file=sys.stderr)
            return 1
        ls.settimeout(left)
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        with c:
            c.settimeout(10)
            try:
                said = c.makefile("r").readline().strip()
            except OSError:
                continue
            if said != name:
                print(f"ctl_barrier: at '{name}' the other host said '{said[:80]}'",
                      file=sys.stderr)
                continue
            c.sendall(f"ok {message}\n".encode())
            return 0


def call(host: str, port: int, name: str, limit: float) -> int:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with socket.create_connection((host, port), timeout=5) as c:
                c.sendall(f"{name}\n".encode())
                reply = c.makefile("r").readline()
            if reply.startswith("ok"):
                msg = reply[3:].rstrip("\n")
                if msg:
                    print(msg)
                return 0
        except OSError:
            pass
        time.sleep(0.2)
    print(f"ctl_barrier: waited {limit:g} s at '{name}': {host}:{port} never answered",
          file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 4 and argv[0] == "serve":
            return serve(int(argv[1]), argv[2], float(argv[3]),
                         argv[4] if len(argv) > 4 else "0.0.0.0", argv[5] if len(argv) > 5 else "")
        if len(argv) == 5 and argv[0] == "call":
            return call(argv[1], int(argv[2]), argv[3], float(argv[4]))
    except ValueError:
        pass
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
