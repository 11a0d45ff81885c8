#!/usr/bin/python3
"""attnd's core beside the attention a user would pick instead (make
bench-peers; tests/bench/peers.sh runs it in a Debian 13 chroot with
Debian's python3-onnxruntime, python3-onnx and python3-torch).

On each shape (B, H, Lq, Lk, D), no mask, no weights, scale 1/sqrt(D):

  attnd     build/<suite>/attnd-bench peers (bench_modes.c), float32 mode
            and BF16 mode (q, k, v given as BF16)
  ORT       ONNX Runtime's com.microsoft MultiHeadAttention, a one-node
            model, inputs (B, L, H*D) and output bound once (IO binding),
            CPUExecutionProvider; float32, and BF16 where ORT has a CPU
            kernel for it (it says when not)
  PyTorch   torch.nn.functional.scaled_dot_product_attention on (B, H, L,
            D) tensors, float32 and bfloat16 (its call's Python overhead,
            a few microseconds, included)

One thread each: OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 (set by
peers.sh), torch.set_num_threads(1), ORT intra_op_num_threads=1.  Every
figure is CPU time (the whole process's, time.process_time here, the
worker thread's in attnd-bench), the least per call over several runs
after a warm-up; calls under 2 ms are timed in batches.  All of them see
the same q, k and v (standard normal); each answer's largest absolute
difference to attnd's in the same precision, and to a float64 reference,
is printed, so that the ratios compare the same computation.

Prints a Markdown table (ratios peer / attnd: above 1, attnd is faster)
and writes JSON lines to --out/peers.jsonl.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

# (B, H, L, D): Lq = Lk = L
SHAPES = [(1, 16, 2048, 64), (1, 16, 2048, 128), (1, 8, 128, 64)]
# the target: ORT float32 time / attnd float32 time on D = 64
ORT_TARGET = 1.3


def cpu_best(fn, min_runs=8, budget_s=2.0):
    """Least CPU seconds per call of fn after one warm-up call: single
    calls, or batches lasting 2 ms or more for shorter calls; at least
    min_runs samples (3 for calls over a second) and about budget_s
    seconds of them."""
    c0 = time.process_time()
    fn()
    first = time.process_time() - c0
    batch = 1 if first >= 2e-3 else int(2e-3 / max(first, 1e-6)) + 1
    runs = 3 if first > 1.0 else min_runs
    best, spent, n = float("inf"), 0.0, 0
    while n < runs or spent < budget_s:
        c0 = time.process_time()
        for _ in range(batch):
            fn()
        c = time.process_time() - c0
        best, spent, n = min(best, c / batch), spent + c, n + 1
        if first > 1.0 and n >= runs:
            break
    return best


def reference(q, k, v):
    """float64 attention, (B, H, L, D), one head at a time."""
    out = np.empty(q.shape, dtype=np.float64)
    scale = 1.0 / np.sqrt(q.shape[-1])
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h].astype(np.float64) @ k[b, h].astype(np.float64).T) * scale
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[b, h] = s @ v[b, h].astype(np.float64)
    return out


def run_core(core, q, k, v, tmp):
    """attnd-bench peers on q, k, v: its JSON line and both outputs."""
    b, h, l, d = q.shape
    qkv, out = os.path.join(tmp, "qkv.f32"), os.path.join(tmp, "out.f32")
    np.concatenate([q.ravel(), k.ravel(), v.ravel()]).tofile(qkv)
    res = subprocess.run([core, "peers", str(b), str(h), str(l), str(d), qkv, out],
                         check=True, stdout=subprocess.PIPE, text=True)
    line = json.loads(res.stdout.strip().splitlines()[-1])
    both = np.fromfile(out, dtype=np.float32).reshape(2, b, h, l, d)
    return line, both[0], both[1]


def ort_model(b, h, l, d, elem):
    """A one-node MultiHeadAttention model, inputs (B, L, H*D) of elem."""
    from onnx import helper

    io = [helper.make_tensor_value_info(n, elem, [b, l, h * d])
          for n in ("query", "key", "value", "output")]
    node = helper.make_node("MultiHeadAttention", ["query", "key", "value"],
                            ["output"], domain="com.microsoft", num_heads=h)
    graph = helper.make_graph([node], "mha", io[:3], io[3:])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def ort_session(model):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_fp32(q, k, v):
    """(CPU seconds per call, output (B, H, L, D)).  Inputs and output are
    bound once (IO binding), so that a call costs the operator and not
    the Python binding's conversions."""
    b, h, l, d = q.shape
    from onnx import TensorProto

    sess = ort_session(ort_model(b, h, l, d, TensorProto.FLOAT))
    bind = sess.io_binding()
    feeds = {n: np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(b, l, h * d))
             for n, x in (("query", q), ("key", k), ("value", v))}
    for name, x in feeds.items():
        bind.bind_cpu_input(name, x)
    out = np.empty((b, l, h * d), dtype=np.float32)
    bind.bind_output("output", "cpu", 0, np.float32, out.shape, out.ctypes.data)
    sec = cpu_best(lambda: sess.run_with_iobinding(bind))
    return sec, out.reshape(b, l, h, d).transpose(0, 2, 1, 3)


