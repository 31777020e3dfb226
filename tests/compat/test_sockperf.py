"""sockperf ping-pong and throughput, TCP and UDP, server and client both under vsocket."""

import re
import signal
import subprocess
import time

import pytest

from conftest import (T, check_sampled_paths, check_server_stat, dump_stat, find_sockets,
                      finish_comparison, free_port, require_program, run_sampled, stat_for_tree,
                      strip_ansi)

pytestmark = pytest.mark.sockperf

CASES = [(test, proto) for test in ("ping-pong", "throughput") for proto in ("tcp", "udp")]

VALID = re.compile(r"\[Valid Duration\] RunTime=[\d.]+ sec; SentMessages=(\d+); ReceivedMessages=(\d+)")
DROPS = re.compile(r"# dropped messages = (\d+); # duplicated messages = (\d+); # out-of-order messages = (\d+)")
TP_SENT = re.compile(r"Total of (\d+) messages sent")
SRV_RECV = re.compile(r"Total (\d+) messages received and handled")


def kernel_unread(port) -> int:
    """Bytes the kernel holds unread for the server's sockets on PORT."""
    out = subprocess.run(["ss", "-Htn", f"sport = :{port}"], capture_output=True, text=True,
                         timeout=30).stdout
    return sum(int(line.split()[1]) for line in out.splitlines() if len(line.split()) > 1)


def server_read(runner, srv, port) -> int:
    """Bytes the server's program has read on PORT (vsocket's statistics)."""
    socks = [s for p in stat_for_tree(runner.vsocket, srv.pid).values() for s in p["sockets"]]
    return sum(s["rx_bytes"] for s in find_sockets(socks, proto="tcp", port=port))


def wait_drained(runner, srv, port, want):
    """The client is gone; its bytes may still wait for a server that a busy
    machine left behind (seen: 100,505 of 104,615 messages handled at the
    SIGINT, on the kernel). The server is stopped once it has read them all:
    the kernel holds nothing unread for it, and with vsocket its statistics
    count WANT bytes read (the rest may be in a ring). Bounded so that only
    lost bytes cross it; the count check after says which."""
    deadline = time.monotonic() + T(60)
    while time.monotonic() < deadline:
        if kernel_unread(port) == 0 and (not runner.preloaded or
                                         server_read(runner, srv, port) >= want):
            return
        time.sleep(0.1)


def run_sockperf(runner, servers, test, proto):
    sockperf = require_program("sockperf")
    port = free_port()
    tcp = ["--tcp"] if proto == "tcp" else []
    srv = servers.start("sockperf-server", [sockperf, "server", "-i", "127.0.0.1", "-p", port, *tcp],
                        runner, port=port, proto=proto)
    # ping-pong: sockperf sizes its record buffer for ~1 M messages per second
    # of test and stops with "_seqN > m_maxSequenceNo" above that; shm gets there.
    cap = ["--mps", "800000"] if test == "ping-pong" else []
    res, sampler = run_sampled([sockperf, test, "-i", "127.0.0.1", "-p", port, *tcp, "-t", "2",
                                "-m", "1024" if test == "throughput" else "64", *cap], runner,
                               timeout=60)
    out = strip_ansi(res.stdout + res.stderr)
    assert "Test ended" in out, f"[{runner}] sockperf did not finish\n{res.describe()}"
    summary = {}
    if test == "ping-pong":
        m = VALID.search(out)
        assert m, res.describe()
        sent, recv = int(m.group(1)), int(m.group(2))
        assert sent > 0 and recv == sent, f"[{runner}] ping-pong sent {sent} received {recv}"
        d = DROPS.search(out)
        assert d and d.groups() == ("0", "0", "0"), f"[{runner}] drops/dups/reordering:\n{out}"
        summary = {"ok": True}
    else:
        m = TP_SENT.search(out)
        assert m and int(m.group(1)) > 0, res.describe()
        summary = {"sent": int(m.group(1))}

    if runner.preloaded:
        # TCP: the one connection on shm when the build has it; UDP: kernel
        tcp = 1 if proto == "tcp" else 0
        client = sampler.merged()
        csocks = check_sampled_paths(sampler, "sockperf client", peer="vsocket")
        # Sampled while it ran, or not (the server's records below are the proof).
        assert not csocks or find_sockets(csocks, proto=proto), \
            f"client: no {proto} socket:\n{dump_stat(client)}"
        procs, socks = check_server_stat(srv, port, proto=proto, comm="sockperf", peer="vsocket",
                                         min_conns=tcp)
        rx = sum(s["rx_bytes"] for s in find_sockets(socks, proto=proto, port=port))
        assert rx > 0, f"server: no bytes received on port {port} in stat:\n{dump_stat(procs)}"

    if test == "throughput" and proto == "tcp":
        wait_drained(runner, srv, port, (summary["sent"] - 1) * 1024)
    # SIGINT makes the server print how many messages it handled
    srv.stop(signal.SIGINT)
    srv.check_output_clean()
    sout = strip_ansi(srv.stdout() + srv.stderr())
    m = SRV_RECV.search(sout)
    assert m, f"[{runner}] sockperf server printed no total\n{srv.describe()}"
    handled = int(m.group(1))
    if test == "throughput":
        if proto == "tcp":
            # a stream: every message sent arrives, but the last one: the
            # client's end-of-test alarm may cut its send short (a blocking
            # send interrupted after some bytes returns that count); a
            # shared-memory ring, smaller than the kernel's buffer, is full
            # more often when it strikes (seen once in CI: 9970123 of 9970124)
            assert handled >= summary["sent"] - 1, \
                f"[{runner}] server handled {handled} < sent {summary['sent']} - 1"
        else:
            assert 0 < handled, f"[{runner}] server received nothing"
    else:
        assert handled >= sent, f"[{runner}] server handled {handled} < client's {sent}"
    return summary


@pytest.mark.parametrize("test,proto", CASES, ids=[f"{p}-{t}" for t, p in CASES])
def test_sockperf(test, proto, runners, servers):
    """sockperf completes with and without vsocket: ping-pong has every reply,
    no drops/duplicates/reordering; TCP throughput messages all reach the server.
    With vsocket the TCP connection is on shm when the build has it, UDP on kernel."""
    results = {r.name: run_sockperf(r, servers, test, proto) for r in runners}
    finish_comparison(results)
    assert results["plain"].keys() == results["vsocket"].keys()
