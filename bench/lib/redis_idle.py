#!/usr/bin/env python3
"""redis_idle.py N PORT: holds N idle connections to a redis server on
127.0.0.1:PORT (the crowd of a server's keep-alive clients), prints
"held N" once every one has answered two PINGs, then sleeps until killed.

The second PING comes after a pause, so that under vsocket both directions
of every connection are on the rings by then, as with a client that
talked a while and went quiet."""
import resource
import socket
import sys
import time


def ping(s):
    s.sendall(b"PING\r\n")
    if s.recv(64) != b"+PONG\r\n":
        sys.exit(f"redis_idle: no PONG on connection {s.getsockname()}")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: redis_idle.py N PORT")
    n, port = int(sys.argv[1]), int(sys.argv[2])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # two descriptors per connection under vsocket (its side channel)
    if hard != resource.RLIM_INFINITY and hard < 2 * n + 64:
        sys.exit(f"redis_idle: {n} connections need {2 * n + 64} descriptors, the limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    for s in conns:
        ping(s)
    time.sleep(0.5)
    for s in conns:
        ping(s)
    print(f"held {n}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
