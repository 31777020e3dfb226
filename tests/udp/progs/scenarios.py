"""UDP scenarios for tests/udp: each runs the calls of one behaviour on
loopback and prints what it observed as one JSON list of [label, value].

The same scenario runs with and without vsocket; the test compares the two
lists. So an observation must not depend on the run: ports are reported as
relations ("the source is the sender's address"), never as numbers.

    scenarios.py NAME            run scenario NAME
    scenarios.py --list          the scenario names
    scenarios.py child FD PORT   (internal) the exec'd child of 'inherited'
    scenarios.py hold            (internal) sockets for the statistics test
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import select
import socket
import struct
import subprocess
import sys

LIBC = ctypes.CDLL(None, use_errno=True)
# A wait for what must come: only a hang crosses it.
HANG = 60.0
OUT: list = []


def note(label: str, value) -> None:
    OUT.append([label, value])


def err_name(e: int) -> str:
    return errno.errorcode.get(e, str(e))


def attempt(label: str, fn):
    """Notes fn()'s value, or the error it raised (by name)."""
    try:
        value = fn()
    except OSError as e:
        note(label, "error " + err_name(e.errno))
        return None
    note(label, value)
    return value


def udp(family=socket.AF_INET, bind=None, hang=True):
    s = socket.socket(family, socket.SOCK_DGRAM)
    if bind is not None:
        s.bind(bind)
    if hang:
        # A blocking receive gives up only if what must come never does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(HANG), 0))
    return s


def udp_chosen_port():
    """A socket bound explicitly, to a port the kernel picked for another one
    (shared by SO_REUSEADDR, the other closed): the program chose its port."""
    t = udp()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("127.0.0.1", 0))
    s = udp()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(t.getsockname())
    t.close()
    return s


def same(src, local) -> bool:
    """Whether SRC (an address heard) names the socket whose own address is
    LOCAL: its port, and its host unless it is bound to a wildcard."""
    return src[1] == local[1] and (local[0] in ("0.0.0.0", "::") or src[0] == local[0])


def c_addr(sa_family: int, host: str, port: int) -> bytes:
    if sa_family == socket.AF_INET:
        return struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + \
            socket.inet_pton(socket.AF_INET, host) + bytes(8)
    return struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", port, 0) + \
        socket.inet_pton(socket.AF_INET6, host) + struct.pack("=I", 0)


def c_call(fn, *args) -> str | int:
    ctypes.set_errno(0)
    r = fn(*args)
    return r if r >= 0 else "error " + err_name(ctypes.get_errno())


# ---------------------------------------------------------------- sendmmsg


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(IOVec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]


class Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


MSG_WAITFORONE = 0x10000
# Not all in Python's socket module.
SO_RXQ_OVFL = 40
SO_TIMESTAMPNS = 35
IP_PKTINFO = 8
SIOCOUTQ = 0x5411


def sendmmsg(sock, payloads, dest: bytes | None, flags=0):
    n = len(payloads)
    vec = (MMsgHdr * n)()
    keep = []
    for i, p in enumerate(payloads):
        buf = ctypes.create_string_buffer(p, max(len(p), 1))
        iov = IOVec(ctypes.cast(buf, ctypes.c_void_p), len(p))
        keep += [buf, iov]
        vec[i].hdr.iov = ctypes.pointer(iov)
        vec[i].hdr.iovlen = 1
        if dest is not None:
            name = ctypes.create_string_buffer(dest, len(dest))
            keep.append(name)
            vec[i].hdr.name = ctypes.cast(name, ctypes.c_void_p)
            vec[i].hdr.namelen = len(dest)
    r = c_call(LIBC.sendmmsg, sock.fileno(), vec, n, flags)
    return r, [vec[i].len for i in range(n)]


