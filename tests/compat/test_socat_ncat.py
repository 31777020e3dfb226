"""socat and ncat: files piped through TCP (IPv4 and IPv6), a forking socat
echo server, and an exec'd shell serving a file on its inherited socket.

These servers end a connection's life quickly (a single-shot listener exits,
a forked child exits), so the path of each connection is checked while it is
still open: the client reads its input from a pipe the test holds open once
every byte went through (feed_stdin), or the exec'd server pauses
mid-download until the test has looked."""

import hashlib
import socket
import subprocess

import pytest

from conftest import (assert_no_error_lines, check_server_stat, conn_key, dump_stat, feed_stdin,
                      find_sockets, finish_comparison, free_port, is_connection, make_random_file,
                      port_of, read_pipe, require_program, sha256_file, stat_for_tree,
                      wait_tcp_paths, wait_until)

FAMILIES = {"ipv4": ("127.0.0.1", socket.AF_INET), "ipv6": ("::1", socket.AF_INET6)}
SIZE = 5 * 1024 * 1024 + 123


@pytest.fixture
def payload(tmp_path):
    path = tmp_path / "payload.bin"
    return path, make_random_file(path, SIZE, seed=21)


# ------------------------------------------------------------------ socat


def socat_addr(host, port, listen):
    if ":" in host:
        return (f"TCP6-LISTEN:{port},bind=[{host}],reuseaddr" if listen
                else f"TCP6:[{host}]:{port}")
    return f"TCP4-LISTEN:{port},bind={host},reuseaddr" if listen else f"TCP4:{host}:{port}"


def size_of(path):
    return path.stat().st_size if path.exists() else 0


def held_conn_key(client, port):
    """Key (conn_key) of the client's one open TCP connection to port, from stat."""
    found = []

    def have():
        socks = [dict(s) for p in stat_for_tree(client.runner.vsocket, client.pid).values()
                 for s in p.get("sockets", [])]
        found[:] = [s for s in socks if is_connection(s) and port_of(s.get("peer")) == port
                    and not s.get("closed")]
        return bool(found)
    wait_until(have, 10, lambda: f"{client.name}'s connection to port {port} in vsocket stat",
               [client])
    return conn_key(found[0])


def check_held_connection(srv, client, port, handoff=False):
    """Both ends hold the connection open: the server's records of it must be
    on its path (shm with SHM_BUILT), polled up to 3 s; the client's must
    not contradict it. handoff: the server hands the connection to an exec'd
    program, which takes it back to TCP (HANDOFF_REASONS)."""
    key = held_conn_key(client, port)
    vs = srv.runner.vsocket
    wait_tcp_paths(lambda: stat_for_tree(vs, srv.pid), f"{srv.name} (server)", peer="vsocket",
                   idle_ok=False, handoff_ok=handoff, select=lambda s: conn_key(s) == key)
    wait_tcp_paths(lambda: stat_for_tree(vs, client.pid), f"{client.name} (client)",
                   peer="vsocket", settled=False, handoff_ok=handoff,
                   select=lambda s: conn_key(s) == key)


def run_socat_push(runner, servers, tmp_path, family, payload):
    socat = require_program("socat")
    host, fam = FAMILIES[family]
    port = free_port(family=fam)
    src, digest = payload
    dst = tmp_path / f"socat-{family}-{runner.name}.out"
    srv = servers.start("socat-recv", [socat, "-u", socat_addr(host, port, True),
                                       f"OPEN:{dst},creat,trunc"], runner, port=port)
    if runner.preloaded:
        check_server_stat(srv, port, comm="socat", peer="vsocket")
    cli = servers.start("socat-send", [socat, "-u", "STDIN", socat_addr(host, port, False)],
                        runner, stdin=subprocess.PIPE)
    feed_stdin(cli.proc, src)
    wait_until(lambda: dst.exists() and dst.stat().st_size >= SIZE, 60,
               lambda: f"{dst} to reach {SIZE} bytes (has {size_of(dst)})", [srv, cli])
    if runner.preloaded:
        check_held_connection(srv, cli, port)
    cli.proc.stdin.close()
    assert cli.wait_exit(timeout=30) == 0, cli.describe()
    cli.check_output_clean()
    rc = srv.wait_exit(timeout=30)
    assert rc == 0, srv.describe()
    srv.check_output_clean()
    got = sha256_file(dst)
    assert got == digest, f"[{runner}] received file differs ({dst.stat().st_size} of {SIZE} bytes)"
    return got


