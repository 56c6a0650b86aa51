#!/usr/bin/env python3
"""BENCHMARKS.md from the results of one bench/run.sh run: report.py WORKDIR > BENCHMARKS.md

WORKDIR/res/<key> holds one line per round (whitespace-separated numbers), WORKDIR/meta.env the
machine and versions. Every figure is a median over the rounds; every ratio is taken between
medians of the same run. A section whose results are missing (ROWS left it out) is left out.
"""
import os
import statistics
import sys

WORK = sys.argv[1]
RES = os.path.join(WORK, "res")
META = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(WORK, "meta.env")) if "=" in line)
ENV = os.environ
ROUNDS, DURATION = ENV.get("ROUNDS", "?"), ENV.get("DURATION", "?")
SERVER_CPU, LOAD_CPU = ENV.get("SERVER_CPU", "1"), ENV.get("LOAD_CPU", "0")
BASE = META.get("BASE_REV", "")


def rows(key):
    path = os.path.join(RES, key)
    if not os.path.exists(path):
        return []
    return [[float(x) for x in line.split()] for line in open(path) if line.strip()]


def med(key, field=0):
    r = rows(key)
    return statistics.median(x[field] for x in r) if r else None


def col(key, field=0, fmt="{:.0f}"):
    return " ".join(fmt.format(x[field]) for x in rows(key))


def have(key):
    return bool(rows(key))


def verdict(value, goal, higher_is_better=True):
    """'met' or '**not met** (N% short)' for value against goal."""
    if value is None:
        return "not measured"
    if (value >= goal) if higher_is_better else (value <= goal):
        return "met"
    short = (goal - value) / goal if higher_is_better else (value - goal) / goal
    return f"**not met** ({abs(short) * 100:.0f}% {'short' if higher_is_better else 'over'})"


def x(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}×"


out = []
p = out.append
goals = []  # rows of the summary table: measure, peer, goal, measured, verdict

# -- HTTP -----------------------------------------------------------------------------------------
http = {}
for conns in (64, 1000):
    bv = med(f"http{conns}.bootvol")
    if bv is None:
        continue
    h = http[conns] = {s: (med(f"http{conns}.{s}", 0), med(f"http{conns}.{s}", 1), med(f"http{conns}.{s}", 2))
                       for s in ("bootvol", "nginx-files", "nginx-return", "null-http", "baseline") if have(f"http{conns}.{s}")}
if 64 in http:
    h = http[64]
    r = h["bootvol"][0] / h["nginx-files"][0]
    goals.append(("per-MAC scripts, 64 connections, 10,000 nodes, 1,000 MACs cycled, each request logged",
                  "nginx, 1 worker, files, access log on", "≥ 1.5×", x(r), verdict(r, 1.5)))
    r = h["bootvol"][0] / h["nginx-return"][0]
    goals.append(("same", "nginx `return 200` from memory, access log on", "≥ 1.0×",
                  f"{x(r)} (the minimal responder: {x(h['bootvol'][0] / h['null-http'][0])})", verdict(r, 1.0)))
if 1000 in http:
    h = http[1000]
    r = h["bootvol"][0] / h["nginx-files"][0]
    p99_ok = h["bootvol"][1] <= h["nginx-files"][1]
    v = verdict(r, 1.5)
    if not p99_ok:
        v = (v if v != "met" else "**not met**") + f"; p99 {h['bootvol'][1]:.1f} ms against {h['nginx-files'][1]:.1f} ms"
    goals.append(("same, 1,000 connections", "nginx, files", "≥ 1.5×, p99 ≤ nginx's",
                  f"{x(r)}, p99 {h['bootvol'][1]:.1f} / {h['nginx-files'][1]:.1f} ms", v))

# -- TFTP 1 MiB -----------------------------------------------------------------------------------
TFTP_CASES = [("lock1468", "lock-step, blksize 1468"), ("win8", "blksize 1468 + windowsize 8"),
              ("b512", "lock-step, 512 bytes (no options)")]
