"""SO_BUSY_POLL on a connection upgraded to shm (issue 21): a program that asks
for busy-polling gets it, whatever vsocket's own budget (VSOCKET_POLL_US=0
here: vsocket alone would never spin), and one that does not ask gets none.

The verdict counts events, not time: each blocking receive that finds nothing
spins once when the socket asks for it (as the kernel's tcp_recvmsg does), and
the process's busy-poll counters (logged at exit, VSOCKET_LOG_LEVEL=info) must
show at least one spin per such receive, and none without the option. The
accepted socket inherits the listener's value, as the kernel copies it.

Raising SO_BUSY_POLL needs CAP_NET_ADMIN: without it the kernel refuses, and
the cases that raise it are skipped.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILD_DIR = Path(os.environ.get("VSOCKET_BUILD_DIR") or (REPO / "build")).resolve()
VSOCKET = BUILD_DIR / "bin" / "vsocket"
HANG = 60  # only a hang crosses it
RECEIVES = 3

# One end: A (the client) or B (the server). Both echo one exchange, report
# "ready" with their fd, make one more exchange for each "ping" (until the
# connection is on shm), wait for "go", then make RECEIVES blocking receives with a 0.2 s timeout that find
# nothing, and report how each ended.
END = r"""
import socket, struct, sys
role, port, busy_us, on_listener = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
SO_BUSY_POLL = getattr(socket, "SO_BUSY_POLL", 46)
if role == "b":
    ls = socket.socket()
    if busy_us and on_listener:
        ls.setsockopt(socket.SOL_SOCKET, SO_BUSY_POLL, busy_us)
    ls.bind(("127.0.0.1", 0)); ls.listen(1)
    print(ls.getsockname()[1], flush=True)
    s, _ = ls.accept()
    s.sendall(s.recv(1))
else:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"x"); assert s.recv(1) == b"x"
print("ready", s.fileno(), flush=True)
while True:  # one more exchange per "ping": the upgrade completes in calls
    cmd = sys.stdin.readline().strip()
    if cmd == "go":
        if busy_us and not on_listener:  # after the exchanges: only the receives below ask
            s.setsockopt(socket.SOL_SOCKET, SO_BUSY_POLL, busy_us)
        break
    assert cmd == "ping", cmd
    if role == "a":
        s.sendall(b"p"); assert s.recv(1) == b"p"
    else:
        s.sendall(s.recv(1))
    print("pong", flush=True)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 200000))
for i in range(%d):
    try:
        s.recv(10)
        print("data", flush=True)
    except (BlockingIOError, TimeoutError):
        print("timeout", flush=True)
sys.stdin.readline()
""" % RECEIVES


def may_raise_busy_poll() -> bool:
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_BUSY_POLL", 46), 100)
        return True
    except OSError:
        return False
    finally:
        s.close()


def start(role: str, port: int, busy_us: int, on_listener: bool) -> subprocess.Popen:
    env = dict(os.environ, VSOCKET_POLL_US="0", VSOCKET_LOG_LEVEL="info",
               VSOCKET_UPGRADE_AFTER_US="0", VSOCKET_TRANSPORTS="shm,kernel")
    return subprocess.Popen([str(VSOCKET), "run", "--", sys.executable, "-c", END, role,
                             str(port), str(busy_us), "1" if on_listener else "0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def transport_of(pid: int, fd: int) -> str:
    out = subprocess.run([str(VSOCKET), "stat", "--json", "--all", "--pid", str(pid)],
                         capture_output=True, text=True, timeout=HANG).stdout
    for p in json.loads(out or '{"processes": []}').get("processes", []):
        for s in p.get("sockets", []):
            if s.get("fd") == fd and s.get("state") != "listening" and not s.get("closed"):
                return f'{s.get("transport", "?")} {s.get("reason", "")}'.strip()
    return "none"


def spins(stderr: str) -> int:
    m = re.search(r"busy-poll: (\d+) spins", stderr)
    return int(m.group(1)) if m else 0


def tell(ends: dict, cmd: str, answer: str):
    for p in ends.values():
        p.stdin.write(cmd + "\n")
        p.stdin.flush()
    for name, p in ends.items():
        got = p.stdout.readline().strip()
        assert got == answer, f"{name}: {got!r} after {cmd}"


def run_pair(busy_us: int, on_listener: bool, who: str) -> tuple[int, int]:
    """Spins counted in the client and in the server; WHO ("a" or "b") is the
    end whose socket asks for BUSY_US."""
    b = start("b", 0, busy_us if who == "b" else 0, on_listener)
    a = None
    try:
        port = int(b.stdout.readline())
        a = start("a", port, busy_us if who == "a" else 0, False)
        ends = {"a": a, "b": b}
        fds = {}
        for name, p in ends.items():
            line = p.stdout.readline().split()
            assert line[:1] == ["ready"], f"{name}: {line}"
            fds[name] = int(line[1])
        for _ in range(50):
            on = {name: transport_of(p.pid, fds[name]) for name, p in ends.items()}
            if all(t.split()[0] == "shm" for t in on.values()):
                break
            tell(ends, "ping", "pong")
        assert all(t.split()[0] == "shm" for t in on.values()), f"not on shm: {on}"
        for p in ends.values():
            p.stdin.write("go\n")
            p.stdin.flush()
        for name, p in ends.items():
            got = [p.stdout.readline().strip() for _ in range(RECEIVES)]
            assert got == ["timeout"] * RECEIVES, f"{name}: {got}"
        errs = {}
        for name, p in ends.items():
            _, errs[name] = p.communicate("\n", timeout=HANG)
            assert p.returncode == 0, f"{name}: rc {p.returncode}: {errs[name]}"
        return spins(errs["a"]), spins(errs["b"])
    finally:
        for p in (a, b):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def kernel_busy_polls() -> bool:
    """net.core.busy_read or busy_poll set: every socket asks by default."""
    for name in ("busy_read", "busy_poll"):
        try:
            if int(Path(f"/proc/sys/net/core/{name}").read_text()) > 0:
                return True
        except (OSError, ValueError):
            pass
    return False


@pytest.mark.skipif(kernel_busy_polls(), reason="net.core.busy_read/busy_poll set on this host")
def test_no_spin_unless_asked():
    assert run_pair(0, False, "a") == (0, 0)


@pytest.mark.skipif(not may_raise_busy_poll() or kernel_busy_polls(),
                    reason="raising SO_BUSY_POLL needs CAP_NET_ADMIN; or busy_read set")
def test_so_busy_poll_spins_each_receive():
    # Exactly one spin per receive that waited (the kernel's rule), however
    # many times the receive slept in between.
    a, b = run_pair(50000, False, "a")
    assert a == RECEIVES, f"client asked for SO_BUSY_POLL: {a} spins for {RECEIVES} empty receives"
    assert b == 0, f"server did not ask: {b} spins"


@pytest.mark.skipif(not may_raise_busy_poll() or kernel_busy_polls(),
                    reason="raising SO_BUSY_POLL needs CAP_NET_ADMIN; or busy_read set")
def test_accepted_socket_inherits_listener_value():
    a, b = run_pair(50000, True, "b")
    assert b >= RECEIVES, f"listener asked for SO_BUSY_POLL: {b} spins for {RECEIVES} empty receives"
    assert a == 0, f"client did not ask: {a} spins"