@pytest.mark.socat
@pytest.mark.parametrize("family", list(FAMILIES))
def test_socat_file_transfer(family, runners, servers, tmp_path, payload):
    """A 5 MB file pushed with `socat -u` arrives with the same sha256 with
    and without vsocket; the listening socat is in vsocket stat, and once the
    file went through, the still open connection is on shm in the receiving
    socat when the build has it."""
    results = {r.name: run_socat_push(r, servers, tmp_path, family, payload) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"] == payload[1]


def run_socat_echo(runner, servers, tmp_path, payload):
    socat = require_program("socat")
    port = free_port()
    src, digest = payload
    srv = servers.start("socat-echo", [socat, f"TCP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork",
                                       "EXEC:cat"], runner, port=port)
    digests = []
    for i in range(2):
        cli = servers.start(f"socat-echo-client{i}", [socat, "-t", "10", "-",
                                                      f"TCP4:127.0.0.1:{port}"],
                            runner, stdin=subprocess.PIPE)
        dst = cli.out_path
        feed_stdin(cli.proc, src)
        wait_until(lambda: dst.stat().st_size >= SIZE, 60,
                   lambda: f"echo #{i} to reach {SIZE} bytes (has {size_of(dst)})", [srv, cli])
        if runner.preloaded:
            # the forked socat child serving this connection holds it (the
            # parent's copy, closed right after fork, is grouped with it)
            check_held_connection(srv, cli, port, handoff=True)
        cli.proc.stdin.close()
        assert cli.wait_exit(timeout=30) == 0, cli.describe()
        cli.check_output_clean()
        digests.append(sha256_file(dst))
        assert digests[-1] == digest, f"[{runner}] echo #{i} differs ({dst.stat().st_size} bytes)"
    if runner.preloaded:
        # after the children exited: the parent's copies may predate the handshake
        procs, socks = check_server_stat(srv, port, comm="socat", peer="vsocket", min_conns=2,
                                         settled=False, handoff_ok=True)
    assert srv.alive(), srv.describe()
    srv.stop()
    srv.check_output_clean()
    return digests


@pytest.mark.socat
def test_socat_echo_fork(runners, servers, tmp_path, payload):
    """`socat TCP-LISTEN:…,fork EXEC:cat` (fork per connection, exec of cat):
    two clients each get their 5 MB back intact, with and without vsocket;
    with vsocket the forked child's connection is on shm when the build has it."""
    results = {r.name: run_socat_echo(r, servers, tmp_path, payload) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]


# ------------------------------------------------------------------ ncat


def run_ncat_push(runner, servers, tmp_path, family, payload):
    ncat = require_program("ncat")
    host, fam = FAMILIES[family]
    port = free_port(family=fam)
    src, digest = payload
    flag = "-6" if fam == socket.AF_INET6 else "-4"
    # what the listener receives goes to its stdout, i.e. srv.out_path
    srv = servers.start("ncat-recv", [ncat, flag, "-l", host, port, "--recv-only"], runner,
                        port=port)
    if runner.preloaded:
        procs, socks = check_server_stat(srv, port, comm="ncat", peer="vsocket")
        fams = {s.get("family") for s in find_sockets(socks, proto="tcp", state="listening",
                                                       port=port)}
        assert fams == {"ipv6" if fam == socket.AF_INET6 else "ipv4"}, dump_stat(procs)
    cli = servers.start("ncat-send", [ncat, flag, "--send-only", host, port], runner,
                        stdin=subprocess.PIPE)
    feed_stdin(cli.proc, src)
    wait_until(lambda: srv.out_path.stat().st_size >= SIZE, 60,
               lambda: f"ncat listener's output to reach {SIZE} bytes "
                       f"(has {size_of(srv.out_path)})", [srv, cli])
    if runner.preloaded:
        check_held_connection(srv, cli, port)
    cli.proc.stdin.close()
    assert cli.wait_exit(timeout=30) == 0, cli.describe()
    cli.check_output_clean()
    rc = srv.wait_exit(timeout=30)
    assert rc == 0, srv.describe()
    got = sha256_file(srv.out_path)
    assert got == digest, f"[{runner}] received {srv.out_path.stat().st_size} of {SIZE} bytes, content differs"
    assert_no_error_lines(srv.stderr(), f"[{runner}] ncat server stderr")
    return got


@pytest.mark.ncat
@pytest.mark.parametrize("family", list(FAMILIES))
def test_ncat_file_transfer(family, runners, servers, tmp_path, payload):
    """`ncat --send-only` → `ncat -l --recv-only`: the 5 MB file arrives with
    the same sha256 with and without vsocket; the listener is in vsocket stat
    with the right address family, and once the file went through, the still
    open connection is on shm in the listener when the build has it."""
    results = {r.name: run_ncat_push(r, servers, tmp_path, family, payload) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"] == payload[1]


# The exec'd server program: the first MiB, then the rest once the test has
# looked at the connection mid-download (the flag file exists).
EXEC_SERVE = """\
head -c 1048576 "$1"
while [ ! -e "$2" ]; do sleep 0.02; done
tail -c +1048577 "$1"
"""


def first_difference(data, path):
    """Where data first departs from the file at path, for a failure message."""
    want = path.read_bytes()
    at = next((i for i, (a, b) in enumerate(zip(data, want)) if a != b), min(len(data), len(want)))
    return f"first difference at byte {at} of {len(want)}"


def run_exec_handoff(runner, servers, tmp_path, payload):
    socat = require_program("socat")
    sh = require_program("sh")
    port = free_port()
    src, digest = payload
    script = tmp_path / f"serve-{runner.name}.sh"
    script.write_text(EXEC_SERVE)
    flag = tmp_path / f"go-{runner.name}"
    # nofork: the forked socat execs the shell with the socket itself as its
    # stdin and stdout (inetd style), no relay in between.
    srv = servers.start("socat-exec", [socat, f"TCP4-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork",
                                       f"EXEC:{sh} {script} {src} {flag},nofork"],
                        runner, port=port)
    digests = []
    for i in range(3):
        flag.unlink(missing_ok=True)
        out = tmp_path / f"download-{runner.name}-{i}"
        with open(out, "wb") as f:
            cli = servers.start(f"socat-get{i}", [socat, "-u", f"TCP4:127.0.0.1:{port}", "STDOUT"],
                                runner, stdout=f)
        what = f"[{runner}] download #{i}"
        wait_until(lambda: out.stat().st_size >= 1 << 20, 60,
                   lambda: f"{what}: first MiB ({out.stat().st_size} bytes so far)", [cli])
        if runner.preloaded:
            # mid-download: the connection is open in the client and in the
            # exec'd shell (and its head/tail); the socat that accepted it
            # exec'd. The exec took the connection back to TCP (or it never
            # left it): kernel with a handoff reason, or shm, and nothing
            # contradicting it.
            key = held_conn_key(cli, port)
            vs = runner.vsocket
            wait_tcp_paths(lambda: [*stat_for_tree(vs, srv.pid).values(),
                                    *stat_for_tree(vs, cli.pid).values()],
                           f"exec'd server + client, download #{i}", peer="vsocket",
                           idle_ok=False, handoff_ok=True, select=lambda s: conn_key(s) == key)
        flag.touch()
        assert cli.wait_exit(timeout=60) == 0, cli.describe()
        cli.check_output_clean()
        data = out.read_bytes()
        digests.append(hashlib.sha256(data).hexdigest())
        assert digests[-1] == digest, f"{what}: {len(data)} bytes, {first_difference(data, src)}"
    srv.stop()
    srv.check_output_clean()
    return digests


@pytest.mark.socat
def test_exec_handoff(runners, servers, tmp_path, payload):
    """`socat TCP-LISTEN:…,fork EXEC:"sh serve.sh FILE FLAG",nofork`: each
    connection's socket becomes the stdin and stdout of an exec'd shell whose
    head and tail write the file into it (the second half once the test has
    looked); three downloads get the right sha256 with and without vsocket,
    and with vsocket each connection, checked mid-download, is on its path.
    (Not ncat --exec: ncat 7.93 relays through pipes, and its relay lost
    3180 bytes near the end now and then, without vsocket too.)"""
    results = {r.name: run_exec_handoff(r, servers, tmp_path, payload) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
