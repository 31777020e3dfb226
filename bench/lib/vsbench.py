"""vsbench - shared launcher, parsers and statistics for vsocket's benchmarks.

Python 3 standard library only. Used by bench/passthrough, bench/programs and
(through bench/programs) scripts/demo.sh.

A "runner" is how a program is started: `kernel` (no preload) or `vsocket`
(`vsocket run -- PROGRAM ...`, i.e. libvsocket.so preloaded). Every process a
benchmark starts goes through `Procs`, which puts it in its own process group
and kills every group it still holds when the benchmark ends, whether normally,
on an exception, on SIGINT/SIGTERM or at interpreter exit. Every wait is
bounded.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]


class BenchError(Exception):
    """A program failed, timed out or printed something we could not parse."""


# --------------------------------------------------------------------------
# build artefacts and runners

def build_dir() -> Path:
    return Path(os.environ.get("VSOCKET_BUILD_DIR") or (REPO / "build")).resolve()


def vsocket_tool(bdir: Optional[Path] = None) -> Path:
    bdir = bdir or build_dir()
    tool = bdir / "bin" / "vsocket"
    if not os.access(tool, os.X_OK):
        raise BenchError(f"{tool} not found: build first (cmake -S . -B build -G Ninja && "
                         f"cmake --build build) or set VSOCKET_BUILD_DIR")
    lib = bdir / "lib" / "libvsocket.so"
    if not lib.exists():
        raise BenchError(f"{lib} not found: build first")
    return tool


def require(program: str) -> str:
    path = shutil.which(program) or (f"/usr/sbin/{program}" if os.access(f"/usr/sbin/{program}", os.X_OK) else None)
    if not path:
        raise BenchError(f"{program} is not installed (scripts/install-deps.sh test installs it)")
    return path


class Runner:
    """kernel: the program as is; vsocket: the program under `vsocket run`."""

    def __init__(self, name: str, prefix: Sequence[str], cpus: Optional[set] = None):
        self.name = name
        self.prefix = [str(p) for p in prefix]
        self.cpus = cpus  # CPU affinity of every process started with this runner

    @property
    def preloaded(self) -> bool:
        return bool(self.prefix)

    def argv(self, argv: Sequence) -> List[str]:
        return self.prefix + [str(a) for a in argv]

    def __repr__(self):
        return self.name


def runners(tool: Path, cpus: Optional[set] = None) -> Dict[str, Runner]:
    return {"kernel": Runner("kernel", [], cpus),
            "vsocket": Runner("vsocket", [tool, "run", "--"], cpus)}


# --------------------------------------------------------------------------
# processes

class Proc:
    def __init__(self, name: str, argv: List[str], popen: subprocess.Popen, out, err):
        self.name, self.argv, self.popen = name, argv, popen
        self._out, self._err = out, err
        self.pid = popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _signal(self, sig) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, sig=signal.SIGTERM, timeout: float = 5.0) -> Optional[int]:
        """Signal the process group, wait up to `timeout`, then SIGKILL it."""
        if self.alive():
            self._signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        # whatever is left of the group (children that ignored the signal)
        self._signal(signal.SIGKILL)
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass
        return self.popen.returncode

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop(signal.SIGKILL)
            raise BenchError(f"{self.name} did not finish within {timeout:.0f} s: {' '.join(self.argv)}")

    def _read(self, f) -> str:
        f.flush()
        f.seek(0)
        return f.read().decode(errors="replace")

    def stdout(self) -> str:
        return self._read(self._out)

    def stderr(self) -> str:
        return self._read(self._err)

    def describe(self, tail: int = 1500) -> str:
        rc = self.popen.poll()
        return (f"{self.name} (pid {self.pid}, {'running' if rc is None else f'exit {rc}'}): "
                f"{' '.join(self.argv)}\n--- stdout ---\n{self.stdout()[-tail:]}\n"
                f"--- stderr ---\n{self.stderr()[-tail:]}")


class Procs:
    """Starts processes in their own process groups; kill_all() ends them all."""

    def __init__(self):
        self.procs: List[Proc] = []
        atexit.register(self.kill_all)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread
                pass

    def _on_signal(self, signum, frame):
        self.kill_all()
        raise SystemExit(128 + signum)

    def start(self, name: str, argv: Sequence, runner: Optional[Runner] = None,
              env: Optional[dict] = None, cwd=None) -> Proc:
        full = runner.argv(argv) if runner else [str(a) for a in argv]
        out = tempfile.TemporaryFile()
        err = tempfile.TemporaryFile()
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)  # the kernel runner must really be preload-free
        if env:
            e.update(env)
        cpus = runner.cpus if runner else None
        try:
            p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True, env=e, cwd=cwd,
                                 preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        except OSError as ex:
            raise BenchError(f"cannot start {name}: {' '.join(full)}: {ex}")
        proc = Proc(name, full, p, out, err)
        self.procs.append(proc)
        return proc

    def run(self, name: str, argv: Sequence, runner: Optional[Runner] = None,
            timeout: float = 60, check: bool = True, env: Optional[dict] = None) -> Proc:
        """Run to completion (bounded by `timeout`)."""
        p = self.start(name, argv, runner, env=env)
        rc = p.wait(timeout)
        if check and rc != 0:
            raise BenchError(f"{name} failed with exit code {rc}\n{p.describe()}")
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.alive():
                p.stop(signal.SIGTERM, timeout=2)
            else:
                p._signal(signal.SIGKILL)  # stray children of a finished leader
        self.procs = []


def free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                    u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise BenchError("no free port")


def _bound_ports(proto: str) -> set:
    ports = set()
    for name in (f"/proc/net/{proto}", f"/proc/net/{proto}6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if len(f) < 4:
                continue
            if proto == "tcp" and f[3] != "0A":  # LISTEN
                continue
            ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def wait_listening(port: int, proto: str, proc: Proc, timeout: float = 15) -> None:
    """Wait until something listens on (TCP) / is bound to (UDP) `port`,
    without connecting to it (that would disturb the server and its stats)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise BenchError(f"{proc.name} exited before listening on {proto} port {port}\n"
                             f"{proc.describe()}")
        if port in _bound_ports(proto):
            return
        time.sleep(0.02)
    raise BenchError(f"{proc.name} not listening on {proto} port {port} after {timeout:.0f} s\n"
                     f"{proc.describe()}")


