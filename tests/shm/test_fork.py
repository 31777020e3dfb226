"""Programs that fork with connections open (progs/forker.py): a fork never
crashes, hangs or corrupts a connection, and one whose child does not use
the connection, or uses it and goes, leaves the parent on the transport.

Both ends run under `vsocket run`: an echo server and a client scenario.
VSOCKET_SEMANTICS_TRANSPORT=shm (default: loopback) or rdma (the Soft-RoCE
guest, tests/rdma/cases/fork.sh: VSOCKET_TRANSPORTS=rdma over 10.77.0.1).
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
    r = subprocess.run([str(VSOCKET), "run", "--", sys.executable, str(FORKER), scenario, ADDR,
                        str(port)], capture_output=True, text=True, env=env(), timeout=300 * SCALE)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and lines, (f"{scenario}: exit status {r.returncode}\n"
                                         f"stdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}")
    res = json.loads(lines[-1])
    assert res["ok"], res
    return res


def server_transport(server, client_local: str):
    """The transport of the server's end of the connection from CLIENT_LOCAL."""
    proc, _ = server
    out = subprocess.run([str(VSOCKET), "stat", "--json", "--all", "--pid", str(proc.pid)],
                         capture_output=True, text=True, timeout=60 * SCALE)
    for p in json.loads(out.stdout).get("processes", []):
        for s in p.get("sockets", []):
            if s.get("peer") == client_local:
                return s.get("transport"), s.get("reason")
    return None, None


def test_turns(server):
    """Parent and child share a connection on the transport: turns of 1 B to
    16 MiB (rings grow and shrink), then both write at once, then the child
    writes at its exit; every frame right and in order; the parent stays on
    the transport."""
    assert run_client(server, "turns")["transport"] == TRANSPORT


def test_young(server):
    """Fork while the connection is young; the child writes and exits; the
    parent's connection then upgrades (on main before the fix: the child
    used rings the parent mapped after the fork, SIGSEGV)."""
    assert run_client(server, "young")["transport"] == TRANSPORT


def test_spawn(server):
    """subprocess.run, posix_spawn and system() in a loop while 100
    connections set up and echo: every one ends on the transport."""
    assert run_client(server, "spawn")["connections"] > 0


@pytest.mark.parametrize("scenario", ["midsetup_exit", "midsetup_lives"])
def test_midsetup(server, scenario):
    """A fork just as the set-up starts: both ends end on the same path (the
    transport or TCP), every byte right."""
    res = run_client(server, scenario)
    assert res["transport"] in (TRANSPORT, "kernel"), res
    assert server_transport(server, res["local"])[0] == res["transport"], res
