"""UDP between two processes of one host (issue 23 step 3, docs/design/udp.md
§7): scenarios that run the same without vsocket and with shm pairs, and
print their observations as one JSON list (last line of stdout).

Each scenario forks: the parent holds one socket, the child another, and
they talk long enough (VSOCKET_UDP_UPGRADE_AFTER_DGRAMS is 16 by default)
for a pair to come up under vsocket. What they observe must not depend on
the path a datagram took. Every wait is bounded by HANG, which only a hang
crosses.

  pairs.py --list
  pairs.py NAME
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenarios import MSG_WAITFORONE, c_addr, recvmmsg, sendmmsg  # noqa: E402

HANG = 120.0
OBS: list = []


def note(label: str, value) -> None:
    OBS.append([label, value])


def udp(family=socket.AF_INET, bind=None):
    """A blocking socket whose receives give up after HANG (SO_RCVTIMEO, not
    Python's timeout: that makes the descriptor non-blocking and polls
    before each call, which libc's recvmmsg and MSG_DONTWAIT would see)."""
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(HANG), 0))
    if bind:
        s.bind(bind)
    return s


def run_child(fn) -> int:
    """Runs FN in a forked child; its exit status 0 means it saw what it expected."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = fn()
        finally:
            os._exit(code)
    return pid


def wait_child(pid) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def pair_up_at_both(log_path: str, ports) -> bool:
    """Whether vsocket's log (VSOCKET_LOG_FILE, debug) says a pair is up at
    both ends: one "pair with ADDR:PORT up" line for each of PORTS."""
    try:
        with open(log_path, errors="replace") as f:
            ups = [line.split(" up", 1)[0] for line in f if "udp shm: pair with " in line
                   and line.rstrip().endswith(" up")]
    except OSError:
        return False
    return all(any(u.endswith(":%d" % p) for u in ups) for p in ports)


def warm_up(sock, peer, rounds, first):
    """Ping-pongs with PEER until a pair can be up: ROUNDS of them, and under
    vsocket (its log in VSOCKET_LOG_FILE) until the log says the pair is up
    in both processes, so that what follows runs on the rings whatever the
    machine's speed (a fixed count was not enough for a loaded one; bounded:
    only a hang crosses it; VSOCKET_UDP_SHM=1 only). FIRST: we send first,
    and say when it is done.
    The other side's port."""
    if first:
        log = os.environ.get("VSOCKET_LOG_FILE") if os.environ.get("VSOCKET_UDP_SHM") == "1" else None
        ports = (sock.getsockname()[1], peer[1])
        i, up_at = 0, None
        deadline = time.monotonic() + HANG / 2
        # Past the log's "up" at both ends, a few more rounds: each side
        # then has received on its ring (the tests count what the rings
        # delivered), whatever the speed of the set-up.
        while i < rounds or (log and (up_at is None or i < up_at + 8) and time.monotonic() < deadline):
            sock.sendto(b"ping %d" % i, peer)
            data, _ = sock.recvfrom(100)
            assert data == b"pong %d" % i, data
            i += 1
            if log and up_at is None and pair_up_at_both(log, ports):
                up_at = i
        sock.sendto(b"warm done", peer)
        return peer[1]
    i = 0
    while True:
        data, src = sock.recvfrom(100)
        if data == b"warm done":
            return src[1]
        assert data == b"ping %d" % i, data
        sock.sendto(b"pong %d" % i, src)
        i += 1


