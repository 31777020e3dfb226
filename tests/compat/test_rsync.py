"""rsync: a daemon and a client pulling and pushing a tree, both under
vsocket. The client forks once connected (its generator and receiver share
the socket) and the daemon forks per connection: the case that crashed the
client on shm (issue 19: rings mapped by one process after the fork)."""

import hashlib
import os
import random

import pytest

from conftest import finish_comparison, free_port, require_program, run_cmd

pytestmark = pytest.mark.rsync

RUNS = 5


def make_tree(root):
    rnd = random.Random(19)
    root.mkdir()
    for i in range(200):
        size = rnd.choice([1, 100, 4096, 65536, 300_000, rnd.randint(1, 300_000)])
        (root / f"f{i:03}").write_bytes(rnd.randbytes(size))


def digest(root) -> str:
    h = hashlib.sha256()
    for p in sorted(root.iterdir()):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def start_daemon(runner, servers, d, port):
    conf = d / "rsyncd.conf"
    conf.write_text(f"port = {port}\naddress = 127.0.0.1\nuse chroot = no\n"
                    f"pid file = {d}/rsyncd.pid\n"
                    f"[src]\npath = {d}/src\nread only = yes\n"
                    f"[dst]\npath = {d}/pushed\nread only = no\n"
                    + ("uid = root\ngid = root\n" if os.geteuid() == 0 else ""))
    (d / "pushed").mkdir()
    srv = servers.start("rsyncd", [require_program("rsync"), "--daemon", "--no-detach",
                                   f"--config={conf}"], runner, port=port)
    return srv


def run_rsync(runner, servers, tmp_path):
    d = tmp_path / f"rsync-{runner.name}"
    d.mkdir()
    make_tree(d / "src")
    want = digest(d / "src")
    port = free_port()
    srv = start_daemon(runner, servers, d, port)
    rsync = require_program("rsync")
    for i in range(RUNS):
        dst = d / f"pulled{i}"
        run_cmd([rsync, "-a", f"rsync://127.0.0.1:{port}/src/", f"{dst}/"], runner, timeout=120)
        assert digest(dst) == want, f"[{runner}] pull {i}: the tree differs"
        run_cmd([rsync, "-a", f"{d}/src/", f"rsync://127.0.0.1:{port}/dst/p{i}/"], runner,
                timeout=120)
        assert digest(d / "pushed" / f"p{i}") == want, f"[{runner}] push {i}: the tree differs"
    srv.stop()
    srv.check_output_clean()
    return {"pulls": RUNS, "pushes": RUNS, "digest": want}


def test_rsync_pull_push(runners, servers, tmp_path):
    """A 200-file tree (1 B..300 KB) pulled and pushed five times each
    through an rsync daemon: every run exits 0 and the trees are identical,
    with and without vsocket."""
    results = {r.name: run_rsync(r, servers, tmp_path) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
