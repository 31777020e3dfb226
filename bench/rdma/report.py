#!/usr/bin/env python3
"""bench/rdma/report.py - the report of bench/rdma/run (standard library only).

Reads the raw output of one guest run, or of one pair run (bench/rdma/run
--pair; its line "I layout=pair ..." says so), as lines "R KEY SIZE VALUE",
"S KEY ...", "N note", "I info", "H host info"; prints the tables, and with
--results / --svg replaces the run's section of bench/RESULTS.md (a pair
run has its own, before the one-guest one, with a "<= kernel?" column and
the programs sockperf and iperf3) and writes the plot (plain SVG).
"""
import argparse
import math
import re
import sys
from collections import defaultdict

SECTION = "## RDMA benchmark: vsocket vs kernel TCP, rsocket, perftest (one Soft-RoCE guest run)"
SECTION_PAIR = "## RDMA benchmark across two guests: vsocket with its defaults vs kernel TCP, rsocket, perftest (one pair run)"
RING = 256 << 10  # VSOCKET_RDMA_RING default (src/config/config.h)
# Above this share of its bytes on kernel TCP a vsocket point measured the
# kernel (its connection left RDMA); below it, the share is the warm-up
# before the upgrade (up to ~20 % of the small sizes' few bytes).
TCP_SHARE_MAX = 0.5


def parse(path):
    R = defaultdict(dict)
    S, H, I, notes = {}, {}, {}, []
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("R "):
            p = line.split()
            if len(p) >= 4 and p[3] not in ("", "-"):
                try:
                    x = float(p[3])
                    if math.isfinite(x):  # perftest prints "inf" when its clock saw 0
                        R[p[1]][int(p[2])] = x
                except ValueError:
                    pass
        elif line.startswith("S "):
            p = line.split(None, 2)
            S[p[1]] = p[2] if len(p) > 2 else ""
        elif line.startswith("H "):
            p = line.split(None, 2)
            H[p[1]] = p[2] if len(p) > 2 else ""
        elif line.startswith("I "):
            for kv in line[2:].split():
                if "=" in kv:
                    k, v = kv.split("=", 1)
                    I[k] = v
        elif line.startswith("N "):
            notes.append(line[2:])
    return R, S, H, I, notes


def human(n):
    for u, m in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m} {u}"
    return f"{n} B"


