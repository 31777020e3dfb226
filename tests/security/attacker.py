"""A local process that is not the peer, calling a connection's rendezvous.

Plain Python, never run under vsocket. Imported by test_rendezvous.py (the
same-uid attacks run inside the test process) and run as a program for the
other-uid attacks (`setpriv --reuid=nobody ... python3 attacker.py ...`),
when it prints one JSON document with the outcome of each attack.

The protocol spoken here is the one of src/transport/shm/proto.h: every
message is a 24-byte little-endian record {u32 magic, u16 version, u16 type,
u64 arg, u64 arg2} on an abstract AF_UNIX SOCK_SEQPACKET socket named
"\\0vsocket/1/<connector ip>:<port>/<accepter ip>:<port>", descriptors in
SCM_RIGHTS.

An attack's outcome records everything the attacker received: each message
(length, decoded type) and each descriptor (what it is: O_PATH or not, socket,
memfd...), and how the conversation ended (the other side hung up, reset, or
said nothing until the timeout).
"""

from __future__ import annotations

import array
import fcntl
import json
import mmap
import os
import socket
import stat
import struct
import subprocess
import sys
import time



def _ring_image() -> str:
    """This build's ring_image (tests/security/ring_image.c), next to the
    vsocket tool the suite runs ($VSOCKET), else in <repo>/build."""
    tool = os.environ.get("VSOCKET") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin", "vsocket")
    return os.path.join(os.path.dirname(os.path.abspath(tool)), "ring_image")


