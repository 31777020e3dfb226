#!/usr/bin/env python3
"""Memcached client speaking the raw text protocol over a plain socket.

Stores --keys values of random size (seeded), reads them back one by one and
with multi-get, increments a counter, deletes half the keys and checks they
are gone, then reads the server's stats.  Prints one line and exits 0 only if
every reply was the expected one:
  mc_client: keys=N bytes=N sha256=HEX get_hits=N incr=N deleted=N errors=0 result=PASS
"""
import argparse
import hashlib
import random
import socket
import sys


class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=30)
        self.buf = b""

    def send(self, data: bytes):
        self.s.sendall(data)

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.s.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def get_values(self) -> dict:
        out = {}
        while True:
            ln = self.line()
            if ln == b"END":
                return out
            parts = ln.split()
            if parts[0] != b"VALUE":
                raise ValueError(f"unexpected reply {ln!r}")
            data = self.exact(int(parts[3]) + 2)
            if data[-2:] != b"\r\n":
                raise ValueError("value not terminated by CRLF")
            out[parts[1].decode()] = data[:-2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys", type=int, default=500)
    ap.add_argument("--max-size", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    rnd = random.Random(args.seed)
    c = Conn(args.host, args.port)
    errors = 0

    def err(msg):
        nonlocal errors
        errors += 1
        if errors <= 10:
            print(f"mc_client: {msg}", file=sys.stderr)

    values = {}
    digest = hashlib.sha256()
    total = 0
    for i in range(args.keys):
        key = f"k{args.seed}:{i}"
        val = rnd.randbytes(rnd.randint(1, args.max_size))
        values[key] = val
        digest.update(val)
        total += len(val)
        c.send(b"set %s %d 0 %d\r\n%s\r\n" % (key.encode(), i, len(val), val))
        if (r := c.line()) != b"STORED":
            err(f"set {key}: {r!r}")

    hits = 0
    for key, val in values.items():
        c.send(b"get %s\r\n" % key.encode())
        got = c.get_values()
        if got.get(key) != val:
            err(f"get {key}: wrong value")
        else:
            hits += 1

    keys = list(values)
    for start in range(0, len(keys), 50):
        batch = keys[start:start + 50]
        c.send(b"get " + b" ".join(k.encode() for k in batch) + b"\r\n")
        got = c.get_values()
        for k in batch:
            if got.get(k) != values[k]:
                err(f"multi-get {k}: wrong value")
            else:
                hits += 1

    c.send(b"set counter 0 0 1\r\n0\r\n")
    c.line()
    for _ in range(100):
        c.send(b"incr counter 3\r\n")
        c.line()
    c.send(b"get counter\r\n")
    incr = int(c.get_values().get("counter", b"-1"))
    if incr != 300:
        err(f"counter is {incr}, expected 300")

    deleted = 0
    for k in keys[::2]:
        c.send(b"delete %s\r\n" % k.encode())
        if (r := c.line()) != b"DELETED":
            err(f"delete {k}: {r!r}")
        else:
            deleted += 1
    c.send(b"get " + b" ".join(k.encode() for k in keys[:100]) + b"\r\n")
    left = c.get_values()
    if set(left) != set(keys[1:100:2]):
        err("deleted keys still present / kept keys missing")

    c.send(b"stats\r\n")
    stats = {}
    while (ln := c.line()) != b"END":
        _, name, value = ln.decode().split(" ", 2)
        stats[name] = value
    if int(stats.get("curr_items", -1)) != len(keys) - deleted + 1:
        err(f"server has {stats.get('curr_items')} items, expected {len(keys) - deleted + 1}")
    c.send(b"quit\r\n")
    c.s.close()

    ok = errors == 0
    print(f"mc_client: keys={args.keys} bytes={total} sha256={digest.hexdigest()} get_hits={hits} "
          f"incr={incr} deleted={deleted} errors={errors} result={'PASS' if ok else 'FAIL'}",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