PEERS = ("tftpd-hpa", "atftpd", "dnsmasq")
tftp = {}
for key, label in TFTP_CASES:
    if not have(f"tftp.{key}.bootvol"):
        continue
    m = {s: med(f"tftp.{key}.{s}") for s in ("bootvol",) + PEERS + ("null-tftp", "baseline") if have(f"tftp.{key}.{s}")}
    faster = min(m[s] for s in PEERS if s in m)
    ratio, limit = faster / m["bootvol"], m["null-tftp"] / m["bootvol"]
    tftp[key] = (label, m, ratio, limit)
    ok = ratio >= 1.5 or limit >= 0.9
    goals.append((f"TFTP 1 MiB, {label}", "the faster of tftpd-hpa, atftpd, dnsmasq",
                  "≥ 1.5×, or ≥ 0.9 of the null server", f"{x(ratio)}; {limit:.2f} of the limit",
                  "met" if ok else f"**not met** ({(1 - max(ratio / 1.5, limit / 0.9)) * 100:.0f}% short of the nearer goal)"))

# -- TFTP storms ----------------------------------------------------------------------------------
storms = {}
for n in ENV.get("STORM_N", "500 5000").split():
    if not have(f"storm{n}.bootvol"):
        continue
    s = {srv: {"fail": max(r[1] for r in rows(f"storm{n}.{srv}")), "secs": med(f"storm{n}.{srv}", 2),
               "mibs": med(f"storm{n}.{srv}", 3), "p99": med(f"storm{n}.{srv}", 5), "cpu": med(f"storm{n}.{srv}", 6)}
         for srv in ("bootvol",) + PEERS + ("null-tftp", "baseline") if have(f"storm{n}.{srv}")}
    storms[n] = s
    faster = max(s[srv]["mibs"] for srv in PEERS if srv in s)
    r = s["bootvol"]["mibs"] / faster
    v = verdict(r, 1.5)
    if s["bootvol"]["fail"]:
        v = f"**not met** ({s['bootvol']['fail']:.0f} failures" + ("" if v == "met" else f"; {v[13:-1]}") + ")"
    goals.append((f"{int(n):,} TFTP clients at once, 100 KiB", "the faster peer", "0 failures, aggregate ≥ 1.5×",
                  f"{s['bootvol']['fail']:.0f} failures (worst round), {x(r)}; {s['bootvol']['mibs'] / s['null-tftp']['mibs']:.2f} of the null server", v))

# -- boot storm -----------------------------------------------------------------------------------
boot = None
if have("boot.bootvol"):
    boot = {k: {"fail": max(r[1] for r in rows(f"boot.{k}")), "secs": med(f"boot.{k}", 2), "p50": med(f"boot.{k}", 3),
                "p99": med(f"boot.{k}", 4), "cpu": med(f"boot.{k}", 5)} for k in ("bootvol", "peers", "baseline") if have(f"boot.{k}")}
    r = boot["bootvol"]["secs"] / boot["peers"]["secs"]
    v = verdict(r, 0.67, higher_is_better=False)
    if boot["bootvol"]["fail"]:
        v = f"**not met** ({boot['bootvol']['fail']:.0f} failures; time {r:.2f}×)"
    goals.append((f"boot storm, {int(rows('boot.bootvol')[0][0]):,} nodes: undionly.kpxe (TFTP), boot.ipxe and own script (HTTP)",
                  "dnsmasq (TFTP) + nginx (HTTP)", "0 failures, total time ≤ 0.67×",
                  f"{boot['bootvol']['fail']:.0f} failures, {r:.2f}× ({boot['bootvol']['secs']:.2f} s / {boot['peers']['secs']:.2f} s)", v))