def recvmmsg(sock, count, size, flags=0, timeout=None):
    """(result, [(bytes, source family, source port, msg_flags)] of those received)."""
    vec = (MMsgHdr * count)()
    bufs = [ctypes.create_string_buffer(size) for _ in range(count)]
    names = [ctypes.create_string_buffer(128) for _ in range(count)]
    iovs = [IOVec(ctypes.cast(b, ctypes.c_void_p), size) for b in bufs]
    for i in range(count):
        vec[i].hdr.iov = ctypes.pointer(iovs[i])
        vec[i].hdr.iovlen = 1
        vec[i].hdr.name = ctypes.cast(names[i], ctypes.c_void_p)
        vec[i].hdr.namelen = 128
    ts = ctypes.byref(Timespec(int(timeout), int((timeout % 1) * 1e9))) if timeout else None
    r = c_call(LIBC.recvmmsg, sock.fileno(), vec, count, flags, ts)
    got = []
    for i in range(r if isinstance(r, int) else 0):
        n = vec[i].len
        fam, port = struct.unpack("=H", names[i].raw[:2])[0], struct.unpack("!H", names[i].raw[2:4])[0]
        got.append((bufs[i].raw[:min(n, size)], fam, port, vec[i].hdr.flags, vec[i].hdr.namelen))
    return r, got


# --------------------------------------------------------------- scenarios


def addressed(family, host):
    """Unconnected sockets: sendto/recvfrom with addresses, both ways."""
    r = udp(family, (host, 0))
    s = udp(family)
    note("sendto", s.sendto(b"hello", r.getsockname()))
    note("sender bound by its send", s.getsockname()[1] != 0)
    data, src = r.recvfrom(100)
    note("recvfrom data", data.decode())
    note("source is the sender", same(src, s.getsockname()))
    note("source", [src[0], len(src)])
    note("reply", r.sendto(b"world", src))
    data, src = s.recvfrom(100)
    note("reply data", data.decode())
    note("reply source is the receiver", same(src, r.getsockname()))
    # Several peers of one socket: each datagram keeps its own source.
    t = udp(family)
    t.sendto(b"from t", r.getsockname())
    s.sendto(b"from s", r.getsockname())
    for _ in range(2):
        data, src = r.recvfrom(100)
        who = "t" if same(src, t.getsockname()) else "s" if same(src, s.getsockname()) else "?"
        note("datagram " + data.decode(), who)
    # recvmsg's name and flags; sendmsg with a destination and three pieces.
    note("sendmsg", s.sendmsg([b"a", b"bc", b"def"], [], 0, r.getsockname()))
    data, anc, flags, src = r.recvmsg(100)
    note("recvmsg", [data.decode(), anc, flags, same(src, s.getsockname())])
    # The address length as the kernel writes it: the full length even into a
    # short buffer (recvfrom through libc with a 4-byte buffer).
    s.sendto(b"short", r.getsockname())
    buf = ctypes.create_string_buffer(16)
    name = ctypes.create_string_buffer(4)
    nlen = ctypes.c_uint32(4)
    note("recvfrom short name", [c_call(LIBC.recvfrom, r.fileno(), buf, 16, 0, name, ctypes.byref(nlen)),
                                 nlen.value])


def scenario_ipv4():
    addressed(socket.AF_INET, "127.0.0.1")


def scenario_ipv6():
    addressed(socket.AF_INET6, "::1")


def scenario_v4_mapped():
    """An IPv6 socket hears IPv4 peers as ::ffff:a.b.c.d, and sends to them so."""
    r = udp(socket.AF_INET6)
    r.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    r.bind(("::", 0))
    port = r.getsockname()[1]
    s = udp(socket.AF_INET)
    s.sendto(b"v4", ("127.0.0.1", port))
    data, src = r.recvfrom(100)
    note("mapped source", [data.decode(), src[0], src[1] == s.getsockname()[1]])
    r.sendto(b"back", src)
    data, src = s.recvfrom(100)
    note("v4 hears", [data.decode(), src[0], src[1] == port])
    # An IPv6 socket sending to a v4-mapped destination.
    m = udp(socket.AF_INET6)
    m.sendto(b"via mapped", ("::ffff:127.0.0.1", port))
    data, src = r.recvfrom(100)
    note("mapped to mapped", [data.decode(), src[0]])
    # IPV6_V6ONLY refuses it.
    o = udp(socket.AF_INET6)
    o.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    attempt("v6only to mapped", lambda: o.sendto(b"x", ("::ffff:127.0.0.1", port)))


