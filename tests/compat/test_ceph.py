"""A single-host Ceph cluster from Debian's packages (ceph-mon, ceph-mgr,
ceph-osd on memstore, auth none, `ms type = async+posix`), every daemon and
client under vsocket.

Issue 19: the monitor died with SIGSEGV in close() when the manager stopped.
Making a pool makes the monitor fork its CRUSH smoke test (Ceph's
fork_function: a child that closes every descriptor, then forks again); that
child's closes unlinked the parent's connections from a list whose links
lived in the connections' shared pages, and the parent's next close followed
a link into a page it had unmapped. Here: four pools are made, `rados bench`
writes for 2 s, then the daemons stop one at a time (manager, OSD, monitor),
each by SIGTERM: each must exit by itself with status 0, the others still
running, and no daemon may log a caught signal. VSOCKET_CEPH_STOP_ORDER
(e.g. "mon,osd,mgr") stops them in another order: issue 19 asks every
order to pass (docs/design/shm-transport.md, fork). With vsocket, the OSD's
connection from `rados bench` is on shm and carried the benchmark's bytes.

Cost: one cluster per runner, 25 s each on this shared 2-core machine (55 s
under a load average of 9; the manager's start and the Python `ceph` CLI
dominate); under the ASan build 50 s each; scripts/install-deps.sh
installs the packages (61 MB of archives, 244 MB installed, about a minute).
On the old build this test failed 5 runs of 5: the monitor died (-11) when the
OSD or the manager stopped, or stopped answering after a smoke test (the next
`ceph osd pool create` timed out)."""

import json
import os
import re
import signal
import time
import uuid

import pytest

from conftest import (T, check_server_stat, dump_stat, finish_comparison, find_sockets, free_port,
                      require_program, run_cmd)

pytestmark = pytest.mark.ceph

BENCH_S = 2
BLOCK = 65536
POOLS = ("bench", "p1", "p2", "p3")
STOP_ORDER = tuple(os.environ.get("VSOCKET_CEPH_STOP_ORDER", "mgr,osd,mon").split(","))


