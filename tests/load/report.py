"""Tables for the load benchmarks (standard library only).

    python3 report.py batching DIR     bench_batching.sh's table
    python3 report.py http DIR PNG     bench_http.sh's table and plot

DIR holds `results`: one JSON object per wrk run, as lib.sh's load_wrk
writes them ({"tag", "conns", "rps", "p50_ms", "p99_ms", ...}).  When a
(tag, conns) pair ran more than once, each figure is the median of its
runs.  Runs tagged "warm" are ignored.
"""

import json
import os
import re
import statistics
import subprocess
import sys


def requests_by_key(dirname):
    total = {}
    with open(os.path.join(dirname, "results")) as f:
        for line in f:
            r = json.loads(line)
            key = (r["tag"], r["conns"])
            total[key] = total.get(key, 0) + r["requests"]
    return total


def cpu_per_request(dirname):
    """{(tag, conns): server CPU microseconds per request} from `cpu`
    lines "TAG CONNS TICKS CLK_TCK" written around each run."""
    path = os.path.join(dirname, "cpu")
    if not os.path.exists(path):
        return {}
    ticks = {}
    with open(path) as f:
        for line in f:
            tag, c, t, hz = line.split()
            key = (tag, int(c))
            ticks[key] = ticks.get(key, 0.0) + int(t) / float(hz)
    reqs = requests_by_key(dirname)
    return {k: 1e6 * v / reqs[k] for k, v in ticks.items() if reqs.get(k)}


def client_cpu_per_request(dirname):
    """{(tag, conns): wrk's own CPU microseconds per request}, from the
    cpu_s that report.lua adds to each run (absent from older results)."""
    cpu = {}
    with open(os.path.join(dirname, "results")) as f:
        for line in f:
            r = json.loads(line)
            if "cpu_s" in r:
                key = (r["tag"], r["conns"])
                cpu[key] = cpu.get(key, 0.0) + r["cpu_s"]
    reqs = requests_by_key(dirname)
    return {k: 1e6 * v / reqs[k] for k, v in cpu.items() if reqs.get(k)}


def load(dirname):
    runs = {}
    with open(os.path.join(dirname, "results")) as f:
        for line in f:
            r = json.loads(line)
            if r["tag"] != "warm":
                runs.setdefault((r["tag"], r["conns"]), []).append(r)
    table = {}
    for key, rs in runs.items():
        table[key] = {k: statistics.median(r[k] for r in rs)
                      for k in ("rps", "p50_ms", "p90_ms", "p99_ms", "max_ms")}
        table[key]["runs"] = len(rs)
        table[key]["errors"] = sum(r["non2xx"] + r["socket_errors"] for r in rs)
    return table


