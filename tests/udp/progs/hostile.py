"""Hostile local processes against UDP on shm (docs/design/udp.md §7, §12):
what a program observes is the same with and without vsocket; what the
attacker tried shows in vsocket's log, which the test reads.

  hostile.py squatter   a process holds the receiver's rendezvous name first
                        and answers every call with a forged ACCEPT
  hostile.py ring       a peer that proves itself, then writes a record of
                        an impossible length into the receiver's ring

The last line of stdout is the observations, as JSON.
"""

from __future__ import annotations

import mmap
import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pairs import HANG, main, note  # noqa: E402
from pairs import run_child as fork  # noqa: E402


def udp(bind=("127.0.0.1", 0)):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(HANG), 0))
    s.bind(bind)
    return s


def rendezvous(addr) -> bytes:
    return b"\0vsocket/u1/%s:%d" % (addr[0].encode(), addr[1])


def wire_addr(addr) -> bytes:
    """udp.md's 20-byte address: family 2, port, IPv4 as v4-mapped."""
    return struct.pack("<HH", 2, addr[1]) + b"\0" * 10 + b"\xff\xff" + socket.inet_aton(addr[0])


def hs(kind, fd, frm=None, to=None) -> bytes:
    body = wire_addr(frm) + wire_addr(to) if frm else b"\0" * 40
    return b"VSUS" + bytes([1, kind, 0, 0]) + struct.pack("<Q", fd) + body


def scenario_squatter():
    r = udp()
    dest = r.getsockname()
    ready_r, ready_w = os.pipe()
    answered_r, answered_w = os.pipe()

    def squatter():
        """Binds the receiver's name before it can, and answers every HELLO
        with an ACCEPT naming a UDP socket of its own and three descriptors."""
        try:
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            lst.bind(rendezvous(dest))
            lst.listen(8)
        except OSError:
            lst = None
        os.write(ready_w, b"x")
        if lst is None:
            return 0
        own = udp()
        mem = os.memfd_create("bait")
        os.ftruncate(mem, 4096)
        ev = os.eventfd(0)
        lst.settimeout(HANG)
        calls = 0
        while True:
            try:
                c, _ = lst.accept()
            except OSError:
                break
            c.settimeout(5)
            try:
                msg = c.recv(100)
            except OSError:
                continue
            if msg[:4] != b"VSUS":
                break  # the test's end of the run
            calls += 1
            try:
                socket.send_fds(c, [hs(2, own.fileno())], [mem, mem, ev])
            except OSError:
                # The caller gave up first (its set-up's time ran out on a
                # loaded machine): nothing to answer.
                continue
            print(f"squatter answered call {calls}", file=sys.stderr)
            if calls == 1:
                os.write(answered_w, b"a")
        return 0

    sq = fork(squatter)
    os.read(ready_r, 1)  # the name is taken before the receiver's first use

    def sender():
        s = udp()
        for i in range(300):
            # Under vsocket the sender calls the squatter after 16
            # datagrams; its last 50 wait for the squatter's answer, which
            # a call of the sender's then reads (and refuses: the log says
            # so), however slow the machine (without vsocket nobody calls).
            if i == 250 and os.environ.get("VSOCKET_UDP_SHM") == "1":
                ready, _, _ = select.select([answered_r], [], [], HANG)
                if not ready:
                    return 3
                # Past the data path's 1 ms between looks at the pairs'
                # sockets: the next send reads the answer.
                time.sleep(0.002)
            s.sendto(b"%d" % i, dest)
            if i % 50 == 49 and s.recv(100) != b"ack":
                return 2
        s.sendto(b"end", dest)
        return 0

    snd = fork(sender)
    got = []
    while True:
        data, src = r.recvfrom(100)
        if data == b"end":
            break
        got.append(int(data))
        if len(got) % 50 == 0:
            r.sendto(b"ack", src)
    note("received in order", got == list(range(300)))
    note("sender", os.waitstatus_to_exitcode(os.waitpid(snd, 0)[1]))
    # Wakes the squatter's accept with a call that is not a HELLO.
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.connect(rendezvous(dest))
        c.send(b"stop")
    except OSError:
        pass
    note("squatter", os.waitstatus_to_exitcode(os.waitpid(sq, 0)[1]))


def scenario_ring():
    r = udp()
    dest = r.getsockname()
    ready_r, ready_w = os.pipe()

    def hostile():
        os.read(ready_r, 1)
        h = udp()
        try:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            c.settimeout(HANG)
            c.connect(rendezvous(dest))
            c.send(hs(1, h.fileno(), h.getsockname(), dest))
            msg, fds, _, _ = socket.recv_fds(c, 100, 4)
            if msg[5] != 2 or len(fds) != 3:
                print(f"no ACCEPT: {msg!r} {fds}", file=sys.stderr)
                raise OSError
            ring = mmap.mmap(fds[0], os.fstat(fds[0]).st_size)
            data_offset = struct.unpack_from("<Q", ring, 16)[0]
            # A record head whose length no datagram can have, published.
            struct.pack_into("<IIQ", ring, data_offset, 0xFFFFFF00, 0, 0)
            struct.pack_into("<Q", ring, 64, 16)
            os.eventfd_write(fds[2], 1)
            print("hostile wrote its ring", file=sys.stderr)
        except OSError:
            pass  # no rendezvous: the receiver is a plain program
        h.sendto(b"after", dest)
        return 0 if h.recv(100) == b"heard" else 2

    pid = fork(hostile)
    try:
        r.recv(100, socket.MSG_DONTWAIT)  # the first use: the rendezvous opens
    except BlockingIOError:
        pass
    os.write(ready_w, b"x")
    data, src = r.recvfrom(100)
    note("received", data.decode())
    r.sendto(b"heard", src)
    note("hostile", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    try:
        r.recv(100, socket.MSG_DONTWAIT)
        note("then", "a datagram")
    except BlockingIOError:
        note("then", "nothing")


if __name__ == "__main__":
    main(globals())
