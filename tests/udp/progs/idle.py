"""A pair's rings give their memory back once quiet (docs/design/udp.md §7):
the receiver's ring grows under a burst it does not read at once, is read to
the end, then the receiver waits in a blocking receive that finds nothing
(longer than the 100 ms a ring must be quiet), or in poll or epoll_wait
(argument "poll", "epoll"). Prints, as JSON, how many
datagrams arrived on the rings and the receiver's resident ring memory
(smaps entries of vsocket's ring memfds) after the burst and after the wait.
Run under `vsocket run` with VSOCKET_UDP_SHM=1 and a debug log
(VSOCKET_LOG_FILE): the pair is up before the burst.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pairs import Burst  # noqa: E402

BURST, SIZE = 100, 1400
WAIT = sys.argv[1] if len(sys.argv) > 1 else "recv"  # how the receiver waits: recv, poll, epoll


def ring_rss_kib() -> int:
    """Resident KiB of this process's vsocket ring mappings."""
    total, ring = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if not line[:1].isupper():  # a mapping's first line: "addr-addr perms ..."
                ring = "vsocket-ring" in line
            elif ring and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def main() -> None:
    b = Burst(BURST, SIZE)
    r, got = b.r, b.drain()
    grown = ring_rss_kib()
    if WAIT == "recv":
        r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 1, 0))
        try:
            r.recv(10)
            raise SystemExit("a datagram came after the burst")
        except (BlockingIOError, TimeoutError):
            pass
    else:
        p = select.poll() if WAIT == "poll" else select.epoll()
        p.register(r.fileno(), select.POLLIN)
        if p.poll(1000 if WAIT == "poll" else 1.0):
            raise SystemExit("a datagram came after the burst")
    quiet = ring_rss_kib()
    print(json.dumps({"received": got, "grown_kib": grown, "quiet_kib": quiet, "sender": b.end()}))


if __name__ == "__main__":
    main()
