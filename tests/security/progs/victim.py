"""The honest end facing progs/hostile.py, run under `vsocket run`.

Usage: victim.py server | victim.py client PORT

As server: listens on 127.0.0.1 (ephemeral port), prints {"ev": "listening"},
accepts one connection. As client: connects to 127.0.0.1:PORT. Prints
{"ev": "connected"}. Then one thread sends and one receives, until "stop" on
stdin, each thread until its first error or end of stream:

  * it sends only bytes below 0x80 (its "secret"), the peer sends only bytes
    of 0x80 and above, so a received byte below 0x80 came from somewhere the
    peer never wrote (our own ring, our memory, a page never written);
  * every call is bounded: SO_RCVTIMEO and SO_SNDTIMEO of 2 s (a time-out
    is counted, not an error), and the receiver alternates a blocking recv
    with select() + recv(MSG_DONTWAIT); the longest call is reported.

Then it closes the socket and prints {"ev": "result", ...}: bytes moved, the
number of foreign bytes and the first of them, the errors (errno names),
time-outs, end of stream, the longest call in seconds. Exit status 0.
"""

import errno
import json
import os
import select
import socket
import struct
import sys
import threading
import time

CALL_TIMEOUT = 2.0
LOW = bytes(range(0x80))  # what we send
HIGH = bytes(range(0x80, 0x100))  # what the peer sends


def emit(**ev):
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.tx = self.rx = self.foreign = self.timeouts = 0
        self.first_foreign = ""
        self.errors = []
        self.eof = False
        self.max_call = 0.0

    def call(self, t0):
        dt = time.monotonic() - t0
        with self.lock:
            self.max_call = max(self.max_call, dt)


def sender(s, stop, st):
    table = bytes(b & 0x7F for b in range(256))
    chunk = os.urandom(1 << 16).translate(table)
    i = 0
    while not stop.is_set():
        n = 1 + (i * 7919) % len(chunk)
        i += 1
        t0 = time.monotonic()
        try:
            sent = s.send(chunk[:n])
            st.call(t0)
            st.tx += sent
        except BlockingIOError:  # SO_SNDTIMEO: counted, not an error
            st.call(t0)
            st.timeouts += 1
        except OSError as e:
            st.call(t0)
            st.errors.append("send: " + errno.errorcode.get(e.errno, str(e.errno)))
            return


def receiver(s, stop, st):
    i = 0
    while not stop.is_set():
        i += 1
        t0 = time.monotonic()
        try:
            if i % 2:
                data = s.recv(1 << 16)
            else:
                r, _, _ = select.select([s], [], [], CALL_TIMEOUT)
                st.call(t0)
                if not r:
                    st.timeouts += 1
                    continue
                t0 = time.monotonic()
                data = s.recv(1 << 16, socket.MSG_DONTWAIT)
            st.call(t0)
        except BlockingIOError:
            st.call(t0)
            st.timeouts += 1
            continue
        except OSError as e:
            st.call(t0)
            st.errors.append("recv: " + errno.errorcode.get(e.errno, str(e.errno)))
            return
        if not data:
            st.eof = True
            return
        st.rx += len(data)
        low = data.translate(None, HIGH)
        if low:
            st.foreign += len(low)
            if not st.first_foreign:
                st.first_foreign = low[:32].hex()


def main():
    role = sys.argv[1]
    if role == "server":
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        emit(ev="listening", port=ls.getsockname()[1], pid=os.getpid())
        s, _ = ls.accept()
        ls.close()
    else:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    emit(ev="connected", fd=s.fileno(), pid=os.getpid(), local=list(s.getsockname()),
         peer=list(s.getpeername()))
    tv = struct.pack("ll", int(CALL_TIMEOUT), 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    st, stop = Stats(), threading.Event()
    threads = [threading.Thread(target=f, args=(s, stop, st), daemon=True)
               for f in (sender, receiver)]
    for t in threads:
        t.start()
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()
    # test_other_user.py's HANG_S: only a hung call takes that long
    for t in threads:
        t.join(15 * CALL_TIMEOUT)
    hung = [t.name for t in threads if t.is_alive()]
    t0 = time.monotonic()
    if not hung:
        s.close()
    emit(ev="result", tx=st.tx, rx=st.rx, foreign=st.foreign, first_foreign=st.first_foreign,
         errors=st.errors, timeouts=st.timeouts, eof=st.eof, max_call=round(st.max_call, 3),
         close_s=round(time.monotonic() - t0, 3), hung=hung)
    if hung:
        os._exit(0)  # a hung thread must not keep us alive: the test reads "hung"


if __name__ == "__main__":
    main()