def scenario_connect():
    """connect, its filter, AF_UNSPEC dissolving it, reconnecting."""
    r1 = udp(bind=("127.0.0.1", 0))
    r2 = udp(bind=("127.0.0.1", 0))
    # S binds to a port of its own choosing (one T got, shared by
    # SO_REUSEADDR), which it keeps when its association goes.
    s = udp_chosen_port()
    s.connect(r1.getsockname())
    note("peer", same(s.getpeername(), r1.getsockname()))
    note("send", s.send(b"to r1"))
    note("r1 got", r1.recv(100).decode())
    note("write", os.write(s.fileno(), b"write"))
    note("r1 got write", r1.recv(100).decode())
    # A destination on a connected UDP socket overrides the association.
    note("sendto other", s.sendto(b"to r2", r2.getsockname()))
    data, src = r2.recvfrom(100)
    note("r2 got", [data.decode(), same(src, s.getsockname())])
    # Only the connected peer is heard: r2's datagram is dropped, r1's
    # (sent after it) is the next one.
    r2.sendto(b"r2 unheard", s.getsockname())
    r1.sendto(b"r1 heard", s.getsockname())
    note("connected hears", s.recv(100).decode())
    attempt("then nothing", lambda: s.recv(100, socket.MSG_DONTWAIT))
    # read(2) of nothing leaves a datagram; recv(2) of nothing takes it.
    r1.sendto(b"stays", s.getsockname())
    note("read of nothing", len(os.read(s.fileno(), 0)))
    note("still there", s.recv(100).decode())
    # connect(AF_UNSPEC): no peer, unbound sends fail, anyone is heard.
    unspec = struct.pack("=H14x", socket.AF_UNSPEC)
    note("disconnect", c_call(LIBC.connect, s.fileno(), unspec, len(unspec)))
    attempt("peer after", s.getpeername)
    attempt("send after", lambda: s.send(b"nowhere"))
    note("still bound", s.getsockname()[1] != 0)
    r2.sendto(b"r2 heard", s.getsockname())
    note("hears anyone", s.recv(100).decode())
    # A second AF_UNSPEC is no error.
    note("disconnect again", c_call(LIBC.connect, s.fileno(), unspec, len(unspec)))
    s.connect(r2.getsockname())
    note("reconnected", s.send(b"to r2 again"))
    note("r2 got again", r2.recv(100).decode())
    # A socket whose port came from connect loses it with the association.
    a = udp()
    a.connect(r1.getsockname())
    note("autobound", a.getsockname()[1] != 0)
    c_call(LIBC.connect, a.fileno(), unspec, len(unspec))
    note("port gone with it", a.getsockname()[1])


def scenario_mmsg():
    """sendmmsg/recvmmsg: addresses, zero-length entries, MSG_WAITFORONE, timeouts."""
    r = udp(bind=("127.0.0.1", 0))
    s = udp(bind=("127.0.0.1", 0))
    host, port = r.getsockname()
    dest = c_addr(socket.AF_INET, host, port)
    payloads = [b"one", b"", b"three", b"x" * 1000, b"five"]
    note("sendmmsg", sendmmsg(s, payloads, dest))
    got = []
    while len(got) < len(payloads):
        n, part = recvmmsg(r, 8, 2048, MSG_WAITFORONE)
        if not isinstance(n, int):
            note("recvmmsg failed", n)
            break
        got += part
    sport = s.getsockname()[1]
    note("recvmmsg", [[d.decode(), fam, p == sport, fl, nl] for d, fam, p, fl, nl in got])
    # Truncated entries: msg_len is the bytes copied, msg_flags says MSG_TRUNC.
    sendmmsg(s, [b"a" * 10, b"b" * 3], dest)
    got = []
    while len(got) < 2:
        n, part = recvmmsg(r, 2, 4, MSG_WAITFORONE)
        got += part
    note("truncated entries", [[d.decode(), fl & socket.MSG_TRUNC != 0] for d, _, _, fl, _ in got])
    note("empty, non-blocking", recvmmsg(r, 4, 64, socket.MSG_DONTWAIT)[0])
    # A timeout is checked after each datagram (the kernel's rule): with
    # two queued and a timeout of 1 ns, the call returns after the first.
    s.sendto(b"first", r.getsockname())
    s.sendto(b"second", r.getsockname())
    n, part = recvmmsg(r, 4, 64, 0, timeout=1e-9)
    note("with a timeout", [n, [d.decode() for d, *_ in part]])
    note("the other waits", r.recv(64).decode())
    # Connected: no names.
    s.connect(r.getsockname())
    note("connected sendmmsg", sendmmsg(s, [b"c1", b"c2"], None))
    got = []
    while len(got) < 2:
        got += recvmmsg(r, 4, 64, MSG_WAITFORONE)[1]
    note("connected got", [d.decode() for d, *_ in got])
    # Unconnected without names: the kernel's error for the first entry.
    u = udp()
    note("no destination", sendmmsg(u, [b"x"], None)[0])


