"""redis-server with redis-benchmark and redis-cli, all under vsocket."""

import csv
import io
import re

import pytest

from conftest import (check_sampled_paths, check_server_stat, dump_stat, find_sockets,
                      finish_comparison, free_port, make_random_file, require_program, run_cmd,
                      run_sampled)

pytestmark = pytest.mark.redis

BENCH_TESTS = ["SET", "GET", "INCR", "LPUSH", "LPOP", "MSET"]
N = 20000


def start_redis(runner, servers, tmp_path):
    redis_server = require_program("redis-server")
    port = free_port()
    d = tmp_path / f"redis-{runner.name}"
    d.mkdir()
    srv = servers.start("redis-server", [redis_server, "--port", port, "--bind", "127.0.0.1",
                                         "--dir", d, "--save", "", "--appendonly", "no",
                                         "--daemonize", "no", "--protected-mode", "no",
                                         "--logfile", "", "--unixsocket", ""],
                        runner, port=port)
    return srv, port


def cli(runner, port, *args, **kw):
    return run_cmd([require_program("redis-cli"), "-h", "127.0.0.1", "-p", port, *args], runner,
                   timeout=30, **kw)


def commandstats(runner, port) -> dict:
    out = cli(runner, port, "INFO", "commandstats").stdout
    stats = {}
    for m in re.finditer(r"^cmdstat_([\w|]+):calls=(\d+),.*failed_calls=(\d+)", out, re.M):
        stats[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    assert stats, out
    return stats


def run_benchmark(runner, servers, tmp_path):
    srv, port = start_redis(runner, servers, tmp_path)
    bench = require_program("redis-benchmark")
    res, sampler = run_sampled([bench, "-h", "127.0.0.1", "-p", port, "-n", N, "-c", "20",
                                "-t", ",".join(t.lower() for t in BENCH_TESTS), "--csv"],
                               runner, timeout=120)
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    done = [r["test"].split()[0] for r in rows]
    assert done == BENCH_TESTS, f"[{runner}] benchmark tests completed: {done}\n{res.describe()}"
    for r in rows:
        assert float(r["rps"]) > 0, r
    stats = commandstats(runner, port)
    # each benchmark test runs exactly N requests; the server saw them all
    calls = {k: stats.get(k, (0, 0)) for k in ("set", "get", "incr", "lpush", "lpop", "mset")}
    for k, (n, failed) in calls.items():
        assert n == N and failed == 0, f"[{runner}] redis counted {n} {k} calls ({failed} failed), expected {N}"
    if runner.preloaded:
        # On shm the whole run may end between two samples (~0.2 s): what the
        # samples saw must not contradict the path; the proof that the
        # benchmark's 20 connections ran on shm is the server's side below
        # (a connection is on shm at one end only if it is at both).
        if sampler.samples:
            check_sampled_paths(sampler, "redis-benchmark", peer="vsocket")
        # every connection the server accepted (benchmark, redis-cli) on shm with SHM_BUILT
        procs, socks = check_server_stat(srv, port, comm="redis-server", peer="vsocket",
                                         min_conns=21)
        accepted = [s for s in find_sockets(socks, proto="tcp", port=port) if s.get("peer")]
        assert len(accepted) >= 20, f"redis-server: accepted connections in stat:\n{dump_stat(procs)}"
        assert sum(s["rx_bytes"] for s in accepted) > 0, dump_stat(procs)
    srv.stop()
    srv.check_output_clean()
    return calls


def test_redis_benchmark(runners, servers, tmp_path):
    """redis-benchmark -n 20000 (SET GET INCR LPUSH LPOP MSET, 20 clients)
    completes every test with and without vsocket, and redis-server's
    INFO commandstats counts exactly 20000 calls of each, none failed.  With
    vsocket every connection is on shm when the build has it."""
    results = {r.name: run_benchmark(r, servers, tmp_path) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]


def run_blob(runner, servers, tmp_path, blob, digest):
    srv, port = start_redis(runner, servers, tmp_path)
    # redis-cli -x reads the value from stdin; GET --raw prints it back (+ "\n")
    with open(blob, "rb") as f:
        out = cli(runner, port, "-x", "SET", "blob", stdin=f).stdout
    assert out.strip() == "OK", out
    got = cli(runner, port, "--raw", "GET", "blob", text_stdout=False).stdout
    assert got.endswith(b"\n")
    import hashlib
    got_digest = hashlib.sha256(got[:-1]).hexdigest()
    assert got_digest == digest, f"[{runner}] GET returned different bytes ({len(got) - 1} bytes)"
    strlen = int(cli(runner, port, "STRLEN", "blob").stdout.strip())
    assert strlen == blob.stat().st_size
    if runner.preloaded:
        # SET, GET, STRLEN: three redis-cli connections, on shm with SHM_BUILT
        procs, socks = check_server_stat(srv, port, comm="redis-server", peer="vsocket",
                                         min_conns=3)
        accepted = [s for s in find_sockets(socks, proto="tcp", port=port) if s.get("peer")]
        assert sum(s["rx_bytes"] for s in accepted) >= strlen, dump_stat(procs)
        assert sum(s["tx_bytes"] for s in accepted) >= strlen, dump_stat(procs)
    srv.stop()
    srv.check_output_clean()
    return got_digest


def test_redis_cli_blob(runners, servers, tmp_path):
    """A 3 MB random value stored with `redis-cli -x SET` and read back with
    GET has the same sha256 with and without vsocket (over shm when the build
    has it)."""
    blob = tmp_path / "blob.bin"
    digest = make_random_file(blob, 3 * 1000 * 1000 + 17, seed=5)
    results = {r.name: run_blob(r, servers, tmp_path, blob, digest) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"] == digest