def descendants(root: int) -> set:
    """root and every process below it."""
    children: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(children.get(p, []))
    return out


# --------------------------------------------------------------------------
# vsocket stat

def stat_tree(tool: Path, root_pid: int, timeout: float = 10) -> List[dict]:
    """Every socket (with `pid`/`comm` added) that `vsocket stat --json --all`
    lists for root_pid and its descendants."""
    pids = descendants(root_pid)
    try:
        r = subprocess.run([str(tool), "stat", "--json", "--all"], capture_output=True,
                           timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        raise BenchError("vsocket stat --json --all did not answer within "
                         f"{timeout:.0f} s")
    if r.returncode not in (0, 3):
        raise BenchError(f"vsocket stat failed ({r.returncode}): {r.stderr.strip()}")
    try:
        doc = json.loads(r.stdout or "{}")
    except json.JSONDecodeError as ex:
        raise BenchError(f"vsocket stat printed invalid JSON ({ex}): {r.stdout[:500]}")
    socks = []
    for p in doc.get("processes", []):
        if p.get("pid") in pids:
            for s in p.get("sockets", []):
                socks.append(dict(s, pid=p["pid"], comm=p.get("comm", "")))
    return socks


def transport_summary(socks: Iterable[dict], proto: Optional[str] = None) -> str:
    """'kernel (no-accelerated-transport) x12' for the sockets that carried
    data (or all of them if none did). A connection whose peer closed it
    before the upgrade could end (reason peer-closed: redis-benchmark's
    first CONFIG GET) says nothing about the path, unless it is all there is."""
    socks = [s for s in socks if proto is None or s.get("proto") == proto]
    socks = [s for s in socks if s.get("reason") != "peer-closed"] or socks
    used = [s for s in socks if s.get("tx_bytes", 0) or s.get("rx_bytes", 0)] or socks
    if not used:
        return "(no socket in vsocket stat)"
    counts: Dict[str, int] = {}
    for s in used:
        key = s.get("transport", "?") + (f" ({s['reason']})" if s.get("reason") else "")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))


