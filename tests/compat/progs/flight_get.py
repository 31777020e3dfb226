#!/usr/bin/env python3
"""An Arrow Flight server and a client fetching a 64 MiB table with do_get
(pyarrow; gRPC's C++ core inside).

  flight_get.py serve --port P     serves the table until SIGTERM
  flight_get.py get --port P       fetches it and compares it with its own copy

The client prints: flight_get: rows=R bytes=B result=PASS|FAIL."""

import argparse
import signal
import sys
import threading

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

ROWS = (64 << 20) // 16  # two int64 columns: 64 MiB


def table() -> pa.Table:
    a = pa.array(range(ROWS), type=pa.int64())
    b = pc.bit_wise_xor(pc.multiply(a, 2654435761), 0x5BD1E995)
    return pa.table({"a": a, "b": b})


class Server(flight.FlightServerBase):
    def __init__(self, location):
        self.table = table()  # before listening: the client may call at once
        super().__init__(location)

    def do_get(self, context, ticket):
        return flight.RecordBatchStream(self.table)


def serve(port: int) -> int:
    server = Server(f"grpc://127.0.0.1:{port}")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve()
    print("flight_get: server stopped", flush=True)
    return 0


def get(port: int) -> int:
    client = flight.connect(f"grpc://127.0.0.1:{port}")
    got = client.do_get(flight.Ticket(b"table")).read_all()
    ok = got.equals(table())
    print(f"flight_get: rows={got.num_rows} bytes={got.nbytes} result={'PASS' if ok else 'FAIL'}",
          flush=True)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["serve", "get"])
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    return serve(a.port) if a.mode == "serve" else get(a.port)


if __name__ == "__main__":
    sys.exit(main())