# -- memory and start -----------------------------------------------------------------------------
mem = None
if have("memory.bootvol"):
    mem = {k: (med(f"memory.{k}", 0), med(f"memory.{k}", 1) / 1024, med(f"memory.{k}", 2) / 1024)
           for k in ("bootvol", "baseline") if have(f"memory.{k}")}
    goals.append(("resident memory, 10,000 nodes, after load", "itself before (52 MiB)", "≤ 30 MiB",
                  f"{mem['bootvol'][2]:.0f} MiB", verdict(mem["bootvol"][2], 30, higher_is_better=False)))
    goals.append(("start to first answer, 10,000 nodes", "itself before (175 ms)", "≤ 100 ms",
                  f"{mem['bootvol'][0]:.0f} ms", verdict(mem["bootvol"][0], 100, higher_is_better=False)))

# -- neighbour ------------------------------------------------------------------------------------
nb = None
if have("neighbour.neighbour"):
    nb = {m: {"clients": rows(f"neighbour.{m}")[0][0], "fail": max(r[2] for r in rows(f"neighbour.{m}")),
              "rps": med(f"neighbour.{m}", 3), "p99": med(f"neighbour.{m}", 4), "cpu": med(f"neighbour.{m}", 5)}
          for m in ("neighbour", "any") if have(f"neighbour.{m}")}
    n = nb["neighbour"]
    goals.append((f"neighbour check: {n['clients']:.0f} clients on macvlan links, each its own script",
                  '`script_secrets = "any"`, same set-up', "0 failures",
                  f"{n['fail']:.0f} failures, {n['rps']:.0f} requests/s, {x(n['rps'] / nb['any']['rps'])} the rate with \"any\"",
                  "met" if n["fail"] == 0 else f"**not met** ({n['fail']:.0f} failures)"))

# =================================================================================================
p("# Benchmarks")
p("")
p(f"Written by `bench/run.sh` on {META['DATE']}, bootvol {META['COMMIT']} (release build). Medians of {ROUNDS} interleaved")
p("rounds; every peer runs in the same run, on the same machine, over loopback (the neighbour row: a veth")
p("pair), in a network namespace of the run's own.")
p("")
p(f"Machine: {META['CORES']} cores ({META['CPU']}), {META['RAM_GIB']} GiB RAM, Linux {META['KERNEL']}. {META['NGINX']},")
p(f"tftpd-hpa {META['TFTPD_HPA']}, atftpd {META['ATFTPD']}, dnsmasq {META['DNSMASQ']}, wrk {META['WRK']}, iPXE {META['IPXE']} (its `undionly.kpxe`).")
p("")
p(f"Core layout: every server under test runs on core {SERVER_CPU} alone (`taskset -c {SERVER_CPU}`: bootvol, each nginx")
p(f"master and its one worker, tftpd-hpa and the children it forks, atftpd, dnsmasq, the null servers); every")
p(f"load generator (wrk, hyperfine and its TFTP clients, `bench/tools` loadgen) runs on core {LOAD_CPU}. Latency is")
p("measured on the client side (`wrk --latency`, the generators' own clocks), never from server logs.")
p("")
p("Logging: bootvol runs at its default level (`info`: one line per request or transfer) to a file; nginx")
p("writes its access log through `access_log ... buffer=64k flush=1s`; dnsmasq logs each transfer to a file,")
p("atftpd its default level to a file (start-up and errors; its next level writes three lines per transfer);")
p("tftpd-hpa logs only to syslog, and no syslog runs in the namespace.")
p("The null servers log nothing.")
p("")
p("bootvol's configuration for the bench: the clients sit on loopback and the nodes carry CHAP, so")
NOFILE = ENV.get("NOFILE", "?")
nofile = f"`ulimit -n {NOFILE}`" + ("" if NOFILE == "65536" else " (65536 asked; the hard limit of the machine allowed no more)")
p("`[boot] script_secrets = \"any\"` (the neighbour row measures the default, `\"neighbour\"`); the connection")
p(f"and transfer caps (`[http] max_connections`, `max_connections_per_client`, `[tftp] max_transfers`,")
p(f"`max_transfers_per_client`) are {ENV.get('CAP', '?')}, above the most clients of the run; {nofile} for")
p(f"every process; dnsmasq runs with `--tftp-max={ENV.get('CAP', '?')}`, atftpd with `--maxthread {ENV.get('CAP', '?')}`.")
p("")
p("## Goals (issue 14)")
p("")
p("| measure | peer | goal | measured | verdict |")
p("|---|---|---|---|---|")
for g in goals:
    p("| " + " | ".join(g) + " |")