# --------------------------------------------------------------------------
# statistics

def cpu_times() -> List[int]:
    """The aggregate `cpu` line of /proc/stat (user nice system idle iowait irq softirq steal ...)."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return []


def busy_steal(before: List[int], after: List[int]) -> str:
    """'busy 63 %, steal 12 %' of all CPUs between two cpu_times() samples."""
    if len(before) < 8 or len(after) < 8:
        return "cpu times unavailable"
    d = [b - a for a, b in zip(before, after)]
    total = sum(d[:8]) or 1
    idle = d[3] + d[4]
    return f"CPU busy {100 * (total - idle - d[7]) / total:.0f} %, steal {100 * d[7] / total:.0f} %"


def quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: Sequence[float]) -> float:
    return quantile(xs, 0.5)


def fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{max(digits - len(str(int(abs(x)))), 0)}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence], align: str = "") -> str:
    """A plain-text table; align is one char per column (l/r), default r except col 0."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or ("l" + "r" * (len(headers) - 1))

    def line(r):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                         for c, w, a in zip(r, widths, align)).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


# --------------------------------------------------------------------------
# parsers

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_sockperf(text: str) -> dict:
    """sockperf ping-pong (--full-rtt) output -> {'avg','p50','p99','p99.9','msgs'} in µs."""
    t = ANSI.sub("", text)
    if "Test ended" not in t:
        raise BenchError("sockperf did not end its test:\n" + t[-1500:])
    out = {}
    m = re.search(r"\[Valid Duration\] RunTime=[\d.]+ sec; SentMessages=(\d+); ReceivedMessages=(\d+)", t)
    if not m or int(m.group(2)) == 0:
        raise BenchError("sockperf: no valid-duration message count:\n" + t[-1500:])
    out["msgs"] = int(m.group(2))
    m = re.search(r"avg-rtt=([\d.]+)", t) or re.search(r"avg-lat=([\d.]+)", t)
    if not m:
        raise BenchError("sockperf: no average:\n" + t[-1500:])
    out["avg"] = float(m.group(1))
    for key, pct in (("p50", "50.000"), ("p99", "99.000"), ("p99.9", "99.900")):
        m = re.search(r"percentile " + re.escape(pct) + r" =\s*([\d.]+)", t)
        if m:
            out[key] = float(m.group(1))
    d = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                  r"# out-of-order messages = (\d+)", t)
    out["dropped"] = int(d.group(1)) if d else None
    return out


