#!/usr/bin/env python3
"""A unary gRPC echo service (grpcio, generic handlers: no generated code).

  grpc_echo.py serve --port P          serves /vsocket.Echo/Call until SIGTERM
  grpc_echo.py call --port P --calls N N calls of 1 B .. 200 KB, each reply
                                       checked byte for byte; every 50th call
                                       first runs a subprocess (`true`), as
                                       programs do, while gRPC's threads poll

The client prints one line: grpc_echo: calls=N bytes=B sha256=H result=PASS|FAIL.
The server prints grpc_echo: served=N bytes=B at SIGTERM."""

import argparse
import hashlib
import signal
import subprocess
import sys
import threading
from concurrent import futures

import grpc

METHOD = "/vsocket.Echo/Call"
MAX = 200_000
OPTIONS = [("grpc.max_receive_message_length", 1 << 24),
           ("grpc.max_send_message_length", 1 << 24)]


def payload(i: int) -> bytes:
    """Call i's request: 1 B first, then sizes spread over 1 B .. 200 KB."""
    size = 1 if i == 0 else MAX if i == 1 else 1 + (i * 7919) % MAX
    block = hashlib.sha256(i.to_bytes(4, "big")).digest()
    return (block * (size // len(block) + 1))[:size]


def serve(port: int) -> int:
    lock = threading.Lock()
    count = {"served": 0, "bytes": 0}

    def echo(request, context):
        with lock:
            count["served"] += 1
            count["bytes"] += len(request)
        return request

    handler = grpc.method_handlers_generic_handler(
        "vsocket.Echo", {"Call": grpc.unary_unary_rpc_method_handler(echo)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler],
                         options=OPTIONS)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop(grace=1).wait()
    print(f"grpc_echo: served={count['served']} bytes={count['bytes']}", flush=True)
    return 0


def call(port: int, calls: int) -> int:
    digest = hashlib.sha256()
    total = 0
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = channel.unary_unary(METHOD)
        for i in range(calls):
            if i % 50 == 25:
                subprocess.run(["true"], check=True, timeout=60)
            request = payload(i)
            reply = stub(request, timeout=60)
            if reply != request:
                print(f"grpc_echo: call {i} of {len(request)} B came back as {len(reply)} B "
                      f"differing", flush=True)
                print(f"grpc_echo: calls={i} bytes={total} result=FAIL", flush=True)
                return 1
            digest.update(reply)
            total += len(reply)
    print(f"grpc_echo: calls={calls} bytes={total} sha256={digest.hexdigest()} result=PASS",
          flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["serve", "call"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    return serve(a.port) if a.mode == "serve" else call(a.port, a.calls)


if __name__ == "__main__":
    sys.exit(main())
