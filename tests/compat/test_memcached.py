"""memcached with a raw text-protocol Python client and libmemcached's
memcslap / memcping / memcstat, all under vsocket."""

import re
import sys

import pytest

from conftest import (PROGS, check_sampled_paths, check_server_stat, dump_stat, find_sockets,
                      finish_comparison, free_port, require_program, run_cmd, run_sampled)

pytestmark = pytest.mark.memcached


def start_memcached(runner, servers):
    memcached = require_program("memcached")
    port = free_port()
    args = [memcached, "-l", "127.0.0.1", "-p", port, "-U", "0", "-m", "64", "-t", "2", "-c", "256"]
    import os
    if os.geteuid() == 0:
        args += ["-u", "root"]
    srv = servers.start("memcached", args, runner, port=port)
    return srv, port


def kv(line):
    return dict(item.split("=", 1) for item in line.split())


def run_py_client(runner, servers):
    srv, port = start_memcached(runner, servers)
    res = run_cmd([sys.executable, PROGS / "mc_client.py", "--port", port, "--keys", "400",
                   "--seed", "9"], runner, timeout=90)
    m = re.search(r"mc_client: (.*)", res.stdout)
    assert m, res.describe()
    out = kv(m.group(1))
    assert out["result"] == "PASS" and out["errors"] == "0", res.describe()
    assert int(out["get_hits"]) == 2 * int(out["keys"]), out
    if runner.preloaded:
        # mc_client.py's connection(s), on shm with SHM_BUILT
        procs, socks = check_server_stat(srv, port, comm="memcached", peer="vsocket", min_conns=1)
        accepted = [s for s in find_sockets(socks, proto="tcp", port=port) if s.get("peer")]
        assert accepted, dump_stat(procs)
        assert sum(s["rx_bytes"] for s in accepted) >= int(out["bytes"]), dump_stat(procs)
        assert sum(s["tx_bytes"] for s in accepted) >= 2 * int(out["bytes"]), dump_stat(procs)
    srv.stop()
    srv.check_output_clean()
    return out


def test_memcached_python_client(runners, servers):
    """400 random values (1 B..100 KB) set, get, multi-get, incr, delete and
    stats over the text protocol: all replies right, same sha256 of the data
    with and without vsocket; with vsocket the server's connection is on shm
    when the build has it and counts the bytes."""
    results = {r.name: run_py_client(r, servers) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]


def memcstat(runner, port) -> dict:
    res = run_cmd([require_program("memcstat"), f"--servers=127.0.0.1:{port}"], runner, timeout=30)
    stats = dict(re.findall(r"^\s*(\w+): (\S+)", res.stdout, re.M))
    assert "cmd_set" in stats, res.describe()
    return stats


def run_memcslap(runner, servers):
    srv, port = start_memcached(runner, servers)
    slap = require_program("memcslap")
    run_cmd([require_program("memcping"), f"--servers=127.0.0.1:{port}"], runner, timeout=30)
    # `set`: 2 threads x 2000 keys; `get` first loads 2000 keys, then 2 threads get them
    outs = []
    sampler = None
    for test in ("set", "get"):
        res, sampler = run_sampled([slap, f"--servers=127.0.0.1:{port}", f"--test={test}",
                                    "--concurrency=2", "--execute-number=2000"], runner, timeout=90)
        assert "Time total" in res.stdout, res.describe()
        outs.append(res)
        if runner.preloaded and sampler.samples:
            # a short run may be sampled before its connections' handshakes
            check_sampled_paths(sampler, "memcslap", peer="vsocket")
    stats = memcstat(runner, port)
    counts = {k: int(stats[k]) for k in ("cmd_set", "cmd_get", "get_hits", "get_misses")}
    # 4000 sets + 2000 loaded by the get test; 4000 gets, all hits
    assert counts == {"cmd_set": 6000, "cmd_get": 4000, "get_hits": 4000, "get_misses": 0}, \
        f"[{runner}] memcached stats {counts}"
    if runner.preloaded:
        # memcping, memcslap's, memcstat: every connection on shm with SHM_BUILT
        procs, socks = check_server_stat(srv, port, comm="memcached", peer="vsocket", min_conns=5)
        accepted = [s for s in find_sockets(socks, proto="tcp", port=port) if s.get("peer")]
        assert len(accepted) >= 5, f"memcached: accepted connections:\n{dump_stat(procs)}"
    srv.stop()
    srv.check_output_clean()
    return counts


def test_memcached_memcslap(runners, servers):
    """memcping answers; memcslap set and get runs complete; memcstat shows
    the exact command counts (6000 sets, 4000 gets, all hits) with and
    without vsocket; with vsocket all of memcached's connections are on shm
    when the build has it."""
    results = {r.name: run_memcslap(r, servers) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
