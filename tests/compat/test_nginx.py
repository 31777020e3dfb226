"""nginx (master + 2 workers, epoll) with curl and wrk, all under vsocket."""

import os
import re
import time

import pytest

from conftest import (T, check_kernel_sockets, dump_stat, find_sockets, finish_comparison,
                      free_port, make_random_file, process_tree, require_program, run_cmd,
                      run_sampled, sha256_file, stat_for_tree)

pytestmark = pytest.mark.nginx

WORKERS = 2

CONF = """\
{user}
worker_processes {workers};
master_process on;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ use epoll; worker_connections 512; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  types {{ text/html html; application/octet-stream bin; }}
  default_type application/octet-stream;
  sendfile {sendfile};
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{port};
    root {d}/www;
  }}
}}
"""

WRK_REQS = re.compile(r"(\d+) requests in [\d.]+\w+, [\d.]+\w+ read")


def make_site(d, port, sendfile):
    (d / "www").mkdir(parents=True)
    (d / "tmp").mkdir()
    (d / "logs").mkdir()  # nginx -p opens <prefix>/logs/error.log before reading the config
    user = "user root;" if os.geteuid() == 0 else ""
    (d / "nginx.conf").write_text(CONF.format(user=user, workers=WORKERS, d=d, port=port,
                                              sendfile=sendfile))
    (d / "www" / "index.html").write_text(
        "<html><body>" + "".join(f"<p>line {i}</p>" for i in range(150)) + "</body></html>\n")
    digests = {"index.html": sha256_file(d / "www" / "index.html"),
               "blob.bin": make_random_file(d / "www" / "blob.bin", 4 * 1024 * 1024 + 3, seed=3)}
    return digests


def wait_workers(srv, master_pid_file, timeout=15):
    """(master pid, [worker pids]) once the master wrote its pid file and
    forked its workers."""
    deadline = time.monotonic() + T(timeout)
    while time.monotonic() < deadline:
        assert srv.alive(), srv.describe()
        try:
            master = int(master_pid_file.read_text().strip())
        except (OSError, ValueError):
            master = None
        if master:
            tree = process_tree(master)
            workers = [p for p, i in tree.items() if i["ppid"] == master and i["comm"] == "nginx"]
            if len(workers) == WORKERS:
                return master, sorted(workers)
        time.sleep(0.05)
    pytest.fail(f"nginx did not start {WORKERS} workers\n{srv.describe()}", pytrace=False)


