"""Peers in pid namespaces of their own: the containers of one Kubernetes
pod, or `docker run --network host`, share the host's (or the pod's)
network and /dev/shm but number their processes from 1.

  a. The proof that a peer holds its socket (transport/local_proof.c) looks
     into /proc/PID/fd; a peer in a namespace we do not see has pid 0 for
     us. Such a peer sends the O_PATH proof a peer of another user sends.
     A server in a namespace of its own with a client on the host, the
     reverse, and two namespaces side by side (a pod): shm at both ends,
     the echo exact. (Before: the end that could not see the other declined,
     peer-proof-failed, and both stayed on the kernel.)
  b. Statistics (config/stats.c, tool/cmd_stat.c): each namespace has its
     own pid 1, so a container names its file vsocket-stats.nsINODE.PID;
     `vsocket stat` on the host shows a container's processes under their
     host pids, and never removes the file of one it can see. Inside, the
     container's own `vsocket stat` shows them under its numbers (a.).
     (Before: two pid 1s wrote one file, and the host's `vsocket stat`
     removed a live container's file as a dead process's.) A stale file is
     removed only if it is still the file judged: a new pid 1 in a
     namespace whose inode the kernel reused takes the same name (this
     test's runs do that, one after another: 2 of 6 failed so).

Needs root and unshare(1); skipped otherwise, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from harness import PROGS, VSOCKET, Proc

NS = ["unshare", "--pid", "--fork", "--mount-proc"]
# docker's default: a /dev/shm of the container's own as well.
PRIVATE_SHM = NS + ["sh", "-c", 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "sh"]
SIZE = 1 << 20


@pytest.fixture(scope="module", autouse=True)
def _can_unshare():
    if os.geteuid() != 0:
        pytest.skip("not root: cannot make a pid namespace")
    if not shutil.which("unshare"):
        pytest.skip("no unshare(1)")
    r = subprocess.run(NS + ["true"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"unshare --pid refused here: {r.stderr.strip()}")


def start(role: str, in_ns: bool, *args: str, private_shm: bool = False) -> Proc:
    argv = [str(VSOCKET), "run", "--", sys.executable, str(PROGS / "ns_echo.py"), role, *args]
    env = dict(os.environ, VSOCKET=str(VSOCKET), VSOCKET_UPGRADE_AFTER_US="0",
               VSOCKET_LOG_LEVEL="info")
    prefix = (PRIVATE_SHM if private_shm else NS) if in_ns else []
    return Proc(role, prefix + argv, env)


def expect(p: Proc, ev: str, timeout: float = 120.0) -> dict:
    import queue
    try:
        while True:
            got = p.q.get(timeout=timeout)
            if got.get("ev") == ev:
                return got
            if got.get("ev") == "stdout-eof":
                break
    except queue.Empty:
        pass
    pytest.fail(f"no {ev!r} from {p.role}:\n{p.describe()}", pytrace=False)


def host_pid(p: Proc, in_ns: bool) -> int:
    """The program's pid as the host numbers it: unshare's child when in a
    namespace (vsocket run execs the program in place)."""
    if not in_ns:
        return p.p.pid
    with open(f"/proc/{p.p.pid}/task/{p.p.pid}/children") as f:
        return int(f.read().split()[0])


def ns_pids(pid: int) -> list[int]:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    return []


def host_stat() -> dict:
    r = subprocess.run([str(VSOCKET), "stat", "--json"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode in (0, 3), r.stderr  # 3: no process
    return {p["pid"]: p for p in json.loads(r.stdout)["processes"]}


@pytest.mark.parametrize("server_ns,client_ns,private_shm",
                         [(True, False, False), (False, True, False), (True, True, False),
                          (True, True, True)],
                         ids=["server-in-ns", "client-in-ns", "both-in-own-ns",
                              "both-with-own-dev-shm"])
def test_peers_in_pid_namespaces(server_ns, client_ns, private_shm):
    """PRIVATE_SHM: each end also has a /dev/shm of its own (docker's
    default): the rings are memfds passed over the side channel, so they
    need no shared file system; the statistics are then seen only inside."""
    srv = start("server", server_ns, private_shm=private_shm)
    cli = None
    try:
        port = expect(srv, "listening")["port"]
        cli = start("client", client_ns, str(port), str(SIZE), private_shm=private_shm)
        ends = {"server": (srv, server_ns, expect(srv, "done")),
                "client": (cli, client_ns, expect(cli, "done"))}
        seen = host_stat()
        for role, (p, in_ns, done) in ends.items():
            assert done["ok"], f"{role}: the echo came back wrong"
            own = done["stat"]
            assert own.get("transport") == "shm", \
                f"{role} (in its own pid namespace: {in_ns}) is not on shm: {own}\n{p.describe()}"
            if private_shm:
                continue
            # b. the host's view: the same process under the host's number,
            # its file still there after the host's `vsocket stat` looked.
            hp = host_pid(p, in_ns)
            assert ns_pids(hp)[-1] == done["pid"]
            assert hp in seen, f"host `vsocket stat` does not show {role} (host pid {hp})"
            socks = [s for s in seen[hp]["sockets"] if s["fd"] == done["fd"]]
            assert socks and socks[0]["transport"] == "shm", seen[hp]
            again = subprocess.run([str(VSOCKET), "stat", "--pid", str(done["pid"])],
                                   capture_output=True, text=True, timeout=30)
            if in_ns:
                # Its own number means another process (or none) on the host.
                assert f"\n{done['pid']:<7d} {done['fd']:<4d}" not in again.stdout or \
                    done["pid"] == hp
        if not private_shm:
            assert hp in host_stat(), "the host's `vsocket stat` removed a live file"
        for p, _, _ in ends.values():
            p.send("exit")
        for role, (p, _, _) in ends.items():
            assert p.p.wait(timeout=60) == 0, p.describe()
    finally:
        for p in (srv, cli):
            if p:
                p.kill()
