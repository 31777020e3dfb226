"""Drives one connection between progs/server.py and progs/client.py, both
under `vsocket run`, for the rendezvous attacks of test_rendezvous.py.

Environment: VSOCKET (the `vsocket` tool), else VSOCKET_BUILD_DIR/bin/vsocket,
else <repo>/build/bin/vsocket.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROGS = HERE / "progs"
ATTACKER = HERE / "attacker.py"


def _tool() -> Path:
    if os.environ.get("VSOCKET"):
        return Path(os.environ["VSOCKET"]).resolve()
    build = Path(os.environ.get("VSOCKET_BUILD_DIR") or (REPO / "build"))
    return (build / "bin" / "vsocket").resolve()


VSOCKET = _tool()

# What must never appear on a peer's stderr.
BAD_STDERR = [
    re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer"),
    re.compile(r"runtime error:"),
    re.compile(r"Segmentation fault|core dumped"),
    re.compile(r"vsocket\[\d+\] (error|fatal)", re.I),
]


def known_bug(msg: str):
    """A check for a library bug this suite found (silent caller, forged
    proof, duplex hang). All three are fixed: their return fails the test."""
    pytest.fail("REGRESSION of a fixed bug: " + msg, pytrace=False)


# --------------------------------------------------------------------------
# another uid


@functools.lru_cache(maxsize=None)
def other_user(user: str = "nobody") -> tuple[Optional[list[str]], Optional[str], str]:
    """(argv prefix that runs a program as USER, a python it can run, why
    not). Needs root and setpriv or runuser. The python must run as USER
    both plainly (attacker.py) and under `vsocket run` (which needs the
    build directory readable by USER), with the modules the progs import."""
    if os.geteuid() != 0:
        return None, None, "not root: cannot run a process under another uid"
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None, None, f"no user {user!r}"
    if shutil.which("setpriv"):
        prefix = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"]
    elif shutil.which("runuser"):
        prefix = ["runuser", "-u", user, "--"]
    else:
        return None, None, "neither setpriv nor runuser"
    why = f"no python that user {user} may run"
    for py in (sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3",
               shutil.which("python3") or ""):
        if not py:
            continue
        code = ["-c", "import socket, mmap, fcntl, ctypes, hashlib, select, threading; "
                      f"open({str(PROGS / 'server.py')!r}).close()"]
        if subprocess.run(prefix + [py] + code, cwd="/", capture_output=True,
                          timeout=30).returncode != 0:
            continue
        r = subprocess.run(prefix + [str(VSOCKET), "run", "--", py] + code, cwd="/",
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            return prefix, py, ""
        why = (f"user {user} may run {py} but not under {VSOCKET} run (is the build "
               f"directory readable by {user}?): {r.stderr.strip()[-300:]}")
    return None, None, why


def nobody_uid() -> int:
    return pwd.getpwnam("nobody").pw_uid


# --------------------------------------------------------------------------
# vsocket stat


def stat_socket(pid: int, fd: int) -> Optional[dict]:
    r = subprocess.run([str(VSOCKET), "stat", "--json", "--all", "--pid", str(pid)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return None
    for p in json.loads(r.stdout).get("processes", []):
        if p.get("pid") != pid:
            continue
        for s in p.get("sockets", []):
            if s.get("fd") == fd and not s.get("closed") and s.get("state") == "connected":
                return s
    return None


def settled_stat(pid: int, fd: int, timeout: float = 30.0) -> Optional[dict]:
    """The socket's record once its handshake is over (not upgrade-pending);
    TIMEOUT only bounds a hang."""
    end = time.monotonic() + timeout
    s = None
    while time.monotonic() < end:
        s = stat_socket(pid, fd)
        if s and (s.get("transport") == "shm" or s.get("reason") != "upgrade-pending"):
            return s
        time.sleep(0.05)
    return s


# --------------------------------------------------------------------------
# the two ends


class Proc:
    """A program printing JSON events on stdout, commanded on stdin."""

    def __init__(self, role: str, argv: list[str], env: Optional[dict] = None):
        self.role, self.argv = role, argv
        self.q: queue.Queue = queue.Queue()
        self.lines: list[str] = []
        self.err = bytearray()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True, cwd="/",
                                  env=env)
        threading.Thread(target=self._out, daemon=True).start()
        threading.Thread(target=self._errs, daemon=True).start()

    def _out(self):
        for raw in self.p.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"ev": "raw", "line": line}
            self.q.put(ev if isinstance(ev, dict) else {"ev": "raw", "line": line})
        self.q.put({"ev": "stdout-eof"})

    def _errs(self):
        for raw in self.p.stderr:
            self.err += raw

    def send(self, line: str):
        try:
            self.p.stdin.write((line + "\n").encode())
            self.p.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def stderr(self) -> str:
        return self.err.decode("utf-8", "replace")

    def describe(self) -> str:
        return (f"[{self.role}] pid {self.p.pid}: {' '.join(self.argv)}\n"
                f"  exit code: {self.p.poll()}\n  stdout: {self.lines[-6:]}\n"
                f"  stderr: {self.stderr()[-2500:]}")

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Pair:
    """server.py and client.py under `vsocket run`, connected, the server
    not accepting until accept() is called."""

    def __init__(self, *, as_nobody: bool = False, size: int = 4 << 20,
                 mode: str = "pingpong", timeout: float = 120.0,
                 server_nobody: Optional[bool] = None, client_nobody: Optional[bool] = None,
                 server_env: Optional[dict] = None, client_env: Optional[dict] = None):
        """AS_NOBODY runs both ends as user nobody; SERVER_NOBODY and
        CLIENT_NOBODY choose per end. SERVER_ENV and CLIENT_ENV add to one
        end's environment."""
        self.deadline = time.monotonic() + timeout
        self.procs: dict[str, Proc] = {}
        server_nobody = as_nobody if server_nobody is None else server_nobody
        client_nobody = as_nobody if client_nobody is None else client_nobody
        self.runs = {}
        for role, nobody in (("server", server_nobody), ("client", client_nobody)):
            prefix, py = [], sys.executable
            if nobody:
                prefix, py, why = other_user()
                if prefix is None:
                    pytest.skip(why)
            self.runs[role] = ([*prefix, str(VSOCKET), "run", "--"], py)
        # The set-up starts at connect and accept (not once the connection
        # has lived a while): the attacks race the real peer for it.
        self.env = dict(os.environ, VSOCKET_LOG_LEVEL="info", VSOCKET_UPGRADE_AFTER_US="0")
        self.envs = {"server": dict(self.env, **(server_env or {})),
                     "client": dict(self.env, **(client_env or {}))}
        self.size, self.mode = size, mode
        self.run, self.py = self.runs["server"]
        self.server = self.procs["server"] = Proc(
            "server", [*self.run, self.py, str(PROGS / "server.py")], self.envs["server"])
        ev = self.expect("server", "listening")
        self.server_pid, self.port = ev["pid"], ev["port"]

    def connect(self, src_port: int = 0) -> dict:
        """Starts the client; returns once it is connected (the server has
        not accepted: the client now serves its rendezvous)."""
        run, py = self.runs["client"]
        self.client = self.procs["client"] = Proc(
            "client", [*run, py, str(PROGS / "client.py"), str(self.port),
                       str(src_port), str(self.size), self.mode], self.envs["client"])
        self.connected = self.expect("client", "connected")
        self.t_connected = time.monotonic()
        self.client_pid, self.client_fd = self.connected["pid"], self.connected["fd"]
        self.client_addr = tuple(self.connected["local"])
        self.server_addr = tuple(self.connected["peer"])
        return self.connected

    @property
    def name(self) -> bytes:
        """The client's rendezvous name."""
        (cip, cport), (sip, sport) = self.client_addr, self.server_addr
        return f"\0vsocket/1/{cip}:{cport}/{sip}:{sport}".encode()

    def client_fds(self) -> list[str]:
        fds = []
        for fd in sorted(os.listdir(f"/proc/{self.client_pid}/fd"), key=int):
            try:
                fds.append(f"{fd}->{os.readlink(f'/proc/{self.client_pid}/fd/{fd}')}")
            except OSError:
                pass
        return fds

    def fail(self, msg: str):
        pytest.fail(msg + "\n\n" + "\n".join(p.describe() for p in self.procs.values()),
                    pytrace=False)

    def expect(self, role: str, name: str, timeout: Optional[float] = None) -> dict:
        end = self.deadline if timeout is None else min(self.deadline,
                                                          time.monotonic() + timeout)
        while True:
            left = end - time.monotonic()
            if left <= 0:
                self.fail(f"[{role}] no {name!r} event in time (hung?)")
            try:
                ev = self.procs[role].q.get(timeout=left)
            except queue.Empty:
                self.fail(f"[{role}] no {name!r} event in time (hung?)")
            if ev.get("ev") == name:
                return ev
            if ev.get("ev") in ("error", "stdout-eof"):
                self.fail(f"[{role}] {ev} while waiting for {name!r}")

    def accept(self, greet: bool = True) -> dict:
        """The server accepts; with GREET it sends the client its greeting at
        once, else only at greet()."""
        self.server.send("accept")
        self.accepted = self.expect("server", "accepted")
        if greet:
            self.greet()
        return self.accepted

    def greet(self):
        self.server.send("greet")

    def echo(self) -> dict:
        ev = self.expect("client", "echo")
        if not ev.get("ok"):
            self.fail(f"the echo came back different: {ev}")
        self.expect("server", "echoed")
        return ev

    def poke(self, rounds: int = 3):
        """Both ends call and send a byte, a few times 10 ms apart, as a
        program using its connection would: a set-up past its due time ends
        then, with its reason (progs/client.py poke()). The stream is left
        as it was: every byte sent is read back."""
        for _ in range(rounds):
            for role in ("client", "server"):
                self.procs[role].send("poke")
                self.expect(role, "poked")
            time.sleep(0.01)
        self.procs["client"].send("drain")
        self.expect("client", "poked")

    def stats(self) -> tuple[Optional[dict], Optional[dict]]:
        return (settled_stat(self.client_pid, self.client_fd),
                settled_stat(self.server_pid, self.accepted["fd"]))

    def assert_upgraded(self, what: str = ""):
        c, s = self.stats()
        if not c or not s or c.get("transport") != "shm" or s.get("transport") != "shm":
            self.fail(f"{what}: the real connection is not on shm at both ends:\n"
                      f"  client: {c}\n  server: {s}")

    def close(self):
        """Both ends exit cleanly (status 0) and said nothing alarming."""
        for p in self.procs.values():
            p.send("exit")
        for role, p in self.procs.items():
            left = max(0.1, self.deadline - time.monotonic())
            try:
                rc = p.p.wait(timeout=min(left, 60))
            except subprocess.TimeoutExpired:
                self.fail(f"[{role}] did not exit (hung)")
            if rc != 0:
                self.fail(f"[{role}] exited with status {rc}")
        time.sleep(0.05)  # the stderr readers catch up
        for role, p in self.procs.items():
            for pat in BAD_STDERR:
                if pat.search(p.stderr()):
                    self.fail(f"[{role}] stderr matches {pat.pattern!r}")

    def cleanup(self):
        for p in self.procs.values():
            p.kill()
        for p in self.procs.values():
            try:
                p.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def free_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_attacker_as_nobody(name: bytes, timeout: float, *kinds: str) -> dict:
    prefix, py, why = other_user()
    if prefix is None:
        pytest.skip(why)
    r = subprocess.run([*prefix, py, str(ATTACKER), name.hex(), str(timeout), *kinds],
                       capture_output=True, text=True, timeout=600, cwd="/")
    if r.returncode != 0:
        pytest.fail(f"attacker as nobody failed ({r.returncode}):\n{r.stdout}\n{r.stderr}",
                    pytrace=False)
    return json.loads(r.stdout.splitlines()[-1])