def metric_sum(path, name):
    total = 0.0
    with open(path) as f:
        for line in f:
            m = re.match(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
            if m:
                total += float(m.group(2))
    return total


def verdict(ok):
    return "met" if ok else "NOT met"


def batching(dirname):
    t = load(dirname)
    print("attnd batching on (--inline-us 0, default --max-batch) vs off "
          "(--inline-us 0 --max-batch 1), tiny JSON 1x1x16x16x32 with weights")
    print("%-6s %10s %10s %7s | %9s %9s | %9s %9s | %s" % (
        "conns", "on req/s", "off req/s", "on/off", "on p50", "off p50",
        "on p99", "off p99", "errors"))
    for c in (1, 64):
        on, off = t[("on", c)], t[("off", c)]
        print("%-6d %10.0f %10.0f %6.2fx | %7.3fms %7.3fms | %7.3fms %7.3fms | %d" % (
            c, on["rps"], off["rps"], on["rps"] / off["rps"], on["p50_ms"],
            off["p50_ms"], on["p99_ms"], off["p99_ms"], on["errors"] + off["errors"]))
    cpu = cpu_per_request(dirname)
    if cpu:
        print("attnd CPU time per request (user + system, all threads, over all rounds):")
        for c in (1, 64):
            on, off = cpu[("on", c)], cpu[("off", c)]
            print("  %2d conns: on %.0f us, off %.0f us: batching saves %.0f%%" % (
                c, on, off, 100 * (1 - on / off)))
    if ("inline", 64) in t:
        print("the default (a request this cheap runs on its HTTP thread, --inline-us):")
        for c in (1, 64):
            i, on = t[("inline", c)], t[("on", c)]
            extra = ""
            if cpu.get(("inline", c)):
                extra = ", CPU %.0f us per request" % cpu[("inline", c)]
            print("  %2d conns: %.0f req/s (%.2fx batched), p50 %.3f ms, p99 %.3f ms%s" % (
                c, i["rps"], i["rps"] / on["rps"], i["p50_ms"], i["p99_ms"], extra))
    before = os.path.join(dirname, "metrics_on_before")
    after = os.path.join(dirname, "metrics_on_after")
    n = metric_sum(after, "attnd_batch_size_sum") - metric_sum(before, "attnd_batch_size_sum")
    b = metric_sum(after, "attnd_batch_size_count") - metric_sum(before, "attnd_batch_size_count")
    if b:
        print("mean batch size with batching on: %.2f (%d requests in %d batches)" % (n / b, n, b))
    r64 = t[("on", 64)]["rps"] / t[("off", 64)]["rps"]
    d1 = t[("on", 1)]["p50_ms"] - t[("off", 1)]["p50_ms"]
    print("target: 64 conns on/off >= 1.20x: %.2fx, %s" % (r64, verdict(r64 >= 1.2)))
    print("target: 1 conn adds no latency: p50 on - off = %+.3f ms (p99 %+.3f ms)" % (
        d1, t[("on", 1)]["p99_ms"] - t[("off", 1)]["p99_ms"]))
    errors = sum(v["errors"] for v in t.values())
    if errors:
        print("ERROR: %d requests failed" % errors)
        return 1
    return 0


V2_LINE = 0.6  # the v2 binary target, a share of the in-process core's rate

SERIES = [  # (tag, label) in table order
    ("nginx_static", "nginx static 20 B"),
    ("attnd_tiny", "attnd tiny JSON"),
    ("fastapi_tiny", "FastAPI tiny JSON"),
    ("attnd_small", "attnd small JSON"),
    ("fastapi_small", "FastAPI small JSON"),
    ("attnd_v2bin", "attnd v2 binary small"),
]


def plot(t, conns, dirname, png, core_rps):
    """Throughput and p99 against connections, one line per series; the
    in-process core rate of the v2 shape as a dashed reference line."""
    files = []
    for tag, label in SERIES:
        path = os.path.join(dirname, tag + ".dat")
        with open(path, "w") as f:
            for c in conns:
                if (tag, c) in t:
                    f.write("%d %g %g\n" % (c, t[(tag, c)]["rps"], t[(tag, c)]["p99_ms"]))
        files.append((path, label))
    script = [
        'set terminal pngcairo size 1400,560 font "sans,11"' if has_cairo() else
        'set terminal png size 1400,560',
        'set output "%s"' % png,
        "set multiplot layout 1,2 title \"attnd vs nginx (static) and FastAPI+numpy, "
        "wrk on loopback, %d cores, same run\"" % os.cpu_count(),
        "set logscale xy", "set xtics (%s)" % ", ".join(str(c) for c in conns),
        "set xrange [0.8:%d]" % (conns[-1] * 1.25), "set grid", "set key outside bottom center horizontal maxrows 2",
        "set xlabel 'connections'", "set ylabel 'requests/s'",
        "set title 'throughput'",
        "plot " + ", ".join("'%s' using 1:2 with linespoints lw 2 title '%s'" % f for f in files)
        + ", %g with lines dt 2 lw 2 lc rgb 'gray40' title 'core in-process, v2 shape'" % core_rps,
        "set ylabel 'p99 latency (ms)'", "set title 'p99 latency'",
        "plot " + ", ".join("'%s' using 1:3 with linespoints lw 2 title '%s'" % f for f in files),
        "unset multiplot",
    ]
    gp = os.path.join(dirname, "plot.gp")
    with open(gp, "w") as f:
        f.write("\n".join(script) + "\n")
    subprocess.run(["gnuplot", gp], check=True)


def cpu_budget(dirname, conns, core_rps):
    """attnd's and wrk's CPU per request, and what the v2 line leaves them:
    wrk runs on the same cores, so 60 % of the in-process rate allows
    cores / (0.6 x rate) of CPU per request for the two together, and the
    core's own share of that is cores / rate."""
    server, client = cpu_per_request(dirname), client_cpu_per_request(dirname)
    if not server or not client:
        return
    print("CPU time per request, us (user + system over the runs; attnd all threads, "
          "wrk its own):")
    print("  %-24s" % "" + "".join("%18s" % ("c=%d attnd / wrk" % c) for c in conns))
    for tag, label in SERIES:
        if tag.startswith("attnd_"):
            print("  %-24s" % label + "".join(
                "%18s" % ("%.0f / %.0f" % (server[(tag, c)], client[(tag, c)])
                          if (tag, c) in server and (tag, c) in client else "-")
                for c in conns))
    cores = os.cpu_count()
    budget = 1e6 * cores / (V2_LINE * core_rps)
    share = 1e6 * cores / core_rps
    c = conns[-1]
    if ("attnd_v2bin", c) in client:
        w = client[("attnd_v2bin", c)]
        print("v2 binary at %.0f%% of the in-process core is %.0f req/s: %.0f us of the %d "
              "cores per request for attnd and wrk together"
              % (100 * V2_LINE, V2_LINE * core_rps, budget, cores))
        print("  at c=%d wrk took %.0f us, and the core's own share is %.0f us (%d threads "
              "at %.0f calls/s): %.0f us, %s" % (
                  c, w, share, cores, core_rps, w + share,
                  "within that" if w + share <= budget else
                  "over that before attnd reads a byte"))


def has_cairo():
    p = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True)
    return "pngcairo" in p.stdout + p.stderr


