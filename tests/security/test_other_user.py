"""Peers of other users (issue 9): connections between processes of
different uids go on shm by default, when the proof holds.

The proof for a peer we may not look into (/proc/PID/fd of another user's
process) is an O_PATH descriptor of its socket, sent with HELLO / HELLO_ACK;
the accepter sends its own only to a rendezvous listener of its uid or of the
uid that created the connecting socket (src/transport/shm/handshake.c:
proof_fd, proof_ok, listener_is_connector_user). VSOCKET_SHM_PEERS (any,
same-uid, or a list of users) says whose peers we share rings with.

Runs as root, with user nobody (and www-data for the third-user squatter) as
the other uid; skips, saying why, when that is not possible
(harness.other_user()). Each test checks the uids it ran as, so that a
harness running everything as root cannot pass it.

  a. server as nobody, client as root, and the reverse: shm at both ends,
     4 MiB echoed exactly (sha256).
  b. VSOCKET_SHM_PEERS: same-uid on either end keeps the connection on the
     kernel, the refusing end saying peer-credentials; a list naming nobody
     on the root end: shm; a list not naming it: kernel; a bad value: a
     warning naming the variable, and the default (shm).
  c. a hostile peer of another uid (progs/hostile.py, nobody, under vsocket,
     so it holds the real socket and gets the rings) scribbles over the
     header words and the data of both rings (all words at once; one word
     nudged at a time; the words that never move, one at a time and put
     back) while the root end (progs/victim.py) sends and receives: the
     root end never crashes, no call takes more than a few seconds, it reads
     no byte the hostile peer could not have written (it sends bytes below
     0x80, the peer writes only bytes above: test_hostile_check_not_blind
     shows the check sees bytes that do come from the ring), its errors are
     ECONNRESET/EPIPE, and it exits cleanly. Root end as server and client.
  d. a squatter of a third uid on the rendezvous name, bound before the
     connector binds it (the connector defers its set-up): the squatter gets
     a DECLINE or nothing, never a descriptor (no O_PATH proof, no ring);
     the accepter stays on the kernel (peer-credentials), the echo is exact.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time

import pytest

import attacker as atk
from harness import (ATTACKER, BAD_STDERR, PROGS, VSOCKET, Pair, Proc, free_port, other_user,
                     settled_stat)

# VSOCKET_UPGRADE_CONNECTOR_NS + VSOCKET_UPGRADE_GRACE_NS (src/transport/stream.h):
# by then every set-up has ended, once its program calls.
SETTLE_S = 3.2


@pytest.fixture(scope="module", autouse=True)
def _nobody():
    prefix, _, why = other_user()
    if prefix is None:
        pytest.skip(f"other-uid tests skipped: {why}")


@pytest.fixture
def pairs():
    made: list[Pair] = []

    def make(**kw) -> Pair:
        p = Pair(**kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.cleanup()


def uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[2])  # effective
    raise LookupError(pid)


def check_uids(p: Pair, server: str, client: str):
    want = {"server": pwd.getpwnam(server).pw_uid, "client": pwd.getpwnam(client).pw_uid}
    got = {"server": uid_of(p.server_pid), "client": uid_of(p.client_pid)}
    if got != want:
        p.fail(f"the ends run as uids {got}, not {want}")


ENDS_IDS = ["server-nobody-client-root", "server-root-client-nobody"]


def ends(nobody_end: str) -> tuple[dict, str, str]:
    """Pair arguments and (server user, client user) with NOBODY_END as nobody."""
    if nobody_end == "server":
        return {"server_nobody": True}, "nobody", "root"
    return {"client_nobody": True}, "root", "nobody"


# --------------------------------------------------------------------------
# a. shm between users


@pytest.mark.parametrize("nobody_end", ["server", "client"], ids=ENDS_IDS)
def test_other_user_on_shm(pairs, nobody_end):
    kw, su, cu = ends(nobody_end)
    p = pairs(**kw)
    p.connect()
    check_uids(p, su, cu)
    p.accept()
    p.echo()
    p.assert_upgraded(f"server {su}, client {cu}")
    p.close()


# --------------------------------------------------------------------------
# b. VSOCKET_SHM_PEERS


def settled_pair(p: Pair) -> tuple[dict, dict]:
    """(client, server) records once every set-up has had its time, and
    both ends made a call since."""
    time.sleep(max(0.0, p.t_connected + SETTLE_S - time.monotonic()))
    p.poke()
    return p.stats()


@pytest.mark.parametrize("nobody_end", ["server", "client"], ids=ENDS_IDS)
@pytest.mark.parametrize("refuser", ["root", "nobody"], ids=["same-uid-on-root", "same-uid-on-nobody"])
def test_peers_same_uid(pairs, nobody_end, refuser):
    """VSOCKET_SHM_PEERS=same-uid on one end: both on the kernel, the
    refusing end with reason peer-credentials, the other settled (not
    pending), the echo exact."""
    kw, su, cu = ends(nobody_end)
    refusing = "server" if (su == refuser) else "client"
    kw[f"{refusing}_env"] = {"VSOCKET_SHM_PEERS": "same-uid"}
    p = pairs(**kw)
    p.connect()
    check_uids(p, su, cu)
    p.accept()
    p.echo()
    c, s = settled_pair(p)
    rec = {"client": c, "server": s}
    other = "server" if refusing == "client" else "client"
    where = f"server {su}, client {cu}, VSOCKET_SHM_PEERS=same-uid on the {refusing}"
    if not c or not s or c.get("transport") != "kernel" or s.get("transport") != "kernel":
        p.fail(f"{where}: want both ends on the kernel:\n  client: {c}\n  server: {s}")
    if rec[refusing].get("reason") != "peer-credentials":
        p.fail(f"{where}: the {refusing} refused its peer's user, so its reason must be "
               f"peer-credentials, not {rec[refusing].get('reason')!r}:\n  {rec[refusing]}")
    if "pending" in rec[other].get("reason", ""):
        p.fail(f"{where}: the {other}'s set-up never ended: {rec[other]}")
    p.close()


@pytest.mark.parametrize("value,want", [("nobody", "shm"), ("65534,daemon", "shm"),
                                        ("daemon,bin", "kernel")])
def test_peers_list(pairs, value, want):
    """A list on the root end: nobody (by name or uid) in it gives shm,
    a list without it the kernel."""
    p = pairs(server_nobody=True, client_env={"VSOCKET_SHM_PEERS": value})
    p.connect()
    check_uids(p, "nobody", "root")
    p.accept()
    p.echo()
    if want == "shm":
        p.assert_upgraded(f"VSOCKET_SHM_PEERS={value} on the root end")
    else:
        c, s = settled_pair(p)
        if not c or not s or c.get("transport") != "kernel" or s.get("transport") != "kernel":
            p.fail(f"VSOCKET_SHM_PEERS={value} on the root end (client), the server is "
                   f"nobody: want the kernel at both ends:\n  client: {c}\n  server: {s}")
    p.close()


def test_peers_bad_value(pairs):
    """An unknown user: a warning on stderr that names the variable, and the
    default (any: shm)."""
    p = pairs(server_nobody=True, client_env={"VSOCKET_SHM_PEERS": "nosuchuser"})
    p.connect()
    p.accept()
    p.echo()
    p.assert_upgraded("VSOCKET_SHM_PEERS=nosuchuser on the root end")
    p.close()
    err = p.client.stderr()
    if not any("VSOCKET_SHM_PEERS" in ln and "nosuchuser" in ln and "warn" in ln
               for ln in err.splitlines()):
        p.fail(f"no warning naming VSOCKET_SHM_PEERS and its value on the client's stderr:\n{err}")


# --------------------------------------------------------------------------
# c. a hostile peer of another uid


def _threads(pid: int) -> str:
    out = []
    try:
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                wchan = f.read()
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                sc = f.read().split()[:1]
            out.append(f"tid {tid}: syscall {sc} wchan {wchan}")
    except OSError as e:
        out.append(str(e))
    return "; ".join(out)


def expect(proc: Proc, name: str, timeout: float) -> dict:
    end = time.monotonic() + timeout
    while True:
        try:
            ev = proc.q.get(timeout=max(0.01, end - time.monotonic()))
        except Exception:
            ev = None
        if ev is None or time.monotonic() > end:
            pytest.fail(f"[{proc.role}] no {name!r} event within {timeout} s "
                        f"(threads: {_threads(proc.p.pid)})\n{proc.describe()}", pytrace=False)
        if ev.get("ev") == name:
            return ev
        if ev.get("ev") in ("stdout-eof", "no-rings", "mprotect-failed"):
            pytest.fail(f"[{proc.role}] {ev} while waiting for {name!r}\n{proc.describe()}",
                        pytrace=False)


ATTACK_S = 3.0
OK_ERRORS = {"ECONNRESET", "EPIPE"}
# A bound on a wait that must end (a program's start, a call given a 2 s
# timeout, a close): so loose that only a hang crosses it, however loaded
# the machine. victim.py waits as long for its threads after "stop".
HANG_S = 30.0


def hostile_run(root_end: str, mode: str) -> tuple[dict, list[str], str]:
    """progs/victim.py as root at ROOT_END, progs/hostile.py MODE as nobody
    at the other; the attack starts once both ends are on shm and lasts
    ATTACK_S. Returns (the victim's result, problems, description)."""
    prefix, py, _ = other_user()
    env = dict(os.environ, VSOCKET_LOG_LEVEL="info", VSOCKET_UPGRADE_AFTER_US="0")
    run = [str(VSOCKET), "run", "--"]
    victim_py = [*run, sys.executable, str(PROGS / "victim.py")]
    hostile_py = [*prefix, *run, py, str(PROGS / "hostile.py"), mode]
    procs: list[Proc] = []

    def start(role, argv):
        procs.append(Proc(role, argv, env))
        return procs[-1]

    def describe():
        return "\n".join(p.describe() for p in procs)

    try:
        if root_end == "server":
            victim = start("victim", [*victim_py, "server"])
            port = expect(victim, "listening", HANG_S)["port"]
            hostile = start("hostile", [*hostile_py, "client", str(port)])
        else:
            hostile = start("hostile", [*hostile_py, "server"])
            port = expect(hostile, "listening", HANG_S)["port"]
            victim = start("victim", [*victim_py, "client", str(port)])
        v = expect(victim, "connected", HANG_S)
        h = expect(hostile, "connected", HANG_S)
        assert (uid_of(victim.p.pid), h["uid"]) == (0, pwd.getpwnam("nobody").pw_uid), (v, h)
        vs, hs = settled_stat(v["pid"], v["fd"]), settled_stat(h["pid"], h["fd"])
        if not vs or not hs or vs.get("transport") != "shm" or hs.get("transport") != "shm":
            pytest.fail(f"not on shm before the attack:\n  root end: {vs}\n  hostile: {hs}\n"
                        f"{describe()}", pytrace=False)
        hostile.send("attack")
        expect(hostile, "attacking", HANG_S)
        time.sleep(ATTACK_S)
        victim.send("stop")
        res = expect(victim, "result", 2 * HANG_S)
        hostile.send("stop")
        try:
            rc = victim.p.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the root end did not exit (threads: {_threads(victim.p.pid)})\n"
                        f"{describe()}", pytrace=False)
        time.sleep(0.05)  # the stderr reader catches up
        problems = []
        if rc != 0:
            problems.append(f"exit status {rc}")
        if res["hung"]:
            problems.append(f"threads still in a call {HANG_S:.0f} s after stop: {res['hung']}")
        if res["max_call"] > HANG_S:
            problems.append(f"a call took {res['max_call']} s (SO_RCVTIMEO/SO_SNDTIMEO: 2 s)")
        if res["foreign"]:
            problems.append(f"read {res['foreign']} byte(s) the hostile peer never wrote "
                            f"(below 0x80), first: {res['first_foreign']}")
        bad = [e for e in res["errors"] if e.split(": ")[1] not in OK_ERRORS]
        if bad:
            problems.append(f"errors other than {sorted(OK_ERRORS)}: {bad}")
        if res["close_s"] > HANG_S:
            problems.append(f"close took {res['close_s']} s")
        for pat in BAD_STDERR:
            if pat.search(victim.stderr()):
                problems.append(f"stderr matches {pat.pattern!r}")
        return res, problems, describe()
    finally:
        for p in procs:
            p.kill()
            try:
                p.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@pytest.mark.parametrize("mode", ["all", "nudge", "static"])
