"""Runs inside the package test's chroot (tests/package/test_package.sh):
an echo server under `vsocket run` and a client preloaded by LD_PRELOAD with
the library's bare name (found through the loader's cache, as a systemd
drop-in would name it), both from the installed package; checks the bytes,
the library each loaded, and that `vsocket stat` shows their connection on
shm. Prints FAIL lines and exits 1 on any failure."""
import json
import subprocess
import sys

VSOCKET = "/usr/bin/vsocket"
PY = "/usr/bin/python3"
ECHO = sys.argv[1]
LIBDIR = sys.argv[2]  # where the package put libvsocket.so
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL " + what, flush=True)


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def connection_rows(stat, port):
    """(pid, transport, reason) of each connected socket with PORT at either end."""
    rows = []
    for proc in stat.get("processes", []):
        for s in proc.get("sockets", []):
            ends = (s.get("local", ""), s.get("peer", ""))
            if s.get("state") == "connected" and any(e.endswith(f":{port}") for e in ends):
                rows.append((proc["pid"], s.get("transport"), s.get("reason")))
    return rows


def main():
    server = subprocess.Popen([VSOCKET, "run", "--", PY, ECHO, "server"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    srv = fields(server.stdout.readline())
    check("port" in srv, f"the server under `vsocket run` printed no port: {srv}")
    if "port" not in srv:
        server.kill()
        return
    check(srv.get("lib", "").startswith(LIBDIR + "/libvsocket.so"),
          f"`vsocket run` preloaded {srv.get('lib')}, not the package's library in {LIBDIR}")

    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "libvsocket.so"}
    client = subprocess.Popen([PY, ECHO, "client", srv["port"]], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    cli = fields(client.stdout.readline())
    check(cli.get("received") == str(1 << 20) and cli.get("same") == "yes",
          f"the echo came back wrong: {cli}")
    check(cli.get("lib", "").startswith(LIBDIR + "/libvsocket.so"),
          f"LD_PRELOAD=libvsocket.so loaded {cli.get('lib')}, not {LIBDIR}'s (ldconfig not run?)")

    # Both ends still hold the connection: stat lists it in both processes.
    run = subprocess.run([VSOCKET, "stat", "--json"], capture_output=True, text=True)
    check(run.returncode == 0, f"vsocket stat exited {run.returncode}: {run.stderr}")
    rows = connection_rows(json.loads(run.stdout or "{}"), srv["port"])
    pids = {pid for pid, _, _ in rows}
    check(pids == {server.pid, client.pid},
          f"vsocket stat lists the connection in {sorted(pids)}, "
          f"not in the server {server.pid} and the client {client.pid}: {run.stdout}")
    check(rows and all(t == "shm" for _, t, _ in rows),
          f"the connection is not on shm in vsocket stat: {rows}")

    client.stdin.close()
    check(client.wait() == 0, f"the client exited {client.returncode}")
    done = fields(server.stdout.readline())
    check(done.get("echoed") == str(1 << 20), f"the server's count: {done}")
    check(server.wait() == 0, f"the server exited {server.returncode}")
    if not failures:
        print(f"echo over shm through the installed package: ok ({LIBDIR})")


main()
sys.exit(1 if failures else 0)