def http(dirname, png):
    t = load(dirname)
    conns = sorted({c for _, c in t})
    with open(os.path.join(dirname, "core")) as f:
        cores = [json.loads(line) for line in f if line.strip()]
    core = {k: statistics.median(c[k] for c in cores) for k in ("calls_per_s", "gflops")}
    rounds = len(cores)
    print("HTTP benchmark, one run%s: requests/s, p50 and p99 latency (ms) by "
          "connections" % (", medians of %d rounds" % rounds if rounds > 1 else ""))
    head = "%-22s" % "" + "".join("| %9s %7s %7s " % ("c=%d req/s" % c, "p50", "p99") for c in conns)
    print(head)
    for tag, label in SERIES:
        row = "%-22s" % label
        for c in conns:
            v = t.get((tag, c))
            row += "| %9.0f %7.2f %7.2f " % (v["rps"], v["p50_ms"], v["p99_ms"]) if v else "| %25s " % "-"
        print(row)
    print("in-process core, 1x8x128x128x64 without weights, %d threads: %.1f calls/s (%.1f GFLOP/s)"
          % (os.cpu_count(), core["calls_per_s"], core["gflops"]))
    def rps(tag, c):
        return t[(tag, c)]["rps"]
    checks = [
        ("attnd tiny / nginx static", "attnd_tiny", "nginx_static", 0.35, "%.1f%%", 100),
        ("attnd tiny / FastAPI tiny", "attnd_tiny", "fastapi_tiny", 15, "%.1fx", 1),
        ("attnd small / FastAPI small", "attnd_small", "fastapi_small", 20, "%.1fx", 1),
    ]
    print("ratios by connections (target at 64):")
    print("  %-40s" % "" + "".join("%9s" % ("c=%d" % c) for c in conns) + "   target")
    met = True
    for name, a, b, target, fmt, scale in checks:
        vals = [rps(a, c) / rps(b, c) for c in conns]
        ok = vals[-1] >= target
        met &= ok
        print("  %-40s" % name + "".join("%9s" % (fmt % (v * scale)) for v in vals)
              + "   >= %s %s" % (fmt % (target * scale), verdict(ok)))
    vals = [rps("attnd_v2bin", c) / core["calls_per_s"] for c in conns]
    print("  %-40s" % "attnd v2 binary small / in-process core"
          + "".join("%9s" % ("%.1f%%" % (v * 100)) for v in vals)
          + "   >= %.1f%% %s" % (100 * V2_LINE, verdict(vals[-1] >= V2_LINE)))
    p99 = [t[("attnd_tiny", c)]["p99_ms"] for c in conns]
    print("  %-40s" % "attnd tiny p99 (ms)" + "".join("%9.2f" % v for v in p99)
          + "   < 5 ms %s" % verdict(p99[-1] < 5))
    cpu_budget(dirname, conns, core["calls_per_s"])
    plot(t, conns, dirname, png, core["calls_per_s"])
    print("plot: %s" % png)
    errors = {k: v["errors"] for k, v in t.items() if v["errors"]}
    if errors:
        print("ERROR: failed requests: %s" % errors)
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "batching":
        sys.exit(batching(sys.argv[2]))
    sys.exit(http(sys.argv[2], sys.argv[3]))
