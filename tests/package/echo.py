"""A TCP echo server and client for tests/package/test_package.sh.

    echo.py server          listens on 127.0.0.1, prints its port and library,
                            echoes one connection until it ends, prints the count
    echo.py client PORT     sends 1 MiB in 64 KiB rounds, each echoed back,
                            prints what came back, then waits for a line on
                            stdin (so that `vsocket stat` sees both ends live)

Each prints the libvsocket it has loaded (from /proc/self/maps), so the test
knows which copy of the library ran.
"""
import hashlib
import socket
import sys

ROUND = 64 * 1024
ROUNDS = 16


def loaded_library():
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libvsocket" in path:
                return path
    return "none"


def recv_exactly(conn, n):
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def server():
    lst = socket.create_server(("127.0.0.1", 0))
    print(f"server port={lst.getsockname()[1]} lib={loaded_library()}", flush=True)
    conn, _ = lst.accept()
    total = 0
    while True:
        data = conn.recv(ROUND)
        if not data:
            break
        conn.sendall(data)
        total += len(data)
    print(f"server echoed={total}", flush=True)


def client(port):
    conn = socket.create_connection(("127.0.0.1", port))
    sent, back = hashlib.sha256(), hashlib.sha256()
    total = 0
    for i in range(ROUNDS):
        block = bytes((i * 7 + j) % 251 for j in range(ROUND))
        conn.sendall(block)
        sent.update(block)
        data = recv_exactly(conn, ROUND)
        back.update(data)
        total += len(data)
    same = "yes" if sent.digest() == back.digest() else "no"
    print(f"client received={total} same={same} lib={loaded_library()}", flush=True)
    sys.stdin.readline()
    conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server()
    else:
        client(int(sys.argv[2]))