def _ring_image_run(*args: str, fds: tuple = ()) -> dict:
    r = subprocess.run([_ring_image(), *args], capture_output=True, text=True, timeout=60,
                       pass_fds=fds)
    if r.returncode != 0:
        raise RuntimeError(f"ring_image {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


# The message magic and version of this build: with a stale version every
# forged message is refused as malformed, before the check under attack.
_BUILD = _ring_image_run("make", str(1 << 16))
MAGIC = _BUILD["shm_magic"]
VERSION = _BUILD["shm_version"]
HELLO, HELLO_ACK, READY, DECLINE, SWITCH, WAKE, REVERT = range(1, 8)
MSG = struct.Struct("<IHHQQ")
O_PATH = getattr(os, "O_PATH", 0o10000000)


def msg(mtype: int, *, magic: int = MAGIC, version: int = VERSION, arg: int = 0,
        arg2: int = 0) -> bytes:
    return MSG.pack(magic, version, mtype, arg, arg2)


def rendezvous_name(conn_ip: str, conn_port: int, acc_ip: str, acc_port: int) -> bytes:
    """The abstract name the connector listens on (handshake.c)."""
    return f"\0vsocket/1/{conn_ip}:{conn_port}/{acc_ip}:{acc_port}".encode()


def opath(path: str) -> int:
    return os.open(path, O_PATH | os.O_CLOEXEC)


def call(name: bytes, timeout: float = 2.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    s.connect(name)
    return s


def send(s: socket.socket, data: bytes, fds: list[int] = ()) -> bool:
    """False when the other side had already hung up (EPIPE, ECONNRESET): a
    caller refused before it could say anything."""
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    try:
        s.sendmsg([data], anc)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def describe_fd(fd: int) -> dict:
    """What a received descriptor gives its holder."""
    d: dict = {}
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        d["o_path"] = bool(flags & O_PATH)
    except OSError as e:
        d["o_path"] = None
        d["fcntl_error"] = e.errno
    try:
        st = os.fstat(fd)
        d["mode"] = oct(st.st_mode)
        d["socket"] = stat.S_ISSOCK(st.st_mode)
        d["regular"] = stat.S_ISREG(st.st_mode)
        d["size"] = st.st_size
        d["ino"] = st.st_ino
    except OSError as e:
        d["fstat_error"] = e.errno
    try:
        d["target"] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    # A descriptor that is not O_PATH is a capability: a ring memfd can be
    # mapped, a socket read and written.
    d["capability"] = d.get("o_path") is False
    return d


def outcome(s: socket.socket, timeout: float, answer=None) -> dict:
    """Reads until the other side hangs up or TIMEOUT passes.

    ANSWER(s, message, fds) may reply to a message (used by the squatter)."""
    res = {"messages": [], "fds": [], "end": None, "elapsed": None}
    t0 = time.monotonic()
    end = t0 + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            res["end"] = "timeout"
            break
        s.settimeout(left)
        try:
            data, anc, flags, _ = s.recvmsg(256, socket.CMSG_SPACE(64 * 4))
        except socket.timeout:
            res["end"] = "timeout"
            break
        except ConnectionResetError:
            res["end"] = "reset"
            break
        except OSError as e:
            res["end"] = f"error {e.errno}"
            break
        fds = []
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(cdata[: len(cdata) - len(cdata) % a.itemsize])
                fds.extend(a)
        infos = [describe_fd(fd) for fd in fds]
        res["fds"].extend(infos)
        if not data and not fds:
            res["end"] = "hangup"
            break
        m = {"len": len(data), "flags": flags, "nfds": len(fds)}
        if len(data) >= MSG.size:
            magic, version, mtype, arg, arg2 = MSG.unpack_from(data)
            m.update(magic=magic, version=version, type=mtype, arg=arg, arg2=arg2)
        res["messages"].append(m)
        try:
            if answer:
                answer(s, m, fds)
        finally:
            for fd in fds:
                os.close(fd)
    res["elapsed"] = round(time.monotonic() - t0, 3)
    return res


def refused(res: dict) -> bool:
    """The other side hung up (or reset) without a single byte or descriptor."""
    return res["end"] in ("hangup", "reset") and not res["messages"] and not res["fds"]


class TcpPair:
    """A connected loopback TCP pair of the attacker's own: real sockets with
    real inodes, just not the connection under attack."""

    def __init__(self):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        self.a = socket.create_connection(ls.getsockname())
        self.b, _ = ls.accept()
        ls.close()

    def close(self):
        self.a.close()
        self.b.close()


# --------------------------------------------------------------------------
# the attacks: each sends something on a fresh call and reports the outcome


def _with_fds(name: bytes, data: bytes, fds: list[int], timeout: float) -> dict:
    s = call(name, timeout)
    try:
        sent = send(s, data, fds)
        res = outcome(s, timeout)
        res["sent"] = sent
        return res
    finally:
        s.close()


def attack(name: bytes, kind: str, timeout: float = 2.0, **kw) -> dict:
    """Runs one attack against the rendezvous NAME; returns its outcome."""
    pair = TcpPair()
    own = []
    try:
        own_opath = opath(f"/proc/self/fd/{pair.a.fileno()}")
        own.append(own_opath)
        if kind == "hello-own-tcp":  # a real socket of ours, passed as is
            res = _with_fds(name, msg(HELLO), [pair.a.fileno()], timeout)
        elif kind == "hello-own-tcp-opath":  # a proof made exactly like the library's
            res = _with_fds(name, msg(HELLO), [own_opath], timeout)
        elif kind == "hello-unrelated-unix":  # an O_PATH proof of a unix socket
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            own.append(os.dup(u.fileno()))
            u.close()
            res = _with_fds(name, msg(HELLO), [own[-1]], timeout)
        elif kind == "hello-client-socket":  # the connector's own socket, reflected
            fd = opath(f"/proc/{kw['client_pid']}/fd/{kw['client_fd']}")
            own.append(fd)
            res = _with_fds(name, msg(HELLO), [fd], timeout)
        elif kind == "hello-not-a-socket":
            fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
            own.append(fd)
            res = _with_fds(name, msg(HELLO), [fd], timeout)
        elif kind == "hello-no-fd":
            res = _with_fds(name, msg(HELLO), [], timeout)
        elif kind == "hello-two-fds":
            res = _with_fds(name, msg(HELLO), [own_opath, pair.b.fileno()], timeout)
        elif kind == "hello-many-fds":
            res = _with_fds(name, msg(HELLO), [own_opath] * 60, timeout)
        elif kind == "garbage":
            res = _with_fds(name, os.urandom(MSG.size), [], timeout)
        elif kind == "garbage-long":
            res = _with_fds(name, os.urandom(4096), [own_opath], timeout)
        elif kind == "truncated":  # the first 10 bytes of a HELLO, with its proof
            res = _with_fds(name, msg(HELLO)[:10], [own_opath], timeout)
        elif kind == "oversized":  # a HELLO with 8 more bytes
            res = _with_fds(name, msg(HELLO) + b"\0" * 8, [own_opath], timeout)
        elif kind == "empty":  # a zero-length record
            res = _with_fds(name, b"", [], timeout)
        elif kind == "bad-magic":
            res = _with_fds(name, msg(HELLO, magic=0x314B5357), [own_opath], timeout)
        elif kind == "bad-version":
            res = _with_fds(name, msg(HELLO, version=VERSION + 1), [own_opath], timeout)
        elif kind.startswith("type-"):  # a valid header of another type
            mtype = int(kind[5:])
            fds = [own_opath]
            if mtype == HELLO_ACK:
                mfd = os.memfd_create("attacker-ring", os.MFD_CLOEXEC)
                os.ftruncate(mfd, 1 << 16)
                own.append(mfd)
                fds = [own_opath, mfd]
            res = _with_fds(name, msg(mtype, arg=1 << 16), fds, timeout)
        elif kind == "half-close":  # says nothing, then shuts its side
            s = call(name, timeout)
            try:
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # already hung up on
                res = outcome(s, timeout)
            finally:
                s.close()
        elif kind == "hello-twice":  # a bad HELLO, then a second one at once
            s = call(name, timeout)
            try:
                send(s, msg(HELLO), [own_opath])
                send(s, msg(HELLO), [pair.b.fileno()])
                res = outcome(s, timeout)
            finally:
                s.close()
        else:
            raise ValueError(f"unknown attack {kind!r}")
    finally:
        for fd in own:
            os.close(fd)
        pair.close()
    res["kind"] = kind
    return res


# --------------------------------------------------------------------------
# forging a proof from /proc (the design's stated limit: "a process with
# ptrace rights over ours")


def _hexaddr(ip: str, port: int) -> str:
    a = socket.inet_aton(ip)
    return f"{struct.unpack('<I', a)[0]:08X}:{port:04X}"


def tcp_inode(local: tuple[str, int], remote: tuple[str, int]) -> int:
    """The inode /proc/net/tcp (world-readable) lists for a 4-tuple, 0 if none
    (a connection still in the accept queue has none)."""
    want_l, want_r = _hexaddr(*local), _hexaddr(*remote)
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if parts[1] == want_l and parts[2] == want_r:
                return int(parts[9])
    return 0


def find_socket(inode: int) -> tuple[int, int]:
    """(pid, fd) of a process of ours holding socket INODE."""
    want = f"socket:[{inode}]"
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                        return int(pid), int(fd)
                except OSError:
                    pass
        except OSError:
            pass
    raise LookupError(f"no process of uid {os.getuid()} shows {want}")


def forge_proof(local: tuple[str, int], remote: tuple[str, int], timeout: float = 3.0) -> int:
    """An O_PATH descriptor of the socket holding LOCAL<->REMOTE, opened
    through /proc/PID/fd of the process that holds it: the very proof the
    verifier wants, made by a process that is not the peer. Waits until the
    socket has been accepted (it has an inode)."""
    end = time.monotonic() + timeout
    while True:
        ino = tcp_inode(local, remote)
        if ino:
            break
        if time.monotonic() > end:
            raise TimeoutError(f"{local}<->{remote} never got an inode")
        time.sleep(0.005)
    pid, fd = find_socket(ino)
    return opath(f"/proc/{pid}/fd/{fd}")


F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
RING_SEALS = (getattr(fcntl, "F_SEAL_SEAL", 1) | getattr(fcntl, "F_SEAL_SHRINK", 2)
              | getattr(fcntl, "F_SEAL_GROW", 4))


def make_ring(capacity: int = 1 << 16) -> int:
    """A valid ring of this build (its header page made by ring_image, i.e.
    by src/memory/ring.c), in a sealed memfd of our own: what an attacker
    hands the connector in READY, which makes it the connector's transmit
    ring."""
    img = _ring_image_run("make", str(capacity))
    header = bytes.fromhex(img["header"])
    fd = os.memfd_create("attacker-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, len(header) + img["span"])
    os.pwrite(fd, header, 0)
    fcntl.fcntl(fd, F_ADD_SEALS, RING_SEALS)
    return fd


def read_ring(fd: int, limit: int = 64) -> tuple[int, bytes]:
    """(bytes the producer ever published, the first LIMIT of them)."""
    os.set_inheritable(fd, True)
    try:
        got = _ring_image_run("read", str(fd), str(limit), fds=(fd,))
    finally:
        os.set_inheritable(fd, False)
    return got["head"], bytes.fromhex(got["first"])


def hold_and_forge(name: bytes, local: tuple[str, int], remote: tuple[str, int],
                   timeout: float, called=None) -> dict:
    """Calls the rendezvous first and says nothing (the connector takes the
    call and waits for its HELLO); once the accepting process has accepted
    the TCP connection, sends a HELLO whose proof is forged from /proc. Should
    the connector answer HELLO_ACK, completes the handshake with READY and a
    ring of its own, and reports what the connector then wrote into it."""
    ring = make_ring()
    s = call(name, timeout)
    try:
        if called:
            called()
        proof = forge_proof(local, remote, timeout)
        try:
            send(s, msg(HELLO), [proof])
        finally:
            os.close(proof)

        def answer(sock, m, fds):
            if m.get("type") == HELLO_ACK:
                send(sock, msg(READY, arg=1 << 16), [ring])

        res = outcome(s, timeout, answer)
        head, first = read_ring(ring)
        res["stolen_len"] = head
        res["stolen_first"] = first.hex()
    finally:
        s.close()
        os.close(ring)
    res["kind"] = "hold-and-forge"
    return res


def squat(name: bytes, timeout: float, bound=None) -> dict:
    """Holds the rendezvous NAME before the connector can, takes the
    accepter's call and plays the connector: answers its HELLO with a
    HELLO_ACK carrying a proof of our own socket and a ring of ours."""
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pair = TcpPair()
    ring = make_ring()
    proof = opath(f"/proc/self/fd/{pair.a.fileno()}")
    try:
        ls.bind(name)
        ls.listen(4)
        if bound:
            bound()
        ls.settimeout(timeout)
        try:
            s, _ = ls.accept()
        except socket.timeout:
            return {"kind": "squat", "end": "nobody called", "messages": [], "fds": []}
        try:
            def answer(sock, m, fds):
                if m.get("type") == HELLO:
                    send(sock, msg(HELLO_ACK, arg=1 << 16), [proof, ring])

            res = outcome(s, timeout, answer)
            res["stolen_len"], first = read_ring(ring)
            res["stolen_first"] = first.hex()
        finally:
            s.close()
    finally:
        ls.close()
        os.close(proof)
        os.close(ring)
        pair.close()
    res["kind"] = "squat"
    return res


def main(argv: list[str]) -> int:
    """attacker.py NAME_HEX TIMEOUT KIND...: the outcomes as one JSON document.
    KIND "silent:SECONDS" calls, says nothing for SECONDS and hangs up.
    attacker.py NAME_HEX TIMEOUT squat: squat(), printing {"ev": "bound"} first.
    attacker.py NAME_HEX TIMEOUT forge ACC_IP ACC_PORT CONN_IP CONN_PORT:
    hold_and_forge(), printing {"ev": "called"} once it holds the call."""
    name = bytes.fromhex(argv[0])
    timeout = float(argv[1])
    out = {"uid": os.getuid(), "euid": os.geteuid(), "results": []}
    if argv[2] == "squat":
        r = squat(name, timeout, lambda: print(json.dumps({"ev": "bound"}), flush=True))
        out["results"].append(r)
        print(json.dumps(out), flush=True)
        return 0
    if argv[2] == "forge":
        local = (argv[3], int(argv[4]))
        remote = (argv[5], int(argv[6]))

        def called():
            print(json.dumps({"ev": "called"}), flush=True)

        try:
            r = hold_and_forge(name, local, remote, timeout, called)
        except (OSError, LookupError) as e:
            r = {"kind": "hold-and-forge", "end": f"error: {e}", "messages": [], "fds": []}
        out["results"].append(r)
        print(json.dumps(out), flush=True)
        return 0
    for kind in argv[2:]:
        try:
            if kind.startswith("silent:"):
                s = call(name, timeout)
                r = outcome(s, float(kind.split(":")[1]))
                s.close()
                r["kind"] = kind
            else:
                r = attack(name, kind, timeout)
        except OSError as e:
            r = {"kind": kind, "end": f"error {e.errno}", "error": str(e), "messages": [],
                 "fds": []}
        out["results"].append(r)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
