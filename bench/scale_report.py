#!/usr/bin/env python3
"""The scale section of BENCHMARKS.md from one bench/scale.sh run: scale_report.py WORKDIR > OUT

WORKDIR/res/all holds "N KEY VALUE" lines, WORKDIR/meta.env the machine. Prints the section,
draws PLOT (gnuplot) and puts the section into BENCHMARKS (between its heading and the next
"## " heading, or at the end) so the two agree.
"""
import os
import re
import subprocess
import sys

WORK = sys.argv[1]
ENV = os.environ
META = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(WORK, "meta.env")) if "=" in line)
HEADING = "## A hundred thousand nodes (issue 28)"

values = {}  # key -> {n: value}
for line in open(os.path.join(WORK, "res", "all")):
    n, key, value = line.split()
    values.setdefault(key, {})[int(n)] = float(value)  # patch_s: the last of the three kept
sizes = sorted({n for v in values.values() for n in v})

# key, label, unit, how it may grow ("linear" or "flat"), goal at the largest size (or None)
OPS = [
    ("apply_s", "`bootvol apply` of the whole inventory", "s", "linear", None),
    ("apply_lines", "`apply` output, lines", "", "flat", None),
    ("apply_peak_mib", "`apply` peak memory", "MiB", "linear", None),
    ("start_s", "`serve`: start to the last node's script", "s", "linear", 1.0),
    ("rss_start_mib", "resident memory after start", "MiB", "linear", 150),
    ("api_nodes_s", "`GET /v1/nodes` (no limit: one page of `max_limit`)", "ms", "flat", 0.050),
    ("api_nodes_bytes", "`GET /v1/nodes` answer", "KB", "flat", None),
    ("api_limit1000_s", "`GET /v1/nodes?limit=1000`", "ms", "flat", 0.050),
    ("api_deep_page_s", "`GET /v1/nodes?limit=1000&marker=` (middle of the fleet)", "ms", "flat", 0.050),
    ("api_detail_name_s", "`GET /v1/nodes/detail?limit=100&sort_key=name`", "ms", "flat", 0.050),
    ("api_port_address_s", "`GET /v1/ports?address=...`", "ms", "flat", 0.010),
    ("admin_first_s", "admin list, first page", "ms", "flat", 0.200),
    ("admin_deep_s", "admin list, page N/100", "ms", "flat", 0.200),
    ("admin_mac_s", "admin list, a MAC search", "ms", "flat", 0.200),
    ("admin_problems_s", "admin list, only problems", "ms", "flat", 0.200),
    ("rss_lists_mib", "resident memory after those lists", "MiB", "linear", None),
    ("patch_s", "one PATCH of a node's name (its answer)", "ms", "flat", None),
    ("change_served_s", "that PATCH to the new script served (median of 3)", "ms", "flat", 0.200),
    ("export_s", "`bootvol export`", "s", "linear", None),
    ("export_peak_mib", "`bootvol export` peak memory", "MiB", "flat", None),
]


def shown(key, unit, v):
    if v is None:
        return "–"
    if unit == "ms":
        return f"{v * 1000:.1f} ms"
    if unit == "KB":
        return f"{v / 1000:,.0f} KB"
    if unit == "s":
        return f"{v:.2f} s"
    if unit == "MiB":
        return f"{v:.0f} MiB"
    return f"{v:,.0f}"


def goal_text(unit, goal):
    return shown("", unit, goal) if unit != "s" or goal >= 0.1 else f"{goal * 1000:.0f} ms"


out = []
p = out.append
p(HEADING)
p("")
p(f"Written by `bench/scale.sh` on {META.get('DATE')}, commit {META.get('COMMIT')}: {META.get('CORES')} cores "
  f"({META.get('CPU')}), kernel {META.get('KERNEL')}, release build, SQLite (libsqlite3-sys {META.get('SQLITE')}). "
  "The same inventory at each size: deployed iSCSI nodes with CHAP, one port, one connector, one target each "
  "(bench/run.sh's fixture). bootvol unpinned (both cores), one curl client at a time; each request the "
  f"median of {ENV.get('REPEAT', '5')}, apply, start and export once per size. Growth is the cost at the "
  f"largest size over the cost at the smallest ({sizes[-1] // sizes[0]:,}× the nodes); \"flat\" rows may not grow "
  "with the fleet, \"linear\" rows may grow at most as it does.")
p("")
p("| operation | " + " | ".join(f"{n:,} nodes" for n in sizes) + " | growth | allowed | goal at "
  f"{sizes[-1]:,} | verdict |")
p("|---|" + "---|" * (len(sizes) + 4))
verdicts = []
for key, label, unit, growth, goal in OPS:
    v = values.get(key, {})
    first, last = v.get(sizes[0]), v.get(sizes[-1])
    factor = (last / first) if first and last is not None else None
    allowed = (sizes[-1] / sizes[0]) * 1.2 if growth == "linear" else 2.0
    grows_ok = factor is not None and factor <= allowed
    goal_ok = goal is None or (last is not None and last <= goal)
    verdict = "met" if grows_ok and goal_ok else "**not met**"
    if not grows_ok and goal_ok and goal is not None:
        verdict = "goal met, grows"
    verdicts.append((label, verdict))
    p(f"| {label} | " + " | ".join(shown(key, unit, v.get(n)) for n in sizes)
      + f" | {'–' if factor is None else f'{factor:.1f}×'} | {growth} | "
      + ("–" if goal is None else goal_text(unit, goal)) + f" | {verdict} |")
p("")
p("\"flat\" allows 2× over the whole range (noise, and a B-tree one level deeper); \"linear\" allows "
  "1.2× the growth of the node count. The plot (seconds against node count, both axes logarithmic; a "
  "line parallel to the diagonal grows linearly, a level one stays flat):")
p("")
plot = os.path.relpath(ENV["PLOT"], os.path.dirname(os.path.abspath(ENV.get("BENCHMARKS", "BENCHMARKS.md"))))
p(f"![cost against node count]({plot})")
section = "\n".join(out) + "\n"
print(section, end="")

# -- the plot: seconds against nodes, one line per timed operation ----------------------------
timed = [(k, l, u) for k, l, u, _, _ in OPS if u in ("s", "ms") and k in values]
data = os.path.join(WORK, "plot.dat")
with open(data, "w") as f:
    for n in sizes:
        # Every line in seconds, the ms rows divided by 1000.
        f.write(f"{n} " + " ".join(
            str(values[k][n] / (1000 if u == "ms" else 1)) if n in values[k] else "NaN"
            for k, _, u in timed) + "\n")
titles = [re.sub("[`']", "", label)[:60] for _, label, _ in timed]
lines = ", ".join(f"'{data}' using 1:{i + 2} with linespoints title '{t}'" for i, t in enumerate(titles))
script = f"""set terminal pngcairo size 1100,700 font ',9'
set output '{ENV['PLOT']}'
set logscale xy
set xlabel 'nodes'
set ylabel 'seconds'
set key outside right
set grid
plot {lines}
"""
subprocess.run(["gnuplot"], input=script, text=True, check=True)

# -- BENCHMARKS.md: this section replaced (or added) -------------------------------------------
bench = ENV.get("BENCHMARKS")
if bench and os.path.exists(bench):
    text = open(bench).read()
    start = text.find(HEADING)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    open(bench, "w").write(text)