class Burst:
    """A receiver R and a forked sender that, once their pair can be up
    (warm_up), sends COUNT datagrams of SIZE bytes (each byte its index
    mod 256) and then waits outside vsocket (a pipe) until end(): its own
    calls, which tend the pair's rings too, must not be what the receiver
    measures. Meanwhile the receiver sees the burst with drain(). RCVBUF:
    the receiver's SO_RCVBUF, set before the pair comes up."""

    def __init__(self, count, size, rcvbuf=None):
        self.size = size
        self.r = udp(socket.AF_INET, ("127.0.0.1", 0))
        if rcvbuf:
            self.r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        dest = self.r.getsockname()
        sent_r, sent_w = os.pipe()
        done_r, self.done_w = os.pipe()

        def sender():
            s = udp(socket.AF_INET, ("127.0.0.1", 0))
            warm_up(s, dest, 20, True)
            for i in range(count):
                s.sendto(bytes([i % 256]) * size, dest)
            os.write(sent_w, b"x")
            os.read(done_r, 1)
            return 0

        self.pid = run_child(sender)
        warm_up(self.r, None, 20, False)
        assert os.read(sent_r, 1) == b"x"

    def drain(self) -> int:
        """Reads every datagram waiting, each checked whole; how many."""
        got = 0
        while True:
            try:
                data = self.r.recv(self.size + 1, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return got
            assert len(data) == self.size and data == bytes([data[0]]) * self.size, "corrupt"
            got += 1

    def end(self) -> int:
        """Lets the sender go; its exit status."""
        os.write(self.done_w, b"x")
        return wait_child(self.pid)


# --------------------------------------------------------------- scenarios


def stream(family, host, count=3000, batch=100):
    """COUNT numbered datagrams across the switch from kernel to rings: each
    arrives once, none is lost (the sender waits for an ack after each
    BATCH, so that the receiver is never full)."""
    r = udp(family, (host, 0))
    dest = r.getsockname()

    def sender():
        s = udp(family, (host, 0))
        for i in range(count):
            s.sendto(b"%d" % i, dest)
            if i % batch == batch - 1:
                if s.recv(100) != b"ack %d" % i:
                    return 2
        s.sendto(b"end", dest)
        s.close()
        return 0

    pid = run_child(sender)
    seen, dups, late, last = set(), 0, 0, -1
    while True:
        data, src = r.recvfrom(100)
        if data == b"end":
            break
        n = int(data)
        dups += n in seen
        late += n < last
        last = max(last, n)
        seen.add(n)
        if len(seen) % batch == 0:
            r.sendto(b"ack %d" % (len(seen) - 1), src)
    note("received", len(seen))
    note("duplicated", dups)
    note("missing", count - len(seen))
    note("sender", wait_child(pid))
    # Out of order across the switch: UDP allows it, loopback rarely does
    # it; reported on stderr, not judged.
    print(f"out of order: {late}", file=sys.stderr)
    r.close()


def scenario_stream_v4():
    stream(socket.AF_INET, "127.0.0.1")


def scenario_stream_v6():
    stream(socket.AF_INET6, "::1")


def scenario_mapped():
    """A dual-stack IPv6 socket and an IPv4 one: the source is v4-mapped on
    one side, plain IPv4 on the other, on every path."""
    r = udp(socket.AF_INET6)
    r.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    r.bind(("::", 0))
    port = r.getsockname()[1]

    def v4():
        s = udp(socket.AF_INET, ("127.0.0.1", 0))
        warm_up(s, ("127.0.0.1", port), 64, True)
        for i in range(50):
            s.sendto(b"late %d" % i, ("127.0.0.1", port))
        data, src = s.recvfrom(100)
        ok = data == b"done" and src == ("127.0.0.1", port)
        s.close()
        return 0 if ok else 3

    pid = run_child(v4)
    warm_up(r, None, 64, False)
    srcs = set()
    for i in range(50):
        data, src = r.recvfrom(100)
        assert data == b"late %d" % i, data
        srcs.add(src[0])
    r.sendto(b"done", src)
    note("sources", sorted(srcs))
    note("child", wait_child(pid))
    r.close()


def scenario_readiness():
    """poll, select, epoll level- and edge-triggered wake for datagrams on
    whatever path they came, and say nothing when there is none."""
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()
    rounds = 60

    def sender():
        s = udp(bind=("127.0.0.1", 0))
        warm_up(s, dest, 64, True)
        for mode in range(4):
            for i in range(rounds):
                s.sendto(b"%d %d" % (mode, i), dest)
                if s.recv(100) != b"ok":
                    return 2
        s.close()
        return 0

    # Registered before the socket's first use, as a server does.
    p = select.poll()
    p.register(r, select.POLLIN)
    lt = select.epoll()
    lt.register(r.fileno(), select.EPOLLIN)
    et = select.epoll()
    et.register(r.fileno(), select.EPOLLIN | select.EPOLLET)
    pid = run_child(sender)
    warm_up(r, None, 64, False)
    for ep in (lt, et):  # what the warm-up left of the edges
        ep.poll(0)
    waits = {
        "poll": lambda: [ev for _, ev in p.poll(HANG * 1000)],
        "select": lambda: [len(select.select([r], [], [], HANG)[0])],
        "epoll": lambda: [ev for _, ev in lt.poll(HANG)],
        "epoll edge": lambda: [ev for _, ev in et.poll(HANG)],
    }
    for mode, (name, wait) in enumerate(waits.items()):
        woke, got, src = set(), 0, None
        for i in range(rounds):
            woke.add(json.dumps(wait()))
            data, src = r.recvfrom(100)
            got += data == b"%d %d" % (mode, i)
            if name == "epoll edge":
                woke.add("again " + json.dumps([ev for _, ev in et.poll(0)]))
            r.sendto(b"ok", src)
        note(name, [sorted(woke), got])
    note("nothing queued", [ev for _, ev in p.poll(0)])
    note("sender", wait_child(pid))
    r.close()


def scenario_semantics():
    """After the pair is up: MSG_PEEK, MSG_TRUNC, FIONREAD, zero-length
    datagrams, recvmsg's flags and source, MSG_DONTWAIT."""
    import fcntl
    import termios
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()
    fionread = lambda: struct.unpack("i", fcntl.ioctl(r.fileno(), termios.FIONREAD, b"\0" * 4))[0]

    def sender():
        s = udp(bind=("127.0.0.1", 0))
        warm_up(s, dest, 64, True)
        for d in (b"p" * 100, b"second", b"", b"after", b"x" * 60000, b"tail"):
            s.sendto(d, dest)
        code = 0 if s.recv(100) == b"bye" else 2
        s.close()
        return code

    pid = run_child(sender)
    warm_up(r, None, 64, False)
    # Everything the sender sent is there once the last one is.
    r.recv(1, socket.MSG_PEEK)
    while fionread() != 100:
        r.recv(1, socket.MSG_PEEK)
    note("FIONREAD: the next datagram", fionread())
    note("peek", len(r.recv(10, socket.MSG_PEEK)))
    buf = bytearray(10)
    note("peek|trunc: full length", r.recv_into(buf, 10, socket.MSG_PEEK | socket.MSG_TRUNC))
    data, anc, flags, src = r.recvmsg(10)
    note("recvmsg cut", [len(data), flags & socket.MSG_TRUNC != 0, anc])
    data, src = r.recvfrom(100)
    note("the cut datagram is gone", data.decode())
    note("FIONREAD of a zero-length one", fionread())
    data, src = r.recvfrom(100)
    note("zero-length", data.decode())
    note("next", r.recv(100).decode())
    data = r.recv(70000)
    note("60000 bytes", [len(data), data == b"x" * 60000])
    note("trunc: full length", r.recv_into(bytearray(2), 2, socket.MSG_TRUNC))
    try:
        r.recv(100, socket.MSG_DONTWAIT)
        note("empty", "got one")
    except BlockingIOError:
        note("empty", "EAGAIN")
    r.sendto(b"bye", src)
    note("sender", wait_child(pid))
    r.close()


def scenario_mmsg():
    """sendmmsg/recvmmsg on a pair: names, zero-length entries, MSG_TRUNC in
    msg_flags, MSG_WAITFORONE."""
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()
    payloads = [b"one", b"", b"three", b"x" * 1000, b"five"]

    def sender():
        s = udp(bind=("127.0.0.1", 0))
        warm_up(s, dest, 64, True)
        if sendmmsg(s, payloads, c_addr(socket.AF_INET, *dest))[0] != 5:
            return 2
        sendmmsg(s, [b"a" * 10, b"b" * 3], c_addr(socket.AF_INET, *dest))
        s.connect(dest)
        sendmmsg(s, [b"c1", b"c2"], None)
        code = 0 if s.recv(100) == b"bye" else 3
        s.close()
        return code

    pid = run_child(sender)
    sport = warm_up(r, None, 64, False)
    got = []
    while len(got) < len(payloads):
        n, part = recvmmsg(r, len(payloads) - len(got), 2048, MSG_WAITFORONE)
        assert isinstance(n, int), n
        got += part
    note("recvmmsg", [[len(d), fam, p == sport, fl, nl] for d, fam, p, fl, nl in got])
    got = []
    while len(got) < 2:
        got += recvmmsg(r, 2 - len(got), 4, MSG_WAITFORONE)[1]
    note("truncated entries", [[d.decode(), fl & socket.MSG_TRUNC != 0] for d, _, _, fl, _ in got])
    got = []
    while len(got) < 2:
        got += recvmmsg(r, 2 - len(got), 64, MSG_WAITFORONE)[1]
    note("connected got", [d.decode() for d, *_ in got])
    note("empty, non-blocking", recvmmsg(r, 4, 64, socket.MSG_DONTWAIT)[0])
    r.sendto(b"bye", ("127.0.0.1", sport))
    note("sender", wait_child(pid))
    r.close()


def scenario_connect():
    """A receiver with pairs up with two peers connects to one: the other's
    datagrams sent after are not heard; one it sent before still is (the
    kernel keeps what it queued before a connect). The steps are ordered by
    pipes, not by the sockets."""
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()
    steps = {"a": os.pipe(), "b": os.pipe()}
    done = os.pipe()

    def peer(name, says):
        def run():
            s = udp(bind=("127.0.0.1", 0))
            warm_up(s, dest, 64, True)
            for text in says:
                os.read(steps[name][0], 1)
                s.sendto(text, dest)
                os.write(done[1], b"x")
            s.close()
            return 0
        return run

    a = run_child(peer("a", [b"a heard"]))
    port_a = warm_up(r, None, 64, False)
    b = run_child(peer("b", [b"b early", b"b unheard", b"b unheard too"]))
    warm_up(r, None, 64, False)

    def step(name):
        os.write(steps[name][1], b"x")
        os.read(done[0], 1)

    step("b")  # b early: queued before the connect
    r.connect(("127.0.0.1", port_a))
    step("b")  # b unheard: after it
    step("a")
    # Two peers' datagrams: UDP gives no order between senders (on shm each
    # has its ring), so the set is what counts.
    note("queued before connect, and the connected peer's",
         sorted([r.recv(100).decode(), r.recv(100).decode()]))
    try:
        r.recv(100, socket.MSG_DONTWAIT)
        note("then", "a datagram")
    except BlockingIOError:
        note("then", "nothing")
    step("b")  # b's last: not heard either
    note("peers", [wait_child(a), wait_child(b)])
    r.close()


def burst_after(dest, go, count):
    """A sender to DEST: it warms a pair up, waits for a byte on the pipe
    end GO, then sends COUNT numbered datagrams and "end"."""
    def sender():
        s = udp(bind=("127.0.0.1", 0))
        warm_up(s, dest, 64, True)
        os.read(go, 1)
        for i in range(count):
            s.sendto(b"%d" % i, dest)
        s.sendto(b"end", dest)
        s.close()
        return 0
    return sender


def handed_on(how):
    """A receiver with a pair up with a sender hands its socket on to a
    child (HOW: "fork", or "exec" of a new image that adopts the inherited
    socket) and stops receiving; the child receives everything the sender
    sends after the child's first receive (ordered by a pipe), as the
    kernel gives every holder of a socket what it queued."""
    count = 50
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()
    ready = os.pipe()  # the child received once: the sender may go on

    a = run_child(burst_after(dest, ready[0], count))
    warm_up(r, None, 64, False)
    if how == "fork":
        b = run_child(lambda: handed_receive(r.fileno(), ready[1]))
    else:
        os.set_inheritable(r.fileno(), True)
        b = os.fork()
        if b == 0:
            code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                    f"import pairs; sys.exit(pairs.handed_receive({r.fileno()}, {ready[1]}))")
            os.set_inheritable(ready[1], True)
            os.execv(sys.executable, [sys.executable, "-c", code])
    note("receiver", wait_child(b))
    note("sender", wait_child(a))
    r.close()