def ort_bf16_missing(q):
    """Why ORT runs no BF16 MultiHeadAttention here (None when it does)."""
    from onnx import TensorProto

    b, h, l, d = q.shape
    try:
        ort_session(ort_model(b, h, l, d, TensorProto.BFLOAT16))
    except Exception as e:  # ORT's own exception types vary by version
        return str(e).strip().splitlines()[0][:200]
    return None


def torch_sdpa(q, k, v, dtype):
    """(CPU seconds per call, output (B, H, L, D) as float32); dtype
    "float32" or "bfloat16" (rounded to nearest even from q, k, v)."""
    import torch
    import torch.nn.functional as F

    t = [torch.from_numpy(x).to(getattr(torch, dtype)) for x in (q, k, v)]
    with torch.inference_mode():
        sec = cpu_best(lambda: F.scaled_dot_product_attention(*t))
        out = F.scaled_dot_product_attention(*t).float().numpy()
    return sec, out


def versions():
    import onnx
    import onnxruntime
    import torch

    cpu, flags = "", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not cpu:
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    return {"kind": "peers_env", "cpu": cpu, "python": platform.python_version(),
            "numpy": np.__version__, "onnxruntime": onnxruntime.__version__,
            "onnx": onnx.__version__, "torch": torch.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(),
            "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
            "env": {k: os.environ.get(k) for k in
                    ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}


def fmt_time(s):
    return f"{s * 1e3:,.1f} ms" if s >= 1e-3 else f"{s * 1e6:,.0f} us"


def fmt_diff(x):
    return f"{x:.1e}"


def bench_shape(core, shape, tmp, emit):
    b, h, l, d = shape
    rng = np.random.default_rng(l * 1000 + d)
    q, k, v = (rng.standard_normal((b, h, l, d), dtype=np.float32) for _ in range(3))
    ref = reference(q, k, v)
    core_line, a32, a16 = run_core(core, q, k, v, tmp)
    print(f"bench-peers: {shape}: attnd done", file=sys.stderr, flush=True)
    rows = {"attnd fp32": (core_line["fp32_cpu_sec"], a32, a32),
            "attnd bf16": (core_line["bf16_cpu_sec"], a16, a16)}
    sec, out = ort_fp32(q, k, v)
    rows["ORT fp32"] = (sec, out, a32)
    why = ort_bf16_missing(q)
    sec, out = torch_sdpa(q, k, v, "float32")
    rows["torch fp32"] = (sec, out, a32)
    sec, out = torch_sdpa(q, k, v, "bfloat16")
    rows["torch bf16"] = (sec, out, a16)
    print(f"bench-peers: {shape}: peers done", file=sys.stderr, flush=True)
    res = {"kind": "peers", "B": b, "H": h, "Lq": l, "Lk": l, "D": d,
           "fp32_kernel": core_line["fp32_kernel"],
           "bf16_kernel": core_line["bf16_kernel"], "ort_bf16": why or "runs"}
    for name, (sec, out, same) in rows.items():
        key = name.replace(" ", "_")
        res[key + "_cpu_sec"] = sec
        res[key + "_vs_attnd"] = float(np.max(np.abs(out - same)))
        res[key + "_vs_f64"] = float(np.max(np.abs(out - ref)))
    emit(res)
    return res


def table(results):
    lines = [
        "| (B,H,Lq,Lk,D) | attnd fp32 | ORT MHA fp32 | ORT/attnd | torch SDPA fp32 "
        "| torch/attnd | attnd bf16 | torch SDPA bf16 | torch/attnd |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        a32, a16 = r["attnd_fp32_cpu_sec"], r["attnd_bf16_cpu_sec"]
        lines.append(
            f"| ({r['B']},{r['H']},{r['Lq']},{r['Lk']},{r['D']}) | {fmt_time(a32)} "
            f"| {fmt_time(r['ORT_fp32_cpu_sec'])} | {r['ORT_fp32_cpu_sec'] / a32:.2f}x "
            f"| {fmt_time(r['torch_fp32_cpu_sec'])} | {r['torch_fp32_cpu_sec'] / a32:.2f}x "
            f"| {fmt_time(a16)} | {fmt_time(r['torch_bf16_cpu_sec'])} "
            f"| {r['torch_bf16_cpu_sec'] / a16:.2f}x |")
    lines += [
        "",
        "max |answer - attnd's in the same precision| (max |answer - float64 reference|):",
        "",
        "| (B,H,Lq,Lk,D) | attnd fp32 | ORT fp32 | torch fp32 | attnd bf16 | torch bf16 |",
        "|---|---|---|---|---|---|"]
    for r in results:
        cells = []
        for key in ("attnd_fp32", "ORT_fp32", "torch_fp32", "attnd_bf16", "torch_bf16"):
            vs_a = "-" if key.startswith("attnd") else fmt_diff(r[key + "_vs_attnd"])
            cells.append(f"{vs_a} ({fmt_diff(r[key + '_vs_f64'])})")
        lines.append(f"| ({r['B']},{r['H']},{r['Lq']},{r['Lk']},{r['D']}) | "
                     + " | ".join(cells) + " |")
    lines.append("")
    for r in results:
        if r["D"] == 64:
            ratio = r["ORT_fp32_cpu_sec"] / r["attnd_fp32_cpu_sec"]
            verdict = "met" if ratio >= ORT_TARGET else "NOT met"
            lines.append(f"target ORT/attnd >= {ORT_TARGET}x float32 on "
                         f"({r['B']},{r['H']},{r['Lq']},{r['Lk']},{r['D']}): "
                         f"{ratio:.2f}x, {verdict}")
    lines.append(f"attnd kernels: float32 {results[0]['fp32_kernel']}, "
                 f"BF16 mode {results[0]['bf16_kernel']}")
    lines.append(f"ONNX Runtime BF16 MultiHeadAttention: {results[0]['ort_bf16']}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", required=True, help="attnd-bench built for this system")
    ap.add_argument("--out", required=True, help="directory for peers.jsonl")
    ap.add_argument("shapes", nargs="*", help="B,H,L,D (default: the three)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] or SHAPES
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.jsonl"), "w") as log, \
            tempfile.TemporaryDirectory() as tmp:
        def emit(obj):
            log.write(json.dumps(obj) + "\n")
            log.flush()

        env = versions()
        emit(env)
        bf16 = [f for f in ("avx512_bf16", "amx_bf16") if env[f]] or ["no BF16 instructions"]
        print(f"CPU: {env['cpu']} ({', '.join(bf16)}); ONNX Runtime {env['onnxruntime']} (onnx "
              f"{env['onnx']}), PyTorch {env['torch']} ({env['torch_cpu_capability']}), "
              f"numpy {env['numpy']}, Python {env['python']}; one thread each, "
              "CPU time per call, least of several runs", flush=True)
        results = [bench_shape(args.core, s, tmp, emit) for s in shapes]
    print(table(results))


if __name__ == "__main__":
    main()
