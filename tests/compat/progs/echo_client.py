#!/usr/bin/env python3
"""Echo client: stdlib socket + selectors.

TCP: opens --conns connections at once and, multiplexed with selectors, sends
--messages messages of random size (1 B .. --max-size) on each, checking that
the echoed stream is byte-identical.  UDP: sends --messages datagrams of random
size (1 B .. 8 KB) one at a time and checks each reply (a lost datagram is
resent at most 3 times and counted).  Content and sizes come from --seed, so
two runs with the same arguments send exactly the same bytes.

With --hold (TCP) the connections stay open once everything was echoed
("echo_client: holding ..." is printed then) until stdin is closed, with a
1-byte echo on each every --ping-interval (counted in bytes and pings=, not
in sha256).

Prints one line and exits 0 only when every byte came back intact:
  echo_client: proto=tcp conns=4 messages=200 bytes_sent=N bytes_received=N
               mismatches=0 lost=0 pings=0 sha256=HEX result=PASS
"""
import argparse
import hashlib
import os
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
        st = {"sock": s, "out": bytearray(stream), "sent": 0, "expect": bytearray(stream),
              "got": 0, "shut": False, "eof": False}
        conns.append(st)
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, st)

    tot = {"sent": 0, "received": 0, "mismatches": 0, "pings": 0}
    deadline = time.monotonic() + args.timeout
    # without --hold a connection is shut down (SHUT_WR) as soon as all its
    # bytes are sent; with --hold only once the hold is over
    shut_when_sent = [not args.hold]

    def want(st):
        pending = st["sent"] < len(st["out"]) or (shut_when_sent[0] and not st["shut"])
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0)

    def pump(timeout):
        """One round of the event loop; True when stdin (the hold) hit EOF."""
        stdin_eof = False
        for key, events in sel.select(timeout=timeout):
            st = key.data
            if st is None:  # stdin, during the hold
                if not os.read(key.fd, 4096):
                    sel.unregister(key.fd)
                    stdin_eof = True
                continue
            s = st["sock"]
            if events & selectors.EVENT_WRITE and st["sent"] < len(st["out"]):
                try:
                    n = s.send(st["out"][st["sent"]:st["sent"] + 262144])
                    st["sent"] += n
                    tot["sent"] += n
                except BlockingIOError:
                    pass
            if shut_when_sent[0] and st["sent"] == len(st["out"]) and not st["shut"]:
                s.shutdown(socket.SHUT_WR)
                st["shut"] = True
            if events & selectors.EVENT_READ:
                try:
                    data = s.recv(131072)
                except BlockingIOError:
                    data = None
                if data == b"":
                    if st["got"] != len(st["expect"]):
                        print(f"echo_client: connection closed after {st['got']} of "
                              f"{len(st['expect'])} bytes", file=sys.stderr)
                        tot["mismatches"] += 1
                    sel.unregister(s)
                    s.close()
                    st["eof"] = True
                    continue
                if data:
                    exp = st["expect"][st["got"]:st["got"] + len(data)]
                    if data != exp:
                        tot["mismatches"] += 1
                        print(f"echo_client: data mismatch at offset {st['got']}", file=sys.stderr)
                    st["got"] += len(data)
                    tot["received"] += len(data)
            if sel.get_key(s).events != want(st):
                sel.modify(s, want(st), st)
        return stdin_eof

    def run_until(cond, what):
        while not cond():
            if time.monotonic() > deadline:
                print(f"echo_client: timeout ({what})", file=sys.stderr)
                return False
            if any(st["eof"] for st in conns) and not all(st["eof"] for st in conns) \
                    and not shut_when_sent[0]:
                print("echo_client: connection closed by the server during the transfer",
                      file=sys.stderr)
                return False
            pump(1.0)
        return True

    def echoed():
        return all(st["got"] == len(st["expect"]) for st in conns)

    ok = True
    if args.hold:
        # 1. the whole stream, echoed, connections kept open
        ok = run_until(echoed, "transfer")
        if ok:
            print(f"echo_client: holding conns={len(conns)} bytes_sent={tot['sent']}", flush=True)
            # 2. hold until stdin is closed, with a 1-byte echo on every connection
            #    every --ping-interval so both ends keep making socket calls
            sel.register(sys.stdin.fileno(), selectors.EVENT_READ, None)
            stdin_eof = False
            next_ping = time.monotonic()
            while not stdin_eof:
                if time.monotonic() > deadline:
                    print("echo_client: timeout (hold: stdin never closed)", file=sys.stderr)
                    ok = False
                    break
                if time.monotonic() >= next_ping and echoed():
                    for st in conns:
                        st["out"] += b"."
                        st["expect"] += b"."
                        sel.modify(st["sock"], want(st), st)
                    tot["pings"] += 1
                    next_ping = time.monotonic() + args.ping_interval
                stdin_eof = pump(max(0.0, min(0.05, next_ping - time.monotonic())))
            ok = ok and run_until(echoed, "last ping")
        # 3. shut down and read up to the server's EOF
        shut_when_sent[0] = True
        for st in conns:
            if not st["eof"]:
                sel.modify(st["sock"], want(st), st)
    if ok:
        ok = run_until(lambda: all(st["eof"] for st in conns), "end of stream")
    mismatches = tot["mismatches"] + (0 if ok else 1)
    return tot["sent"], tot["received"], mismatches, 0, tot["pings"]


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
    return sent, received, mismatches, lost, 0


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
    ap.add_argument("--hold", action="store_true",
                    help="TCP: once everything is echoed, print 'echo_client: holding ...' and "
                         "keep the connections open (1-byte echo every --ping-interval) until "
                         "stdin is closed; then shut down as usual")
    ap.add_argument("--ping-interval", type=float, default=0.1)
    args = ap.parse_args()

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    rnd = random.Random(args.seed)
    digest = hashlib.sha256()
    fn = run_tcp if args.proto == "tcp" else run_udp
    sent, received, mismatches, lost, pings = fn(args, family, rnd, digest)
    ok = mismatches == 0 and (sent == received or args.proto == "udp")
    print(f"echo_client: proto={args.proto} conns={args.conns if args.proto == 'tcp' else 1} "
          f"messages={args.messages} bytes_sent={sent} bytes_received={received} "
          f"mismatches={mismatches} lost={lost} pings={pings} sha256={digest.hexdigest()} "
          f"result={'PASS' if ok else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