def write_conf(d, port):
    fsid = str(uuid.uuid4())
    conf = d / "ceph.conf"
    conf.write_text(f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{port}
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms type = async+posix
ms bind ipv6 = false
ms bind msgr1 = false
run dir = {d}/run
admin socket = {d}/run/$name.asok
log file = {d}/log/$name.log
pid file = {d}/run/$name.pid
keyring = {d}/keyring
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd objectstore = memstore
memstore device bytes = 536870912
osd data = {d}/osd.$id
mon data = {d}/mon.$id
mgr data = {d}/mgr.$id
osd crush chooseleaf type = 0
""")
    for sub in ("run", "log", "mon.a", "mgr.x", "osd.0"):
        (d / sub).mkdir()
    (d / "keyring").write_text("")
    return conf, fsid


def ceph(runner, conf, *args, timeout=60, **kw):
    return run_cmd([require_program("ceph"), "-c", conf, *args], runner, timeout=timeout,
                   check_errors=False, **kw)


def wait_healthy(runner, conf):
    """Until the manager is active and the OSD up and in (90 s at most)."""
    deadline = time.monotonic() + T(90)
    status = {}
    while time.monotonic() < deadline:
        out = ceph(runner, conf, "status", "--format", "json", expect_rc=None, timeout=30).stdout
        try:
            status = json.loads(out)
        except ValueError:
            status = {}
        osds = status.get("osdmap", {})
        osds = osds.get("osdmap", osds)  # the layout of older releases
        if status.get("mgrmap", {}).get("available") and osds.get("num_up_osds") == 1 \
                and osds.get("num_in_osds") == 1:
            return
        time.sleep(0.5)
    pytest.fail(f"[{runner}] the cluster did not come up within {T(90):.0f}s: {status}",
                pytrace=False)


def caught_signals(d) -> list[str]:
    """What Ceph's own fatal-signal handler logged, in every daemon's log."""
    pat = re.compile(r"\*\*\* Caught signal \([^)]*\) \*\*")
    return [f"{p.name}: {m.group(0)}" for p in sorted((d / "log").glob("*.log"))
            for m in pat.finditer(p.read_text(errors="replace"))]


def run_cluster(runner, servers, tmp_path):
    for prog in ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph", "rados", "monmaptool"):
        require_program(prog)
    d = tmp_path / f"ceph-{runner.name}"
    d.mkdir()
    port = free_port()
    conf, fsid = write_conf(d, port)
    run_cmd([require_program("monmaptool"), "--create", "--add", "a", f"v2:127.0.0.1:{port}",
             "--fsid", fsid, d / "monmap"], check_errors=False)
    run_cmd([require_program("ceph-mon"), "-c", conf, "--mkfs", "-i", "a", "--monmap",
             d / "monmap"], runner, check_errors=False)
    daemons = {"mon": servers.start("ceph-mon", [require_program("ceph-mon"), "-c", conf, "-i", "a",
                                                 "-f"], runner, port=port, ready_timeout=30)}
    daemons["mgr"] = servers.start("ceph-mgr", [require_program("ceph-mgr"), "-c", conf, "-i", "x",
                                                "-f"], runner)
    osd_id = ceph(runner, conf, "osd", "create").stdout.strip()
    assert osd_id == "0", osd_id
    run_cmd([require_program("ceph-osd"), "-c", conf, "-i", "0", "--mkfs"], runner, timeout=90,
            check_errors=False)
    daemons["osd"] = servers.start("ceph-osd", [require_program("ceph-osd"), "-c", conf, "-i", "0",
                                                "-f"], runner)
    wait_healthy(runner, conf)
    # The monitor forks its CRUSH smoke test for each pool.
    for pool in POOLS:
        ceph(runner, conf, "osd", "pool", "create", pool, "8")
    res = run_cmd([require_program("rados"), "-c", conf, "-p", "bench", "bench", BENCH_S, "write",
                   "-b", BLOCK, "-t", "16", "--no-cleanup"], runner, timeout=120,
                  check_errors=False)
    m = re.search(r"^Total writes made:\s+(\d+)", res.stdout, re.M)
    assert m and int(m.group(1)) > 0, res.describe()
    writes = int(m.group(1))
    if runner.preloaded:
        # The benchmark's connection to the OSD: on shm, with its bytes.
        procs, socks = check_server_stat(daemons["osd"], peer="vsocket", settled=False, min_shm=1)
        on_shm = [s for s in find_sockets(socks, proto="tcp") if s.get("transport") == "shm"]
        assert max((s.get("rx_bytes", 0) for s in on_shm), default=0) >= writes * BLOCK, \
            dump_stat(procs)
        check_server_stat(daemons["mon"], port, peer="vsocket", settled=False, min_shm=1)
    exits = {}
    assert sorted(STOP_ORDER) == ["mgr", "mon", "osd"], f"VSOCKET_CEPH_STOP_ORDER={STOP_ORDER}"
    for name in STOP_ORDER:
        exits[name] = daemons[name].stop(signal.SIGTERM, timeout=60)
        others = [o for o in daemons if o not in exits and not daemons[o].alive()]
        assert not others, (f"[{runner}] {others} died when {name} stopped:\n"
                            + "\n".join(daemons[o].describe() for o in others)
                            + f"\n{caught_signals(d)}")
    assert exits == {"mgr": 0, "osd": 0, "mon": 0}, (f"[{runner}] exit codes {exits}\n"
                                                    + f"{caught_signals(d)}")
    assert not caught_signals(d), caught_signals(d)
    return {"writes": writes > 0, "exits": exits}


def test_ceph_cluster_stops_cleanly(runners, servers, tmp_path):
    """Four pools, 2 s of `rados bench`, then manager, OSD and monitor stopped one
    by one: every daemon exits 0 by itself, with and without vsocket."""
    results = {r.name: run_cluster(r, servers, tmp_path) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
