"""Mixed cases: one end of each TCP connection runs plainly, the other under
vsocket.  The transfer must be correct, and the vsocket end must stay on
kernel TCP: with the shm transport built, with reason `peer-not-vsocket`
(decided within 1-2 s of connection set-up, so polled for up to 3 s while the
connection is still open); without it, kernel with a non-empty reason.

  plain-client-vsocket-server   the server runs under vsocket, the client not
  vsocket-client-plain-server   the client runs under vsocket, the server not
"""

import csv
import hashlib
import io
import random
import re
import subprocess
import sys

import pytest

from conftest import (PLAIN, PROGS, TIMEOUT_SCALE, check_sampled_paths, free_port,
                      require_program, run_sampled, stat_for_tree, wait_tcp_paths, wait_until)
from test_redis import cli, commandstats, start_redis

pytestmark = pytest.mark.mixed

PY = sys.executable

CASES = ["plain-client-vsocket-server", "vsocket-client-plain-server"]


def sides(case, vsocket_runner):
    """(server runner, client runner)."""
    if case == "plain-client-vsocket-server":
        return vsocket_runner, PLAIN
    return PLAIN, vsocket_runner


def kv(line: str) -> dict:
    return dict(item.split("=", 1) for item in line.split())


# ------------------------------------------------------------------ Python echo

ECHO = {"conns": 2, "messages": 30, "max_size": 200000, "seed": 13}  # ~6 MB each way


def echo_digest(conns, messages, max_size, seed) -> str:
    """sha256 of the streams echo_client.py generates (same generator)."""
    rnd = random.Random(seed)
    h = hashlib.sha256()
    for _ in range(conns):
        for _ in range(messages):
            h.update(rnd.randbytes(rnd.randint(1, max_size)))
    return h.hexdigest()


@pytest.mark.python_echo
@pytest.mark.parametrize("case", CASES)
def test_mixed_python_echo(case, vsocket_runner, servers):
    """progs/echo_server.py and echo_client.py, one of them under vsocket:
    two connections each echo ~3 MB of seeded random data, byte-checked by the
    client, with the expected sha256, and the server's totals equal the
    client's.  Held open afterwards (echo_client --hold), the vsocket end's
    connections are on kernel TCP with reason peer-not-vsocket (SHM_BUILT),
    or kernel with a reason (no shm in the build)."""
    srv_runner, cli_runner = sides(case, vsocket_runner)
    port = free_port()
    srv = servers.start("echo_server", [PY, PROGS / "echo_server.py", "--host", "127.0.0.1",
                                        "--port", port, "--proto", "tcp"], srv_runner, port=port)
    client = servers.start("echo_client", [PY, PROGS / "echo_client.py", "--host", "127.0.0.1",
                                           "--port", port, "--conns", ECHO["conns"],
                                           "--messages", ECHO["messages"],
                                           "--max-size", ECHO["max_size"], "--seed", ECHO["seed"],
                                           "--hold"], cli_runner, stdin=subprocess.PIPE)
    wait_until(lambda: "echo_client: holding" in client.stdout(), 60,
               lambda: "echo_client to have its streams echoed", [srv, client])

    vside = srv if srv_runner.preloaded else client
    vs = vsocket_runner.vsocket
    what = f"{vside.name} under vsocket ({case})"
    wait_tcp_paths(lambda: stat_for_tree(vs, vside.pid), what, peer="plain",
                   min_conns=ECHO["conns"])

    client.proc.stdin.close()
    rc = client.wait_exit(timeout=60)
    assert rc == 0, client.describe()
    client.check_output_clean()
    m = re.search(r"echo_client: (proto=.*)", client.stdout())
    assert m, client.describe()
    c = kv(m.group(1))
    assert c["result"] == "PASS" and c["mismatches"] == "0", client.describe()
    assert c["bytes_sent"] == c["bytes_received"] and int(c["pings"]) > 0, c
    assert c["sha256"] == echo_digest(**ECHO), f"client sent other data than expected: {c}"
    if srv_runner.preloaded:
        # the server's closed connections keep the same path and reason
        wait_tcp_paths(lambda: stat_for_tree(vs, srv.pid), what + " after the end",
                       peer="plain", min_conns=ECHO["conns"])
    assert srv.stop() == 0, srv.describe()
    srv.check_output_clean()
    s = kv(re.search(r"echo_server: (.*)", srv.stdout()).group(1))
    assert int(s["tcp_bytes"]) == int(c["bytes_sent"]) and int(s["tcp_conns"]) == ECHO["conns"] \
        and s["errors"] == "0", f"server {s} vs client {c}"


