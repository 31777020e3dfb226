"""Shared fixtures for the vsocket compatibility suite.

Every test runs a real program twice: once plainly ("plain") and once through
`vsocket run` ("vsocket"), compares the two results, and for the vsocket run
checks through `vsocket stat --json` that the program's sockets are listed with
transport `kernel` and a non-empty reason.

Environment:
  VSOCKET_BUILD_DIR              build dir holding lib/libvsocket.so and bin/ (default <repo>/build)
  VSOCKET_COMPAT_ALLOW_MISSING=1 skip (instead of fail) tests whose program is not installed
  VSOCKET_COMPAT_BASELINE_ONLY=1 run only the "plain" halves (no vsocket build needed);
                                 the tests then end as skipped after the baseline checks passed
  VSOCKET_COMPAT_TIMEOUT_SCALE   multiply every timeout (default 1, or 3 for a sanitizer build)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGS = Path(__file__).resolve().parent / "progs"
BUILD_DIR = Path(os.environ.get("VSOCKET_BUILD_DIR") or (REPO / "build")).resolve()
ALLOW_MISSING = os.environ.get("VSOCKET_COMPAT_ALLOW_MISSING") == "1"
BASELINE_ONLY = os.environ.get("VSOCKET_COMPAT_BASELINE_ONLY") == "1"


def _is_sanitizer_build(build_dir: Path) -> bool:
    cache = build_dir / "CMakeCache.txt"
    try:
        return re.search(r"^VSOCKET_SANITIZE:BOOL=(ON|1|TRUE|YES)\s*$",
                         cache.read_text(errors="replace"), re.M | re.I) is not None
    except OSError:
        return False


SANITIZER_BUILD = _is_sanitizer_build(BUILD_DIR)
TIMEOUT_SCALE = float(os.environ.get("VSOCKET_COMPAT_TIMEOUT_SCALE")
                      or (3.0 if SANITIZER_BUILD else 1.0))


def T(seconds: float) -> float:
    """A timeout, scaled for slow (sanitizer) builds."""
    return seconds * TIMEOUT_SCALE


MARKERS = {
    "iperf3": "iperf3 TCP/UDP bandwidth runs",
    "sockperf": "sockperf ping-pong and throughput",
    "redis": "redis-server with redis-benchmark / redis-cli",
    "nginx": "nginx (master + 2 workers) with curl and wrk",
    "memcached": "memcached with a Python text-protocol client and memcslap",
    "socat": "socat file transfer and forking echo",
    "ncat": "ncat file transfer and --exec echo",
    "python_echo": "stdlib socket + selectors echo client/server",
    "stress": "vsocket-stress in every mode",
}


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


# --------------------------------------------------------------------------
# programs and build artefacts


def require_program(name: str) -> str:
    """Absolute path of an installed program; a missing one fails the test
    (scripts/install-deps.sh test installs all of them) unless
    VSOCKET_COMPAT_ALLOW_MISSING=1, which turns it into a skip."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} is not installed (run scripts/install-deps.sh test)"
        if ALLOW_MISSING:
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    return path


def require_build_artifact(rel: str) -> Path:
    path = BUILD_DIR / rel
    if not path.exists():
        pytest.fail(f"{path} does not exist: build first (cmake -S . -B build -G Ninja && "
                    f"cmake --build build) or set VSOCKET_BUILD_DIR", pytrace=False)
    return path


@pytest.fixture(scope="session")
def build_dir() -> Path:
    return BUILD_DIR


@pytest.fixture(scope="session")
def vsocket_bin() -> Path:
    if BASELINE_ONLY:
        pytest.skip("VSOCKET_COMPAT_BASELINE_ONLY=1")
    require_build_artifact("lib/libvsocket.so")
    return require_build_artifact("bin/vsocket")


# --------------------------------------------------------------------------
# how a program is launched: plainly or through `vsocket run`


@dataclasses.dataclass(frozen=True)
class Runner:
    name: str                       # "plain" or "vsocket" (used in messages)
    vsocket: Optional[Path] = None  # path of the vsocket tool, None = plain
    transport: Optional[str] = None # --transport=... for vsocket run

    @property
    def preloaded(self) -> bool:
        return self.vsocket is not None

    def cmd(self, argv: Sequence) -> list[str]:
        argv = [str(a) for a in argv]
        if not self.preloaded:
            return argv
        pre = [str(self.vsocket), "run"]
        if self.transport:
            pre.append(f"--transport={self.transport}")
        return pre + ["--", *argv]

    def __str__(self):
        return self.name


