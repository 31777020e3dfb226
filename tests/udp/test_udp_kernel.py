"""UDP under vsocket on the kernel path (issue 23, docs/design/udp.md §13
step 1): every scenario of progs/scenarios.py gives the same observations
with vsocket as without, and `vsocket stat` shows UDP sockets as they are.

Each scenario runs twice: plain, and under `vsocket run` with the datagram
layer holding its UDP sockets (its debug log says so: checked, so that a
run where the layer took nothing cannot pass for one where it passed
everything through). The plain run's key observations are checked too:
they say the scenario exercised what it claims (a drop, an error, a
truncation), so that two runs agreeing on nothing cannot pass.

Environment: VSOCKET_BUILD_DIR (default <repo>/build) holds bin/vsocket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROG = HERE / "progs" / "scenarios.py"
BUILD_DIR = Path(os.environ.get("VSOCKET_BUILD_DIR") or (REPO / "build")).resolve()
VSOCKET = BUILD_DIR / "bin" / "vsocket"
PYTHON = sys.executable
# Bounds only a hang crosses (an ASan build under load is slow).
HANG = 300

SCENARIOS = subprocess.run([PYTHON, str(PROG), "--list"], capture_output=True, text=True,
                           check=True).stdout.split()

# What the plain run must show for the scenario to mean anything.
EXPECT = {
    "ipv4": {"source is the sender": True, "recvfrom short name": [5, 16]},
    "ipv6": {"source is the sender": True, "source": ["::1", 4], "recvfrom short name": [5, 28]},
    "v4_mapped": {"mapped source": ["v4", "::ffff:127.0.0.1", True]},
    "connect": {"connected hears": "r1 heard", "send after": "error EDESTADDRREQ",
                "peer after": "error ENOTCONN", "hears anyone": "r2 heard",
                "read of nothing": 0, "still there": "stays", "port gone with it": 0},
    "mmsg": {"with a timeout": [1, ["first"]], "no destination": "error EDESTADDRREQ",
             "truncated entries": [["aaaa", True], ["bbb", False]]},
    "peek_trunc": {"peek|trunc: full length": 100, "recvmsg cut": [10, True],
                   "zero-length": ["", True], "receive timeout": "error EAGAIN"},
    "capacity": {"sends that returned": 2000, "kept + dropped = sent": True},
    "errors": {"then": "error ECONNREFUSED", "65508 bytes": "error EMSGSIZE",
               "v6 65528 bytes": "error EMSGSIZE", "recvfrom name without length": "error EFAULT",
               "which took the datagram": "error EAGAIN", "sendto address too long": "error EINVAL"},
    "readiness": {"epoll edge once": [], "poll, one queued": [5]},
    "inherited": {"from the child": ["child send", True], "parent still has it": "to the parent"},
    "forked": {"child": 0, "from the parent": "parent"},
    "misc": {"sendfile datagram": [1000, "00010203", True],
             "pktinfo": [1, "127.0.0.1", "127.0.0.1"]},
}


def run(argv, env=None, timeout=HANG):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def observations(out: subprocess.CompletedProcess, what: str) -> list:
    assert out.returncode == 0, f"{what} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


# With VSOCKET_UDP_SHM too: these scenarios' pairs never live long enough
# to leave the kernel, but every socket then goes through the shm state,
# its rendezvous and its translated readiness, which must change nothing.
@pytest.mark.parametrize("shm", [False, True], ids=["udp", "udp-shm-on"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_same_as_kernel(name, shm, vs_env, tmp_path):
    plain = observations(run([PYTHON, str(PROG), name]), f"{name} without vsocket")
    for label, value in EXPECT.get(name, {}).items():
        assert [label, value] in plain, f"{name}: without vsocket, {label!r} is not {value!r}: {plain}"
    env = {**vs_env, "VSOCKET_UDP_SHM": "1"} if shm else vs_env
    under = observations(run([str(VSOCKET), "run", "--", PYTHON, str(PROG), name], env),
                         f"{name} under vsocket")
    assert under == plain
    log = (tmp_path / "vsocket.log").read_text(errors="replace")
    assert "udp socket on the datagram layer" in log, log[-2000:]


def test_udp_disabled_same_as_kernel(vs_env, tmp_path):
    """VSOCKET_UDP=off: the layer takes nothing, and nothing changes."""
    plain = observations(run([PYTHON, str(PROG), "connect"]), "connect without vsocket")
    under = observations(run([str(VSOCKET), "run", "--", PYTHON, str(PROG), "connect"],
                             {**vs_env, "VSOCKET_UDP": "off"}), "connect, VSOCKET_UDP=off")
    assert under == plain
    log = (tmp_path / "vsocket.log").read_text(errors="replace")
    assert "udp socket on the datagram layer" not in log
    assert "loaded:" in log  # the log was written: the absence above means something


# ------------------------------------------------------------------ vsocket stat


def stat_rows(env, pid):
    out = run([str(VSOCKET), "stat", "--json", "--pid", str(pid)], env, timeout=60)
    assert out.returncode == 0, out.stderr
    procs = json.loads(out.stdout)["processes"]
    assert len(procs) == 1
    return procs[0]["sockets"]


def hold(env, transport_args=()):
    """Starts progs/scenarios.py hold under vsocket: its sockets' ports once
    its traffic is done, and the process (waiting for a line on stdin)."""
    p = subprocess.Popen([str(VSOCKET), "run", *transport_args, "--", PYTHON, str(PROG), "hold"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, **env})
    line = p.stdout.readline()
    assert line, p.stderr.read()
    return p, json.loads(line)


def finish(p):
    out, err = p.communicate("done\n", timeout=HANG)
    assert p.returncode == 0, err


def by_local_port(rows, port):
    found = [r for r in rows if r["local"].endswith(f":{port}")]
    assert len(found) == 1, rows
    return found[0]


def test_stat_rows(vs_env):
    p, ports = hold(vs_env)
    try:
        rows = stat_rows(vs_env, p.pid)
        udp = [r for r in rows if r["proto"] == "udp"]
        assert len(udp) == 4, rows
        for r in udp:
            assert r["transport"] == "kernel" and r["reason"] == "udp-on-kernel", r
        recv = by_local_port(udp, ports["receiver"])
        assert recv["state"] == "bound" and recv["peer"] == "", recv
        # 4 datagrams in (one of length 0), 2 out: counted per datagram.
        assert (recv["rx_msgs"], recv["rx_bytes"], recv["tx_msgs"], recv["tx_bytes"]) == (4, 8, 2, 4)
        conn = by_local_port(udp, ports["connected"])
        assert conn["state"] == "connected" and conn["peer"].endswith(f":{ports['receiver']}")
        assert (conn["tx_msgs"], conn["tx_bytes"], conn["rx_msgs"]) == (2, 5, 2)
        gone = by_local_port(udp, ports["disconnected"])
        # connect(AF_UNSPEC) on a port it bound itself: bound again, no peer.
        assert gone["state"] == "bound" and gone["peer"] == "", gone
        six = [r for r in udp if r["family"] == "ipv6"]
        assert len(six) == 1 and six[0]["tx_msgs"] == 1, udp
        table = run([str(VSOCKET), "stat", "--pid", str(p.pid)], vs_env, timeout=60).stdout
        assert table.count(" udp ") == 4 and table.count("udp-on-kernel") == 4, table
    finally:
        finish(p)


@pytest.mark.parametrize("how,reason", [
    ({"VSOCKET_UDP": "off"}, "udp-disabled"),
    ({"VSOCKET_TRANSPORTS": "kernel"}, "disabled-by-config"),
], ids=["udp-off", "kernel-only"])
def test_stat_reason_when_off(vs_env, how, reason):
    p, ports = hold({**vs_env, **how})
    try:
        udp = [r for r in stat_rows(vs_env, p.pid) if r["proto"] == "udp"]
        assert len(udp) == 4 and all(r["reason"] == reason for r in udp), udp
        recv = by_local_port(udp, ports["receiver"])
        assert (recv["rx_msgs"], recv["rx_bytes"]) == (4, 8), recv
    finally:
        finish(p)