def handed_receive(fd, ready_w, count=50):
    """handed_on's receiver, forked or in an exec'd image: 0 when it got
    the COUNT datagrams sent after its first receive."""
    c = socket.socket(fileno=fd)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(HANG), 0))
    try:
        c.recv(100, socket.MSG_DONTWAIT)
        return 3
    except BlockingIOError:
        pass
    os.write(ready_w, b"x")
    got = set()
    while True:
        data = c.recv(100)
        if data == b"end":
            break
        got.add(int(data))
    return 0 if len(got) == count else 4


def scenario_forked_receiver():
    handed_on("fork")


def scenario_exec_receiver():
    handed_on("exec")


def scenario_option_after_pair():
    """Datagrams wait in the receiver's ring when it sets an option the
    rings do not give (IP_PKTINFO): the socket goes back to the kernel, and
    what waited is still delivered, then what comes after."""
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()
    sent, set_ = os.pipe(), os.pipe()

    def sender():
        s = udp(bind=("127.0.0.1", 0))
        warm_up(s, dest, 64, True)
        for i in range(10):
            s.sendto(b"%d" % i, dest)
        os.write(sent[1], b"x")
        os.read(set_[0], 1)
        for i in range(10, 20):
            s.sendto(b"%d" % i, dest)
        s.close()
        return 0

    a = run_child(sender)
    warm_up(r, None, 64, False)
    os.read(sent[0], 1)
    r.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_PKTINFO", 8), 1)
    os.write(set_[1], b"x")
    note("received", sorted(int(r.recv(100)) for _ in range(20)))
    note("sender", wait_child(a))
    r.close()