PLAIN = Runner("plain")


@pytest.fixture(scope="session")
def vsocket_runner() -> Runner:
    if BASELINE_ONLY:
        pytest.skip("VSOCKET_COMPAT_BASELINE_ONLY=1")
    require_build_artifact("lib/libvsocket.so")
    return Runner("vsocket", require_build_artifact("bin/vsocket"))


@pytest.fixture
def runners() -> list[Runner]:
    """[plain, vsocket]: the two halves of every comparison.  With
    VSOCKET_COMPAT_BASELINE_ONLY=1 only [plain]; use finish_comparison() at
    the end of the test so such a run is reported as skipped, not passed."""
    if BASELINE_ONLY:
        return [PLAIN]
    require_build_artifact("lib/libvsocket.so")
    return [PLAIN, Runner("vsocket", require_build_artifact("bin/vsocket"))]


def finish_comparison(results: dict):
    if "vsocket" not in results:
        pytest.skip("baseline only (VSOCKET_COMPAT_BASELINE_ONLY=1): plain half passed")


# --------------------------------------------------------------------------
# running commands


def _kill_group(pgid: int, sig=signal.SIGKILL):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is pgid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        st = _proc_stat(int(d))
        if st and st[1] != "Z" and st[3] == pgid:
            out.append(int(d))
    return out


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.05)
    return not group_members(pgid)


@dataclasses.dataclass
class Result:
    argv: list
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (f"command: {' '.join(map(str, self.argv))}\nexit code: {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}")


def run_cmd(argv: Sequence, runner: Runner = PLAIN, *, timeout: float = 60,
            input: Optional[bytes] = None, stdin=None, stdout=None, cwd=None, env=None,
            expect_rc: Optional[int] = 0, on_start: Optional[Callable[[subprocess.Popen], None]] = None,
            text_stdout: bool = True, check_errors: bool = True) -> Result:
    """Run argv (through `runner`) in its own process group with a bounded
    wait; on timeout the whole group is killed and the test fails.  With
    expect_rc set (default 0) a different exit code fails the test."""
    cmd = runner.cmd(argv)
    timeout = T(timeout)
    p = subprocess.Popen(cmd, stdin=(subprocess.PIPE if input is not None else (stdin or subprocess.DEVNULL)),
                         stdout=(stdout or subprocess.PIPE), stderr=subprocess.PIPE,
                         cwd=cwd, env=env, start_new_session=True)
    try:
        if on_start:
            on_start(p)
        out, err = p.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(p.pid)
        out, err = p.communicate(timeout=10)
        res = Result(cmd, p.returncode, _dec(out), _dec(err))
        pytest.fail(f"[{runner}] timed out after {timeout:.0f}s\n{res.describe()}", pytrace=False)
    except BaseException:
        _kill_group(p.pid)
        p.wait(timeout=10)
        raise
    finally:
        # nothing of it may outlive the call (e.g. a forked helper)
        if not _wait_group_gone(p.pid, T(5)):
            _kill_group(p.pid)
    res = Result(cmd, p.returncode, _dec(out) if text_stdout else out, _dec(err))
    if expect_rc is not None and p.returncode != expect_rc:
        pytest.fail(f"[{runner}] exit code {p.returncode}, expected {expect_rc}\n{res.describe()}",
                    pytrace=False)
    if check_errors:
        assert_no_error_lines(res.stderr, f"[{runner}] stderr of {os.path.basename(str(argv[0]))}")
    return res


def _dec(b) -> str:
    if b is None:
        return ""
    if isinstance(b, str):
        return b
    return b.decode("utf-8", "replace")


@pytest.fixture
def run_with_vsocket(vsocket_runner) -> Callable[..., Result]:
    """run_with_vsocket(argv, **kw) -> Result: run_cmd through `vsocket run`."""
    def _run(argv, **kw):
        return run_cmd(argv, vsocket_runner, **kw)
    return _run


# Lines that are never acceptable in a program's output, with or without vsocket.
ERROR_PATTERNS = [
    re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer"),
    re.compile(r"^==\d+==\s*ERROR", re.M),
    re.compile(r"runtime error:"),          # UBSan
    re.compile(r"stack smashing detected"),
    re.compile(r"Segmentation fault|core dumped"),
    re.compile(r"^\S*vsocket\S*[:\]]?.*\b(FATAL|fatal|ERROR|error|panic|PANIC)\b", re.M),
]