@pytest.mark.parametrize("root_end", ["server", "client"], ids=["root-server", "root-client"])
def test_hostile_peer(root_end, mode):
    """MODE all: every header word garbage, over and over (the connection
    dies at once: the checks on entry); nudge: one plausible change at a
    time (it lives longer: the checks deeper in); static: the words that do
    not move (the capacity...), one at a time and put back (a field read
    again after its check)."""
    res, problems, procs = hostile_run(root_end, mode)
    if problems:
        pytest.fail(f"root end as {root_end}, hostile nobody ({mode}): " + "; ".join(problems)
                    + f"\nresult: {res}\n{procs}", pytrace=False)
    print(f"root end as {root_end}, {mode}: {res}")


def test_hostile_check_not_blind():
    """The hostile peer writes bytes below 0x80 into the data areas (which it
    may: the victim just reads them as data): the victim must see them, or
    its check for foreign bytes proves nothing."""
    res, problems, procs = hostile_run("server", "low-data")
    if not res["foreign"]:
        pytest.fail(f"the victim saw no byte below 0x80 although the hostile peer wrote them "
                    f"into its ring for {ATTACK_S} s: {res}\n{procs}", pytrace=False)


# --------------------------------------------------------------------------
# d. a squatter of a third uid


SQUAT_CASES = [  # (server user, client user, squatter user)
    ("root", "root", "nobody"),
    ("root", "nobody", "www-data"),
    ("nobody", "root", "www-data"),
]


