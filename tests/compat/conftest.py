"""Shared fixtures for the vsocket compatibility suite.

Every test runs a real program twice: once plainly ("plain") and once through
`vsocket run` ("vsocket"), compares the two results, and for the vsocket run
checks through `vsocket stat --json` that the program's sockets are listed and
on the path they must be on (check_tcp_paths and friends):

  * SHM_BUILT (the build lists "shm" in `vsocket version`'s "transports built:"
    line) and both ends of a loopback TCP connection run under vsocket: the
    connection is on transport `shm`, with byte counters > 0;
  * SHM_BUILT and one end plain: transport `kernel`, reason `peer-not-vsocket`;
  * without shm in the build: transport `kernel` and a non-empty reason;
  * always: UDP, listening and unconnected sockets are `kernel` with a reason.

Environment:
  VSOCKET_BUILD_DIR              build dir holding lib/libvsocket.so and bin/ (default <repo>/build)
  VSOCKET_COMPAT_ALLOW_MISSING=1 skip (instead of fail) tests whose program is not installed
  VSOCKET_COMPAT_BASELINE_ONLY=1 run only the "plain" halves (no vsocket build needed);
                                 the tests then end as skipped after the baseline checks passed
  VSOCKET_COMPAT_TIMEOUT_SCALE   multiply every timeout (default 1, or 3 for a sanitizer build)
  VSOCKET_COMPAT_EXPECT_SHM=1|0  override SHM_BUILT (what `vsocket version` says the build has);
                                 =1 on a build without shm makes every path check fail (used to
                                 prove the checks are not blind)
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


def _built_transports(build_dir: Path) -> Optional[list[str]]:
    """The transports of the build, from `vsocket version`'s line
    `transports built: kernel[,shm…]`; None when there is no such build or line."""
    vs = build_dir / "bin" / "vsocket"
    if not vs.exists():
        return None
    try:
        out = subprocess.run([str(vs), "version"], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^transports built:\s*(\S+)\s*$", out, re.M)
    return [t for t in m.group(1).split(",") if t] if m else None


BUILT_TRANSPORTS = _built_transports(BUILD_DIR)
_EXPECT_SHM = os.environ.get("VSOCKET_COMPAT_EXPECT_SHM", "")
if _EXPECT_SHM not in ("", "0", "1"):
    raise RuntimeError(f"VSOCKET_COMPAT_EXPECT_SHM must be 0 or 1, not {_EXPECT_SHM!r}")
# The single source of truth for "connections between two vsocket processes
# must be on shared memory": every path check below goes through it.
SHM_BUILT: bool = (_EXPECT_SHM == "1") if _EXPECT_SHM else "shm" in (BUILT_TRANSPORTS or [])


MARKERS = {
    "grpc": "grpcio echo service and Arrow Flight do_get (PyPI packages in build/compat-venv)",
    "iperf3": "iperf3 TCP/UDP bandwidth runs",
    "sockperf": "sockperf ping-pong and throughput",
    "redis": "redis-server with redis-benchmark / redis-cli",
    "nginx": "nginx (master + 2 workers) with curl and wrk",
    "memcached": "memcached with a Python text-protocol client and memcslap",
    "socat": "socat file transfer and forking echo",
    "ncat": "ncat file transfer and --exec echo",
    "python_echo": "stdlib socket + selectors echo client/server",
    "stress": "vsocket-stress in every mode",
    "rsync": "rsync daemon pulls and pushes (client and daemon fork with the socket open)",
    "mixed": "one end plain, the other under vsocket (kernel TCP, reason peer-not-vsocket)",
    "ceph": "a single-host Ceph cluster with rados bench, stopped daemon by daemon",
    "nfs": "nfs-ganesha (NFSv3, VFS FSAL) with libnfs's nfs-cp and nfs-ls",
}


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def pytest_report_header(config):
    built = ",".join(BUILT_TRANSPORTS) if BUILT_TRANSPORTS is not None else "unknown"
    forced = (f", forced by VSOCKET_COMPAT_EXPECT_SHM={_EXPECT_SHM}" if _EXPECT_SHM else "")
    return (f"vsocket build: {BUILD_DIR} (transports built: {built}); "
            f"SHM_BUILT={SHM_BUILT}{forced}")


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
                 cwd=None, env=None, stdin=None, stdout=None):
        """stdin: subprocess.PIPE gives the test proc.stdin to feed (e.g. to
        hold a client's connection open: see feed_stdin); stdout: PIPE lets
        the test read it at its own pace, otherwise it goes to out_path."""
        self.name = name
        self.runner = runner
        self.argv = runner.cmd(argv)
        self.out_path = workdir / f"{name}.{runner.name}.stdout"
        self.err_path = workdir / f"{name}.{runner.name}.stderr"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=(stdin or subprocess.DEVNULL),
                                     stdout=(stdout or self._out), stderr=self._err, cwd=cwd,
                                     env=env, start_new_session=True)
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
        for f in (self._out, self._err, self.proc.stdin, self.proc.stdout):
            if f is not None and not f.closed:
                try:
                    f.close()
                except OSError:  # a pipe whose reader died
                    pass

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
              count: int = 1, stdin=None, stdout=None) -> Server:
        """Also used for clients that must outlive a check (stdin=PIPE holds
        them): they are killed at teardown like any server."""
        s = Server(name, argv, runner, self.workdir, cwd=cwd, env=env, stdin=stdin, stdout=stdout)
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


def check_server_stat(server: Server, port: Optional[int] = None, *, peer: str,
                      proto: str = "tcp", comm: Optional[str] = None, reason: Optional[str] = None,
                      min_conns: int = 0, settled: bool = True, min_shm: int = 0,
                      handoff_ok: bool = False) -> tuple[dict, list]:
    """Stat of a live server (through vsocket): present, listening (tcp) /
    bound (udp) on port, and every socket on its path (check_tcp_paths with
    peer="vsocket" when the clients run under vsocket, "plain" when they do
    not).  With `reason` (e.g. disabled-by-config) every socket must instead
    be kernel with exactly that reason.  Returns (procs, sockets)."""
    assert server.alive(), f"server died:\n{server.describe()}"
    procs = stat_for_tree(server.runner.vsocket, server.pid)
    assert procs, (f"{server.name}: none of its processes {sorted(server.tree())} is listed by "
                   f"`vsocket stat --json --all`:\n"
                   f"{json.dumps(read_stat(server.runner.vsocket))[:3000]}")
    if comm is not None:
        comms = {p.get("comm") for p in procs.values()}
        assert comm in comms, f"{server.name}: no process with comm {comm!r} in stat: {comms}"
    if reason is not None:
        socks = check_kernel_sockets(procs, f"server {server.name}", reason)
    else:
        # A client that finished may have closed a connection the server has
        # not closed yet (it sees the end at its next call): one that lived for
        # a request stays on the kernel, rightly, and counts as such once
        # closed (seen: ganesha's MOUNT connection of the last nfs-ls, still
        # open at the check). So wait for that event; the timeout only bounds
        # a hang, and a wrong transport fails at once.
        last = [procs]

        def fetch():
            last[0] = stat_for_tree(server.runner.vsocket, server.pid) or last[0]
            return last[0]

        socks = wait_tcp_paths(fetch, f"server {server.name}", peer=peer, timeout=30,
                               min_conns=min_conns, settled=settled, min_shm=min_shm,
                               handoff_ok=handoff_ok)
        procs = last[0]
    if port is not None:
        want = "listening" if proto == "tcp" else ("bound", "open", "connected")
        found = find_sockets(socks, proto=proto, state=want, port=port, closed=False)
        assert found, (f"{server.name}: no {proto} socket in state {want} on port {port} in "
                       f"vsocket stat:\n{dump_stat(procs)}")
    return procs, socks


# --------------------------------------------------------------------------
# the path of each socket: kernel or shm
#
# Terms: a *connection* is a TCP socket with a peer address that is not
# listening (connected, connecting, or closed after having been connected);
# everything else (UDP, listening, unconnected TCP) is never accelerated and
# must be `kernel` with a reason.  Records of one connection are grouped by
# its pair of addresses, so the records of both ends, of a forking server's
# parent and child, or of successive samples form one group.

PEER_NOT_VSOCKET = "peer-not-vsocket"
# Reasons a handshake with the peer ends with (docs/design/shm-transport.md
# DECLINE, and the ones src/ uses): never right between two vsocket processes
# on loopback, whatever the timing, so they fail a check at once, even in a
# sample.  Any other reason on a connection (e.g. upgrade-pending) counts as
# "not decided yet": tolerated only where records may predate the handshake
# (settled=False); a settled check wants shm regardless.
# Reasons that end a handshake (docs/statistics.md).
DECLINE_REASONS = frozenset({PEER_NOT_VSOCKET, "peer-not-local", "peer-credentials",
                             "peer-proof-failed", "handshake-malformed", "handshake-timeout",
                             "declined-by-peer", "rendezvous-unavailable", "no-resources"})
# A connection closed before its handshake finished (curl after a 404,
# redis-benchmark's probes) legitimately stays on the kernel with this reason.
SHORT_LIVED_REASONS = frozenset({"peer-closed", "upgrade-pending", "upgrade-deferred"})


def is_connection(s: dict) -> bool:
    return s.get("proto") == "tcp" and bool(s.get("peer")) and s.get("state") != "listening"


def conn_key(s: dict) -> frozenset:
    """Same for both ends of a connection."""
    return frozenset((s.get("local"), s.get("peer")))


def stat_sockets(procs) -> list[dict]:
    """All sockets of `procs` ({pid: record}, [record] or a list of such, in
    time order), each annotated with its process's pid ("_pid") and comm."""
    if isinstance(procs, dict):
        procs = list(procs.values())
    out = []
    for p in procs:
        if isinstance(p, dict) and "sockets" not in p and all(isinstance(v, dict) for v in p.values()):
            out.extend(stat_sockets(p))     # a sample: {pid: record}
            continue
        for s in p.get("sockets", []):
            out.append(dict(s, _pid=p.get("pid"), _comm=p.get("comm")))
    return out


def expected_path(peer: str) -> str:
    """Human-readable expectation for a TCP connection whose other end is
    `peer` ("vsocket" or "plain")."""
    built = ",".join(BUILT_TRANSPORTS) if BUILT_TRANSPORTS is not None else "unknown"
    src = (f"VSOCKET_COMPAT_EXPECT_SHM={_EXPECT_SHM}" if _EXPECT_SHM
           else f"`vsocket version`: transports built: {built}")
    if not SHM_BUILT:
        return f"transport kernel with a non-empty reason (SHM_BUILT=False; {src})"
    if peer == "vsocket":
        return f"transport shm: both ends run under vsocket (SHM_BUILT=True; {src})"
    return (f"transport kernel, reason {PEER_NOT_VSOCKET}: the other end runs without vsocket "
            f"(SHM_BUILT=True; {src})")


def _describe_sock(s: dict) -> str:
    return (f"{s.get('local')} <-> {s.get('peer') or '-'} [{s.get('proto')} {s.get('state')}, "
            f"pid {s.get('_pid')} {s.get('_comm')} fd {s.get('fd')}] transport={s.get('transport')} "
            f"reason={s.get('reason')!r} rx_bytes={s.get('rx_bytes')} tx_bytes={s.get('tx_bytes')}")


# A connection handed to a program through exec (socat EXEC:, ncat --exec)
# leaves the rings or never reaches them: the exec'ing side says so, and the
# other side sees its peer leave (docs/statistics.md).
HANDOFF_REASONS = frozenset({"peer-left-rings", "left-by-exec", "inherited", "peer-not-vsocket",
                             "upgrade-pending", "upgrade-deferred"})


def tcp_path_problems(socks: list[dict], *, peer: str, settled: bool = True, min_conns: int = 0,
                      min_shm: int = 0, idle_ok: bool = True,
                      handoff_ok: bool = False) -> tuple[list[str], bool]:
    """(problems, fatal) of annotated socket records (stat_sockets), in time
    order.  peer: "vsocket" when both ends of every connection run under
    vsocket, "plain" when the other end does not.

    settled=True (records read after the traffic, or of a connection held open
    long enough): every connection must be on its final path — with SHM_BUILT
    and peer="vsocket", at least one record of the connection on shm and its
    byte counters > 0; with peer="plain", its latest record kernel with reason
    peer-not-vsocket.  settled=False (samples taken while a client ran, which
    may predate the handshake, or the record a forking server's parent closed
    at once): undecided connections are tolerated, but none may show a path
    or reason that contradicts the expectation, and at least `min_shm`
    connections must have been seen on shm (SHM_BUILT, peer="vsocket").

    handoff_ok: the connection went to an exec'd program: kernel with a
    HANDOFF_REASONS reason is right for it.

    idle_ok: a connection closed without a byte moved either way (e.g. wrk's
    connect+close probe) has no data path to check: with peer="vsocket" it
    only has to be kernel or shm, whatever the reason.  Pass idle_ok=False
    for a connection the test knows carried data.

    `fatal` marks problems that waiting cannot fix (a wrong transport)."""
    assert peer in ("vsocket", "plain"), peer
    problems: list[str] = []
    fatal = False
    groups: dict[frozenset, list[dict]] = {}
    for s in socks:
        if is_connection(s):
            groups.setdefault(conn_key(s), []).append(s)
            continue
        if s.get("transport") != "kernel" or not s.get("reason"):
            fatal = fatal or s.get("transport") != "kernel"
            problems.append("not a TCP connection (UDP, listening or unconnected), so it must be "
                            "kernel with a reason: " + _describe_sock(s))
    if len(groups) < min_conns:
        problems.append(f"expected at least {min_conns} TCP connection(s), stat lists {len(groups)}")
    shm_conns = 0
    for recs in groups.values():
        last = recs[-1]
        if not SHM_BUILT:
            for s in recs:
                if s.get("transport") != "kernel" or not s.get("reason"):
                    fatal = fatal or s.get("transport") != "kernel"
                    problems.append("not kernel with a reason: " + _describe_sock(s))
            continue
        if peer == "vsocket":
            if handoff_ok and any(s.get("transport") == "kernel"
                                  and s.get("reason") in HANDOFF_REASONS for s in recs):
                continue
            if all(s.get("closed") and s.get("transport") == "kernel"
                   and s.get("reason") in SHORT_LIVED_REASONS for s in recs):
                continue
            if idle_ok and all(s.get("closed") and not s.get("rx_bytes") and not s.get("tx_bytes")
                               and s.get("transport") in ("shm", "kernel") for s in recs):
                continue
            wrong = [s for s in recs if s.get("transport") not in ("shm", "kernel")
                     or (s.get("transport") == "kernel" and s.get("reason") in DECLINE_REASONS)]
            for s in wrong:
                fatal = True
                problems.append("between two vsocket processes, but fell back / wrong transport: "
                                + _describe_sock(s))
            on_shm = [s for s in recs if s.get("transport") == "shm"]
            if on_shm:
                shm_conns += 1
                moved = max(s.get("rx_bytes", 0) + s.get("tx_bytes", 0) for s in on_shm)
                if settled and moved <= 0:
                    problems.append("on shm but its counters show no byte moved: "
                                    + _describe_sock(on_shm[-1]))
            elif settled and not wrong:
                problems.append("should be on shm, is not: " + "\n      also: ".join(
                    _describe_sock(s) for s in recs[-4:]))
        else:
            # Closed before anything was decided: the set-up starts only once
            # a connection lives, and gives up on a plain peer only once that
            # peer has been seen calling (docs/statistics.md).
            if all(s.get("closed") and s.get("transport") == "kernel"
                   and s.get("reason") in SHORT_LIVED_REASONS for s in recs):
                continue
            for s in recs:
                if s.get("transport") != "kernel":
                    fatal = True
                    problems.append("the other end runs without vsocket, yet transport is not "
                                    "kernel: " + _describe_sock(s))
                elif s.get("reason") in DECLINE_REASONS and s.get("reason") != PEER_NOT_VSOCKET:
                    fatal = True
                    problems.append("wrong reason: " + _describe_sock(s))
            if settled and last.get("transport") == "kernel" and last.get("reason") != PEER_NOT_VSOCKET:
                problems.append(f"reason is not {PEER_NOT_VSOCKET}: " + _describe_sock(last))
    if SHM_BUILT and peer == "vsocket" and shm_conns < min_shm:
        problems.append(f"expected at least {min_shm} connection(s) seen on shm, saw {shm_conns}")
    return problems, fatal


def _paths_message(what: str, peer: str, problems: list[str], procs) -> str:
    shown = problems[:25] + ([f"... and {len(problems) - 25} more"] if len(problems) > 25 else [])
    return (f"{what}: sockets not on the expected path.\nexpected for TCP connections: "
            f"{expected_path(peer)}\n  " + "\n  ".join(shown)
            + f"\n--- vsocket stat --json --all (these processes) ---\n{dump_stat(procs)}")


def check_tcp_paths(procs, what: str, *, peer: str, settled: bool = True, min_conns: int = 0,
                    min_shm: int = 0, idle_ok: bool = True, handoff_ok: bool = False) -> list[dict]:
    """Assert tcp_path_problems() finds nothing in `procs` (stat records:
    {pid: record}, a list of them, or a list of samples).  Returns all
    sockets annotated with "_pid" and "_comm" (check_kernel_sockets' shape)."""
    flat = procs if isinstance(procs, dict) else list(procs)
    assert flat, f"{what}: no vsocket process found in `vsocket stat --json --all`"
    socks = stat_sockets(procs)
    problems, _fatal = tcp_path_problems(socks, peer=peer, settled=settled, min_conns=min_conns,
                                         min_shm=min_shm, idle_ok=idle_ok,
                                         handoff_ok=handoff_ok)
    assert not problems, _paths_message(what, peer, problems, procs)
    return socks


def wait_tcp_paths(fetch: Callable[[], object], what: str, *, peer: str, timeout: float = 3.0,
                   min_conns: int = 1, settled: bool = True, min_shm: int = 0,
                   idle_ok: bool = True, handoff_ok: bool = False,
                   select: Optional[Callable[[dict], bool]] = None) -> list[dict]:
    """Poll fetch() (-> stat records, as check_tcp_paths takes) until its
    sockets are on their settled path, for up to `timeout` s (scaled): the
    handshake that decides shm or peer-not-vsocket may take 1-2 s after
    connection set-up.  Fails at once on a fatal problem (e.g. a connection
    on shm whose other end is plain).  select: only check the sockets it
    accepts."""
    deadline = time.monotonic() + T(timeout)
    while True:
        procs = fetch()
        socks = [s for s in stat_sockets(procs) if select is None or select(s)]
        problems, fatal = tcp_path_problems(socks, peer=peer, settled=settled,
                                            min_conns=min_conns, min_shm=min_shm, idle_ok=idle_ok,
                                            handoff_ok=handoff_ok)
        if not problems:
            return socks
        if fatal or time.monotonic() >= deadline:
            why = "" if fatal else f" (still so after {T(timeout):.1f}s of polling)"
            pytest.fail(_paths_message(what + why, peer, problems, procs), pytrace=False)
        time.sleep(0.1)


def check_sampled_paths(sampler: "StatSampler", what: str, *, peer: str, min_conns: int = 0,
                        min_shm: int = 0) -> list[dict]:
    """Path check over every sample a StatSampler took of a client while it
    ran.  A sample may predate a connection's handshake, so this is the
    settled=False check: no connection ever on a contradicting path, and (with
    SHM_BUILT and peer="vsocket") at least `min_shm` connections seen on shm.
    Returns the sockets of the merged (latest per process) sample.

    How many connections the samples saw, and on which path, depends on when
    `vsocket stat` ran: a short client on a loaded machine may be sampled once,
    before its upgrade (seen: sockperf's 2 s run under ASan), or never (seen:
    wrk's 2 s run under ASan beside two Soft-RoCE guests).  So `min_conns`
    and `min_shm` are for clients whose peer is not under vsocket (nothing
    else sees their connections: they need a sample); with a vsocket server,
    its settled records (check_server_stat, check_tcp_paths) prove the count
    and the path, and a client never sampled returns no sockets."""
    assert not sampler.errors, sampler.errors[:3]
    if not sampler.samples and not (min_conns or min_shm):
        return []
    assert sampler.samples, f"{what}: vsocket stat never listed it while it ran"
    socks = stat_sockets(sampler.samples)
    problems, _fatal = tcp_path_problems(socks, peer=peer, settled=False, min_conns=min_conns,
                                         min_shm=min_shm)
    assert not problems, _paths_message(what, peer, problems, sampler.merged())
    return stat_sockets(sampler.merged())


# --------------------------------------------------------------------------
# holding a client open while its connection is checked


def feed_stdin(proc: subprocess.Popen, data_path: Path, *, close: bool = False) -> threading.Thread:
    """Write the file into proc's stdin pipe from a thread (so the test never
    blocks on it); the pipe stays open unless close=True: the client then
    keeps its connection until the test closes it (proc.stdin.close())."""
    def run():
        try:
            with open(data_path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 16), b""):
                    proc.stdin.write(chunk)
            proc.stdin.flush()
            if close:
                proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the client died or was killed: the test reports that
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def read_pipe(pipe, n: Optional[int], timeout: float, what: str) -> bytes:
    """Read n bytes (None: up to EOF) from a pipe, bounded (scaled)."""
    import select
    deadline = time.monotonic() + T(timeout)
    buf = bytearray()
    fd = pipe.fileno()
    while n is None or len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{what}: read {len(buf)} bytes"
                        f"{'' if n is None else f' of {n}'} within {T(timeout):.0f}s", pytrace=False)
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        chunk = os.read(fd, 1 << 16 if n is None else min(1 << 16, n - len(buf)))
        if not chunk:
            if n is None:
                break
            pytest.fail(f"{what}: EOF after {len(buf)} of {n} bytes", pytrace=False)
        buf += chunk
    return bytes(buf)


def wait_until(cond: Callable[[], bool], timeout: float, describe: Callable[[], str],
               procs: Sequence[Server] = ()):
    """Poll cond() (bounded, scaled); fails if it stays false or one of the
    given processes exits meanwhile."""
    deadline = time.monotonic() + T(timeout)
    while not cond():
        for p in procs:
            if not p.alive() and not cond():
                pytest.fail(f"{p.name} exited while waiting: {describe()}\n{p.describe()}",
                            pytrace=False)
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {T(timeout):.0f}s waiting: {describe()}\n"
                        + "\n".join(p.describe() for p in procs), pytrace=False)
        time.sleep(0.02)


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
