"""Not a security test: a hang this suite once ran into.

One connection on shm, the client sending from one thread while another
receives (progs/client.py MODE "duplex"), the server echoing from one thread.
It used to end, about one run in three, with both ends asleep for good (the
client's receive ring full, its receiving thread in ppoll() without a
timeout, the server asleep in send()). Fixed: a hang now fails the test.
"""

from __future__ import annotations

import os
import time

from harness import Pair, known_bug, stat_socket

RUNS = 6
HANG_AFTER = 60.0  # seconds; a run takes about 0.2 s: only a hang takes this long


def _threads(pid: int) -> list[str]:
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                sc = f.read().split()
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                wchan = f.read()
        except OSError:
            continue
        # x86-64: 271 is ppoll; its 3rd argument is the timeout (0: none).
        out.append(f"tid {tid}: syscall {sc[:4]} wchan {wchan}")
    return out


def test_full_duplex_two_threads():
    for i in range(RUNS):
        p = Pair(mode="duplex", timeout=2 * HANG_AFTER)
        try:
            p.connect()
            p.accept()
            ev = None
            end = time.monotonic() + HANG_AFTER
            while time.monotonic() < end and ev is None:
                try:
                    ev = p.client.q.get(timeout=0.2)
                except Exception:
                    continue
                if ev.get("ev") == "greeted":
                    ev = None
            if ev is None:
                c = stat_socket(p.client_pid, p.client_fd)
                s = stat_socket(p.server_pid, p.accepted["fd"])
                known_bug(
                    f"run {i + 1}: a 4 MiB full-duplex echo (client: one thread sends, one "
                    f"receives) hung for {HANG_AFTER:.0f} s on shm. client "
                    f"{c and (c['transport'], c['tx_bytes'], c['rx_bytes'])} threads "
                    f"{_threads(p.client_pid)}; server "
                    f"{s and (s['transport'], s['tx_bytes'], s['rx_bytes'])} threads "
                    f"{_threads(p.server_pid)}")
            if ev.get("ev") != "echo" or not ev.get("ok"):
                p.fail(f"run {i + 1}: {ev}")
            p.expect("server", "echoed")
            p.close()
        finally:
            p.cleanup()
