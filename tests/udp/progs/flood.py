"""A sender floods a receiver that does not read (docs/design/udp.md §7,
§9): with the pair up on shared memory, BURST datagrams go into a ring the
receiver's SO_RCVBUF caps; what does not fit is dropped and counted. Prints
the two pids (JSON) and waits for a line on stdin (the test reads `vsocket
stat` meanwhile), then reads what arrived and prints how many (JSON).
Run under `vsocket run` with VSOCKET_UDP_SHM=1 and a debug log.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pairs import Burst  # noqa: E402

BURST, SIZE = 400, 1400


def main() -> None:
    # 64 KiB (the kernel doubles it): drops whatever the host's default.
    b = Burst(BURST, SIZE, rcvbuf=65536)
    print(json.dumps({"receiver": os.getpid(), "sender": b.pid}), flush=True)
    sys.stdin.readline()
    got = b.drain()
    print(json.dumps({"received": got, "sender": b.end()}), flush=True)


if __name__ == "__main__":
    main()
