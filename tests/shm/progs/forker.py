#!/usr/bin/env python3
"""Programs that fork with connections open, run under `vsocket run` by
tests/shm/test_fork.py (shm on this host, or rdma in the Soft-RoCE guest).

    forker.py serve ADDR              echo server: prints its port, echoes every
                                      connection (a thread each) until EOF
    forker.py SCENARIO ADDR PORT      a client; prints one JSON line
                                      {"ok": true, ...} or {"ok": false, "error"}

Data travels in frames (writer id, sequence number, length, crc32, payload)
echoed by the server; the reader checks each frame's crc and that every
writer's frames come back in order, none missing. Scenarios:

  turns     an upgraded connection shared by parent and child after fork:
            they take turns writing and reading (sizes that make rings grow,
            pauses that let them give memory back), then write at once while
            the parent reads, then the child writes once more at its exit
  young     fork while the connection is young; the child writes and exits
            (a subprocess); the parent's connection then upgrades
  young_lives  the same, the child living on and both writing: one path at
            both ends
  spawn     CONNS connections setting up and echoing while the process runs
            subprocess.run, posix_spawn and system() in a loop; every one
            must end on the transport under test
  midsetup  fork just as the set-up starts (child exits at once, or lives and
            writes first); the connection ends on the transport or on TCP,
            every byte right

Environment: VSOCKET_BIN (the vsocket tool, for `vsocket stat`),
VSOCKET_FORK_CONNS (spawn: connections, default 100),
VSOCKET_SEMANTICS_TRANSPORT (shm or rdma: the transport expected).
"""
import faulthandler
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

TRANSPORT = os.environ.get("VSOCKET_SEMANTICS_TRANSPORT") or "shm"
HEADER = struct.Struct("!IIII")  # writer, seq, length, crc32


