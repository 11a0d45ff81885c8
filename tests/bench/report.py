"""Prints the table of make bench from the JSON lines of its pieces.

Usage: python3 tests/bench/report.py FILE.jsonl...

Also prints the core's native GEMM rate on the ceiling's product and
which GEMM the core ran (the "gemm" line of bench_core.c), and a column
with each workload's rate as a share of that native rate times the
threads.

Targets (design figures for the core):
  - (4,16,512,512,64) and (1,16,2048,2048,64), with and without weights,
    on the workers: at least 70% of the ceiling (one-thread sgemm
    512x512x64 GFLOP/s times the workers, measured in the same run) and
    at least 3x the numpy peer;
  - (1,1,16,16,32): at least 10x the numpy peer per call;
  - no weights at Lq = Lk = 16384, D = 64: peak memory beyond inputs and
    outputs under 64 MiB, and at most 1.1x the weights path per FLOP.
And for the Python client (tests/bench/client_bench.py): attention() with
numpy inputs at most 1.3x infer() with binary tensors, wall time, for
(32,8,64,64,64) without weights and (1,8,2048,2048,64) with weights.
And the cost estimate (attnd-bench estimate): 40-150 estimated GFLOP per
CPU-second on one core for every problem it times (docs/api.md, "Cost
limit").
Needs no numpy.
"""
import json
import sys

TARGET_CEIL, TARGET_NUMPY, TARGET_TINY = 0.70, 3.0, 10.0
TARGET_MEM_MIB, TARGET_NW_COST = 64.0, 1.1
TARGET_SHAPES = ("medium", "large")
TARGET_CLIENT = 1.3


