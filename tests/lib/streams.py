"""Stream helpers shared by the Python test programs (security progs, RDMA
cases: those copy this file next to their own scripts)."""


def recv_exactly(s, n, digest=None):
    """Reads exactly N bytes from socket S; end of stream before is an
    EOFError. With DIGEST (a hashlib object) the bytes go into it and None is
    returned, so that large transfers need no buffer."""
    got = 0
    out = bytearray() if digest is None else None
    while got < n:
        b = s.recv(min(n - got, 1 << 20))
        if not b:
            raise EOFError(f"end of stream after {got} of {n} bytes")
        got += len(b)
        if digest is None:
            out += b
        else:
            digest.update(b)
    return bytes(out) if out is not None else None