if http:
    p("")
    p("## Per-MAC boot scripts over HTTP (10,000 nodes, 1,000 different MACs)")
    p("")
    p(f"`wrk -t1 -c<N> -d{DURATION}s --latency` with a Lua script cycling through 1,000 per-MAC URLs. The peers: nginx,")
    p("1 worker, the same scripts as static files (Debian's `sendfile on; tcp_nopush on`); nginx answering the")
    p("same bytes from memory (`location = /boot/<mac>.ipxe { return 200 \"...\"; }`); the minimal responder")
    p("(`bench/tools` null-http: one prepared answer, a script's bytes, to every request; no routing, no log),")
    p("the practical limit of one core. nginx closes no keep-alive connection (`keepalive_requests` raised).")
    for conns, h in http.items():
        p("")
        p(f"{conns} connections:")
        p("")
        p("| server | requests/s | p99 latency | errors | bootvol / server | of the responder's |")
        p("|---|---|---|---|---|---|")
        for s, (rps, p99, err) in h.items():
            p(f"| {s} | {rps:.0f} | {p99:.2f} ms | {err:.0f} | {h['bootvol'][0] / rps:.2f}× | {rps / h['null-http'][0]:.2f} |")
        p("")
        p("Rounds (requests/s): " + "; ".join(f"{s} {col(f'http{conns}.{s}')}" for s in h) + ".")
    if have("http.bootvol_log_lines"):
        p("")
        p(f"Lines logged over this section: bootvol {med('http.bootvol_log_lines'):.0f}, nginx (files) {med('http.nginx_log_lines'):.0f}.")
    series = {s: rows(f"series.{s}") for s in ("bootvol", "nginx-files", "nginx-return", "null-http") if have(f"series.{s}")}
    if series:
        p("")
        plot = os.path.relpath(ENV.get("PLOT", ""), os.path.dirname(os.path.abspath(ENV.get("OUT", "BENCHMARKS.md"))))
        p(f"Requests/s and p99 against connections (one run per point), plotted in [{plot}]({plot}):")
        p("")
        conns = [int(r[0]) for r in series["bootvol"]]
        p("| server | " + " | ".join(f"{c} conn." for c in conns) + " |")
        p("|---|" + "---|" * len(conns))
        for s, rs in series.items():
            p(f"| {s} | " + " | ".join(f"{r[1]:.0f}/s, {r[2]:.2f} ms" for r in rs) + " |")

if tftp:
    p("")
    p("## TFTP, 1 MiB file, one transfer at a time")
    p("")
    p(f"hyperfine runs the client (atftp 0.8, or tftp-hpa with no options) {ENV.get('TFTP_RUNS', '15')} times per server after 2 warm-ups,")
    p("all servers in each call; each run compares the file with `cmp`. Median wall time of a fetch (lower is")
    p("better), with the throughput it implies; the null server (`bench/tools` null-tftp: prepared packets,")
    p("no file reads, no timers) is the limit the client and the kernel allow. tftpd-hpa and dnsmasq do not")
    p("implement windowsize and answer lock-step. In brackets: the throughput, and the fraction of the null")
    p("server's throughput.")
    p("")
    servers = [s for s in ("bootvol",) + PEERS + ("null-tftp", "baseline") if s in next(iter(tftp.values()))[1]]
    p("| client | " + " | ".join(servers) + " | bootvol / faster peer | bootvol / null |")
    p("|---|" + "---|" * (len(servers) + 2))
    for key, (label, m, ratio, limit) in tftp.items():
        p(f"| {label} | " + " | ".join(f"{m[s]:.1f} ms ({1000 / m[s]:.0f} MiB/s, {m['null-tftp'] / m[s]:.2f})" for s in servers) + f" | {ratio:.2f}× | {limit:.2f} |")

