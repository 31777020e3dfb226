#!/usr/bin/env python3
"""Echo client: stdlib socket + selectors.

TCP: opens --conns connections at once and, multiplexed with selectors, sends
--messages messages of random size (1 B .. --max-size) on each, checking that
the echoed stream is byte-identical.  UDP: sends --messages datagrams of random
size (1 B .. 8 KB) one at a time and checks each reply (a lost datagram is
resent at most 3 times and counted).  Content and sizes come from --seed, so
two runs with the same arguments send exactly the same bytes.

Prints one line and exits 0 only when every byte came back intact:
  echo_client: proto=tcp conns=4 messages=200 bytes_sent=N bytes_received=N
               mismatches=0 lost=0 sha256=HEX result=PASS
"""
import argparse
import hashlib
import random
import selectors
import socket
import sys
import time


def run_tcp(args, family, rnd, digest):
    sel = selectors.DefaultSelector()
    conns = []
    for i in range(args.conns):
        s = socket.create_connection((args.host, args.port), timeout=10)
        s.setblocking(False)
        # each connection's whole byte stream, generated up front
        stream = bytearray()
        for _ in range(args.messages):
            n = rnd.randint(1, args.max_size)
            stream += rnd.randbytes(n)
        digest.update(stream)
        st = {"sock": s, "out": bytes(stream), "sent": 0, "expect": bytes(stream), "got": 0,
              "mismatch": 0, "done": False, "shut": False}
        conns.append(st)
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, st)

    sent = received = mismatches = 0
    deadline = time.monotonic() + args.timeout
    open_conns = len(conns)
    while open_conns:
        if time.monotonic() > deadline:
            print("echo_client: timeout", file=sys.stderr)
            return sent, received, mismatches + 1, 0
        for key, events in sel.select(timeout=1.0):
            st = key.data
            s = st["sock"]
            if events & selectors.EVENT_WRITE and st["sent"] < len(st["out"]):
                try:
                    n = s.send(st["out"][st["sent"]:st["sent"] + 262144])
                    st["sent"] += n
                    sent += n
                except BlockingIOError:
                    pass
                if st["sent"] == len(st["out"]) and not st["shut"]:
                    s.shutdown(socket.SHUT_WR)
                    st["shut"] = True
                    sel.modify(s, selectors.EVENT_READ, st)
            if events & selectors.EVENT_READ:
                try:
                    data = s.recv(131072)
                except BlockingIOError:
                    continue
                if not data:
                    if st["got"] != len(st["expect"]):
                        print(f"echo_client: connection closed after {st['got']} of "
                              f"{len(st['expect'])} bytes", file=sys.stderr)
                        mismatches += 1
                    sel.unregister(s)
                    s.close()
                    open_conns -= 1
                    continue
                exp = st["expect"][st["got"]:st["got"] + len(data)]
                if data != exp:
                    mismatches += 1
                    print(f"echo_client: data mismatch at offset {st['got']}", file=sys.stderr)
                st["got"] += len(data)
                received += len(data)
    return sent, received, mismatches, 0


def run_udp(args, family, rnd, digest):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.connect((args.host, args.port))
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    sent = received = mismatches = lost = 0
    for _ in range(args.messages):
        n = rnd.randint(1, min(args.max_size, 8192))
        msg = rnd.randbytes(n)
        digest.update(msg)
        for _attempt in range(4):
            s.send(msg)
            sent += n
            if not sel.select(timeout=2.0):
                lost += 1
                continue
            data = s.recv(65536)
            received += len(data)
            if data != msg:
                mismatches += 1
                print("echo_client: udp reply differs", file=sys.stderr)
            break
        else:
            mismatches += 1
    s.close()
    return sent, received, mismatches, lost


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--proto", choices=["tcp", "udp"], default="tcp")
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--messages", type=int, default=100)
    ap.add_argument("--max-size", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    rnd = random.Random(args.seed)
    digest = hashlib.sha256()
    fn = run_tcp if args.proto == "tcp" else run_udp
    sent, received, mismatches, lost = fn(args, family, rnd, digest)
    ok = mismatches == 0 and (sent == received or args.proto == "udp")
    print(f"echo_client: proto={args.proto} conns={args.conns if args.proto == 'tcp' else 1} "
          f"messages={args.messages} bytes_sent={sent} bytes_received={received} "
          f"mismatches={mismatches} lost={lost} sha256={digest.hexdigest()} "
          f"result={'PASS' if ok else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
