"""The Python client's cost per call, against the real build/attnd: make
bench's client table.

Starts build/attnd (--workers = the cores), imports attnd_client from
deploy/clients/python (no bytecode written into the tree), and times one
problem per row, with numpy float32 inputs:

  small: (B,H,Lq,Lk,D) = (32,8,64,64,64), output only (no weights)
  large: (1,8,2048,2048,64), output and weights

each through AttndClient.attention() (v2 binary tensors underneath, and
binary=False: /v1 JSON), AttndClient.infer() (v2 binary and v2 JSON), and
AsyncAttndClient.attention().  Prints one JSON line per row: the best
wall time per call and the best client process's CPU time per call (user and
system, its threads included: encoding, decoding, the socket), over
`reps` rounds (ATTND_CLIENT_BENCH_REPS, 5) after one warm-up call; each
round takes the binary calls in turn.  JSON rows of the large problem
run once: a /v1 answer of 34 million numbers takes tens of seconds.

Usage: python3 tests/bench/client_bench.py > build/bench/client.jsonl
"""

import asyncio
import json
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "deploy", "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import numpy as np  # noqa: E402

import harness  # noqa: E402
from attnd_client import AsyncAttndClient, AttndClient  # noqa: E402

PROBLEMS = {
    "small": ((32, 8, 64, 64, 64), False),
    "large": ((1, 8, 2048, 2048, 64), True),
}


def inputs(shape):
    B, H, Lq, Lk, D = shape
    rng = np.random.default_rng(1)
    q = rng.standard_normal((B, H, Lq, D), dtype=np.float32)
    k = rng.standard_normal((B, H, Lk, D), dtype=np.float32)
    v = rng.standard_normal((B, H, Lk, D), dtype=np.float32)
    return q, k, v


def measure(calls, reps):
    """[(best wall, best CPU)] per call: one warm-up call each
    (connection, first touch of buffers; none for a single round), then
    `reps` rounds that take
    the calls in turn, so that load from elsewhere on the machine falls
    on all of them alike."""
    walls = [[] for _ in calls]
    cpus = [[] for _ in calls]
    if reps > 1:
        for _, _, fn in calls:
            fn()
    for _ in range(reps):
        for i, (_, _, fn) in enumerate(calls):
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            walls[i].append(time.perf_counter() - w0)
            cpus[i].append(time.process_time() - c0)
    # the best round: on a shared machine the others are the best plus
    # someone else's load
    return [(min(w), min(c)) for w, c in zip(walls, cpus)]


def main():
    reps = int(os.environ.get("ATTND_CLIENT_BENCH_REPS", "5"))
    workers = str(os.cpu_count() or 1)
    with harness.Attnd(["--workers", workers, "--max-body-mb", "512",
                        "--max-inflight-mb", "4096"]) as srv:
        url = "http://127.0.0.1:%d" % srv.port
        c = AttndClient(url, timeout=600)
        ac = AsyncAttndClient(url, timeout=600)
        loop = asyncio.new_event_loop()
        for name, (shape, weights) in PROBLEMS.items():
            q, k, v = inputs(shape)
            outs = ["output", "weights"] if weights else ["output"]
            rw = None if weights else False
            calls = [
                ("attention()", "v2 binary",
                 lambda: c.attention(q, k, v, return_weights=rw)),
                ("infer()", "v2 binary",
                 lambda: c.infer("attention", {"query": q, "key": k, "value": v}, outs)),
                ("AsyncAttndClient.attention()", "v2 binary",
                 lambda: loop.run_until_complete(ac.attention(q, k, v, return_weights=rw))),
                ("attention(binary=False)", "/v1 JSON",
                 lambda: c.attention(q, k, v, return_weights=rw, binary=False)),
                ("infer(binary=False)", "v2 JSON",
                 lambda: c.infer("attention", {"query": q, "key": k, "value": v}, outs,
                                 binary=False)),
            ]
            # the JSON rows of the large problem once, after the rest
            groups = [(calls[:3], reps), (calls[3:], 1 if weights else reps)]
            for group, n in groups:
                print("bench: client %s: %s, %d rounds..." % (
                    name, ", ".join(x[0] for x in group), n), file=sys.stderr, flush=True)
                for (call, wire, _), (wall, cpu) in zip(group, measure(group, n)):
                    print(json.dumps({"kind": "client", "problem": name, "shape": shape,
                                      "weights": weights, "call": call, "wire": wire,
                                      "calls": n, "sec": wall, "cpu_sec": cpu}), flush=True)
        loop.run_until_complete(ac.aclose())
        loop.close()
        c.close()
        srv.stop()


if __name__ == "__main__":
    main()