if storms:
    p("")
    p("## Many TFTP clients at once, 100 KiB file")
    p("")
    p("`bench/tools` loadgen tftp-storm: N clients start together, blksize 1468, lock-step ACKs, each compares")
    p("every block with the file; a client fails after 5 retransmissions 2 s apart go unanswered. Aggregate")
    p("= N × 100 KiB / the time until the last client finished. \"generator CPU\" is the generator's own CPU")
    p("time over the wall time: near 100%, the generator and not the server is the limit.")
    for n, s in storms.items():
        p("")
        p(f"{int(n):,} clients:")
        p("")
        p("| server | failures (worst round) | total time | aggregate | of the null server's | p99 per client | generator CPU |")
        p("|---|---|---|---|---|---|---|")
        for srv, v in s.items():
            gone = rows(f"exited.{srv}")
            if gone and int(gone[0][0]) <= int(n):
                srv = f"{srv} (exited during the {int(gone[0][0]):,}-client rounds)"
            p(f"| {srv} | {v['fail']:.0f} | {v['secs']:.2f} s | {v['mibs']:.1f} MiB/s | {v['mibs'] / s['null-tftp']['mibs']:.2f} | {v['p99']:.2f} s | {v['cpu']:.0f}% |")
        busy = [srv for srv, v in s.items() if v["cpu"] >= 90]
        if busy:
            p("")
            p(f"The generator used {max(v['cpu'] for v in s.values()):.0f}% of its core against {', '.join(busy)}: there, the figure is the generator's")
            p("limit, and that server's true one is higher.")

if boot:
    p("")
    p("## A simulated boot storm")
    p("")
    p(f"`bench/tools` loadgen boot-storm: {int(rows('boot.bootvol')[0][0]):,} nodes at once, each as a BIOS PXE ROM then iPXE: `undionly.kpxe`")
    p("over TFTP (blksize 1468, tsize, lock-step), then `/boot.ipxe` and its own `/boot/<mac>.ipxe` over one HTTP/1.1")
    p("connection; every byte is compared. bootvol alone (TFTP and HTTP on its one core) against the set-up")
    p("docs/dhcp.md leads to without bootvol: dnsmasq's TFTP and nginx (1 worker, files), both on that same core.")
    p("")
    p("| set-up | failures (worst round) | total time | p50 / p99 per node | generator CPU |")
    p("|---|---|---|---|---|")
    for k, v in boot.items():
        p(f"| {k} | {v['fail']:.0f} | {v['secs']:.2f} s | {v['p50']:.2f} / {v['p99']:.2f} s | {v['cpu']:.0f}% |")

if mem:
    p("")
    p("## Memory and start-up, 10,000 nodes")
    p("")
    p("From process start to the first 200 answer for the last node's MAC (every script is rendered before the")
    p(f"listener answers); the resident set then, and after {DURATION} s of 1,000 wrk connections.")
    p("")
    p("| bootvol | start to first answer | resident, started | resident, after load |")
    p("|---|---|---|---|")
    for k, (ms, a, b) in mem.items():
        p(f"| {k} | {ms:.0f} ms (rounds: {col(f'memory.{k}')}) | {a:.0f} MiB | {b:.0f} MiB |")

if nb:
    p("")
    p("## The neighbour check")
    p("")
    p(f"bootvol with `script_secrets = \"neighbour\"` (the default) on one end of a veth pair in a namespace;")
    p(f"{nb['neighbour']['clients']:.0f} clients in another, each on a macvlan link whose MAC is a node's port, each fetching its own")
    p(f"script over one keep-alive connection for {DURATION} s (`bench/tools` loadgen neighbour; an answer that is not")
    p("that node's script, CHAP and all, is a failure). The same set-up with `\"any\"` shows what the check costs.")
    p("")
    p("| script_secrets | requests/s | p99 | failures (worst round) | generator CPU |")
    p("|---|---|---|---|---|")
    for m, v in nb.items():
        p(f"| {m} | {v['rps']:.0f} | {v['p99']:.2f} ms | {v['fail']:.0f} | {v['cpu']:.0f}% |")