def load(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def mark(ok):
    return "ok" if ok else "BELOW TARGET"


def shape_label(r):
    return "{shape} ({B},{H},{Lq},{Lk},{D}){c}".format(
        c=" causal" if r["causal"] else "", **r)


def core_table(core, ceiling, numpy, numpy1, native, out):
    workers = ceiling["workers"]
    out.append("| workload (B,H,Lq,Lk,D) | path | threads | time | GFLOP/s |"
               " of ceiling | vs numpy | target | of ceiling, CPU time |"
               " vs numpy, CPU time | of native GEMM |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    checks, cpu_checks = [], []
    for r in core:
        ceil = ceiling["gflops"] * r["threads"]
        frac = r["gflops"] / ceil
        np_row = numpy.get(r["shape"])
        ratio = np_row["sec"] / r["sec"] if np_row else None
        # per worker-CPU-second against the ceiling's: blind to time that
        # other processes took from the workers
        cpu_frac = (r["gflops"] * r["sec"] / r["cpu_sec"] /
                    ceiling["cpu_gflops"])
        target = ""
        if r["shape"] in TARGET_SHAPES and r["threads"] == workers:
            ok = frac >= TARGET_CEIL and (ratio is None or
                                          ratio >= TARGET_NUMPY)
            target = ">= 70%% and >= 3x: %s" % mark(ok)
            checks.append(ok)
            cpu_checks.append(cpu_frac >= TARGET_CEIL)
        elif r["shape"] == "tiny" and r["threads"] == 1:
            ok = ratio is not None and ratio >= TARGET_TINY
            target = ">= 10x per call: %s" % mark(ok)
            checks.append(ok)
        t = r["sec"]
        tstr = "%.1f us" % (t * 1e6) if t < 1e-3 else "%.2f ms" % (t * 1e3)
        np1 = numpy1.get(r["shape"])
        cpu_ratio = np1["cpu_sec"] / r["cpu_sec"] if np1 else None
        # the whole attention against the core's own GEMM on the
        # ceiling's product, times the threads
        of_native = ("%.0f%%" % (100 * r["gflops"] /
                                 (native["gflops"] * r["threads"]))
                     if native and native.get("gflops") else "-")
        out.append("| %s | %s | %d | %s | %.1f | %.0f%% | %s | %s | %.0f%% |"
                   " %s | %s |"
                   % (shape_label(r),
                      "weights" if r["weights"] else "no weights",
                      r["threads"], tstr, r["gflops"], 100 * frac,
                      "%.1fx" % ratio if ratio else "-", target,
                      100 * cpu_frac,
                      "%.1fx" % cpu_ratio if cpu_ratio else "-",
                      of_native))
    if cpu_checks:
        out.append("")
        out.append("- in CPU time, >= 70%% of the ceiling on the workers: "
                   "%d of %d target rows" % (sum(cpu_checks),
                                            len(cpu_checks)))
    return checks


def xl_lines(core, mem, workers, out):
    checks = []
    xl = {(r["weights"], r["threads"]): r for r in core if r["shape"] == "xl"}
    for threads in sorted({k[1] for k in xl}):
        nw, w = xl.get((0, threads)), xl.get((1, threads))
        if nw and w:
            cost = nw["sec"] / w["sec"]
            ok = cost <= TARGET_NW_COST
            if threads == workers:
                checks.append(ok)
            out.append("- 16384 x 16384, %d thread(s): no-weights path costs "
                       "%.2fx the weights path per FLOP (target <= 1.1x: %s)"
                       % (threads, cost, mark(ok)))
    for m in mem:
        ok = m["rc"] == 0 and m["peak_beyond_io_mib"] < TARGET_MEM_MIB
        checks.append(ok)
        out.append("- no weights at %d x %d, D %d, %d worker(s): peak "
                   "resident memory %.1f MiB beyond the %.0f MiB of inputs "
                   "and outputs (scratch %.0f KiB per worker; target < 64 "
                   "MiB: %s)" % (m["L"], m["L"], m["D"], m["threads"],
                                 m["peak_beyond_io_mib"],
                                 m["inputs_outputs_mib"],
                                 m["scratch_per_thread_kib"], mark(ok)))
    return checks


TARGET_VARIANT_COST = 1.15


def variant_lines(variants, out):
    """Sinks + softcap + ALiBi against plain, packed against square."""
    checks = []
    v = {r["case"].split(" 1x")[0]: r for r in variants}
    plain = v.get("plain")
    if not plain:
        return checks
    out.append("")
    out.append("variants, no weights, one thread, best CPU seconds per call:")
    for name, r in sorted(v.items()):
        out.append("- %s: %.2f ms" % (r["case"], r["cpu_sec"] * 1e3))
    extra = v.get("sinks+softcap+alibi")
    if extra:
        cost = extra["cpu_sec"] / plain["cpu_sec"]
        ok = cost <= TARGET_VARIANT_COST
        checks.append(ok)
        out.append("- sinks + softcap + ALiBi cost %.2fx plain at (1, 8, "
                   "1024, 1024, 64) (target <= 1.15x: %s)"
                   % (cost, mark(ok)))
    worst = v.get("sinks+softcap+alibi, softcap 0.1 (most scores past it),")
    if worst:
        out.append("- with most scores past the cap: %.2fx plain"
                   % (worst["cpu_sec"] / plain["cpu_sec"]))
    packed = v.get("packed 8 x 512 in")
    square, one = v.get("square"), v.get("one sequence")
    if packed and one:
        ratio = packed["cpu_sec"] / (8 * one["cpu_sec"])
        ok = ratio <= 1.25
        checks.append(ok)
        out.append("- 8 sequences of 512 packed into 4096 cost %.2fx the 8 "
                   "run apart (target <= 1.25x: %s)%s" % (
                       ratio, mark(ok),
                       "; the 4096 square costs %.1fx the packed batch"
                       % (square["cpu_sec"] / packed["cpu_sec"])
                       if square else ""))
    return checks


def precision_lines(rows, out):
    """BF16 mode against float32, one thread, no weights: the ratio of
    CPU seconds per call against its target, for what auto runs (AMX
    where the CPU has it) and, where the CPU has AVX512-BF16, for
    VDPBF16PS and for the float32 kernels on rounded operands, each
    forced."""
    checks = []
    if not rows:
        return checks
    out.append("")
    out.append("BF16 mode vs float32, no weights, one thread, best CPU seconds "
               "per call (kernels: fp32 %s, bf16 %s):"
               % (rows[0]["fp32_kernel"], rows[0]["bf16_kernel"]))
    for r in rows:
        ok = r["ratio"] >= r["target"]
        checks.append(ok)
        line = ("- (%d,%d,%d,%d,%d): float32 %.3f ms, bf16 %.3f ms, %.2fx "
                "(target >= %.1fx: %s)" % (
                    r["B"], r["H"], r["Lq"], r["Lk"], r["D"],
                    r["fp32_cpu_sec"] * 1e3, r["bf16_cpu_sec"] * 1e3,
                    r["ratio"], r["target"], mark(ok)))
        if r.get("vdpbf16ps_cpu_sec"):
            line += "; VDPBF16PS forced %.3f ms, %.2fx" % (
                r["vdpbf16ps_cpu_sec"] * 1e3, r["vdpbf16ps_ratio"])
        if r.get("rounded_fp32_cpu_sec"):
            line += "; float32 kernels on rounded operands %.3f ms, %.2fx" % (
                r["rounded_fp32_cpu_sec"] * 1e3, r["rounded_fp32_ratio"])
        out.append(line)
    return checks


def peak_lines(rows, out):
    """The float32 core's share of one core's measured FMA peak, one
    thread, no weights: the median round's, each round against the peak
    measured around it.  FLOPs count 4 D per allowed (query, key) pair,
    so the masked shapes say how much of their masked work is skipped."""
    checks = []
    if not rows:
        return checks
    out.append("")
    out.append("float32 core against the FMA peak of one core (%d-lane FMA "
               "loop, %.0f GFLOP/s), no weights, one thread, kernels %s:"
               % (rows[0]["lanes"], rows[0]["peak_gflops"],
                  rows[0]["kernel"]))
    for r in rows:
        mask = (", causal" if r["causal"] else "") + (
            ", window %d" % r["window"] if r["window"] else "")
        line = "- (%d,%d,%d,%d,%d)%s: %.3f ms, %.1f %% of the peak" % (
            r["B"], r["H"], r["Lq"], r["Lk"], r["D"], mask,
            r["cpu_sec"] * 1e3, 100 * r["of_peak"])
        if r["target"]:
            ok = r["of_peak"] >= r["target"]
            checks.append(ok)
            line += " (target >= %.0f %%: %s)" % (100 * r["target"], mark(ok))
        out.append(line)
    return checks


def split_lines(rows, out):
    """One large request on one worker against two, split as the server
    splits it."""
    checks = []
    for r in rows:
        ok = r["ratio"] >= r["target"]
        checks.append(ok)
        out.append("")
        out.append("- (%d,%d,%d,%d,%d) no weights, one worker %.1f ms, two "
                   "%.1f ms: %.2fx (target >= %.2fx: %s); CPU per worker "
                   "%s ms, tasks %s; two workers' CPU %.2fx one's; one "
                   "worker's CPU over the busier worker's %.2fx"
                   % (r["B"], r["H"], r["Lq"], r["Lk"], r["D"],
                      r["one_sec"] * 1e3, r["two_sec"] * 1e3, r["ratio"],
                      r["target"], mark(ok),
                      " + ".join("%.1f" % (c * 1e3) for c in r["cpu_sec"]),
                      " + ".join(str(t) for t in r["tasks"]),
                      r["cpu_ratio"], r["busier_ratio"]))
    return checks


def estimate_lines(rows, out):
    """The cost estimate (attn_cost_flops) against the CPU time it stands
    for, one thread: estimated GFLOP per CPU-second, against the band
    docs/api.md promises ("Cost limit")."""
    checks = []
    if not rows:
        return checks
    out.append("")
    out.append("cost estimate against CPU time, one thread (attnd-bench "
               "estimate): estimated GFLOP per CPU-second")
    out.append("")
    out.append("| scoring | (B,H,Lq,Lk,D) | Hd | packed | weights | estimate |"
               " CPU | GFLOP per CPU-s | band |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["band"]
        ok = lo <= r["gflop_per_cpu_sec"] <= hi
        checks.append(ok)
        out.append("| %s | (%d,%d,%d,%d,%d) | %s | %s | %s | %.3g GFLOP | "
                   "%.3g s | %.1f | %d-%d: %s |" % (
                       r["scoring"], r["B"], r["H"], r["Lq"], r["Lk"], r["D"],
                       r["Hd"] or "-",
                       "%d x %d" % (r["seqs"], r["Lq"] // r["seqs"])
                       if r["seqs"] else "-",
                       "yes" if r["weights"] else "no", r["est_gflop"],
                       r["cpu_sec"], r["gflop_per_cpu_sec"], lo, hi,
                       "ok" if ok else "OUTSIDE THE BAND"))
    return checks


def client_table(rows, out):
    """attention() and infer(), binary and JSON, per problem; the ratios
    against infer() with binary tensors on the same problem."""
    checks = []
    out.append("Python client, per call (best of the rounds: wall time, and "
               "the client process's CPU time, its threads included):")
    out.append("")
    out.append("| problem (B,H,Lq,Lk,D) | call | wire | wall | client CPU |"
               " wall vs infer() binary | CPU vs infer() binary | target |")
    out.append("|---|---|---|---|---|---|---|---|")
    base = {r["problem"]: r for r in rows
            if r["call"] == "infer()" and r["wire"] == "v2 binary"}
    for r in rows:
        b = base.get(r["problem"])
        ratio = r["sec"] / b["sec"] if b else None
        cpu_ratio = r["cpu_sec"] / b["cpu_sec"] if b and b["cpu_sec"] else None
        target = ""
        if r["call"] == "attention()" and ratio is not None:
            ok = ratio <= TARGET_CLIENT
            checks.append(ok)
            target = "<= 1.3x: %s" % mark(ok)
        out.append("| %s (%s)%s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["problem"], ",".join(map(str, r["shape"])),
            " weights" if r["weights"] else "", r["call"], r["wire"],
            "%.1f ms" % (r["sec"] * 1e3), "%.1f ms" % (r["cpu_sec"] * 1e3),
            "%.2fx" % ratio if ratio else "-",
            "%.2fx" % cpu_ratio if cpu_ratio else "-", target))
    return checks


def main():
    rows = load(sys.argv[1:])
    by_kind = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append(r)
    out = []
    for e in by_kind.get("env", []):
        out.append("machine: %s, %d cores, %d workers; load average %s; "
                   "OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s (attnd ran "
                   "with these)" % (e["cpu"], e["nproc"], e["workers"],
                                    e["loadavg"], e["OPENBLAS_CORETYPE"],
                                    e["OPENBLAS_L2_SIZE"]))
    for e in by_kind.get("numpy_env", []):
        b = e["blas"]
        out.append("numpy %s peer: %s, OpenBLAS kernel %s, %s threads "
                   "(run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE "
                   "unset)" % (e["numpy"], b["library"], b["corename"],
                               b["threads"]))
    checks = []
    ceiling = (by_kind.get("ceiling") or [None])[0]
    native = (by_kind.get("gemm") or [None])[0]
    if ceiling:
        out.append("ceiling: one-thread sgemm 512x512x64 %.1f GFLOP/s, x %d "
                   "workers = %.1f GFLOP/s (best over the run; %.1f GFLOP/s "
                   "per CPU-second; OpenBLAS kernel %s)" % (
                       ceiling["gflops"], ceiling["workers"],
                       ceiling["gflops"] * ceiling["workers"],
                       ceiling["cpu_gflops"],
                       ceiling.get("corename", "?")))
    if native:
        rate = native.get("gflops")
        out.append("native GEMM: the core's own kernel on the same product, "
                   "one thread: %s; the core ran the %s GEMM (its automatic "
                   "choice here: %s)" % (
                       "%.1f GFLOP/s = %.2fx the ceiling" % (
                           rate, rate / ceiling["gflops"])
                       if rate and ceiling else "not available on this CPU",
                       native["used"], native["auto"]))
    if ceiling:
        out.append("time: best wall time per call; GFLOP/s count "
                   "4*B*H*Lq*Lk*D (dense, also for causal); vs numpy: "
                   "numpy's wall time (its OpenBLAS on every core) over "
                   "attnd's.  The CPU-time columns divide by CPU seconds "
                   "instead (attnd's workers summed; numpy on one BLAS "
                   "thread), which other processes on the machine do not "
                   "inflate.")
        out.append("")
        numpy = {r["shape"]: r for r in by_kind.get("numpy", [])
                 if r["blas_threads"] != 1 or ceiling["workers"] == 1}
        numpy1 = {r["shape"]: r for r in by_kind.get("numpy", [])
                  if r["blas_threads"] == 1}
        core = [r for r in by_kind.get("core", []) if r["shape"] != "xl"]
        checks += core_table(core, ceiling, numpy, numpy1, native, out)
        out.append("")
        checks += xl_lines(by_kind.get("core", []), by_kind.get("mem", []),
                           ceiling["workers"], out)
    checks += variant_lines(by_kind.get("variant", []), out)
    checks += precision_lines(by_kind.get("precision", []), out)
    checks += peak_lines(by_kind.get("of_peak", []), out)
    checks += split_lines(by_kind.get("split", []), out)
    checks += estimate_lines(by_kind.get("estimate_rate", []), out)
    for r in by_kind.get("checks", []):
        out.append("cost estimate before running, %s (%d,%d,%d,%d,%d): %.0f ns a "
                   "request, %.3f %% of its %.1f us compute on one thread"
                   % (r["shape"], r["B"], r["H"], r["L"], r["L"], r["D"],
                      r["cost_ns"], 100 * r["share"], r["compute_ns"] / 1e3))
    if by_kind.get("client"):
        out.append("")
        checks += client_table(by_kind["client"], out)
    known = {"env", "numpy_env", "ceiling", "gemm", "core", "numpy", "mem",
             "variant", "checks", "client", "precision", "of_peak", "split",
             "estimate_rate"}
    for kind in sorted(set(by_kind) - known):
        out.append("(%d %s lines not tabulated)" % (len(by_kind[kind]), kind))
    out.append("")
    out.append("targets: %d of %d met" % (sum(checks), len(checks)))
    print("\n".join(out))


if __name__ == "__main__":
    main()