def scenario_peek_trunc():
    """MSG_PEEK, MSG_TRUNC, MSG_DONTWAIT, FIONREAD, zero-length datagrams."""
    import fcntl
    import termios
    r = udp(bind=("127.0.0.1", 0))
    s = udp()
    s.sendto(b"p" * 100, r.getsockname())
    s.sendto(b"second", r.getsockname())
    fionread = lambda: struct.unpack("i", fcntl.ioctl(r.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    note("FIONREAD: the next datagram", fionread())
    note("peek", len(r.recv(10, socket.MSG_PEEK)))
    buf = bytearray(10)
    note("peek|trunc: full length", r.recv_into(buf, 10, socket.MSG_PEEK | socket.MSG_TRUNC))
    data, anc, flags, src = r.recvmsg(10)
    note("recvmsg cut", [len(data), flags & socket.MSG_TRUNC != 0])
    note("the cut datagram is gone", r.recv(100).decode())
    attempt("empty queue", lambda: r.recv(100, socket.MSG_DONTWAIT))
    r.setblocking(False)
    attempt("non-blocking socket", lambda: r.recv(100))
    r.setblocking(True)
    # Zero-length datagrams are datagrams.
    note("send nothing", s.sendto(b"", r.getsockname()))
    s.sendto(b"after", r.getsockname())
    note("FIONREAD of a zero-length one", fionread())
    data, src = r.recvfrom(100)
    note("zero-length", [data.decode(), same(src, s.getsockname())])
    note("next", r.recv(100).decode())
    # SO_RCVTIMEO ends a blocking receive with EAGAIN.
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 50000))
    attempt("receive timeout", lambda: r.recv(100))
    # MSG_WAITALL is ignored for UDP.
    s.sendto(b"tiny", r.getsockname())
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(HANG), 0))
    note("waitall", r.recv(100, socket.MSG_WAITALL).decode())