@pytest.mark.parametrize("su,cu,squatter", SQUAT_CASES,
                         ids=[f"server-{a}-client-{b}-squatter-{c}" for a, b, c in SQUAT_CASES])
def test_third_user_squatter(pairs, su, cu, squatter):
    """The squatter binds the client's rendezvous name before the client
    connects (the client binds a fixed source port, so the name is
    predictable) and answers like a connector (HELLO_ACK, a proof of its own
    socket, a ring). The server sets up at accept (VSOCKET_UPGRADE_AFTER_US=0)
    and finds the squatter; the client would bind only 200 ms later."""
    sq_prefix, sq_py, why = other_user(squatter)
    if sq_prefix is None:
        pytest.skip(f"squatter as {squatter}: {why}")
    p = pairs(server_nobody=su == "nobody", client_nobody=cu == "nobody",
              client_env={"VSOCKET_UPGRADE_AFTER_US": "200000"})
    port = free_port()
    name = atk.rendezvous_name("127.0.0.1", port, "127.0.0.1", p.port)
    sq = subprocess.Popen([*sq_prefix, sq_py, str(ATTACKER), name.hex(), "4.0", "squat"],
                          stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        line = sq.stdout.readline()
        assert json.loads(line).get("ev") == "bound", line
        ev = p.connect(src_port=port)
        assert ev["local"] == ["127.0.0.1", port], ev
        check_uids(p, su, cu)
        p.accept()
        p.echo()
        out, _ = sq.communicate(timeout=15)
    finally:
        if sq.poll() is None:
            sq.kill()
            sq.wait()
    doc = json.loads(out.splitlines()[-1])
    assert doc["uid"] == pwd.getpwnam(squatter).pw_uid, doc
    res = doc["results"][0]
    if res.get("end") == "nobody called":
        p.fail(f"the server never called the squatter (the test missed its point): {res}")
    types = [m.get("type") for m in res["messages"]]
    if res["fds"] or any(t != atk.DECLINE for t in types) or res.get("stolen_len"):
        p.fail(f"a squatter of uid {doc['uid']} (neither end's user) got more than a DECLINE "
               f"(messages {types}, descriptors {res['fds']}):\n{json.dumps(res, indent=1)}")
    c, s = settled_pair(p)
    if not s or s.get("transport") != "kernel" or s.get("reason") != "peer-credentials":
        p.fail(f"server: want kernel / peer-credentials (its rendezvous call met a listener "
               f"of a third user), got {s}")
    if not c or c.get("transport") != "kernel" or "pending" in c.get("reason", ""):
        p.fail(f"client: want the kernel, settled, got {c}")
    p.close()
