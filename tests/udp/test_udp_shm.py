"""UDP between two processes of one host over shared memory (issue 23 step
3, docs/design/udp.md §7), with VSOCKET_UDP_SHM=1 (experimental, off by
default).

Each scenario of progs/pairs.py runs twice, plain and under `vsocket run`,
and must observe the same; the plain run's key observations are checked so
that two runs agreeing on nothing cannot pass. Under vsocket, the log must
show the pair up in both processes and datagrams carried by the rings both
ways (the counts a pair logs when it ends), so that a run that stayed on
the kernel cannot pass for one on shm.

progs/hostile.py's attackers (a squatter on the rendezvous name, a peer
writing an impossible record into the ring) change nothing the program
sees, and the log names what was refused.

A real DNS server (NSD, a pre-fork server) under dnsperf's load runs the same
way on shm (test_nsd_dnsperf_on_shm).

Environment: VSOCKET_BUILD_DIR (default <repo>/build) holds bin/vsocket.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PAIRS = HERE / "progs" / "pairs.py"
HOSTILE = HERE / "progs" / "hostile.py"
BUILD_DIR = Path(os.environ.get("VSOCKET_BUILD_DIR") or (REPO / "build")).resolve()
VSOCKET = BUILD_DIR / "bin" / "vsocket"
PYTHON = sys.executable
HANG = 300  # only a hang crosses it (an ASan build under load is slow)

SHM = {"VSOCKET_UDP_SHM": "1"}

EXPECT = {
    "stream_v4": {"received": 3000, "duplicated": 0, "missing": 0, "sender": 0},
    "stream_v6": {"received": 3000, "duplicated": 0, "missing": 0, "sender": 0},
    "mapped": {"sources": ["::ffff:127.0.0.1"], "child": 0},
    "readiness": {"poll": [["[1]"], 60], "select": [["[1]"], 60], "epoll": [["[1]"], 60],
                  "epoll edge": [["[1]", "again []"], 60], "nothing queued": [], "sender": 0},
    "semantics": {"FIONREAD: the next datagram": 100, "peek|trunc: full length": 100,
                  "recvmsg cut": [10, True, []], "zero-length": "", "60000 bytes": [60000, True],
                  "trunc: full length": 4, "empty": "EAGAIN", "sender": 0},
    "mmsg": {"truncated entries": [["aaaa", True], ["bbb", False]], "connected got": ["c1", "c2"],
             "empty, non-blocking": "error EAGAIN", "sender": 0},
    "connect": {"queued before connect, and the connected peer's": ["a heard", "b early"],
                "then": "nothing", "peers": [0, 0]},
    "squatter": {"received in order": True, "sender": 0, "squatter": 0},
    "ring": {"received": "after", "hostile": 0, "then": "nothing"},
    "forked_receiver": {"receiver": 0, "sender": 0},
    "exec_receiver": {"receiver": 0, "sender": 0},
    "option_after_pair": {"received": list(range(20)), "sender": 0},
    "prefork": {"server": 0, "sender": 0},
    "child_sends_first": {"child": 0, "echo": 0},
    "inherited_epoll": {"worker": 0, "sender": 0},
}

# Scenarios whose receiver hands its socket on to a child (udp.md §8), and
# what the log must say the hand-over did.
HANDED = {"forked_receiver": "used", "exec_receiver": "is inherited by an exec'd image",
          "child_sends_first": "used", "inherited_epoll": "used"}


def names(prog):
    return subprocess.run([PYTHON, str(prog), "--list"], capture_output=True, text=True,
                          check=True).stdout.split()


def observations(argv, env=None) -> list:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=HANG,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, f"{argv} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def same_as_plain(prog, name, env, tmp_path) -> str:
    plain = observations([PYTHON, str(prog), name])
    for label, value in EXPECT[name].items():
        assert [label, value] in plain, f"{name}: without vsocket, {label!r} is not {value!r}: {plain}"
    under = observations([str(VSOCKET), "run", "--", PYTHON, str(prog), name], env)
    assert under == plain
    return (tmp_path / "vsocket.log").read_text(errors="replace")


RING = re.compile(r"vsocket\[(\d+)\] debug: udp shm: pair with \S+ ended: (\d+) datagrams sent "
                  r"on the ring, (\d+) dropped there \(receiver full\), (\d+) received from it")


@pytest.mark.parametrize("name", names(PAIRS))
def test_pairs_on_shm(name, vs_env, tmp_path):
    log = same_as_plain(PAIRS, name, {**vs_env, **SHM}, tmp_path)
    ups = set(re.findall(r"vsocket\[(\d+)\] debug: udp shm: pair with \S+ up", log))
    assert len(ups) == (3 if name == "connect" else 2), log[-3000:]
    ended = RING.findall(log)
    assert {pid for pid, *_ in ended} == ups, log[-3000:]
    # Each process delivered datagrams from its ring, and none was dropped
    # there (every scenario waits for its receiver).
    for pid, sent, full, received in ended:
        assert int(received) > 0 and int(full) == 0, log[-3000:]
    # The first to close ends the pair; the other sees it leave. Nothing
    # else may take a pair back to the kernel here.
    allowed = "peer-left-rings|the socket connected to another peer" if name == "connect" \
        else "peer-left-rings|left-by-fork" if name in HANDED \
        else "peer-left-rings|udp-option" if name == "option_after_pair" else "peer-left-rings"
    if name in HANDED:
        # The child's first receive (or the exec) said so, and the sender
        # then took the kernel, where the child reads.
        assert re.search(rf"(fd \d+|a udp socket) {HANDED[name]} in process \d+ \(its carrier: \d+\)",
                         log), \
            log[-3000:]
        assert re.search(r"pair with \S+ on the kernel from now on: left-by-fork$", log, re.M), \
            log[-3000:]
    assert not re.search(rf"on the kernel from now on: (?!({allowed})$)", log, re.M), log[-3000:]


@pytest.mark.parametrize("wait", ["recv", "poll", "epoll"])
def test_quiet_rings_give_memory_back(wait, vs_env, tmp_path):
    """A receiver's ring grown by a burst gives its pages back while the
    receiver waits (udp.md §7): progs/idle.py's resident ring memory after
    the burst, and after a 1 s wait that found nothing."""
    out = subprocess.run([str(VSOCKET), "run", "--", PYTHON, str(HERE / "progs" / "idle.py"), wait],
                         capture_output=True, text=True, timeout=HANG,
                         env={**os.environ, **vs_env, **SHM})
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
    res = json.loads(out.stdout.strip().splitlines()[-1])
    log = (tmp_path / "vsocket.log").read_text(errors="replace")
    assert res["received"] == 100 and res["sender"] == 0, res
    assert re.search(r"ended: \d+ datagrams sent on the ring, 0 dropped there \(receiver full\), "
                     r"1\d\d received from it", log), log[-3000:]
    # The burst (100 x 1,400 B) grew the ring past its 64 KiB window; once
    # quiet, only the rings' header pages stay.
    assert res["grown_kib"] >= 96, res
    assert res["quiet_kib"] <= 16, res


def test_stat_shows_peers_and_drops(vs_env, tmp_path):
    """`vsocket stat` shows a UDP socket's peers on shm and the datagrams a
    full receiver cost it (udp.md §9): progs/flood.py's sender overruns a
    receiver that does not read; every datagram is either received or
    counted as dropped."""
    p = subprocess.Popen([str(VSOCKET), "run", "--", PYTHON, str(HERE / "progs" / "flood.py")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, **vs_env, **SHM})
    try:
        pids = json.loads(p.stdout.readline())
        env = {**os.environ, **vs_env}
        doc = json.loads(subprocess.run([str(VSOCKET), "stat", "--json"], capture_output=True,
                                        text=True, timeout=HANG, env=env, check=True).stdout)
        text = subprocess.run([str(VSOCKET), "stat"], capture_output=True, text=True,
                              timeout=HANG, env=env, check=True).stdout
        out, err = p.communicate("go\n", timeout=HANG)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    res = json.loads(out.strip().splitlines()[-1])
    udp = {pr["pid"]: [s for s in pr["sockets"] if s["proto"] == "udp" and s["transport"] == "shm"]
           for pr in doc["processes"] if pr["pid"] in pids.values()}
    recv, send = udp.get(pids["receiver"]), udp.get(pids["sender"])
    assert recv and send and len(recv) == 1 and len(send) == 1, doc
    assert recv[0]["shm_peers"] == 1 and send[0]["shm_peers"] == 1, doc
    drops = send[0]["receiver_full_drops"]
    assert recv[0]["receiver_full_drops"] == 0 and drops > 0, doc
    assert res["received"] + drops == 400 and res["sender"] == 0, (res, drops)
    assert re.search(rf"^{pids['sender']}\s.*\budp\b.*shm-peers=1,receiver-full-drops={drops}$",
                     text, re.M), text


def test_shm_off_by_default(vs_env, tmp_path):
    """Without VSOCKET_UDP_SHM, no pair is set up (and the scenario is the same)."""
    log = same_as_plain(PAIRS, "stream_v4", vs_env, tmp_path)
    assert "udp socket on the datagram layer (every peer on the kernel)" in log, log[-2000:]
    assert "udp shm" not in log, log[-2000:]


def test_squatter_on_the_rendezvous(vs_env, tmp_path):
    """A process holding the receiver's name first cannot prove it holds the
    receiver's socket: the sender stays on the kernel, every datagram
    arrives, and the receiver says its name is taken."""
    log = same_as_plain(HOSTILE, "squatter", {**vs_env, **SHM}, tmp_path)
    assert re.search(r"rendezvous vsocket/u1/127\.0\.0\.1:\d+ taken", log), log[-2000:]
    assert "on the kernel from now on: peer-proof-failed" in log, log[-2000:]
    assert not re.search(r"udp shm: pair with \S+ up", log), log[-2000:]


def test_hostile_ring(vs_env, tmp_path):
    """A peer that proved itself and then writes a record of an impossible
    length: the receiver says so, the pair goes back to the kernel, and the
    peer's next datagram (by the kernel) is received; nothing else is."""
    log = same_as_plain(HOSTILE, "ring", {**vs_env, **SHM}, tmp_path)
    assert "on the kernel from now on: the peer wrote a malformed datagram ring" in log, log[-2000:]