def run_nginx(runner, servers, tmp_path, sendfile):
    nginx = require_program("nginx")
    curl = require_program("curl")
    wrk = require_program("wrk")
    port = free_port()
    d = tmp_path / f"nginx-{runner.name}"
    digests = make_site(d, port, sendfile)
    srv = servers.start("nginx", [nginx, "-p", d, "-c", d / "nginx.conf", "-e", d / "error.log"],
                        runner, port=port)
    master, workers = wait_workers(srv, d / "nginx.pid")
    base = f"http://127.0.0.1:{port}"

    # curl: both files on one keep-alive connection, then the big one again alone
    out = tmp_path / f"curl-{runner.name}"
    out.mkdir()
    res = run_cmd([curl, "-sS", "--fail", "-w", "%{http_code} %{size_download}\\n",
                   "-o", out / "blob.bin", f"{base}/blob.bin",
                   "-o", out / "index.html", f"{base}/index.html"], runner, timeout=60)
    codes = res.stdout.split()
    assert codes == ["200", str((d / "www" / "blob.bin").stat().st_size),
                     "200", str((d / "www" / "index.html").stat().st_size)], res.describe()
    got = {name: sha256_file(out / name) for name in digests}
    assert got == digests, f"[{runner}] curl got different content"
    res = run_cmd([curl, "-sS", "--fail", "--http1.0", "-o", out / "blob2.bin", f"{base}/blob.bin"],
                  runner, timeout=60)
    assert sha256_file(out / "blob2.bin") == digests["blob.bin"]
    res = run_cmd([curl, "-sS", "-o", os.devnull, "-w", "%{http_code}", f"{base}/missing"],
                  runner, timeout=30)
    assert res.stdout.strip() == "404", res.describe()

    # wrk: 2 threads, 8 connections, 2 s
    res, sampler = run_sampled([wrk, "-t", "2", "-c", "8", "-d", "2s", f"{base}/index.html"],
                               runner, timeout=60)
    m = WRK_REQS.search(res.stdout)
    assert m, res.describe()
    wrk_requests = int(m.group(1))
    assert wrk_requests > 0
    assert "Socket errors" not in res.stdout, f"[{runner}] wrk socket errors\n{res.describe()}"
    assert "Non-2xx" not in res.stdout, f"[{runner}] wrk non-2xx responses\n{res.describe()}"

    if runner.preloaded:
        assert not sampler.errors, sampler.errors[:3]
        check_kernel_sockets(sampler.merged(), "wrk")
        procs = stat_for_tree(runner.vsocket, srv.pid)
        socks = check_kernel_sockets(procs, "nginx")
        assert master in procs, f"nginx master {master} not in vsocket stat:\n{dump_stat(procs)}"
        for w in workers:
            assert w in procs, (f"nginx worker {w} (child of master {master}) not in vsocket stat; "
                                f"listed: {sorted(procs)}")
            assert procs[w].get("comm") == "nginx"
            assert find_sockets(procs[w]["sockets"], proto="tcp", state="listening", port=port,
                                closed=False), f"worker {w} lacks the inherited listening socket:\n" \
                                               f"{dump_stat(procs)}"
        assert find_sockets(procs[master]["sockets"], proto="tcp", state="listening", port=port)
        accepted = [s for s in socks if s["_pid"] in workers and s.get("peer")
                    and s.get("proto") == "tcp"]
        # curl made 3 connections, wrk 8
        assert len(accepted) >= 11, f"workers' accepted connections:\n{dump_stat(procs)}"
        blob_size = (d / "www" / "blob.bin").stat().st_size
        sent = sum(s["tx_bytes"] for s in accepted)
        assert sent >= 2 * blob_size, (f"workers' stat counts {sent} bytes sent, curl alone "
                                       f"received {2 * blob_size}:\n{dump_stat(procs)}")

    srv.stop()
    srv.check_output_clean()
    log = (d / "error.log").read_text(errors="replace")
    bad = [ln for ln in log.splitlines() if re.search(r"\[(alert|emerg|crit|error)\]", ln)
           and '"GET /missing ' not in ln]  # the deliberate 404
    assert not bad, f"[{runner}] nginx error.log:\n" + "\n".join(bad[:20])
    exits = re.findall(r"worker process (\d+) exited with code (\d+)", log)
    assert sorted(int(p) for p, _ in exits) == workers and all(c == "0" for _, c in exits), \
        f"[{runner}] workers did not all exit cleanly:\n{log[-3000:]}"
    assert not re.search(r"exited on signal", log), log[-3000:]
    access = (d / "access.log").read_text(errors="replace").splitlines()
    ok_index = sum(1 for ln in access if '"GET /index.html HTTP/1.1" 200' in ln)
    # every request wrk counted was logged (plus curl's one and any in flight at wrk's end)
    assert ok_index >= wrk_requests + 1, f"[{runner}] access.log has {ok_index} index.html 200s, " \
                                         f"wrk counted {wrk_requests}"
    assert not [ln for ln in access if '" 200 ' not in ln and "/missing" not in ln], \
        f"[{runner}] unexpected statuses in access.log"
    return {"digests": got, "codes": codes}


@pytest.mark.parametrize("sendfile", ["on", "off"], ids=["sendfile-on", "sendfile-off"])
def test_nginx(sendfile, runners, servers, tmp_path):
    """nginx master + 2 epoll workers: curl downloads (4 MB random file and an
    HTML page, keep-alive and HTTP/1.0) have the right sha256, a 404 is a 404,
    wrk gets only 2xx and no socket errors, every wrk request is in the access
    log, the workers exit with code 0; with vsocket the master and both
    workers are in vsocket stat with the inherited listening socket and the
    workers hold the accepted connections."""
    results = {r.name: run_nginx(r, servers, tmp_path, sendfile) for r in runners}
    finish_comparison(results)
    assert results["plain"] == results["vsocket"]
