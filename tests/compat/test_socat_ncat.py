"""socat and ncat: files piped through TCP (IPv4 and IPv6), a forking socat
echo server, and ncat --exec (a socket inherited across fork + exec)."""

import hashlib
import socket

import pytest

from conftest import (assert_no_error_lines, check_server_stat, dump_stat, find_sockets,
                      finish_comparison, free_port, make_random_file, require_program, run_cmd,
                      sha256_file)

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


def run_socat_push(runner, servers, tmp_path, family, payload):
    socat = require_program("socat")
    host, fam = FAMILIES[family]
    port = free_port(family=fam)
    src, digest = payload
    dst = tmp_path / f"socat-{family}-{runner.name}.out"
    srv = servers.start("socat-recv", [socat, "-u", socat_addr(host, port, True),
                                       f"OPEN:{dst},creat,trunc"], runner, port=port)
    if runner.preloaded:
        check_server_stat(srv, port, comm="socat")
    run_cmd([socat, "-u", f"OPEN:{src}", socat_addr(host, port, False)], runner, timeout=60)
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
    and without vsocket; the listening socat is in vsocket stat."""
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
        dst = tmp_path / f"socat-echo-{runner.name}-{i}.out"
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            run_cmd([socat, "-t", "10", "-", f"TCP4:127.0.0.1:{port}"], runner, stdin=fin,
                    stdout=fout, timeout=60)
        digests.append(sha256_file(dst))
        assert digests[-1] == digest, f"[{runner}] echo #{i} differs ({dst.stat().st_size} bytes)"
    if runner.preloaded:
        procs, socks = check_server_stat(srv, port, comm="socat")
    assert srv.alive(), srv.describe()
    srv.stop()
    srv.check_output_clean()
    return digests


@pytest.mark.socat
def test_socat_echo_fork(runners, servers, tmp_path, payload):
    """`socat TCP-LISTEN:…,fork EXEC:cat` (fork per connection, exec of cat):
    two clients each get their 5 MB back intact, with and without vsocket."""
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
        procs, socks = check_server_stat(srv, port, comm="ncat")
        fams = {s.get("family") for s in find_sockets(socks, proto="tcp", state="listening",
                                                       port=port)}
        assert fams == {"ipv6" if fam == socket.AF_INET6 else "ipv4"}, dump_stat(procs)
    with open(src, "rb") as fin:
        run_cmd([ncat, flag, "--send-only", host, port], runner, stdin=fin, timeout=60)
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
    with the right address family."""
    results = {r.name: run_ncat_push(r, servers, tmp_path, family, payload) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"] == payload[1]


def run_ncat_exec(runner, servers, tmp_path, payload):
    ncat = require_program("ncat")
    cat = require_program("cat")
    port = free_port()
    src, digest = payload
    srv = servers.start("ncat-exec", [ncat, "-4", "-l", "127.0.0.1", port, "--keep-open",
                                      "--exec", f"{cat} {src}"], runner, port=port)
    digests = []
    for i in range(3):
        res = run_cmd([ncat, "-4", "--recv-only", "127.0.0.1", port], runner, timeout=60,
                      text_stdout=False)
        digests.append(hashlib.sha256(res.stdout).hexdigest())
        assert digests[-1] == digest, f"[{runner}] download #{i}: {len(res.stdout)} bytes, differs"
    if runner.preloaded:
        procs, socks = check_server_stat(srv, port, comm="ncat")
    srv.stop()
    srv.check_output_clean()
    return digests


@pytest.mark.ncat
def test_ncat_exec(runners, servers, tmp_path, payload):
    """`ncat -l --keep-open --exec "cat FILE"`: the connection's socket is
    inherited by a forked and exec'd cat that writes the file into it; three
    downloads get the right sha256 with and without vsocket."""
    results = {r.name: run_ncat_exec(r, servers, tmp_path, payload) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