def free_udp_port() -> int:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_dns_port() -> int:
    """A port free for UDP and TCP both: NSD binds the two and exits if
    either is taken (ctest runs other tests meanwhile)."""
    import socket
    for _ in range(100):
        port = free_udp_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            try:
                t.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise AssertionError("no port free for both UDP and TCP")


def test_sockperf_ping_pong_on_shm(vs_env, tmp_path):
    """A real program: sockperf's UDP ping-pong, server and client under
    vsocket, completes with its figures, on the rings (the log's counts)."""
    env = {**os.environ, **vs_env, **SHM}
    port = str(free_udp_port())
    server = subprocess.Popen([str(VSOCKET), "run", "--", "sockperf", "server", "-i", "127.0.0.1",
                               "-p", port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env)
    try:
        # The client retries its warm-up until the server answers.
        out = subprocess.run([str(VSOCKET), "run", "--", "sockperf", "ping-pong", "-i", "127.0.0.1",
                              "-p", port, "-m", "64", "-t", "2"], capture_output=True, text=True,
                             timeout=HANG, env=env)
    finally:
        server.terminate()
        server.communicate(timeout=HANG)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"avg-latency=\d", out.stdout + out.stderr), out.stdout + out.stderr
    log = (tmp_path / "vsocket.log").read_text(errors="replace")
    assert len(set(re.findall(r"vsocket\[(\d+)\] debug: udp shm: pair with \S+ up", log))) == 2, log[-3000:]
    ended = RING.findall(log)
    assert ended and all(int(received) > 1000 for *_, received in ended), log[-3000:]


