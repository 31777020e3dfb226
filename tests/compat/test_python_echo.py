"""Python stdlib (socket + selectors) echo server and client, separate processes."""

import dataclasses
import re
import signal
import socket
import sys

import pytest

from conftest import (PROGS, check_server_stat, check_tcp_paths, dump_stat, find_sockets,
                      finish_comparison, free_port, run_cmd, stat_for_tree)

pytestmark = pytest.mark.python_echo

PY = sys.executable

CASES = {
    # id: (host, proto, client args)
    "tcp-ipv4": ("127.0.0.1", "tcp", ["--conns", "4", "--messages", "60", "--max-size", "65536"]),
    "tcp-ipv6": ("::1", "tcp", ["--conns", "3", "--messages", "40", "--max-size", "200000"]),
    "udp-ipv4": ("127.0.0.1", "udp", ["--messages", "300", "--max-size", "8192"]),
    "udp-ipv6": ("::1", "udp", ["--messages", "200", "--max-size", "8192"]),
}

CLIENT_LINE = re.compile(r"echo_client: (.*)")
SERVER_LINE = re.compile(r"echo_server: (.*)")


def kv(line: str) -> dict:
    return dict(item.split("=", 1) for item in line.split())


def run_echo(runner, servers, host, proto, client_args, seed=7):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    port = free_port(family=family)
    srv = servers.start("echo_server", [PY, PROGS / "echo_server.py", "--host", host,
                                        "--port", port, "--proto", "both"],
                        runner, port=port, proto=proto)
    res = run_cmd([PY, PROGS / "echo_client.py", "--host", host, "--port", port, "--proto", proto,
                   "--seed", seed, *client_args], runner, timeout=90)
    m = CLIENT_LINE.search(res.stdout)
    assert m, f"[{runner}] no summary line from echo_client\n{res.describe()}"
    client = kv(m.group(1))
    assert client["result"] == "PASS" and client["mismatches"] == "0", res.describe()
    if proto == "tcp":
        assert int(client["bytes_sent"]) > 0
        assert client["bytes_sent"] == client["bytes_received"], res.describe()
    else:
        assert client["lost"] == "0", f"[{runner}] UDP datagrams lost on loopback\n{res.describe()}"

    stat_socks = None
    if runner.preloaded:
        # TCP: every accepted connection on shm with SHM_BUILT; UDP (and the
        # TCP listener of --proto both): kernel
        procs, stat_socks = check_server_stat(srv, port, proto=proto, peer="vsocket",
                                              min_conns=int(client["conns"]) if proto == "tcp" else 0)
        assert any(p.get("comm", "").startswith("python") for p in procs.values()), dump_stat(procs)
    rc = srv.stop(signal.SIGTERM)
    assert rc == 0, f"[{runner}] echo_server exit code {rc}\n{srv.describe()}"
    srv.check_output_clean()
    m = SERVER_LINE.search(srv.stdout())
    assert m, srv.describe()
    server = kv(m.group(1))
    assert server["errors"] == "0", srv.describe()
    if proto == "tcp":
        assert int(server["tcp_bytes"]) == int(client["bytes_sent"]), srv.describe()
        assert int(server["tcp_conns"]) == int(client["conns"])
    else:
        assert int(server["udp_bytes"]) == int(client["bytes_sent"]), srv.describe()
    return client, server, stat_socks, port


@pytest.mark.parametrize("case", list(CASES))
def test_python_echo(case, runners, servers):
    """Same bytes echoed (sha256, counts) with and without vsocket; the
    server's listening/bound socket is listed as kernel with a reason, its
    TCP connections on shm when the build has it."""
    host, proto, args = CASES[case]
    results = {}
    for runner in runners:
        client, server, _socks, _port = run_echo(runner, servers, host, proto, args)
        results[runner.name] = (client, server)
    finish_comparison(results)
    (pc, ps), (vc, vs) = results["plain"], results["vsocket"]
    for k in ("bytes_sent", "bytes_received", "sha256", "conns", "messages"):
        assert pc[k] == vc[k], f"{k}: plain {pc[k]} vs vsocket {vc[k]}"
    for k in ("tcp_bytes", "tcp_conns", "udp_bytes"):
        assert ps[k] == vs[k], f"server {k}: plain {ps[k]} vs vsocket {vs[k]}"


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_python_echo_stat_counters(proto, vsocket_runner, servers):
    """vsocket stat's byte/message counters of the server match what the
    client really sent: rx_bytes == tx_bytes == bytes echoed (on shm when
    the build has it: the counters cover both paths)."""
    host = "127.0.0.1"
    port = free_port()
    srv = servers.start("echo_server", [PY, PROGS / "echo_server.py", "--host", host,
                                        "--port", port, "--proto", proto],
                        vsocket_runner, port=port, proto=proto)
    args = (["--conns", "3", "--messages", "30", "--max-size", "50000"] if proto == "tcp"
            else ["--messages", "100", "--max-size", "4000"])
    res = run_cmd([PY, PROGS / "echo_client.py", "--host", host, "--port", port, "--proto", proto,
                   "--seed", "11", *args], vsocket_runner, timeout=90)
    client = kv(CLIENT_LINE.search(res.stdout).group(1))
    assert client["result"] == "PASS", res.describe()
    sent = int(client["bytes_sent"])

    procs = stat_for_tree(vsocket_runner.vsocket, srv.pid)
    socks = check_tcp_paths(procs, "echo_server", peer="vsocket",
                            min_conns=int(client["conns"]) if proto == "tcp" else 0)
    if proto == "tcp":
        conns = find_sockets(socks, proto="tcp", port=port,
                             state=("connected", "closed", "open", "connecting"))
        conns = [s for s in conns if s.get("peer")]
        assert len(conns) == int(client["conns"]), (
            f"expected {client['conns']} accepted connections on port {port} "
            f"(vsocket stat --all):\n{dump_stat(procs)}")
        rx = sum(s["rx_bytes"] for s in conns)
        tx = sum(s["tx_bytes"] for s in conns)
    else:
        conns = find_sockets(socks, proto="udp", port=port)
        assert len(conns) == 1, dump_stat(procs)
        rx, tx = conns[0]["rx_bytes"], conns[0]["tx_bytes"]
        assert conns[0]["rx_msgs"] == conns[0]["tx_msgs"] >= int(client["messages"]), dump_stat(procs)
    assert rx == sent, f"server rx_bytes {rx} != client sent {sent}\n{dump_stat(procs)}"
    assert tx == sent, f"server tx_bytes {tx} != client sent {sent}\n{dump_stat(procs)}"
    assert srv.stop() == 0, srv.describe()


def test_stat_reason_disabled_by_config(vsocket_runner, servers):
    """With `vsocket run --transport=kernel` every socket's reason is
    disabled-by-config (the echo still works)."""
    runner = dataclasses.replace(vsocket_runner, transport="kernel")
    port = free_port()
    srv = servers.start("echo_server", [PY, PROGS / "echo_server.py", "--port", port,
                                        "--proto", "both"], runner, port=port)
    res = run_cmd([PY, PROGS / "echo_client.py", "--port", port, "--conns", "2",
                   "--messages", "10"], runner, timeout=60)
    assert "result=PASS" in res.stdout, res.describe()
    check_server_stat(srv, port, peer="vsocket", reason="disabled-by-config")
    assert srv.stop() == 0, srv.describe()