class Failed(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failed(msg)


def payload(writer, seq, n):
    block = struct.pack("!II", writer, seq) * 8
    return (block * (n // len(block) + 1))[:n]


def frame(writer, seq, n):
    body = payload(writer, seq, n)
    return HEADER.pack(writer, seq, n, zlib.crc32(body)) + body


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        expect(chunk, f"end of stream with {n - len(buf)} of {n} bytes missing")
        buf += chunk
    return bytes(buf)


class Reader:
    """Checks echoed frames: crc, and each writer's sequence in order."""

    def __init__(self, s):
        self.s, self.next = s, {}

    def one(self):
        writer, seq, n, crc = HEADER.unpack(recv_exact(self.s, HEADER.size))
        expect(n <= 64 << 20, f"frame length {n}: the stream is corrupt")
        body = recv_exact(self.s, n)
        expect(zlib.crc32(body) == crc, f"frame {writer}/{seq}: wrong bytes")
        want = self.next.get(writer, 0)
        expect(seq == want, f"writer {writer}: frame {seq} where {want} was due")
        self.next[writer] = seq + 1
        return writer, n


def echo(s, writer, seq, n):
    s.sendall(frame(writer, seq, n))
    r = Reader(s)
    r.next[writer] = seq
    got_writer, got_n = r.one()
    expect((got_writer, got_n) == (writer, n), "echo of another frame")


def transports(pid=None):
    """{local address: (transport, reason)} of PID's live TCP connections."""
    out = subprocess.run([os.environ["VSOCKET_BIN"], "stat", "--json", "--pid",
                          str(pid or os.getpid())], capture_output=True, text=True, timeout=60)
    found = {}
    if out.returncode != 0:
        return found
    for p in json.loads(out.stdout).get("processes", []):
        for so in p.get("sockets", []):
            if so.get("proto") == "tcp" and so.get("peer") and not so.get("closed"):
                found[so.get("local")] = (so.get("transport"), so.get("reason"))
    return found


def addr_name(addr):
    host, port = addr[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def local_name(s):
    return addr_name(s.getsockname())


def peer_transport(s):
    """The transport the other end of S shows (any process of this host)."""
    out = subprocess.run([os.environ["VSOCKET_BIN"], "stat", "--json"], capture_output=True,
                         text=True, timeout=60)
    me, peer = local_name(s), addr_name(s.getpeername())
    for p in json.loads(out.stdout or "{}").get("processes", []):
        for so in p.get("sockets", []):
            if so.get("local") == peer and so.get("peer") == me and not so.get("closed"):
                return so.get("transport"), so.get("reason")
    return None, None


def transport_of(s):
    return transports().get(local_name(s), (None, None))


def wait_transport(s, want, seconds=30.0):
    """Until S shows WANT (its set-up moves at our calls: echo meanwhile)."""
    deadline = time.monotonic() + seconds * float(os.environ.get("VSOCKET_SEMANTICS_TIME_SCALE") or 1)
    seq = 10**6
    while True:
        got = transport_of(s)
        if got[0] == want or time.monotonic() > deadline:
            return got
        echo(s, 9, seq, 4096)
        seq += 1
        time.sleep(0.01)


def connect(addr, port):
    s = socket.create_connection((addr, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# --------------------------------------------------------------------------
# scenarios


def turns(addr, port):
    s = connect(addr, port)
    for i in range(8):  # past the upgrade's byte threshold
        echo(s, 0, i, 256 << 10)
    got = wait_transport(s, TRANSPORT)
    expect(got[0] == TRANSPORT, f"before the fork: {got}")
    # Counters the child shares: each writer's echoed bytes (flow control
    # for the concurrent phase) and the turn token.
    shared = mmap.mmap(-1, 64)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    me = 1 if pid == 0 else 0
    try:
        seq = 8 if me == 0 else 0
        sizes = [1 << 10, 4 << 20, 64 << 10, 16 << 20, 1, 2 << 20]
        for rnd, n in enumerate(sizes):
            if rnd % 2 != me:
                # the other writes: wait for its token, hand ours back later
                os.read(to_parent_r if me == 0 else to_child_r, 1)
                continue
            if rnd == 3:
                time.sleep(0.3)  # the rings go back to their window meanwhile
            for k in range(3):
                echo(s, me, seq, n)
                seq += 1
            os.write(to_child_w if me == 0 else to_parent_w, b"t")
        # Both write at once, the parent reads: each keeps at most 64 KiB
        # unechoed, so no send ever waits for room (the kernel too could then
        # split a send and interleave the two writers' bytes).
        def write_all(writer, start, count):
            for k in range(count):
                n = 1 + (k * 37) % 2000
                while True:
                    sent, echoed = struct.unpack_from("!QQ", shared, 16 * writer)
                    if sent - echoed < 64 << 10:
                        break
                    time.sleep(0.0005)
                struct.pack_into("!Q", shared, 16 * writer, sent + HEADER.size + n)
                s.sendall(frame(writer, start + k, n))
        count = 3000
        if me == 1:
            write_all(1, seq, count)
            os.read(to_child_r, 1)  # the parent read them all
            s.sendall(frame(1, seq + count, 5))  # at exit, as an exit handler would
            s.close()
            os._exit(0)
        t = threading.Thread(target=write_all, args=(0, seq, count))
        t.start()
        r = Reader(s)
        r.next = {0: seq, 1: 3 * (len(sizes) // 2)}  # the child's turns: three frames each
        for _ in range(2 * count):
            writer, n = r.one()
            sent, echoed = struct.unpack_from("!QQ", shared, 16 * writer)
            struct.pack_into("!Q", shared, 16 * writer + 8, echoed + HEADER.size + n)
        t.join()
        os.write(to_child_w, b"d")
        writer, n = r.one()
        expect((writer, n) == (1, 5), "the child's last frame")
        _, status = os.waitpid(pid, 0)
        expect(status == 0, f"child exit status {status}")
        for k in range(3):  # the parent alone again: rings grow once more
            echo(s, 0, seq + count + k, 8 << 20)
        got = transport_of(s)
        expect(got[0] == TRANSPORT, f"after the fork: {got}")
        return {"transport": got[0]}
    except BaseException:
        if me == 1:
            import traceback
            traceback.print_exc()
            os._exit(1)
        raise


def young(addr, port):
    s = connect(addr, port)
    echo(s, 0, 0, 100)
    pid = os.fork()
    if pid == 0:  # as a subprocess whose program writes once and exits
        try:
            s.sendall(frame(1, 0, 16 << 10))
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    expect(status == 0, f"child exit status {status}")
    r = Reader(s)
    expect(r.one() == (1, 16 << 10), "the child's frame")
    got = wait_transport(s, TRANSPORT)
    expect(got[0] == TRANSPORT, f"alone again, the connection did not upgrade: {got}")
    for i in range(4):
        echo(s, 0, 1 + i, 1 << 20)
    return {"transport": got[0]}


def one_path(s, seq):
    """Past the thresholds once more, then both ends must show one path."""
    for i in range(8):
        echo(s, 0, seq + i, 256 << 10)
    got = wait_transport(s, TRANSPORT, seconds=5)
    theirs = peer_transport(s)
    expect(theirs[0] == got[0], f"this end on {got}, the other on {theirs}")
    return {"transport": got[0], "reason": got[1], "peer": theirs}


def young_lives(addr, port):
    """The child lives on beside the parent, both writing: the connection
    stays on TCP while shared (or its peer gives up on it), ends on one path
    at both ends."""
    s = connect(addr, port)
    echo(s, 0, 0, 100)
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(0.2)
            s.sendall(frame(1, 0, 16 << 10))
            time.sleep(0.5)
            os._exit(0)
        except BaseException:
            os._exit(1)
    # Both write (one frame per send, small: no send waits for room, so
    # none is split), the parent reads.
    r = Reader(s)
    r.next = {0: 1, 1: 0}
    for i in range(20):
        s.sendall(frame(0, 1 + i, 16 << 10))
        time.sleep(0.02)
    seen = [r.one()[0] for _ in range(21)]
    expect(seen.count(1) == 1, f"the child's frame came back {seen.count(1)} times")
    _, status = os.waitpid(pid, 0)
    expect(status == 0, f"child exit status {status}")
    return one_path(s, 21)


def spawn(addr, port):
    conns = [connect(addr, port) for _ in range(int(os.environ.get("VSOCKET_FORK_CONNS") or 100))]
    true = "/bin/true"
    seq = 0
    for rnd in range(12):
        subprocess.run([true], check=True)
        pid = os.posix_spawn(true, [true], os.environ)
        os.waitpid(pid, 0)
        expect(os.system(true) == 0, "system() failed")
        for s in conns:  # past the thresholds by round 8: set-ups start
            echo(s, 0, seq, 32 << 10)
        seq += 1
    found = transports()
    got = [found.get(local_name(s), (None, None)) for s in conns]
    for s in conns:
        echo(s, 0, seq, 64 << 10)
        s.close()
    off = [g for g in got if g[0] != TRANSPORT]
    expect(not off, f"{len(off)} of {len(got)} connections not on {TRANSPORT}: {off[:5]}")
    return {"connections": len(got)}


def midsetup(addr, port, child_lives):
    s = connect(addr, port)
    echo(s, 0, 0, 300 << 10)  # past the byte threshold: the set-up starts at our next call
    s.sendall(frame(0, 1, 10))
    pid = os.fork()
    if pid == 0:
        if not child_lives:
            os._exit(0)
        try:
            time.sleep(0.2)
            s.sendall(frame(1, 0, 100 << 10))
            os._exit(0)
        except BaseException:
            os._exit(1)
    r = Reader(s)
    r.next[0] = 1
    expect(r.one() == (0, 10), "the frame sent before the fork")
    if child_lives:
        expect(r.one() == (1, 100 << 10), "the child's frame")
    _, status = os.waitpid(pid, 0)
    expect(status == 0, f"child exit status {status}")
    return one_path(s, 2)


def serve(addr):
    lst = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    lst.bind((addr, 0))
    lst.listen(512)
    print(json.dumps({"port": lst.getsockname()[1]}), flush=True)

    def one(c):
        with c:
            try:
                while True:
                    b = c.recv(1 << 20)
                    if not b:
                        return
                    c.sendall(b)
            except ConnectionError:  # a client that failed and went
                return

    while True:
        c, _ = lst.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def main():
    # A hang shows where every thread waits, then fails the run.
    scale = float(os.environ.get("VSOCKET_SEMANTICS_TIME_SCALE") or 1)
    if sys.argv[1] != "serve":
        faulthandler.dump_traceback_later(120 * scale, exit=True)
    if sys.argv[1] == "serve":
        return serve(sys.argv[2])
    scenario, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run = {"turns": turns, "young": young, "young_lives": young_lives, "spawn": spawn,
           "midsetup_exit": lambda a, p: midsetup(a, p, False),
           "midsetup_lives": lambda a, p: midsetup(a, p, True)}[scenario]
    try:
        res = run(addr, port)
        print(json.dumps({"ok": True, **res}), flush=True)
    except Failed as e:
        print(json.dumps({"ok": False, "error": str(e)}), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