def scenario_prefork():
    """A pre-fork server: the parent binds, forks, and never uses the
    socket; the child serves. The child carries the socket: its pair with
    a sender comes up, and every datagram arrives once."""
    count, batch = 300, 50
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()

    def server():
        warm_up(r, None, 64, False)
        seen = set()
        while True:
            data, src = r.recvfrom(100)
            if data == b"end":
                break
            seen.add(int(data))
            if len(seen) % batch == 0:
                r.sendto(b"ack", src)
        r.close()
        return 0 if seen == set(range(count)) else 4

    def sender():
        s = udp(bind=("127.0.0.1", 0))
        warm_up(s, dest, 64, True)
        for i in range(count):
            s.sendto(b"%d" % i, dest)
            if i % batch == batch - 1 and s.recv(100) != b"ack":
                return 2
        s.sendto(b"end", dest)
        s.close()
        return 0

    c = run_child(server)
    a = run_child(sender)
    note("server", wait_child(c))
    note("sender", wait_child(a))
    r.close()


def scenario_child_sends_first():
    """A receiver with a pair up with an echo peer forks a child that sends
    requests on the inherited socket before it ever receives, then reads
    the answers: they reach it (the kernel gives a socket's datagrams to
    whichever holder reads)."""
    r = udp(bind=("127.0.0.1", 0))
    port = os.pipe()

    def echo():
        p = udp(bind=("127.0.0.1", 0))
        os.write(port[1], b"%d" % p.getsockname()[1])
        warm_up(p, None, 64, False)
        while True:
            data, src = p.recvfrom(100)
            if data == b"end":
                return 0
            p.sendto(b"re " + data, src)

    a = run_child(echo)
    peer = ("127.0.0.1", int(os.read(port[0], 10)))
    warm_up(r, peer, 64, True)

    def child():
        for i in range(5):
            r.sendto(b"q%d" % i, peer)
        got = sorted(r.recv(100) for _ in range(5))
        return 0 if got == [b"re q%d" % i for i in range(5)] else 4

    note("child", wait_child(run_child(child)))
    r.sendto(b"end", peer)
    note("echo", wait_child(a))
    r.close()


