#!/usr/bin/python3
"""The numpy peer of attnd's core benchmark.

The same masked scaled-dot-product attention as core/ (design.md): scores
(q k^T) * scale, keys j >= valid_lens[b] (and j > i when causal) set to
-FLT_MAX, softmax with the row maximum subtracted, masked weights exactly
0, rows without keys all 0, output = weights v; float32 throughout,
written with in-place numpy operations so that it is a fair peer.  Timed
as bench_core.c times the core: inputs made beforehand, one warm-up call,
then the best wall time per call over at least 5 calls and as many
seconds as bench_core.c spends on the shape.

Prints JSON lines: {"kind": "numpy_env", ...} (numpy version, the BLAS
library and the OpenBLAS kernel it runs, its thread count, and the
OPENBLAS_* variables it saw), then {"kind": "numpy", ...} per shape with
the best wall and the best CPU seconds (all threads) per call.
Run it with Debian's /usr/bin/python3 (python3-numpy).
"""
import ctypes
import json
import os
import sys
import time

import numpy as np

FLT_MAX = np.float32(np.finfo(np.float32).max)

# name, B, H, L (= Lq = Lk), D, causal, seconds of timing: the shapes of
# bench_core.c, timed as long
SHAPES = [
    ("tiny", 1, 1, 16, 32, 0, 0.5),
    ("small", 2, 8, 128, 64, 0, 1.0),
    ("medium", 4, 16, 512, 64, 0, 2.0),
    ("large", 1, 16, 2048, 64, 0, 3.0),
    ("large-causal", 1, 16, 2048, 64, 1, 2.0),
]


def attention(q, k, v, valid_lens, scale, causal):
    """Output (B, H, Lq, Dv) and weights (B, H, Lq, Lk)."""
    lq, lk = q.shape[2], k.shape[2]
    s = np.matmul(q, k.transpose(0, 1, 3, 2))
    s *= np.float32(scale)
    allowed = (np.arange(lk)[None, :] < valid_lens[:, None])[:, None, None, :]
    if causal:
        allowed = allowed & np.tri(lq, lk, dtype=bool)[None, None]
    np.copyto(s, -FLT_MAX, where=~allowed)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s *= allowed  # masked weights exactly 0, also in rows without keys
    total = s.sum(axis=-1, keepdims=True)
    np.divide(s, total, out=s, where=total > 0)
    return np.matmul(s, v), s


def best_time(fn, min_reps=5, min_s=0.3):
    """Best wall seconds and best CPU seconds (all threads) per call."""
    fn()  # warm-up
    best, best_cpu, start, reps = float("inf"), float("inf"), \
        time.perf_counter(), 0
    while reps < min_reps or time.perf_counter() - start < min_s:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        reps += 1
        if reps > 100000:
            break
    return best, best_cpu


def blas_info():
    """The BLAS numpy loaded and, for OpenBLAS, its kernel and threads."""
    info = {"library": None, "corename": None, "threads": None}
    try:
        import threadpoolctl  # Debian python3-threadpoolctl, if installed

        for lib in threadpoolctl.threadpool_info():
            if lib.get("user_api") == "blas":
                info.update(library=lib.get("filepath"),
                            corename=lib.get("architecture"),
                            threads=lib.get("num_threads"))
                return info
    except ImportError:
        pass
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "blas" in line}
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            info.update(library=path,
                        corename=lib.openblas_get_corename().decode(),
                        threads=lib.openblas_get_num_threads())
            return info
        except (OSError, AttributeError):
            continue
    info["library"] = ",".join(sorted(paths)) or None
    return info


def main():
    rng = np.random.default_rng(1)
    env = {k: os.environ.get(k) for k in
           ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")}
    blas = blas_info()
    print(json.dumps({"kind": "numpy_env", "numpy": np.__version__,
                      "blas": blas, "env": env}), flush=True)
    for name, b, h, l, d, causal, min_s in SHAPES:
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        q, k, v = (rng.random((b, h, l, d), dtype=np.float32) - 0.5
                   for _ in range(3))
        valid_lens = np.full((b,), l, dtype=np.int32)
        t, cpu = best_time(
            lambda: attention(q, k, v, valid_lens, 0.125, causal),
            min_s=min_s)
        flops = 4.0 * b * h * l * l * d
        print(json.dumps({"kind": "numpy", "shape": name, "B": b, "H": h,
                          "Lq": l, "Lk": l, "D": d, "causal": causal,
                          "blas_threads": blas["threads"], "sec": t,
                          "cpu_sec": cpu, "gflops": flops / t * 1e-9}),
              flush=True)


if __name__ == "__main__":
    main()
