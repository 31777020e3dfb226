"""vsocket-stress (our own checksummed TCP/UDP stress program) in every mode."""

import os
import re

import pytest

from conftest import (SHM_BUILT, check_sampled_paths, finish_comparison, require_build_artifact,
                      run_cmd, run_sampled, stat_sockets)

pytestmark = pytest.mark.stress

MODES = ["blocking", "poll", "epoll-et", "epoll-lt", "threads"]
# 8 TCP connections x 60 messages of 1 B .. 1 MB each way, 4 UDP flows
ARGS = ["--conns", "8", "--udp-flows", "4", "--messages", "60", "--max-size", "1048576",
        "--seconds", "60", "--seed", "20240611"]
LINE = re.compile(r"^stress: (.*)$", re.M)
ZERO = ("lost", "corrupt", "reordered", "udp_corrupt")


def parse(res) -> list[dict]:
    lines = [dict(kv.split("=", 1) for kv in m.group(1).split()) for m in LINE.finditer(res.stdout)]
    assert lines, f"no 'stress:' summary line\n{res.describe()}"
    return lines


def stress():
    return require_build_artifact("bin/vsocket-stress")


def run_stress(runner, mode, log_dir, extra=()):
    # The log says where each connection went, whatever the run's length; the
    # stat samples (every 0.2 s, each a process of its own) may all miss a
    # run that a quiet machine finishes in a second.
    env = dict(os.environ, VSOCKET_LOG_LEVEL="info", VSOCKET_LOG_FILE=str(log_dir / "vs-%p.log"))
    res, sampler = run_sampled([stress(), "--mode", mode, *ARGS, *extra], runner, timeout=120,
                               env=env)
    (line,) = parse(res)
    assert line["mode"] == mode
    assert line["result"] == "PASS", res.describe()
    for k in ZERO:
        assert line[k] == "0", f"[{runner}] {k}={line[k]}\n{res.describe()}"
    assert int(line["bytes"]) > 0 and int(line["udp_sent"]) > 0
    if runner.preloaded:
        log = "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("vs-*.log")))
        if SHM_BUILT:
            assert "upgraded to shm" in log, f"no connection went on shm:\n{log[-3000:]}"
        if sampler.samples:
            # client and its exec'd server, both under vsocket: TCP connections
            # on shm with SHM_BUILT, UDP kernel: none on a contradicting path
            check_sampled_paths(sampler, f"vsocket-stress {mode}", peer="vsocket")
            seen = {}
            for s in stat_sockets(sampler.samples):
                seen[(s["_pid"], s["fd"], s.get("proto"), s.get("local"), s.get("peer"))] = s
            # the server is exec'd through /proc/self/exe, so its comm is "exe"
            comms = {s["_comm"] for s in seen.values()}
            assert "vsocket-stress" in comms and comms <= {"vsocket-stress", "exe"}, comms
    return {k: line[k] for k in ("tcp_conns", "bytes", "udp_sent")}


@pytest.mark.parametrize("mode", MODES + ["epoll-et-ipv6"])
def test_stress(mode, runners, tmp_path):
    """vsocket-stress in each mode (self-contained: it forks+execs its own
    server) reports PASS with 0 lost / corrupt / reordered TCP bytes and 0
    corrupt datagrams, and moves exactly the same number of bytes with and
    without vsocket (same seed).  With vsocket, every socket it shows in
    vsocket stat while running is on its path: TCP on shm when the build has
    it, otherwise (and UDP always) kernel with a reason."""
    extra = ["--ipv6"] if mode.endswith("-ipv6") else []
    mode = mode.removesuffix("-ipv6")
    results = {r.name: run_stress(r, mode, tmp_path, extra) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]


INJECT = {"payload": "corrupt", "header": "corrupt", "loss": "lost", "reorder": "reordered",
          "udp": "udp_corrupt"}


@pytest.mark.parametrize("fault", list(INJECT))
def test_stress_detects_injected_fault(fault, runners):
    """The checker is not blind: with --inject-corruption FAULT, vsocket-stress
    exits 1, prints result=FAIL and counts the fault, with and without vsocket."""
    results = {}
    for runner in runners:
        res = run_cmd([stress(), "--mode", "poll", "--conns", "4", "--udp-flows", "2",
                       "--messages", "20", "--max-size", "65536", "--seconds", "60", "--seed", "3",
                       "--inject-corruption", fault], runner, timeout=90, expect_rc=1,
                      check_errors=False)
        (line,) = parse(res)
        assert line["result"] == "FAIL", res.describe()
        assert int(line[INJECT[fault]]) >= 1, f"[{runner}] {INJECT[fault]} not counted\n{res.describe()}"
        assert "data check FAILED" in res.stderr, res.describe()
        results[runner.name] = {k: line[k] for k in ZERO}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]


@pytest.mark.parametrize("mode", MODES)
def test_stress_peer_killed(mode, runners):
    """vsocket-stress --kill-peer-after: the server is SIGKILLed mid-transfer.
    The survivor sees end of stream or a reset, never hangs (the run ends in
    well under its timeout), and every byte it did receive is intact."""
    for runner in runners:
        res = run_cmd([stress(), "--mode", mode, "--conns", "3", "--udp-flows", "0",
                       "--messages", "3000", "--max-size", "1048576", "--seconds", "20",
                       "--seed", "7", "--kill-peer-after", "600"], runner, timeout=60)
        (line,) = parse(res)
        assert line["result"] == "PASS", f"[{runner}] {res.describe()}"
        for k in ("corrupt", "reordered"):
            assert line[k] == "0", f"[{runner}] {k}={line[k]}\n{res.describe()}"
        # 3000 messages of up to 1 MB each way take seconds: the kill comes first
        assert line.get("peer") == "killed", f"[{runner}] {res.describe()}"