def assert_no_error_lines(text: str, what: str):
    for pat in ERROR_PATTERNS:
        m = pat.search(text or "")
        if m:
            start = max(0, m.start() - 600)
            pytest.fail(f"{what}: unexpected error output ({pat.pattern!r}):\n"
                        f"{text[start:m.end() + 2000]}", pytrace=False)


# --------------------------------------------------------------------------
# ports and /proc


def free_port(proto: str = "both", family=socket.AF_INET) -> int:
    """A port that is currently free on loopback (for TCP and UDP by default)."""
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    for _ in range(200):
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.bind((host, 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if proto in ("both", "udp"):
            u = socket.socket(family, socket.SOCK_DGRAM)
            try:
                u.bind((host, port))
            except OSError:
                continue
            finally:
                u.close()
        return port
    raise RuntimeError("no free port found")


@pytest.fixture
def free_ports() -> Callable[..., int]:
    """free_ports() -> a new free loopback port (TCP and UDP)."""
    return free_port


def _proc_stat(pid: int):
    """(pid, state, ppid, pgrp, comm) or None."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = data[data.index("(") + 1: data.rindex(")")]
    rest = data[data.rindex(")") + 2:].split()
    return (pid, rest[0], int(rest[1]), int(rest[2]), comm)


def process_tree(root: int) -> dict[int, dict]:
    """{pid: {"ppid":…, "comm":…}} for root and all its live descendants."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _proc_stat(int(d))
            if st and st[1] != "Z":
                procs[st[0]] = {"ppid": st[2], "comm": st[4]}
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in out:
            out[pid] = procs[pid]
            todo.extend(p for p, i in procs.items() if i["ppid"] == pid)
    return out


def _socket_inodes(pids: Iterable[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(int(link[8:-1]))
    return inodes


def _bound_inodes(port: int, proto: str) -> set[int]:
    """Inodes of sockets listening (tcp) / bound (udp) on port."""
    files = [f"/proc/net/{proto}", f"/proc/net/{proto}6"]
    out = set()
    for f in files:
        try:
            lines = Path(f).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, state, inode = parts[1], parts[3], int(parts[9])
            if int(local.rsplit(":", 1)[1], 16) != port:
                continue
            if proto == "tcp" and state != "0A":
                continue
            out.add(inode)
    return out


# --------------------------------------------------------------------------
# servers


class Server:
    def __init__(self, name: str, argv: Sequence, runner: Runner, workdir: Path,
                 cwd=None, env=None, stdin=None):
        self.name = name
        self.runner = runner
        self.argv = runner.cmd(argv)
        self.out_path = workdir / f"{name}.{runner.name}.stdout"
        self.err_path = workdir / f"{name}.{runner.name}.stderr"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=(stdin or subprocess.DEVNULL), stdout=self._out,
                                     stderr=self._err, cwd=cwd, env=env, start_new_session=True)
        self.pid = self.proc.pid
        self.returncode: Optional[int] = None

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def describe(self) -> str:
        return (f"server {self.name} [{self.runner}]: {' '.join(self.argv)}\n"
                f"exit code: {self.proc.poll()}\n--- stdout ---\n{self.stdout()[-3000:]}\n"
                f"--- stderr ---\n{self.stderr()[-3000:]}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tree(self) -> dict[int, dict]:
        return process_tree(self.pid)

    def wait_port(self, port: int, proto: str = "tcp", timeout: float = 15, count: int = 1):
        """Wait until a process of this server holds `count` listening (tcp) or
        bound (udp) sockets on port.  Never connects (single-shot servers
        like `ncat -l` would take that as their client)."""
        deadline = time.monotonic() + T(timeout)
        while time.monotonic() < deadline:
            if not self.alive():
                pytest.fail(f"{self.name} exited before it listened on {proto} port {port}\n"
                            f"{self.describe()}", pytrace=False)
            mine = _socket_inodes(self.tree()) & _bound_inodes(port, proto)
            if len(mine) >= count:
                return
            time.sleep(0.05)
        pytest.fail(f"{self.name} did not listen on {proto} port {port} within "
                    f"{T(timeout):.0f}s\n{self.describe()}", pytrace=False)

    def wait_exit(self, timeout: float = 20) -> int:
        try:
            self.returncode = self.proc.wait(timeout=T(timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} did not exit within {T(timeout):.0f}s\n{self.describe()}",
                        pytrace=False)
        if not _wait_group_gone(self.pid, T(5)):
            _kill_group(self.pid)
        self._close_files()
        return self.returncode

    def stop(self, sig=signal.SIGTERM, timeout: float = 15) -> Optional[int]:
        """Signal the whole process group and wait (bounded); SIGKILL after that."""
        if self.proc.poll() is None:
            _kill_group(self.pid, sig)
        try:
            self.returncode = self.proc.wait(timeout=T(timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            self.returncode = self.proc.returncode
        if not _wait_group_gone(self.pid, T(timeout)):
            _kill_group(self.pid)
            _wait_group_gone(self.pid, 5)
        self._close_files()
        return self.returncode

    def kill(self):
        _kill_group(self.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _wait_group_gone(self.pid, 5)
        self._close_files()

    def _close_files(self):
        for f in (self._out, self._err):
            if not f.closed:
                f.close()

    def check_output_clean(self):
        assert_no_error_lines(self.stderr(), f"server {self.name} [{self.runner}] stderr")
        assert_no_error_lines(self.stdout(), f"server {self.name} [{self.runner}] stdout")


class ServerPool:
    """Starts servers in their own process groups; everything is killed at
    teardown, whatever happened in the test."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.servers: list[Server] = []

    def start(self, name: str, argv: Sequence, runner: Runner = PLAIN, *, port: Optional[int] = None,
              proto: str = "tcp", cwd=None, env=None, ready_timeout: float = 15,
              count: int = 1) -> Server:
        s = Server(name, argv, runner, self.workdir, cwd=cwd, env=env)
        self.servers.append(s)
        if port is not None:
            s.wait_port(port, proto, ready_timeout, count)
        return s

    def cleanup(self):
        for s in self.servers:
            if s.proc.poll() is None or group_members(s.pid):
                _kill_group(s.pid, signal.SIGKILL)
        for s in self.servers:
            try:
                s.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _wait_group_gone(s.pid, 5)
            s._close_files()


@pytest.fixture
def tmp_path(request):
    """A fresh temp dir per test, removed afterwards (pytest's own keeps the
    last runs around); VSOCKET_COMPAT_KEEP_TMP=1 keeps it for debugging."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix=f"vsocket-compat-{request.node.name[:40]}-".replace("/", "_")))
    yield d
    if os.environ.get("VSOCKET_COMPAT_KEEP_TMP") == "1":
        print(f"kept {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def servers(tmp_path):
    pool = ServerPool(tmp_path)
    yield pool
    pool.cleanup()


# --------------------------------------------------------------------------
# vsocket stat


class StatError(AssertionError):
    pass


def read_stat(vsocket: Path, *, include_closed: bool = True, pid: Optional[int] = None) -> list[dict]:
    """Processes from `vsocket stat --json [--all] [--pid PID]` ([] when exit code 3)."""
    cmd = [str(vsocket), "stat", "--json"]
    if include_closed:
        cmd.append("--all")
    if pid is not None:
        cmd += ["--pid", str(pid)]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=T(20))
    if p.returncode == 3:
        return []
    if p.returncode != 0:
        raise StatError(f"{' '.join(cmd)} exited {p.returncode}\n{_dec(p.stdout)}\n{_dec(p.stderr)}")
    try:
        data = json.loads(p.stdout)
    except ValueError as e:
        raise StatError(f"{' '.join(cmd)} printed invalid JSON ({e}):\n{_dec(p.stdout)[:3000]}")
    procs = data.get("processes")
    if not isinstance(procs, list):
        raise StatError(f"no 'processes' list in vsocket stat output:\n{_dec(p.stdout)[:3000]}")
    return procs


@pytest.fixture
def vsocket_stat(vsocket_bin) -> Callable[..., list[dict]]:
    """vsocket_stat(pid=None, include_closed=True) -> list of process records."""
    def _stat(pid: Optional[int] = None, include_closed: bool = True):
        return read_stat(vsocket_bin, include_closed=include_closed, pid=pid)
    return _stat


def stat_for_tree(vsocket: Path, root: int) -> dict[int, dict]:
    """{pid: process record} for the vsocket processes in root's process tree."""
    tree = process_tree(root)
    return {p["pid"]: p for p in read_stat(vsocket) if p.get("pid") in tree}


class StatSampler:
    """Samples `vsocket stat --json --all` in the background for the processes
    of a tree (e.g. a short-lived client) while it runs."""

    def __init__(self, vsocket: Path, interval: float = 0.2):
        self.vsocket = vsocket
        self.interval = interval
        self.root: Optional[int] = None
        self.samples: list[dict[int, dict]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def attach(self, popen: subprocess.Popen):
        self.root = popen.pid
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            try:
                s = stat_for_tree(self.vsocket, self.root)
                if s:
                    self.samples.append(s)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(str(e))
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=T(30))

    def merged(self) -> dict[int, dict]:
        """Latest record of every pid seen."""
        out: dict[int, dict] = {}
        for s in self.samples:
            out.update(s)
        return out


def run_sampled(argv, runner: Runner, **kw) -> tuple[Result, Optional[StatSampler]]:
    """run_cmd, sampling vsocket stat of the program while it runs (vsocket runner only)."""
    if not runner.preloaded:
        return run_cmd(argv, runner, **kw), None
    sampler = StatSampler(runner.vsocket)
    try:
        res = run_cmd(argv, runner, on_start=sampler.attach, **kw)
    finally:
        sampler.stop()
    return res, sampler


def port_of(addr: str) -> Optional[int]:
    m = re.search(r":(\d+)$", addr or "")
    return int(m.group(1)) if m else None


def check_kernel_sockets(procs: dict[int, dict] | list[dict], what: str,
                         reason: Optional[str] = None) -> list[dict]:
    """Every socket of every process is on transport `kernel` with a non-empty
    reason (a specific one if given).  Returns all sockets, each annotated
    with its process's pid ("_pid") and comm ("_comm")."""
    if isinstance(procs, dict):
        procs = list(procs.values())
    assert procs, f"{what}: no vsocket process found in `vsocket stat --json --all`"
    socks = []
    bad = []
    for p in procs:
        for s in p.get("sockets", []):
            s = dict(s, _pid=p.get("pid"), _comm=p.get("comm"))
            socks.append(s)
            if s.get("transport") != "kernel" or not s.get("reason") or \
                    (reason is not None and s.get("reason") != reason):
                bad.append(s)
    assert not bad, (f"{what}: sockets not on transport kernel with "
                     f"{'reason ' + reason if reason else 'a reason'}:\n"
                     + "\n".join(json.dumps(b) for b in bad))
    return socks


def find_sockets(socks: list[dict], *, proto=None, state=None, port=None, peer_port=None,
                 family=None, closed=None) -> list[dict]:
    out = []
    for s in socks:
        if proto is not None and s.get("proto") != proto:
            continue
        if state is not None and s.get("state") not in ((state,) if isinstance(state, str) else state):
            continue
        if port is not None and port_of(s.get("local", "")) != port:
            continue
        if peer_port is not None and port_of(s.get("peer", "")) != peer_port:
            continue
        if family is not None and s.get("family") != family:
            continue
        if closed is not None and bool(s.get("closed")) != closed:
            continue
        out.append(s)
    return out


def dump_stat(procs) -> str:
    if isinstance(procs, dict):
        procs = list(procs.values())
    return json.dumps(procs, indent=1)[:6000]


def check_server_stat(server: Server, port: Optional[int] = None, *, proto: str = "tcp",
                      comm: Optional[str] = None, reason: Optional[str] = None) -> tuple[dict, list]:
    """Stat of a live server (through vsocket): present, all sockets kernel,
    listening (tcp) / bound (udp) on port.  Returns (procs, sockets)."""
    assert server.alive(), f"server died:\n{server.describe()}"
    procs = stat_for_tree(server.runner.vsocket, server.pid)
    assert procs, (f"{server.name}: none of its processes {sorted(server.tree())} is listed by "
                   f"`vsocket stat --json --all`:\n"
                   f"{json.dumps(read_stat(server.runner.vsocket))[:3000]}")
    if comm is not None:
        comms = {p.get("comm") for p in procs.values()}
        assert comm in comms, f"{server.name}: no process with comm {comm!r} in stat: {comms}"
    socks = check_kernel_sockets(procs, f"server {server.name}", reason)
    if port is not None:
        want = "listening" if proto == "tcp" else ("bound", "open", "connected")
        found = find_sockets(socks, proto=proto, state=want, port=port, closed=False)
        assert found, (f"{server.name}: no {proto} socket in state {want} on port {port} in "
                       f"vsocket stat:\n{dump_stat(procs)}")
    return procs, socks


# --------------------------------------------------------------------------
# data helpers


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_random_file(path: Path, size: int, seed: int) -> str:
    """Deterministic pseudo-random content; returns its sha256."""
    import random
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 20)
            f.write(rnd.randbytes(n))
            left -= n
    return sha256_file(path)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(s: str) -> str:
    return ANSI.sub("", s)