ZONE = """$ORIGIN example.test.
$TTL 300
@ IN SOA ns.example.test. admin.example.test. 1 3600 600 86400 300
@ IN NS ns.example.test.
ns IN A 127.0.0.1
www IN A 127.0.0.2
txt IN TXT "vsocket"
"""

NSD_CONF = """server:
    ip-address: 127.0.0.1
    port: {port}
    username: ""
    chroot: ""
    zonesdir: "{dir}"
    pidfile: "{dir}/nsd.pid"
    database: ""
    xfrdfile: "{dir}/xfrd.state"
    zonelistfile: "{dir}/zone.list"
    logfile: "{dir}/nsd.log"
    server-count: 1
    do-ip6: no
    rrl-ratelimit: 0
remote-control:
    control-enable: no
zone:
    name: "example.test"
    zonefile: "example.zone"
"""

DNSPERF = re.compile(r"Queries sent:\s+(\d+).*?Queries completed:\s+(\d+).*?Queries lost:\s+(\d+)"
                     r".*?Response codes:\s+NOERROR (\d+)", re.S)


def wait_udp_bound(port, proc):
    """Until a UDP socket is bound to 127.0.0.1:PORT (/proc/net/udp), or
    PROC ended; bounded: only a hang crosses it."""
    want = "0100007F:%04X" % port
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline and proc.poll() is None:
        with open("/proc/net/udp") as f:
            if any(line.split()[1] == want for line in list(f)[1:]):
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing bound to UDP port {port}: {proc.poll()}")