if have("auth.quiet"):
    p("")
    p("## Boot scripts while 8 clients send wrong API passwords")
    p("")
    p(f"`wrk -t1 -c16 -d{DURATION}s --latency` on per-MAC scripts (10,000 nodes), `[api] auth_strategy = \"http_basic\"`")
    p("with a cost-10 bcrypt htpasswd; meanwhile 8 `curl -u operator:wrong` loops from the same address hit")
    p("`/v1/nodes`. bcrypt runs on the blocking pool, and past 10 failures a minute an address gets 429")
    p(f"without bcrypt: in these rounds the loops got {int(med('auth.401'))} answers 401 and {int(med('auth.429'))} answers 429.")
    p("")
    p("| load | p50 | p99 |")
    p("|---|---|---|")
    p(f"| boot scripts alone | {med('auth.quiet', 0):.2f} ms | {med('auth.quiet', 1):.2f} ms |")
    p(f"| with 8 wrong-password clients | {med('auth.loud', 0):.2f} ms | {med('auth.loud', 1):.2f} ms |")
    p("")
    p(f"Rounds (p99): alone {col('auth.quiet', 1, '{:.2f}')}; with the clients {col('auth.loud', 1, '{:.2f}')}.")

if BASE:
    p("")
    p(f"## Against bootvol {BASE} (the baseline), in the same interleaved rounds")
    p("")
    p(f"| measure | bootvol {META['COMMIT']} | bootvol {BASE} |")
    p("|---|---|---|")
    for conns, h in http.items():
        if "baseline" in h:
            p(f"| per-MAC scripts, {conns} connections | {h['bootvol'][0]:.0f}/s, p99 {h['bootvol'][1]:.2f} ms | {h['baseline'][0]:.0f}/s, p99 {h['baseline'][1]:.2f} ms |")
    for key, (label, m, _, _) in tftp.items():
        if "baseline" in m:
            p(f"| TFTP 1 MiB, {label} | {m['bootvol']:.1f} ms | {m['baseline']:.1f} ms |")
    for n, s in storms.items():
        if "baseline" in s:
            p(f"| {int(n):,} TFTP clients: failures, aggregate | {s['bootvol']['fail']:.0f}, {s['bootvol']['mibs']:.1f} MiB/s | {s['baseline']['fail']:.0f}, {s['baseline']['mibs']:.1f} MiB/s |")
    if boot and "baseline" in boot:
        p(f"| boot storm: failures, total time | {boot['bootvol']['fail']:.0f}, {boot['bootvol']['secs']:.2f} s | {boot['baseline']['fail']:.0f}, {boot['baseline']['secs']:.2f} s |")
    if mem and "baseline" in mem:
        p(f"| start / resident after load | {mem['bootvol'][0]:.0f} ms / {mem['bootvol'][2]:.0f} MiB | {mem['baseline'][0]:.0f} ms / {mem['baseline'][2]:.0f} MiB |")

# Issue 16's row is measured by tests/it/cluster.rs, not by this run: its section is kept in
# bench/cluster-results.md and copied here as it is, saying which commit it is from.
cluster = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster-results.md")
if os.path.exists(cluster):
    p("")
    out.extend(open(cluster).read().rstrip("\n").split("\n"))

# Issue 28's row is written by bench/scale.sh (its own run: ~10 minutes, not pinned): kept in
# bench/scale-results.md and copied here as it is.
scale = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scale-results.md")
if os.path.exists(scale):
    p("")
    out.extend(open(scale).read().rstrip("\n").split("\n"))

print("\n".join(out))
