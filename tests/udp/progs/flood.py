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
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pairs import run_child, udp, wait_child, warm_up  # noqa: E402

BURST, SIZE = 400, 1400


def main() -> None:
    r = udp(socket.AF_INET, ("127.0.0.1", 0))
    # 64 KiB (the kernel doubles it): drops whatever the host's default.
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    dest = r.getsockname()
    sent_r, sent_w = os.pipe()
    done_r, done_w = os.pipe()

    def sender():
        s = udp(socket.AF_INET, ("127.0.0.1", 0))
        warm_up(s, dest, 20, True)
        for i in range(BURST):
            s.sendto(bytes([i % 256]) * SIZE, dest)
        os.write(sent_w, b"x")
        os.read(done_r, 1)
        return 0

    pid = run_child(sender)
    warm_up(r, None, 20, False)
    assert os.read(sent_r, 1) == b"x"
    print(json.dumps({"receiver": os.getpid(), "sender": pid}), flush=True)
    sys.stdin.readline()
    got = 0
    while True:
        try:
            data = r.recv(SIZE + 1, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
        assert len(data) == SIZE and data == bytes([data[0]]) * SIZE, "a corrupt datagram"
        got += 1
    os.write(done_w, b"x")
    print(json.dumps({"received": got, "sender": wait_child(pid)}), flush=True)


if __name__ == "__main__":
    main()
