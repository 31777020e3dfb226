"""Programs that fork with connections open (progs/forker.py): a fork never
crashes, hangs or corrupts a connection, and one whose child does not use
the connection, or uses it and goes, leaves the parent on the transport.

Both ends run under `vsocket run`: an echo server and a client scenario, on
shm (loopback). The same program runs over rdma with
VSOCKET_SEMANTICS_TRANSPORT=rdma in the Soft-RoCE guest, but there a child's
use makes the connection leave for TCP (docs/design/rdma-transport.md), so
`turns` ends on TCP by design: RDMA's fork cases are tests/rdma/cases/fork-carry.sh.
VSOCKET_FORK_CONNS: connections of the spawn scenario (default 100).
A child or client that crashes leaves its exit status in the failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FORKER = HERE / "progs" / "forker.py"
BUILD_DIR = Path(os.environ.get("VSOCKET_BUILD_DIR") or (REPO / "build")).resolve()
VSOCKET = BUILD_DIR / "bin" / "vsocket"
TRANSPORT = os.environ.get("VSOCKET_SEMANTICS_TRANSPORT") or "shm"
RDMA = TRANSPORT == "rdma"
ADDR = (os.environ.get("VSOCKET_SEMANTICS_RDMA_ADDR") or "10.77.0.1") if RDMA else "127.0.0.1"
SCALE = float(os.environ.get("VSOCKET_SEMANTICS_TIME_SCALE") or (10 if RDMA else 1))


def env() -> dict:
    e = dict(os.environ, VSOCKET_BIN=str(VSOCKET), VSOCKET_SEMANTICS_TRANSPORT=TRANSPORT,
             VSOCKET_SEMANTICS_TIME_SCALE=str(SCALE))
    if RDMA:
        e.update(VSOCKET_TRANSPORTS="rdma")
    return e


@pytest.fixture(scope="module")
def server():
    if not VSOCKET.exists():
        pytest.fail(f"{VSOCKET} missing: build first or set VSOCKET_BUILD_DIR", pytrace=False)
    p = subprocess.Popen([str(VSOCKET), "run", "--", sys.executable, str(FORKER), "serve", ADDR],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    line = p.stdout.readline()
    assert line, f"the echo server did not start: {p.stderr.read()}"
    yield p, json.loads(line)["port"]
    p.terminate()
    _, err = p.communicate(timeout=30)
    assert "Segmentation fault" not in err and "Traceback" not in err, err


def run_client(server, scenario: str) -> dict:
    proc, port = server
    assert proc.poll() is None, "the echo server died"
    c = subprocess.Popen([str(VSOCKET), "run", "--", sys.executable, str(FORKER), scenario, ADDR,
                          str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env())
    try:
        out, err = c.communicate(timeout=100 * SCALE)  # forker.py gives up at 120
    except subprocess.TimeoutExpired:
        # What every process shows while the client hangs, then its stacks.
        state = subprocess.run([str(VSOCKET), "stat", "--all"], capture_output=True, text=True,
                               timeout=60 * SCALE).stdout.splitlines()
        mine = [ln for ln in state[1:] if str(c.pid) in ln.split()[:1] or f":{port} " in ln]
        out, err = c.communicate(timeout=60 * SCALE)
        err += "\nvsocket stat --all while it hung (client and server):\n" + "\n".join(
            state[:1] + [ln for ln in mine if " closed " not in ln])
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert c.returncode == 0 and lines, (f"{scenario}: exit status {c.returncode}\n"
                                         f"stdout: {out[-3000:]}\nstderr: {err[-6000:]}")
    res = json.loads(lines[-1])
    assert res["ok"], res
    return res


def test_turns(server):
    """Parent and child share a connection on the transport: turns of 1 B to
    16 MiB (rings grow and shrink), then both write at once, then the child
    writes at its exit; every frame right and in order; the parent stays on
    the transport."""
    assert run_client(server, "turns")["transport"] == TRANSPORT


def test_young(server):
    """Fork while the connection is young; the child writes and exits (a
    subprocess); the parent's connection then upgrades (on main before the fix: the child
    used rings the parent mapped after the fork, SIGSEGV)."""
    assert run_client(server, "young")["transport"] == TRANSPORT


def test_spawn(server):
    """subprocess.run, posix_spawn and system() in a loop while 100
    connections set up and echo: every one ends on the transport."""
    assert run_client(server, "spawn")["connections"] > 0


@pytest.mark.parametrize("scenario", ["young_lives", "midsetup_exit", "midsetup_lives"])
def test_midsetup(server, scenario):
    """A fork while the connection is young and the child lives on, or just
    as the set-up starts: both ends end on the same path (the transport or
    TCP: forker.py compares the two ends' `vsocket stat`), every byte right."""
    res = run_client(server, scenario)
    assert res["transport"] in (TRANSPORT, "kernel"), res
