"""An ONC RPC file service (issue 25): nfs-ganesha (Debian's packages, the
VFS FSAL on a temp directory, NFSv3 over TCP, registered with rpcbind) and
libnfs's user-space client tools (nfs-cp, nfs-ls), both under vsocket.

ntirpc, ganesha's RPC library, waits in several threads on one epoll set,
re-arms each connection EPOLLONESHOT with EPOLL_CTL_MOD after every request
and registers a dup of the socket for EPOLLOUT. Over shm it hung three ways
before aaabeda (tests/unit/epoll_rearm.c, semantics io_errno_kept): a re-arm
while another thread slept was never heard of, a registration outliving its
close spoke for the next connection under the same number, and a send that
succeeded left EAGAIN in errno, which ntirpc reads.

Here: a 16 MiB file written and read back through the server, and 40 small
files written and listed, with and without vsocket; the trees and listings
must be identical, and with vsocket the server's NFS connections on shm.
Needs root (the VFS FSAL opens files by handle) and rpcbind (started here
when none answers; stopped after). Skipped under the sanitizer build, whose
runtime refuses ganesha's dlopen with RTLD_DEEPBIND. ~12 s."""

import hashlib
import os
import random
import re
import shutil
import signal
import subprocess

import pytest

from conftest import (SANITIZER_BUILD, T, check_server_stat, finish_comparison, free_port,
                      require_program, run_cmd)

pytestmark = pytest.mark.nfs

BIG = 16 << 20
SMALL = 40


def rpcbind_answers() -> bool:
    res = subprocess.run([require_program("rpcinfo"), "-p", "127.0.0.1"], capture_output=True,
                         timeout=30)
    return res.returncode == 0


@pytest.fixture(scope="module")
def rpcbind():
    """rpcbind on 127.0.0.1: the one running, or one of ours for the module."""
    if os.geteuid() != 0:
        pytest.skip("nfs-ganesha's VFS FSAL needs root")
    if rpcbind_answers():
        yield
        return
    proc = subprocess.Popen([require_program("rpcbind"), "-f", "-w"], start_new_session=True)
    for _ in range(100):
        if rpcbind_answers():
            break
        if proc.poll() is not None:
            pytest.fail(f"rpcbind exited {proc.returncode}", pytrace=False)
        subprocess.run(["sleep", "0.1"])
    yield
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def write_conf(d, nfs_port, mnt_port):
    conf = d / "ganesha.conf"
    conf.write_text(f"""NFS_CORE_PARAM {{
    NFS_Port = {nfs_port};
    MNT_Port = {mnt_port};
    Bind_Addr = 127.0.0.1;
    Protocols = 3;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
}}
# No grace period: a fresh server refuses SETATTR in it (NFS3ERR_JUKEBOX).
NFSV4 {{ Graceless = true; }}
NFS_KRB5 {{ Active_krb5 = false; }}
EXPORT {{
    Export_Id = 1;
    Path = {d}/export;
    Pseudo = /export;
    Access_Type = RW;
    Squash = None;
    Protocols = 3;
    Transports = TCP;
    SecType = sys;
    FSAL {{ Name = VFS; }}
}}
LOG {{ Default_Log_Level = WARN; }}
""")
    return conf


def registered(mnt_port) -> bool:
    """ganesha's MOUNT service is known to rpcbind at its port (clients find
    it there)."""
    res = subprocess.run([require_program("rpcinfo"), "-p", "127.0.0.1"], capture_output=True,
                         text=True, timeout=30)
    return re.search(rf"100005\s+3\s+tcp\s+{mnt_port}\s", res.stdout) is not None


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_service(runner, servers, tmp_path):
    d = tmp_path / f"nfs-{runner.name}"
    (d / "export").mkdir(parents=True)
    (d / "local").mkdir()
    rnd = random.Random(25)
    big = d / "local" / "big"
    big.write_bytes(rnd.randbytes(BIG))
    smalls = []
    for i in range(SMALL):
        p = d / "local" / f"s{i:02}"
        p.write_bytes(rnd.randbytes(rnd.choice([1, 100, 4096, 65536, rnd.randint(1, 65536)])))
        smalls.append(p)
    nfs_port, mnt_port = free_port(), free_port()
    conf = write_conf(d, nfs_port, mnt_port)
    srv = servers.start("ganesha", [require_program("ganesha.nfsd"), "-F", "-L", d / "ganesha.log",
                                    "-f", conf, "-p", d / "ganesha.pid", "-N", "NIV_WARN"],
                        runner, port=int(nfs_port), ready_timeout=60)
    for _ in range(300):
        if registered(mnt_port):
            break
        assert srv.alive(), f"ganesha died:\n{srv.describe()}\n{(d / 'ganesha.log').read_text()}"
        subprocess.run(["sleep", "0.1"])
    else:
        pytest.fail(f"ganesha never registered MOUNT at {mnt_port} with rpcbind", pytrace=False)
    url = f"nfs://127.0.0.1{d}/export"
    cp = require_program("nfs-cp")
    run_cmd([cp, big, f"{url}/big?version=3"], runner, timeout=T(300))
    back = d / "local" / "big.back"
    run_cmd([cp, f"{url}/big?version=3", back], runner, timeout=T(300))
    assert digest(back) == digest(big), f"[{runner}] the file read back differs"
    for p in smalls:
        run_cmd([cp, p, f"{url}/{p.name}?version=3"], runner, timeout=T(120))
    listing = run_cmd([require_program("nfs-ls"), f"{url}?version=3"], runner, timeout=T(120))
    names = sorted(line.split()[-1] for line in listing.stdout.splitlines() if line.strip())
    assert names == sorted(["big"] + [p.name for p in smalls]), f"[{runner}] listing {names}"
    for p in smalls:
        assert digest(d / "export" / p.name) == digest(p), f"[{runner}] {p.name} differs"
    if runner.preloaded:
        # the NFS connections of the client's runs: on shm
        check_server_stat(srv, int(nfs_port), peer="vsocket", min_shm=1)
    rc = srv.stop(signal.SIGTERM, timeout=60)
    assert rc == 0, f"[{runner}] ganesha exit code {rc}\n{srv.describe()}"
    shutil.rmtree(d / "export")
    return {"big": digest(big), "files": len(names)}


def test_nfs_ganesha(runners, servers, tmp_path, rpcbind):
    """nfs-ganesha serving a directory over NFSv3; libnfs's nfs-cp writes
    and reads a 16 MiB file and 40 small ones, nfs-ls lists them: identical
    with and without vsocket, on shm with it."""
    if SANITIZER_BUILD:
        pytest.skip("ganesha dlopens its FSAL with RTLD_DEEPBIND, which the sanitizer runtime "
                    "refuses (google/sanitizers#611): the release build's stage runs it")
    results = {r.name: run_service(r, servers, tmp_path) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