def parse_iperf3(text: str) -> dict:
    """iperf3 -J client output -> {'gbps': receiver Gbit/s, 'retransmits'}."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise BenchError("iperf3 printed no JSON:\n" + text[-1500:])
    if doc.get("error"):
        raise BenchError("iperf3: " + doc["error"])
    end = doc.get("end", {})
    recv = end.get("sum_received") or end.get("sum")
    if not recv or not recv.get("bits_per_second"):
        raise BenchError("iperf3 JSON has no end.sum_received:\n" + text[-1500:])
    return {"gbps": recv["bits_per_second"] / 1e9,
            "retransmits": end.get("sum_sent", {}).get("retransmits")}


def parse_redis_csv(text: str) -> dict:
    """redis-benchmark --csv -> {'SET': rps, 'GET': rps}."""
    out = {}
    for ln in text.splitlines():
        f = [c.strip().strip('"') for c in ln.split(",")]
        if len(f) >= 2 and f[0] and not f[0].startswith("test"):
            try:
                out[f[0]] = float(f[1])
            except ValueError:
                pass
    if not out:
        raise BenchError("redis-benchmark printed no CSV results:\n" + text[-1500:])
    return out


def parse_wrk(text: str) -> dict:
    m = re.search(r"Requests/sec:\s*([\d.]+)", text)
    if not m:
        raise BenchError("wrk printed no Requests/sec:\n" + text[-1500:])
    n = re.search(r"(\d+) requests in", text)
    return {"rps": float(m.group(1)), "requests": int(n.group(1)) if n else None,
            "errors": "Socket errors" in text or "Non-2xx" in text}


# --------------------------------------------------------------------------
# the programs, one function per measurement; each starts its server and its
# client with the same runner, returns the metrics and (for the vsocket runner)
# what vsocket stat said about the server's sockets.

def _server_stat(tool, runner, srv, proto):
    if not runner.preloaded or tool is None:
        return None
    return transport_summary(stat_tree(tool, srv.pid), proto)


def sockperf_pingpong(procs: Procs, runner: Runner, proto: str = "tcp", size: int = 64,
                      seconds: float = 3, tool: Optional[Path] = None) -> dict:
    sp = require("sockperf")
    port = free_port()
    tcp = ["--tcp"] if proto == "tcp" else []
    srv = procs.start("sockperf server", [sp, "server", "-i", "127.0.0.1", "-p", port, *tcp], runner)
    try:
        wait_listening(port, proto, srv)
        # sockperf keeps one record per message, sized for about 1 M messages
        # per second of test: above that rate (shared memory reaches it) it
        # stops with "_seqN > m_maxSequenceNo". Capping the rate keeps it
        # running; the cap is far above what kernel loopback reaches here.
        cli = procs.run("sockperf ping-pong", [sp, "ping-pong", "-i", "127.0.0.1", "-p", port, *tcp,
                                               "-m", size, "-t", seconds, "--full-rtt",
                                               "--mps", "800000"],
                        runner, timeout=seconds + 30)
        res = parse_sockperf(cli.stdout() + cli.stderr())
        if res.get("dropped"):
            raise BenchError(f"sockperf {proto}: {res['dropped']} messages dropped")
        res["stat"] = _server_stat(tool, runner, srv, proto)
        if not srv.alive():
            raise BenchError("sockperf server died\n" + srv.describe())
        return res
    finally:
        srv.stop(signal.SIGINT)


def iperf3_tcp(procs: Procs, runner: Runner, seconds: float = 3, tool: Optional[Path] = None,
               omit: int = 1) -> dict:
    ip = require("iperf3")
    port = free_port()
    # not -1 (one-off): the server must outlive the test for `vsocket stat`
    srv = procs.start("iperf3 server", [ip, "-s", "-B", "127.0.0.1", "-p", port], runner)
    try:
        wait_listening(port, "tcp", srv)
        cli = procs.run("iperf3 client", [ip, "-c", "127.0.0.1", "-p", port, "-t", seconds,
                                           "-O", omit, "-J"], runner, timeout=seconds + omit + 30)
        res = parse_iperf3(cli.stdout())
        res["stat"] = _server_stat(tool, runner, srv, "tcp")
        return res
    finally:
        srv.stop(signal.SIGTERM)


def hold_idle_redis_clients(procs: Procs, runner: Runner, port: int, n: int) -> Proc:
    """N idle connections to the redis server on PORT (bench/lib/redis_idle.py)."""
    holder = procs.start("redis-idle", [sys.executable, Path(__file__).with_name("redis_idle.py"),
                                        n, port], runner)
    deadline = time.monotonic() + 120
    while f"held {n}" not in holder.stdout():
        if not holder.alive() or time.monotonic() > deadline:
            raise BenchError(f"the {n} idle redis clients never settled: {holder.describe()}")
        time.sleep(0.1)
    return holder


def redis(procs: Procs, runner: Runner, requests: int = 100000, clients: int = 50,
          tool: Optional[Path] = None, workdir: Optional[Path] = None, idle: int = 0) -> dict:
    """redis-benchmark SET and GET; IDLE more connections stay open and quiet
    meanwhile (the server's keep-alive crowd)."""
    rs, rb = require("redis-server"), require("redis-benchmark")
    port = free_port()
    wd = Path(tempfile.mkdtemp(prefix="vsbench-redis-", dir=workdir))
    try:
        srv = procs.start("redis-server", [rs, "--bind", "127.0.0.1", "--port", port, "--save", "",
                                           "--appendonly", "no", "--dir", wd,
                                           "--protected-mode", "no"], runner)
        try:
            wait_listening(port, "tcp", srv)
            holder = hold_idle_redis_clients(procs, runner, port, idle) if idle else None
            cli = procs.run("redis-benchmark", [rb, "-h", "127.0.0.1", "-p", port, "-t", "set,get",
                                                "-n", requests, "-c", clients, "-d", 64, "--csv"],
                            runner, timeout=120)
            res = parse_redis_csv(cli.stdout())
            if "SET" not in res or "GET" not in res:
                raise BenchError(f"redis-benchmark lacks SET/GET: {res}")
            res["stat"] = _server_stat(tool, runner, srv, "tcp")
            if holder:
                holder.stop(signal.SIGKILL)
            return res
        finally:
            srv.stop(signal.SIGTERM)
    finally:
        shutil.rmtree(wd, ignore_errors=True)


NGINX_CONF = """\
{user}
worker_processes {workers};
master_process on;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ use epoll; worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  default_type application/octet-stream;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port};
    root {d}/www;
  }}
}}
"""


def nginx_wrk(procs: Procs, runner: Runner, seconds: float = 3, workers: int = 2,
              connections: int = 16, tool: Optional[Path] = None,
              workdir: Optional[Path] = None, close: bool = False, threads: int = 2) -> dict:
    """wrk -t THREADS -c CONNECTIONS against nginx serving a 1 KB file; with
    close, every request says `Connection: close` (one connection per request)."""
    ng, wrk = require("nginx"), require("wrk")
    port = free_port()
    d = Path(tempfile.mkdtemp(prefix="vsbench-nginx-", dir=workdir))
    try:
        for sub in ("www", "tmp", "logs"):
            (d / sub).mkdir()
        (d / "www" / "1k.bin").write_bytes(os.urandom(1024))
        user = "user root;" if os.geteuid() == 0 else ""
        (d / "nginx.conf").write_text(NGINX_CONF.format(user=user, workers=workers, d=d, port=port))
        srv = procs.start("nginx", [ng, "-p", d, "-c", d / "nginx.conf", "-e", d / "error.log"],
                          runner)
        try:
            wait_listening(port, "tcp", srv)
            # the workers must be up before wrk starts
            deadline = time.monotonic() + 15
            while len(descendants(srv.pid)) < 1 + workers:  # `vsocket run` execs nginx
                if time.monotonic() > deadline or not srv.alive():
                    raise BenchError("nginx did not start its workers\n" + srv.describe())
                time.sleep(0.05)
            hdr = ["-H", "Connection: close"] if close else []
            cli = procs.run("wrk", [wrk, "-t", min(threads, connections), "-c", connections,
                                    "-d", f"{seconds}s", *hdr, f"http://127.0.0.1:{port}/1k.bin"],
                            runner, timeout=seconds + 30)
            res = parse_wrk(cli.stdout())
            if res["errors"]:
                raise BenchError("wrk reported socket errors or non-2xx responses:\n" + cli.stdout())
            res["stat"] = _server_stat(tool, runner, srv, "tcp")
            return res
        finally:
            srv.stop(signal.SIGQUIT, timeout=5)  # graceful: master waits for its workers
    finally:
        shutil.rmtree(d, ignore_errors=True)