def dns_load(port, tmp_path, env):
    """NSD serving a zone (its main process binds and forks the server
    child that answers: a pre-fork server) and dnsperf's 2,000 queries
    against it, both through ENV's runner; dnsperf's counts."""
    d = tmp_path / f"nsd-{'vs' if env else 'plain'}"
    d.mkdir()
    (d / "example.zone").write_text(ZONE)
    (d / "nsd.conf").write_text(NSD_CONF.format(port=port, dir=d))
    (d / "queries").write_text("www.example.test A\ntxt.example.test TXT\n")
    pre = [str(VSOCKET), "run", "--"] if env else []
    run_env = {**os.environ, **(env or {})}
    nsd = subprocess.Popen(pre + [shutil.which("nsd"), "-d", "-c", str(d / "nsd.conf")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env,
                           start_new_session=True)
    try:
        # A query sent before NSD's server child binds is refused by the
        # kernel and never answered: wait for the socket, not for a probe.
        wait_udp_bound(port, nsd)
        out = subprocess.run(pre + ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d",
                                    str(d / "queries"), "-n", "1000", "-t", "30"],
                             capture_output=True, text=True, timeout=HANG, env=run_env)
    finally:
        if nsd.poll() is None:
            os.killpg(nsd.pid, 15)
        out_nsd = nsd.communicate(timeout=HANG)[0]
        log = d / "nsd.log"
        print(out_nsd, log.read_text(errors="replace") if log.exists() else "")
    m = DNSPERF.search(out.stdout)
    assert out.returncode == 0 and m, out.stdout + out.stderr
    return [int(x) for x in m.groups()]


def test_nsd_dnsperf_on_shm(vs_env, tmp_path):
    """A DNS server under a resolver load: NSD's server child (forked
    before its socket's first use) carries the socket, its pair with
    dnsperf comes up, and every query is answered, as without vsocket."""
    for prog in ("nsd", "dnsperf"):
        assert shutil.which(prog), f"{prog} missing: scripts/install-deps.sh test installs it"
    plain = dns_load(free_dns_port(), tmp_path, None)
    assert plain == [2000, 2000, 0, 2000], plain
    under = dns_load(free_dns_port(), tmp_path, {**vs_env, **SHM})
    assert under == plain
    log = (tmp_path / "vsocket.log").read_text(errors="replace")
    assert len(set(re.findall(r"vsocket\[(\d+)\] debug: udp shm: pair with \S+ up", log))) == 2, \
        log[-3000:]
    # Both ends delivered from their rings (how many depends on how soon
    # the pair came up: on a quiet host nearly all 2,000).
    ended = RING.findall(log)
    assert len(ended) == 2 and all(int(received) > 0 for *_, received in ended), log[-3000:]