def f(v, d=1):
    if v is None:
        return "-"
    if v != 0 and abs(v) < 10 ** (-d):
        return f"{v:.2g}"
    return f"{v:.{d}f}"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def build(R, S, H, I, notes):
    # The layout of the run: one guest (servers and clients on rxe0), or a
    # pair (servers in A, clients in B, across the link on rxe1).
    pair = I.get("layout") == "pair"
    dev = I.get("dev", "rxe0")
    vs_label = "vsocket (defaults)" if pair else "vsocket rdma"
    if pair:
        tcp_bytes = ("TCP payload on B's eth0, both ways: tc counters less the headers, 66 B a packet out and 52 B in" if I.get("tcp_bytes") == "tc" else
                     "all of B's eth0 bytes, RoCE frames included (no tc counters): an upper bound")
    else:
        tcp_bytes = "`lo` bytes"
    sizes = sorted({s for k in ("pp_p50_tcp", "pp_p50_vs", "st_gbps_vs", "ib_write_bw", "st_gbps_tcp") for s in R.get(k, {})} |
                   {s for k, d in R.items() if k.endswith("_bytes_vs") and k.split("_")[0] in ("pingpong", "stream") for s in d})
    g = lambda k, s: R.get(k, {}).get(s)
    has_vc = bool(R.get("st_gbps_vc") or R.get("pp_p50_vc"))
    out = []
    # A point whose bytes mostly crossed kernel TCP (the connection left RDMA:
    # spilled, or its peer did) measured the kernel, not vsocket: it cannot
    # meet a target.
    def on_tcp(t, s):
        lo, b = g(f"{t}_lo_vs", s), g(f"{t}_bytes_vs", s)
        return lo is not None and bool(b) and lo / b > TCP_SHARE_MAX

    def yn(ok, t, s):
        return "-" if ok is None else ("yes" if ok else ("**no** (on TCP)" if on_tcp(t, s) else "**no**"))

    def row(cells):
        return "| " + " | ".join(cells) + " |"
    # ----- latency
    out.append("**Latency**: round trip in µs (vsocket-sweep ping-pong, median of the timed round trips after 50 warm-up ones, 5 from 1 MiB;"
               " rstream: its usec/xfer, spinning; perftest: 2 × ib_send_lat t_typical). Ratio < 1: vsocket faster.")
    out.append("")
    head = ["size", "kernel TCP", "rsocket preload", f"**{vs_label}**", "rstream", "2×ib_send_lat", "vs/kernel", "vs/rsocket", "vs/rstream", "≤ rsocket?"]
    if pair:
        head.append("≤ kernel?")
    out.append(row(head))
    out.append("|" + "---:|" * (len(head) - 1 - pair) + ":---:|" * (1 + pair))
    lat_ok, lat_k_ok = [], []
    for s in sizes:
        k, r, v, rs, ib = g("pp_p50_tcp", s), g("pp_p50_rs", s), g("pp_p50_vs", s), g("rstream_rtt", s), g("ib_send_lat", s)
        ib2 = 2 * ib if ib is not None else None
        ok = None if v is None or r is None else v <= r
        if (v is None and r is not None) or on_tcp("pingpong", s):
            ok = False
        lat_ok.append((s, ok))
        ok_k = None if v is None or k is None else v <= k and not on_tcp("pingpong", s)
        if v is None and k is not None:
            ok_k = False
        lat_k_ok.append((s, ok_k))
        cells = [human(s), f(k), f(r), f"**{f(v)}**", f(rs), f(ib2), f(ratio(v, k), 2), f(ratio(v, r), 2), f(ratio(v, rs), 2), yn(ok, "pingpong", s)]
        if pair:
            cells.append(yn(ok_k, "pingpong", s))
        out.append(row(cells))
    out.append("")
    # ----- bandwidth
    text = ("**Bandwidth**: Gb/s (vsocket-sweep stream, receiver's rate, one connection, writes of SIZE bytes, after 50 warm-up"
            " round trips; rstream: its Gb/sec; perftest ib_write_bw: BW average). Ratio > 1: vsocket faster.")
    if has_vc:
        text += (" vsocket rdma runs with its defaults (zero copy from 1 MiB: VSOCKET_RDMA_ZCOPY); \"copy path\": the same with"
                 " VSOCKET_RDMA_ZCOPY=0; \"zc/copy\": the ratio, stream and ping-pong (round trip, copy ÷ zero copy).")
    out.append(text)
    out.append("")
    head = ["size", "kernel TCP", "rsocket preload", f"**{vs_label}**", "rstream", "ib_write_bw"]
    head += ["copy path", "zc/copy (stream, ping-pong)"] if has_vc else []
    head += ["vs/kernel", "vs/rsocket", "vs/rstream", "vs/ib_write_bw", "≥ rsocket?", "≥ 0.9 ib_write_bw?"]
    out.append(row(head))
    out.append("|---:|---:|---:|---:|---:|---:|" + ("---:|---|" if has_vc else "") + "---:|---:|---:|---:|:---:|:---:|")
    bw_ok, ceil_ok = [], []
    for s in sizes:
        k, r, v, rs, ib = g("st_gbps_tcp", s), g("st_gbps_rs", s), g("st_gbps_vs", s), g("rstream_gbps", s), g("ib_write_bw", s)
        ok = None if v is None or r is None else v >= r
        if (v is None and r is not None) or on_tcp("stream", s):
            ok = False
        bw_ok.append((s, ok))
        c = None
        if s >= 65536:
            c = None if v is None or ib is None else v >= 0.9 * ib and not on_tcp("stream", s)
            ceil_ok.append((s, c))
        cells = [human(s), f(k, 3), f(r, 3), f"**{f(v, 3)}**", f(rs, 3), f(ib, 3)]
        if has_vc:
            vc = g("st_gbps_vc", s)
            zc = f"{f(ratio(v, vc), 2)}, {f(ratio(g('pp_p50_vc', s), g('pp_p50_vs', s)), 2)}" if vc is not None else "-"
            cells += [f(vc, 3), zc]
        cells += [f(ratio(v, k), 2), f(ratio(v, r), 2), f(ratio(v, rs), 2), f(ratio(v, ib), 2), yn(ok, "stream", s),
                  "" if s < 65536 else ("-" if c is None else ("yes" if c else "**no**"))]
        out.append(row(cells))
    out.append("")
    # ----- did vsocket use RDMA
    out.append("**Did the vsocket runs use RDMA?** Per run: lines \"upgraded to rdma\" in the client's log (1 = its one connection),"
               f" {dev} packets (sent+rcvd{', in B' if pair else ''}) during the run, and the bytes that crossed kernel TCP ({tcp_bytes}) as a share of the bytes"
               " the program moved (the TCP connect, the request and the warm-up before the upgrade ended). Kernel TCP runs: 0 rxe packets;"
               " rsocket runs (ping-pong + stream): many, or rsocket fell back to kernel TCP.")
    out.append("")
    out.append("| size | ping-pong: upgraded | rxe pkts | TCP share | stream: upgraded | rxe pkts | TCP share | kernel runs' rxe pkts | rsocket runs' rxe pkts |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rdma_bad = []

    def share_of(lo, b):
        share = lo / b if lo is not None and b else None
        return "-" if share is None else f"{100 * share:.2g} %"
    for s in sizes:
        cells = []
        for t in ("pingpong", "stream"):
            u, p, lo, b = g(f"{t}_upg_vs", s), g(f"{t}_pkts_vs", s), g(f"{t}_lo_vs", s), g(f"{t}_bytes_vs", s)
            cells += [f(u, 0), f(p, 0), share_of(lo, b)]
            if not u or not p:
                rdma_bad.append(f"{t} {human(s)}")
        kp = (g("pingpong_pkts_tcp", s) or 0) + (g("stream_pkts_tcp", s) or 0)
        # rsocket falls back to kernel TCP silently where rdma_cm fails: its
        # runs' packets show it did not.
        rp = [g(f"{t}_pkts_rs", s) for t in ("pingpong", "stream")]
        out.append(f"| {human(s)} | " + " | ".join(cells) + f" | {int(kp)} | {' + '.join(f(x, 0) for x in rp)} |")
    out.append("")
    rows_rdma, rows_other = S.get("vs_server_rows_rdma", "?"), S.get("vs_server_rows_other", "?")
    out.append(f"`vsocket stat --all` of the vsocket sweep server{' (in A)' if pair else ''} at the end (since its last restart, after a failed point): {rows_rdma} connections on `rdma` (device {dev}),"
               f" {rows_other} on another transport; the server logged \"upgraded to rdma\" {S.get('vs_server_upgrade_logs', '?')} times.")
    out.append("")
    # ----- programs (pair runs)
    prog_lines, prog_bad = programs(R, S, dev, share_of)
    out += prog_lines
    rdma_bad += prog_bad
    # ----- conns
    conns_summary = None
    if not pair:
        conns_lines, conns_summary = conns(S)
        out += conns_lines
    # ----- targets
    def verdict(lst):
        known = [(s, o) for s, o in lst if o is not None]
        bad = [human(s) for s, o in known if not o]
        if not known:
            return "not measured", bad
        return ("**met**" if not bad else "**not met**"), bad
    tl = []
    v1, b1 = verdict(lat_ok)
    tl.append(f"| vsocket latency ≤ rsocket's (preload, same program) at every size | {v1} | {'slower or on kernel TCP at ' + ', '.join(b1) if b1 else 'all sizes'} |")
    if pair:
        v1k, b1k = verdict(lat_k_ok)
        tl.append(f"| vsocket latency ≤ kernel TCP's on the same link at every size | {v1k} | {'slower or on kernel TCP at ' + ', '.join(b1k) if b1k else 'all sizes'} |")
    v2, b2 = verdict(bw_ok)
    tl.append(f"| vsocket bandwidth ≥ rsocket's at every size | {v2} | {'below or on kernel TCP at ' + ', '.join(b2) if b2 else 'all sizes'} |")
    v3, b3 = verdict(ceil_ok)
    det3 = ", ".join(f"{human(s)} {f(ratio(g('st_gbps_vs', s), g('ib_write_bw', s)), 2)}" for s, _ in ceil_ok)
    tl.append(f"| vsocket bandwidth ≥ 90 % of ib_write_bw{' across the link' if pair else ''} from 64 KiB | {v3} | vs/ib_write_bw: {det3} |")
    if has_vc:
        big = max(sizes) if sizes else None
        zs, zp = (ratio(g("st_gbps_vs", big), g("st_gbps_vc", big)), ratio(g("pp_p50_vc", big), g("pp_p50_vs", big))) if big else (None, None)
        zv = "not measured" if zs is None and zp is None else ("**met**" if max(x for x in (zs, zp) if x is not None) >= 1.5 else "**not met**")
        if big and (on_tcp("stream", big) or on_tcp("pingpong", big)):
            zv = "**not met**"  # the zero-copy run measured the kernel
        tl.append(f"| zero-copy path ≥ 1.5× the copy path at 4 MiB | {zv} | at {human(big) if big else '-'}: stream {f(zs, 2)}×, ping-pong {f(zp, 2)}× |")
    if conns_summary:
        tl.append(f"| {S.get('C_vs_requested', '1000')} concurrent RDMA connections in one process, memory per connection stated | {conns_summary[0]} | {conns_summary[1]} |")
        vs_up, rs_up = S.get("C_vs_upgrade_s"), S.get("C_rs_upgrade_s")
        if S.get("C_rs_requested"):
            if vs_up and rs_up and vs_up != "-" and rs_up != "-":
                ok = float(vs_up) <= float(rs_up)
                tl.append(f"| all {S.get('C_vs_requested')} on RDMA no later than rsocket's (issue 24 goal 5) | {'met' if ok else '**not met**'} | vsocket {vs_up} s after the first connect, rsocket {rs_up} s (both looked at every ~2 s) |")
            else:
                tl.append(f"| all {S.get('C_vs_requested')} on RDMA no later than rsocket's (issue 24 goal 5) | **not met** | vsocket {vs_up or '-'} s, rsocket {rs_up or '-'} s (- : not all) |")
    targets = ["| target | verdict | detail |", "|---|---|---|"] + tl
    return out, targets, notes, rdma_bad, sizes


# Programs of a pair run: (name, key of its figure, its size key, what it is, digits, lower is better)
PROGRAMS = [("sockperf", "sockperf_avg", 64, "sockperf TCP ping-pong 64 B, avg latency (µs, ½ round trip)", 1, True),
            ("sockperf", "sockperf_p50", 64, "sockperf, median latency (µs, ½ round trip)", 1, True),
            ("iperf3", "iperf3_gbps", 131072, "iperf3 one stream (Gb/s, receiver)", 3, False),
            ("iperf3", "iperf3_cpu_client", 131072, "iperf3 CPU, client (% of a vCPU, its figure)", 0, True),
            ("iperf3", "iperf3_cpu_server", 131072, "iperf3 CPU, server (% of a vCPU, its figure)", 0, True)]


def programs(R, S, dev, share_of):
    g = lambda k, s: R.get(k, {}).get(s)
    if not any(R.get(f"{p[1]}_{t}") or R.get(f"{p[0]}_fail_{t}") for p in PROGRAMS for t in ("tcp", "rs", "vs")):
        return [], []
    out = ["**Programs** across the link, unmodified, each over kernel TCP, rsocket's preload and vsocket with its defaults"
           " (servers in A, clients in B, in the same run as the tables above). \"fails\": the program did not give a figure"
           " (see the notes).", "",
           "| program | kernel TCP | rsocket preload | **vsocket (defaults)** | vs/kernel | vs/rsocket | vsocket faster? |",
           "|---|---:|---:|---:|---:|---:|:---:|"]

    def cell(key, name, tr, s, d):
        v = g(f"{key}_{tr}", s)
        if v is None and g(f"{name}_fail_{tr}", s):
            return None, "fails"
        return v, f(v, d)
    for name, key, s, label, d, lower in PROGRAMS:
        (k, kc), (r, rc), (v, vc) = (cell(key, name, t, s, d) for t in ("tcp", "rs", "vs"))
        if k is None and r is None and v is None:
            continue
        better = "" if "cpu" in key else ("-" if v is None or k is None else ("yes" if (v <= k if lower else v >= k) else "**no**"))
        out.append(f"| {label} | {kc} | {rc} | **{vc}** | {f(ratio(v, k), 2)} | {f(ratio(v, r), 2)} | {better} |")
    out.append("")
    out.append(f"vsocket's program runs on RDMA? \"upgraded\": lines \"upgraded to rdma\" in the client's log (sockperf: 1 connection,"
               f" iperf3: 2, its control one and its stream) and in the server's; {dev} packets in B; TCP share as above.")
    out.append("")
    out.append("| program | client upgraded | server upgraded | rxe pkts | TCP share | kernel run's rxe pkts | rsocket run's rxe pkts |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    bad = []
    for name, s in (("sockperf", 64), ("iperf3", 131072)):
        u, p = g(f"{name}_upg_vs", s), g(f"{name}_pkts_vs", s)
        if u is None and p is None:
            continue
        out.append(f"| {name} | {f(u, 0)} | {S.get(f'{name}_server_upgrade_logs', '-')} | {f(p, 0)} |"
                   f" {share_of(g(f'{name}_lo_vs', s), g(f'{name}_bytes_vs', s))} | {f(g(f'{name}_pkts_tcp', s), 0)} | {f(g(f'{name}_pkts_rs', s), 0)} |")
        if not u or not p:
            bad.append(name)
    out.append("")
    return out, bad


def conns(S):
    out = []
    n = S.get("C_vs_requested")
    if not n:
        return ["(`--conns` not run.)", ""], ("not measured", "run without --conns")
    n = int(n)

    def mem(key):
        v = S.get(key)
        return [int(x) for x in v.split()] if v else None

    rows = []
    per = {}
    modes = (("kernel", "kernel TCP (no preload)"), ("rs", "rsocket preload"), ("vs", "vsocket rdma"))
    for mode, label in modes:
        k = f"C_{mode}"
        opened = S.get(f"{k}_opened") or "0"
        nn = int(opened) if opened.isdigit() and int(opened) > 0 else None
        if mode == "vs" and S.get(f"{k}_all_upgraded") != "1":
            # Not all on rdma: the memory is that of the RDMA ones (a kernel
            # connection costs ~1 KiB, see the kernel row): divide by them.
            r = S.get("C_vs_rdma_client", "0")
            nn = int(r) if r.isdigit() and int(r) > 0 else None
        line = {"label": label, "opened": opened, "ok": S.get(f"{k}_all_upgraded"), "t_conn": S.get(f"{k}_connect_s", "-"),
                "t_up": S.get(f"{k}_upgrade_s", "-"), "close": S.get(f"{k}_close_s", "-")}
        d = {}
        for side in ("server", "client"):
            b, a = mem(f"{k}_mem_{side}_before"), mem(f"{k}_mem_{side}_after")
            if b and a and nn and len(a) >= 4 and len(b) >= 4:
                d[side] = [(a[i] - b[i]) / nn for i in range(4)]  # Pss, Rss, VmPin (KiB), fds
        sb, sa = mem(f"{k}_sys_before"), mem(f"{k}_sys_after")
        if sb and sa and nn:
            d["sys"] = [(sb[0] - sa[0]) / nn, (sa[1] - sb[1]) / nn]  # MemAvailable drop, Slab growth (KiB)
        per[mode] = (line, d, nn)
    out.append(f"**{n} concurrent connections, one client process, one server process** (`bench/rdma/conns.c`: the client"
               " opens them one after another, then 1-byte ping-pong rounds over all of them (poll) until `vsocket stat` shows every"
               " end of every connection on rdma, then holds them idle; memory measured before the first connection and while they"
               " are held; per connection = delta ÷ connections opened).")
    out.append("")
    out.append("| | opened | all on rdma | connect all (s) | until all upgraded (s) | close all (s) | Pss/conn client + server (KiB) | RSS/conn client + server (KiB) | pinned (VmPin)/conn client + server (KiB) | fds/conn client + server | guest MemAvailable drop/conn (KiB) | Slab/conn (KiB) |")
    out.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, _ in modes:
        line, d, nn = per[mode]
        if mode == "rs" and not S.get("C_rs_requested"):
            continue  # a run from before rsocket's row
        c, s_ = d.get("client"), d.get("server")

        def two(i, dd=0):
            if not c or not s_:
                return "-"
            return f"{c[i]:.{dd}f} + {s_[i]:.{dd}f} = {c[i] + s_[i]:.{dd}f}"
        sy = d.get("sys")
        allr = "n/a" if mode == "kernel" else ("yes" if line["ok"] == "1" else "**no**")
        if mode == "rs" and line["ok"] == "1":
            allr = "yes (at connect)"
        if mode == "vs":
            allr += f" (client {S.get('C_vs_rdma_client', '?')}, server {S.get('C_vs_rdma_server', '?')} on rdma)"
        out.append(f"| {line['label']} | {line['opened']} | {allr} | {line['t_conn']} | {line['t_up'] if mode != 'kernel' else '-'} | {line['close']} | "
                   f"{two(0)} | {two(1)} | {two(2)} | {two(3, 1)} | {f(sy[0], 0) if sy else '-'} | {f(sy[1], 1) if sy else '-'} |")
    if per["vs"][0]["ok"] != "1":
        out.append("")
        out.append(f"Not all connections reached rdma: the vsocket row's per-connection figures are divided by the"
                   f" {S.get('C_vs_rdma_client', '?')} connections on rdma (the others stayed on kernel TCP, ~1 KiB each).")
    out.append("")
    reg = 2 * RING
    out.append(f"Registered memory from the configuration: `VSOCKET_RDMA_RING` = {human(RING)} (default): each end registers its"
               f" receive ring and a send copy as large, {human(reg)} per connection and process, so {human(2 * reg)} per connection"
               f" for both ends ({n} connections: {2 * reg * n / (1 << 30):.2f} GiB pinned, against `RLIMIT_MEMLOCK`; the guest runs"
               " as root, memlock unlimited).")
    out.append("")
    line, d, nn = per["vs"]
    if line["ok"] == "1" and nn == n:
        c, s_ = d.get("client"), d.get("server")
        tot = (c[0] + s_[0]) if c and s_ else None
        summ = ("**met**", f"{n} on rdma (both ends) after {line['t_up']} s; Pss {f(tot, 0)} KiB per connection (both processes),"
                f" registered {human(2 * reg)} per connection (both ends)")
    else:
        summ = ("**not met**", f"opened {line['opened']} of {n}; client {S.get('C_vs_rdma_client', '?')}, server"
                f" {S.get('C_vs_rdma_server', '?')} on rdma (see the notes)")
    return out, summ


def svg_plot(R, sizes, path, title, vs_label="vsocket rdma"):
    W, Hh = 1000, 430
    panels = [("round trip (µs), lower is better", [("pp_p50_tcp", "kernel TCP", "#777777"), ("pp_p50_rs", "rsocket preload", "#d62728"),
                                                    ("rstream_rtt", "rstream", "#ff9896"), ("pp_p50_vs", vs_label, "#1f77b4"),
                                                    ("ib_send_lat*2", "2×ib_send_lat", "#2ca02c")]),
              ("bandwidth (Gb/s), higher is better", [("st_gbps_tcp", "kernel TCP", "#777777"), ("st_gbps_rs", "rsocket preload", "#d62728"),
                                                      ("rstream_gbps", "rstream", "#ff9896"), ("st_gbps_vs", vs_label, "#1f77b4"),
                                                      ("ib_write_bw", "ib_write_bw", "#2ca02c")])]
    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{Hh}" viewBox="0 0 {W} {Hh}" font-family="sans-serif" font-size="12">',
          f'<rect width="{W}" height="{Hh}" fill="white"/>',
          f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>']
    pw, ph, top = 400, 300, 45
    for pi, (ylabel, series) in enumerate(panels):
        x0 = 70 + pi * 500
        pts = {}
        for key, label, color in series:
            if key.endswith("*2"):
                d = {s: 2 * v for s, v in R.get(key[:-2], {}).items()}
            else:
                d = dict(R.get(key, {}))
            pts[key] = {s: v for s, v in d.items() if v and v > 0 and s in sizes}
        vals = [v for d in pts.values() for v in d.values()]
        if not vals or not sizes:
            continue
        ylo, yhi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
        if yhi == ylo:
            yhi += 1
        xlo, xhi = math.log2(min(sizes)), math.log2(max(sizes))
        X = lambda s: x0 + (math.log2(s) - xlo) / max(xhi - xlo, 1) * pw
        Y = lambda v: top + ph - (math.log10(v) - ylo) / (yhi - ylo) * ph
        el.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
        for e in range(ylo, yhi + 1):
            y = Y(10 ** e)
            el.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#ddd"/>')
            el.append(f'<text x="{x0 - 5}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
        for s in sizes:
            x = X(s)
            el.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>')
            el.append(f'<text x="{x:.1f}" y="{top + ph + 15}" text-anchor="middle" font-size="10">{human(s).replace(" ", "")}</text>')
        el.append(f'<text x="{x0 + pw / 2}" y="{top + ph + 32}" text-anchor="middle">message size</text>')
        el.append(f'<text x="{x0 + pw / 2}" y="{top - 8}" text-anchor="middle">{ylabel}</text>')
        for li, (key, label, color) in enumerate(series):
            d = pts[key]
            xs = sorted(d)
            if xs:
                w = 3 if "vsocket" in label else 1.6
                el.append(f'<polyline fill="none" stroke="{color}" stroke-width="{w}" points="' +
                          " ".join(f"{X(s):.1f},{Y(d[s]):.1f}" for s in xs) + '"/>')
                for s in xs:
                    el.append(f'<circle cx="{X(s):.1f}" cy="{Y(d[s]):.1f}" r="2.5" fill="{color}"/>')
            ly = top + ph + 50 + 0 * li
            lx = x0 + li * 82
            el.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 16}" y2="{ly}" stroke="{color}" stroke-width="3"/>')
            el.append(f'<text x="{lx + 19}" y="{ly + 4}" font-size="10">{label}</text>')
    el.append("</svg>")
    open(path, "w").write("\n".join(el) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--results")
    ap.add_argument("--svg")
    a = ap.parse_args()
    R, S, H, I, notes = parse(a.raw)
    pair = I.get("layout") == "pair"
    tables, targets, notes, rdma_bad, sizes = build(R, S, H, I, notes)
    where = (f"two guests (`tools/rdma-guest/pair`), servers in A {I.get('server', '10.77.1.1')}, clients in B, across the link on"
             f" {I.get('dev', 'rxe1')} (Soft-RoCE on eth0); each guest: kernel" if pair else "Guest: kernel")
    head = (f"{where} {I.get('guest', '?')}, {I.get('vcpus', '?')} vCPUs (TCG), {I.get('mem_mib', '?')} MiB"
            f"{'' if pair else ', rxe0 on dummy0 10.77.0.1'}; run {I.get('date', '?')}, {'pair' if pair else 'guest'} run {H.get('took_s', '?')} s"
            f" (sweep part {S.get('sweep_done_s', '?')} s, whole command {S.get('total_s', '?')} s in the {'client guest' if pair else 'guest'});"
            f" host: {H.get('host_cores', '?')} cores shared with other work, load average {H.get('host_load', '?')} before;"
            f" commit {H.get('commit', '?')}.")
    body = [head, ""] + tables + ["**Targets** (this run):", ""] + targets + [""]
    if rdma_bad:
        body += [f"**Warning**: vsocket runs without proof of RDMA (no upgrade logged or no rxe packets): {', '.join(rdma_bad)}.", ""]
    if notes:
        body += ["Notes from the run (failures, not-on-rdma connections):", ""] + [f"* `{n.strip()}`" for n in notes] + [""]
    text = "\n".join(body)
    print(text)
    if a.svg:
        title = ("vsocket (defaults) across two Soft-RoCE guests vs kernel TCP, rsocket, perftest" if pair else
                 "vsocket over RDMA (Soft-RoCE, TCG guest) vs kernel TCP, rsocket, perftest")
        svg_plot(R, sizes, a.svg, f"{title} — {I.get('date', '')}", "vsocket (defaults)" if pair else "vsocket rdma")
        print(f"(plot written to {a.svg})")
    if a.results:
        md = open(a.results).read()
        if pair:
            sec = [SECTION_PAIR, "", f"Recorded by `{H.get('cmd', 'bench/rdma/run --pair')}` (one run of `tools/rdma-guest/pair`; see"
                   " `bench/README.md`). What users get: two hosts, vsocket with its defaults (no setting but `LD_PRELOAD`; the log"
                   " level only for the proof). **Only ratios between figures of this one run mean anything**: each guest runs under"
                   " qemu TCG emulation (~100× slower than the host), both on a shared 2-core machine, joined by a qemu link over a"
                   " unix socket. Kernel TCP crosses that link on eth0; rsocket, vsocket and perftest cross it on rxe1 (Soft-RoCE,"
                   " RoCE v2). The socket figures come from one program, `vsocket-sweep` (blocking `read`/`write`), then from two"
                   " unmodified programs (sockperf, iperf3); rstream and perftest spin on completions and are shown for reference."
                   " The one-guest section follows.", "",
                   "![vsocket across two guests vs kernel TCP, rsocket, perftest](rdma/rdma-pair.svg)", "", text.rstrip(), ""]
        else:
            sec = [SECTION, "", f"Recorded by `{H.get('cmd', 'bench/rdma/run')}` (one run of `tools/rdma-guest/run`; see"
                   " `bench/README.md`). **Only ratios between figures of this one run mean anything**: the guest runs under qemu TCG"
                   " emulation (~100× slower than the host) on a shared 2-core machine. Kernel TCP is the guest's stack to its own"
                   " address (routed through `lo`); rsocket, vsocket and perftest go through rxe0 (Soft-RoCE, RoCE v2). The socket"
                   " figures come from one program, `vsocket-sweep` (blocking `read`/`write`: every wait sleeps, so a round trip pays"
                   " emulated wake-ups); rstream and perftest spin on completions and are shown for reference.", "",
                   "![vsocket vs kernel TCP, rsocket, perftest](rdma/rdma-bench.svg)", "", text.rstrip(), ""]
        new = "\n".join(sec) + "\n"
        title = SECTION_PAIR if pair else SECTION
        pat = re.compile(r"^" + re.escape(title) + r"\n.*?(?=^## |\Z)", re.S | re.M)
        if pat.search(md):
            md = pat.sub(lambda m: new, md, count=1)
        else:
            # A new pair section goes just before the one-guest one (what
            # users get first); anything else before the first section.
            i = md.find("\n" + SECTION + "\n") if pair else -1
            if i < 0:
                i = md.find("\n## ")
            md = md[:i + 1] + new + "\n" + md[i + 1:] if i >= 0 else md + "\n" + new
        open(a.results, "w").write(md)
        print(f"(section written to {a.results})")


if __name__ == "__main__":
    sys.exit(main())
