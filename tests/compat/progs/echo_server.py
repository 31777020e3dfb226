#!/usr/bin/env python3
"""Echo server: stdlib socket + selectors, non-blocking, TCP and/or UDP.

Runs until SIGTERM/SIGINT, then prints one summary line and exits 0:
  echo_server: tcp_conns=N tcp_bytes=N udp_datagrams=N udp_bytes=N errors=0
"""
import argparse
import selectors
import signal
import socket
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--proto", choices=["tcp", "udp", "both"], default="both")
    args = ap.parse_args()

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sel = selectors.DefaultSelector()
    stats = {"tcp_conns": 0, "tcp_bytes": 0, "udp_datagrams": 0, "udp_bytes": 0, "errors": 0}
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if args.proto in ("tcp", "both"):
        lsock = socket.socket(family, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((args.host, args.port))
        lsock.listen(64)
        lsock.setblocking(False)
        sel.register(lsock, selectors.EVENT_READ, ("listen", None))
    if args.proto in ("udp", "both"):
        usock = socket.socket(family, socket.SOCK_DGRAM)
        usock.bind((args.host, args.port))
        usock.setblocking(False)
        sel.register(usock, selectors.EVENT_READ, ("udp", None))

    conns = {}  # sock -> bytearray of pending output

    def close_conn(sock):
        sel.unregister(sock)
        conns.pop(sock, None)
        sock.close()

    while not stopping:
        for key, events in sel.select(timeout=0.5):
            kind, _ = key.data
            sock = key.fileobj
            if kind == "listen":
                while True:
                    try:
                        c, _addr = sock.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    conns[c] = bytearray()
                    stats["tcp_conns"] += 1
                    sel.register(c, selectors.EVENT_READ, ("conn", None))
            elif kind == "udp":
                while True:
                    try:
                        data, addr = sock.recvfrom(65536)
                    except BlockingIOError:
                        break
                    stats["udp_datagrams"] += 1
                    stats["udp_bytes"] += len(data)
                    sock.sendto(data, addr)
            else:
                pending = conns[sock]
                if events & selectors.EVENT_READ:
                    try:
                        data = sock.recv(65536)
                    except BlockingIOError:
                        data = None
                    except OSError:
                        stats["errors"] += 1
                        close_conn(sock)
                        continue
                    if data == b"":
                        # peer finished sending: flush what is left, then close
                        if pending:
                            sock.setblocking(True)
                            sock.sendall(pending)
                        close_conn(sock)
                        continue
                    if data:
                        stats["tcp_bytes"] += len(data)
                        pending += data
                if pending:
                    try:
                        n = sock.send(pending)
                        del pending[:n]
                    except BlockingIOError:
                        pass
                    except OSError:
                        stats["errors"] += 1
                        close_conn(sock)
                        continue
                want = selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0)
                # stop reading while a lot is pending (back-pressure)
                if len(pending) > 4 << 20:
                    want = selectors.EVENT_WRITE
                if sel.get_key(sock).events != want:
                    sel.modify(sock, want, key.data)

    print("echo_server: " + " ".join(f"{k}={v}" for k, v in stats.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