def scenario_inherited_epoll():
    """A receiver registers its socket in an epoll set and forks a worker
    that waits on the inherited set and receives what it reports: every
    datagram sent after the worker's first wait reaches it."""
    count = 50
    r = udp(bind=("127.0.0.1", 0))
    dest = r.getsockname()
    waiting = os.pipe()

    a = run_child(burst_after(dest, waiting[0], count))
    warm_up(r, None, 64, False)
    ep = select.epoll()
    ep.register(r.fileno(), select.EPOLLIN)

    def worker():
        ep.poll(0)  # its first wait, before the sender goes on
        os.write(waiting[1], b"x")
        got = set()
        while ep.poll(HANG):
            data = r.recv(100, socket.MSG_DONTWAIT)
            if data == b"end":
                return 0 if got == set(range(count)) else 4
            got.add(int(data))
        return 5

    note("worker", wait_child(run_child(worker)))
    note("sender", wait_child(a))
    ep.close()
    r.close()


def main(scope=None):
    """Runs the scenario argv names among SCOPE's (a module's globals)."""
    scope = scope or globals()
    names = sorted(n[len("scenario_"):] for n in scope if n.startswith("scenario_"))
    if sys.argv[1:] == ["--list"]:
        print("\n".join(names))
        return
    scope["scenario_" + sys.argv[1]]()
    print(json.dumps(OBS))


if __name__ == "__main__":
    main()
