"""A hostile peer: holds a real connection under `vsocket run` (so it passes
the proof and gets the rings), then scribbles over the shared memory.

Usage: hostile.py MODE server | hostile.py MODE client PORT

Connects or accepts as progs/victim.py does and prints {"ev": "connected"}.
It sends only bytes of 0x80 and above, and reads and drops what it gets.
On "attack" on stdin a thread finds the rings in /proc/self/maps (mappings
of the memfd "vsocket-ring"), makes them writable if they are not (mprotect:
the memfd was opened read-write), first fills every data area with bytes of
0x80 and above (so the victim can tell a ring page from anything else), then
until "stop", over and over:

  * MODE "all": every 8-byte word of each ring's header page (file offset
    0..4095) gets garbage: random 64 bits, 0, all ones, a small number, or
    its own value moved a little (a plausible cursor), chosen per word;
  * MODE "all" and "nudge": 32 random words of a random header, one at a
    time, moved a little;
  * 64 random places of each data area get random bytes of 0x80 and above;
    MODE "low-data" writes bytes below 0x80 there instead and leaves the
    headers alone: the victim must notice them (its check is not blind);
  * MODE "static" instead: the header words that stay the same while data
    flows (the same in three snapshots: fields written once, such as the
    capacity; closed flags; padding), the non-zero ones first, one at a
    time: each gets each kind of garbage for 10 ms, then its value back.
    A library that read such a field again after checking it would use the
    garbage; all else stays valid, so the connection lives on. We stop
    reading meanwhile, so that our own library (which the garbage may crash
    as well) takes no data from the rings while the victim does.

Nothing here knows the header's layout. Prints {"ev": "attacking", "rings":
[...]} once it found them, {"ev": "stopped", "passes": N} at the end.
"""

import ctypes
import json
import os
import random
import socket
import sys
import threading
import time

PAGE = 4096
HIGH = bytes(range(0x80, 0x100))

libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def emit(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def rings():
    """[(start, end, file offset, perms)] of every mapping of a ring memfd."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "vsocket-ring" in parts[5]:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi, int(parts[2], 16), parts[1]))
    return out


def high_bytes(n):
    return bytes(HIGH[b & 0x7F] for b in os.urandom(n))


def low_bytes(n):
    return bytes(b & 0x7F for b in os.urandom(n))


def garbage(old):
    k = random.randrange(5)
    if k == 0:
        return random.getrandbits(64)
    if k == 1:
        return 0
    if k == 2:
        return (1 << 64) - 1
    if k == 3:
        return random.randrange(1 << 21)
    return (old + random.randint(-(1 << 18), 1 << 18)) % (1 << 64)


def attack(mode, stop, report):
    found = rings()
    if not found:
        report(ev="no-rings", maps=open("/proc/self/maps").read()[-3000:])
        return
    for lo, hi, _, perms in found:
        if "w" not in perms and libc.mprotect(lo, hi - lo, 3) != 0:  # PROT_READ|PROT_WRITE
            report(ev="mprotect-failed", errno=ctypes.get_errno())
            return
    headers, datas = [], []
    for lo, hi, off, _ in found:
        if off < PAGE:  # the first page of the file: the header
            headers.append((lo, min(hi, lo + PAGE - off)))
            lo = min(hi, lo + PAGE - off)
        if lo < hi:
            datas.append((lo, hi))
    report(ev="attacking", rings=[(hex(lo), hi - lo, off) for lo, hi, off, _ in found],
           headers=len(headers), data_areas=len(datas))
    if mode == "static":
        return static_words(headers, stop, report)
    fill = low_bytes if mode == "low-data" else high_bytes
    if mode != "low-data":
        for lo, hi in datas:
            ctypes.memmove(lo, high_bytes(hi - lo), hi - lo)
    passes = 0
    while not stop.is_set():
        passes += 1
        for lo, hi in headers if mode == "all" else ():
            for a in range(lo, hi - 7, 8):
                w = ctypes.c_uint64.from_address(a)
                w.value = garbage(w.value)
        for _ in range(32 if mode != "low-data" else 0):
            lo, hi = random.choice(headers)
            w = ctypes.c_uint64.from_address(random.randrange(lo, hi - 7) & ~7)
            w.value = (w.value + random.randint(-(1 << 12), 1 << 12)) % (1 << 64)
        for lo, hi in datas:
            for _ in range(64):
                n = random.randint(1, 256)
                a = random.randrange(lo, hi - n + 1)
                ctypes.memmove(a, fill(n), n)
    report(ev="stopped", passes=passes)


READING = threading.Event()
READING.set()


def static_words(headers, stop, report):
    words = [a for lo, hi in headers for a in range(lo, hi - 7, 8)]
    snaps = []
    for _ in range(3):
        snaps.append([ctypes.c_uint64.from_address(a).value for a in words])
        time.sleep(0.2)
    static = [(a, v) for a, v, *rest in zip(words, *snaps) if all(x == v for x in rest)]
    static.sort(key=lambda av: av[1] == 0)  # non-zero first
    READING.clear()
    report(ev="static", words=len(words), static=len(static),
           nonzero=sum(1 for _, v in static if v))
    passes = 0
    while not stop.is_set():
        passes += 1
        for a, v in static:
            w = ctypes.c_uint64.from_address(a)
            for bad in (random.getrandbits(64), 0, (1 << 64) - 1, random.randrange(1 << 21),
                        (v * 2) % (1 << 64), (v + 4096) % (1 << 64)):
                if stop.is_set():
                    break
                w.value = bad
                time.sleep(0.01)
                w.value = v
    report(ev="stopped", passes=passes)


def main():
    mode, role = sys.argv[1], sys.argv[2]
    if role == "server":
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        emit(ev="listening", port=ls.getsockname()[1], pid=os.getpid())
        s, _ = ls.accept()
        ls.close()
    else:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[3])))
    emit(ev="connected", fd=s.fileno(), pid=os.getpid(), uid=os.getuid(),
         local=list(s.getsockname()), peer=list(s.getpeername()))

    def send():
        chunk = high_bytes(1 << 16)
        try:
            while True:
                s.sendall(chunk)
        except OSError:
            pass

    def recv():
        try:
            while READING.wait() and s.recv(1 << 16):
                pass
        except OSError:
            pass

    for f in (send, recv):
        threading.Thread(target=f, daemon=True).start()
    stop = threading.Event()
    lock = threading.Lock()

    def report(**ev):
        with lock:
            emit(**ev)

    attacker = None
    for line in sys.stdin:
        if line.strip() == "attack" and attacker is None:
            attacker = threading.Thread(target=attack, args=(mode, stop, report), daemon=True)
            attacker.start()
        elif line.strip() == "stop":
            break
    stop.set()
    if attacker:
        attacker.join(10)
    os._exit(0)


if __name__ == "__main__":
    main()