# ------------------------------------------------------------------ redis

BENCH_TESTS = ["SET", "GET", "LPUSH", "LPOP", "MSET"]
N = 10000
CONNS = 10


@pytest.mark.redis
@pytest.mark.parametrize("case", CASES)
def test_mixed_redis(case, vsocket_runner, servers, tmp_path):
    """redis-server and its clients (redis-benchmark -n 10000 -c 10 SET GET
    LPUSH LPOP MSET; `redis-cli -r R -i 0.1 INCR`, which keeps one connection
    busy for a few seconds), one side under vsocket: every benchmark test
    completes, INFO commandstats counts exactly N of each and R INCRs, the
    counter is R.  The vsocket side's connections are on kernel TCP with
    reason peer-not-vsocket (SHM_BUILT; the long-lived redis-cli connection
    is polled for it while open) or kernel with a reason (no shm built)."""
    srv_runner, cli_runner = sides(case, vsocket_runner)
    vs = vsocket_runner.vsocket
    srv, port = start_redis(srv_runner, servers, tmp_path)
    reps = int(35 * max(1.0, TIMEOUT_SCALE))  # >= 3.5 s: outlives the 3 s poll below
    repeat = servers.start("redis-cli-repeat", [require_program("redis-cli"), "-h", "127.0.0.1",
                                                "-p", port, "-r", reps, "-i", "0.1", "INCR",
                                                "mixed:counter"], cli_runner)
    vside = srv if srv_runner.preloaded else repeat
    wait_tcp_paths(lambda: stat_for_tree(vs, vside.pid),
                   f"{vside.name} under vsocket ({case}), redis-cli -r connection",
                   peer="plain", min_conns=1)

    bench = require_program("redis-benchmark")
    res, sampler = run_sampled([bench, "-h", "127.0.0.1", "-p", port, "-n", N, "-c", CONNS,
                                "-t", ",".join(t.lower() for t in BENCH_TESTS), "--csv"],
                               cli_runner, timeout=120)
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    done = [r["test"].split()[0] for r in rows]
    assert done == BENCH_TESTS, f"benchmark tests completed: {done}\n{res.describe()}"
    if cli_runner.preloaded:
        check_sampled_paths(sampler, f"redis-benchmark under vsocket ({case})", peer="plain",
                            min_conns=CONNS, min_shm=0)
    else:
        # every connection the server accepted: the benchmark's and redis-cli -r's
        wait_tcp_paths(lambda: stat_for_tree(vs, srv.pid),
                       f"redis-server under vsocket ({case}) after redis-benchmark",
                       peer="plain", min_conns=CONNS + 1)

    assert repeat.wait_exit(timeout=30) == 0, repeat.describe()
    repeat.check_output_clean()
    lines = repeat.stdout().split()
    assert lines == [str(i) for i in range(1, reps + 1)], repeat.describe()
    stats = commandstats(cli_runner, port)
    calls = {k: stats.get(k, (0, 0)) for k in ("set", "get", "lpush", "lpop", "mset", "incr")}
    want = {k: (N, 0) for k in ("set", "get", "lpush", "lpop", "mset")}
    want["incr"] = (reps, 0)
    assert calls == want, f"redis commandstats (calls, failed) {calls}, expected {want}"
    assert cli(cli_runner, port, "GET", "mixed:counter").stdout.strip() == str(reps)
    if srv_runner.preloaded:
        wait_tcp_paths(lambda: stat_for_tree(vs, srv.pid),
                       f"redis-server under vsocket ({case}) at the end", peer="plain",
                       min_conns=CONNS + 3)
    srv.stop()
    srv.check_output_clean()
