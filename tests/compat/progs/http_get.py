#!/usr/bin/env python3
"""Minimal HTTP/1.1 client (stdlib http.client): GETs each PATH --repeat
times over one keep-alive connection and prints, per response,
  PATH STATUS LENGTH SHA256
Exits 0 when all requests completed (whatever their status)."""
import argparse
import hashlib
import http.client
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    conn = http.client.HTTPConnection(args.host, args.port, timeout=30)
    for _ in range(args.repeat):
        for path in args.paths:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            print(f"{path} {resp.status} {len(body)} {hashlib.sha256(body).hexdigest()}", flush=True)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
