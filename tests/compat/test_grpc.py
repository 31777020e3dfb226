"""gRPC programs (issue 19): a grpcio unary echo service, and an Arrow Flight
server and client (pyarrow, gRPC's C++ core inside) fetching a 64 MiB table
with do_get. Both ends under vsocket, their connections on shm.

gRPC's epoll poller keeps a pointer with a tag in its low bit in
epoll_event.data and dereferences whatever epoll_wait returns: an event that
carries anything else than what it registered crashes it (it did: SIGSEGV in
both processes, every run).

The Python packages come from PyPI, pinned, in a venv that
`scripts/install-deps.sh test` makes (build/compat-venv; VSOCKET_COMPAT_VENV
names another)."""

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import (ALLOW_MISSING, PROGS, REPO, T, check_server_stat, finish_comparison,
                      free_port, run_cmd)

pytestmark = pytest.mark.grpc

VENV = Path(os.environ.get("VSOCKET_COMPAT_VENV") or (REPO / "build" / "compat-venv"))
CALLS = 300


def venv_python(module: str) -> str:
    """The venv's interpreter, once it imports MODULE; otherwise the test
    fails (or skips with VSOCKET_COMPAT_ALLOW_MISSING=1)."""
    py = VENV / "bin" / "python"
    ok = py.exists() and subprocess.run([str(py), "-c", f"import {module}"],
                                        capture_output=True, timeout=120).returncode == 0
    if not ok:
        msg = f"{VENV} has no {module}: run scripts/install-deps.sh test"
        if ALLOW_MISSING:
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    return str(py)


def summary(pattern: str, text: str, what: str) -> dict:
    m = re.search(pattern + r": (.*)", text)
    assert m, f"no summary line from {what}:\n{text[-3000:]}"
    return dict(item.split("=", 1) for item in m.group(1).split())


def run_case(runner, servers, py, prog, name, client_argv, client_line, timeout,
             ready_timeout=30):
    port = free_port("tcp")
    srv = servers.start(name, [py, prog, "serve", "--port", port], runner, port=port,
                        ready_timeout=ready_timeout)
    res = run_cmd([py, prog, *client_argv, "--port", port], runner, timeout=timeout)
    client = summary(client_line, res.stdout, f"the {name} client")
    assert client["result"] == "PASS", f"[{runner}]\n{res.describe()}"
    if runner.preloaded:
        # the server's end of every connection the client made: on shm
        check_server_stat(srv, port, peer="vsocket", min_conns=1, min_shm=1)
    rc = srv.stop(signal.SIGTERM, timeout=30)
    assert rc == 0, f"[{runner}] {name} server exit code {rc}\n{srv.describe()}"
    srv.check_output_clean()
    return client, srv


def test_grpc_echo(runners, servers):
    """300 unary calls of 1 B .. 200 KB, each reply checked byte for byte;
    the server counts the same calls and bytes; with vsocket, the connection
    is on shm and nothing crashed."""
    py = venv_python("grpc")
    results = {}
    for runner in runners:
        client, srv = run_case(runner, servers, py, PROGS / "grpc_echo.py", "grpc_echo",
                               ["call", "--calls", CALLS], "grpc_echo", timeout=180)
        assert client["calls"] == str(CALLS)
        served = summary("grpc_echo", srv.stdout(), "the grpc_echo server")
        assert served == {"served": str(CALLS), "bytes": client["bytes"]}, srv.describe()
        results[runner.name] = client
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]


def test_flight_do_get(runners, servers):
    """An Arrow Flight do_get of a 64 MiB table, compared column by column
    with the client's own copy; with vsocket, on shm."""
    py = venv_python("pyarrow.flight")
    results = {}
    for runner in runners:
        client, _srv = run_case(runner, servers, py, PROGS / "flight_get.py", "flight_get",
                                ["get"], "flight_get", timeout=240, ready_timeout=60)
        assert int(client["rows"]) == (64 << 20) // 16
        results[runner.name] = client
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