def scenario_capacity():
    """SO_RCVBUF as capacity: a receiver that does not read keeps what the
    kernel keeps, drops the rest (SO_RXQ_OVFL counts them), never blocks
    the sender."""
    r = udp(bind=("127.0.0.1", 0))
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    note("SO_RCVBUF effective", r.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    r.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
    s = udp()
    sent = sum(1 for _ in range(2000) if s.sendto(b"d" * 100, r.getsockname()) == 100)
    note("sends that returned", sent)
    kept = 0
    while True:
        try:
            r.recv(200, socket.MSG_DONTWAIT)
            kept += 1
        except BlockingIOError:
            break
    note("kept", kept)
    s.sendto(b"last", r.getsockname())
    data, anc, flags, src = r.recvmsg(100, socket.CMSG_SPACE(4))
    drops = [struct.unpack("I", d[:4])[0] for lvl, typ, d in anc
             if lvl == socket.SOL_SOCKET and typ == SO_RXQ_OVFL]
    note("drops counted", drops)
    note("kept + dropped = sent", kept + (drops[0] if drops else 0) == sent)


def scenario_errors():
    """The kernel's errors: ECONNREFUSED, EMSGSIZE, EDESTADDRREQ, bad arguments."""
    closed = udp(bind=("127.0.0.1", 0))
    dead = closed.getsockname()
    closed.close()
    s = udp()
    s.connect(dead)
    note("first send", s.send(b"anyone?"))
    # Loopback answers with port unreachable within the send: the next call
    # on the connected socket reports it, once.
    attempt("then", lambda: s.recv(100))
    note("SO_ERROR after", s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    # Unconnected sockets hear no ICMP errors.
    u = udp()
    note("unconnected to a closed port", u.sendto(b"x", dead))
    attempt("unconnected then", lambda: u.recv(100, socket.MSG_DONTWAIT))
    r = udp(bind=("127.0.0.1", 0))
    attempt("65507 bytes", lambda: u.sendto(b"m" * 65507, r.getsockname()))
    note("65507 received", len(r.recv(70000)))
    attempt("65508 bytes", lambda: u.sendto(b"m" * 65508, r.getsockname()))
    r6 = udp(socket.AF_INET6, ("::1", 0))
    u6 = udp(socket.AF_INET6)
    attempt("v6 65527 bytes", lambda: u6.sendto(b"m" * 65527, r6.getsockname()))
    note("v6 65527 received", len(r6.recv(70000)))
    attempt("v6 65528 bytes", lambda: u6.sendto(b"m" * 65528, r6.getsockname()))
    attempt("no destination", lambda: udp().send(b"x"))
    # Bad arguments through libc: the kernel's errors, never a crash.
    dest = c_addr(socket.AF_INET, *r.getsockname())
    note("sendto address too long", c_call(LIBC.sendto, u.fileno(), b"x", 1, 0, dest + bytes(200), len(dest) + 200))
    note("sendto address too short", c_call(LIBC.sendto, u.fileno(), b"x", 1, 0, dest, 8))
    u.sendto(b"for the bad recvfrom", r.getsockname())
    buf = ctypes.create_string_buffer(64)
    name = ctypes.create_string_buffer(128)
    note("recvfrom name without length", c_call(LIBC.recvfrom, r.fileno(), buf, 64, 0, name, None))
    attempt("which took the datagram", lambda: r.recv(100, socket.MSG_DONTWAIT))
    u.sendto(b"for the negative length", r.getsockname())
    neg = ctypes.c_int32(-1)
    note("recvfrom negative length", c_call(LIBC.recvfrom, r.fileno(), buf, 64, 0, name, ctypes.byref(neg)))
    attempt("which took it too", lambda: r.recv(100, socket.MSG_DONTWAIT))


def scenario_readiness():
    """poll, select and epoll see the kernel socket's readiness."""
    r = udp(bind=("127.0.0.1", 0))
    s = udp()
    p = select.poll()
    p.register(r, select.POLLIN | select.POLLOUT)
    note("poll, nothing queued", [ev for _, ev in p.poll(0)])
    ep = select.epoll()
    ep.register(r.fileno(), select.EPOLLIN | select.EPOLLET)
    note("epoll, nothing queued", [ev for _, ev in ep.poll(0)])
    s.sendto(b"ready", r.getsockname())
    note("poll, one queued", [ev for _, ev in p.poll(HANG * 1000)])
    note("epoll edge", [ev for _, ev in ep.poll(HANG)])
    note("epoll edge once", [ev for _, ev in ep.poll(0)])
    note("select", [len(x) for x in select.select([r], [r], [], HANG)])
    r.recv(100)
    note("poll, drained", [ev for _, ev in p.poll(0)])
    s.sendto(b"again", r.getsockname())
    note("epoll edge again", [ev for _, ev in ep.poll(HANG)])


def scenario_forked():
    """A forked child sends and receives on its copy; the parent's goes on."""
    r = udp(bind=("127.0.0.1", 0))
    k = udp(bind=("127.0.0.1", 0))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            k.sendto(b"child", r.getsockname())
            code = 0 if k.recv(100) == b"to the child" else 2
        finally:
            os._exit(code)
    data, src = r.recvfrom(100)
    note("from the child", [data.decode(), same(src, k.getsockname())])
    r.sendto(b"to the child", k.getsockname())
    note("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    k.sendto(b"parent", r.getsockname())
    note("from the parent", r.recv(100).decode())


def scenario_misc():
    """sendfile to a connected UDP socket, the kernel's ancillary data
    (IP_PKTINFO, SO_TIMESTAMPNS), SIOCOUTQ, shutdown."""
    import fcntl
    import tempfile
    r = udp(bind=("127.0.0.1", 0))
    r.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    r.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s = udp()
    s.connect(r.getsockname())
    with tempfile.TemporaryFile() as f:
        f.write(bytes(range(256)) * 4)
        f.flush()
        note("sendfile", os.sendfile(s.fileno(), f.fileno(), 0, 1000))
    data, anc, flags, src = r.recvmsg(2000, 256)
    note("sendfile datagram", [len(data), data[:4].hex(), same(src, s.getsockname())])
    kinds = sorted([lvl, typ] for lvl, typ, _ in anc)
    note("ancillary kinds", kinds)
    for lvl, typ, d in anc:
        if lvl == socket.IPPROTO_IP and typ == IP_PKTINFO:
            ifindex, spec, dst = struct.unpack("i4s4s", d[:12])
            note("pktinfo", [ifindex, socket.inet_ntoa(spec), socket.inet_ntoa(dst)])
    note("SIOCOUTQ", struct.unpack("i", fcntl.ioctl(s.fileno(), SIOCOUTQ, b"\0" * 4))[0])
    attempt("shutdown RD", lambda: s.shutdown(socket.SHUT_RD))
    attempt("send after SHUT_RD", lambda: s.send(b"still"))
    note("delivered", r.recv(100).decode())


def scenario_inherited():
    """A socket inherited through exec (vsocket adopts it at its first use)."""
    r = udp(bind=("127.0.0.1", 0))
    k = udp(bind=("127.0.0.1", 0))
    k.connect(r.getsockname())
    out = subprocess.run([sys.executable, __file__, "child", str(k.fileno()), str(r.getsockname()[1])],
                         pass_fds=[k.fileno()], capture_output=True, text=True, timeout=HANG)
    note("child", [out.returncode, out.stdout.strip(), out.stderr.strip()[-200:]])
    for _ in range(2):
        data, src = r.recvfrom(100)
        note("from the child", [data.decode(), same(src, k.getsockname())])
    r.sendto(b"to the parent", k.getsockname())
    note("parent still has it", k.recv(100).decode())


def child(fd: int, port: int):
    k = socket.socket(fileno=fd)
    k.sendto(b"child sendto", ("127.0.0.1", port))
    unspec = struct.pack("=H14x", socket.AF_UNSPEC)
    LIBC.connect(k.fileno(), unspec, len(unspec))
    k.connect(("127.0.0.1", port))
    k.send(b"child send")
    print(k.getpeername()[1] == port)
    k.detach()


def hold():
    """For the statistics test: four UDP sockets with known traffic, their
    ports on stdout, then kept open until a line arrives on stdin."""
    r = udp(bind=("127.0.0.1", 0))
    c = udp()
    c.connect(r.getsockname())
    c.send(b"abc")
    c.send(b"de")
    d = udp_chosen_port()
    d.connect(r.getsockname())
    d.send(b"")
    unspec = struct.pack("=H14x", socket.AF_UNSPEC)
    LIBC.connect(d.fileno(), unspec, len(unspec))
    six = udp(socket.AF_INET6)
    six.sendto(b"six", ("::ffff:127.0.0.1", r.getsockname()[1]))
    for _ in range(4):
        r.recvfrom(100)
    r.sendto(b"wx", c.getsockname())
    r.sendto(b"yz", c.getsockname())
    c.recv(100)
    c.recv(100)
    print(json.dumps({"receiver": r.getsockname()[1], "connected": c.getsockname()[1],
                      "disconnected": d.getsockname()[1]}), flush=True)
    sys.stdin.readline()


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def main():
    if sys.argv[1:2] == ["--list"]:
        print("\n".join(SCENARIOS))
        return
    if sys.argv[1:2] == ["hold"]:
        hold()
        return
    if sys.argv[1:2] == ["child"]:
        child(int(sys.argv[2]), int(sys.argv[3]))
        return
    SCENARIOS[sys.argv[1]]()
    print(json.dumps(OUT))


if __name__ == "__main__":
    main()
