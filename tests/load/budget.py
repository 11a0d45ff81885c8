#!/usr/bin/env python3
"""budget.py - attnd's CPU per request against the in-process core's.

    python3 budget.py ATTND CORE_RATE [ROUNDS]

For each path below, starts ATTND (a copy of build/attnd), sends requests
one after another on one keep-alive connection, and reads attnd's CPU time
over them from /proc (every thread of attnd, in nanoseconds, from each
thread's schedstat).  CORE_RATE (tests/load/core_rate.c) times the same
problem in process on one thread.  The ratio of the two says what attnd
itself adds to the attention, whatever the client costs: the client's CPU
is not counted, and attnd's idle time between requests costs it nothing.
Measuring starts after the warm-up, once attnd is idle, so that its
start-up work is not counted either.

Paths (no weights; v2 FP32 inputs, output FP32):
  shm small  inputs and output in Triton system shared memory
  tcp small  v2 binary tensors over loopback TCP
  tcp256 small   the same, attnd run with --conn-memory-kb 256
  unix small v2 binary tensors over a Unix domain socket
  unix256 small  the same, attnd run with --conn-memory-kb 256
  unixbuf small  the Unix socket, the client asking for a 1 MiB SO_SNDBUF
  sidecar small  the Unix socket set up as a sidecar: attnd with
                 --conn-memory-kb 256 (deploy/k8s/sidecar.yaml), the client
                 asking for the 4 MiB SO_SNDBUF attnd_client asks for
  tcp large  v2 binary tensors over loopback TCP
  json small POST /v1/attention, JSON numbers (no target: what the
             number reader and printer cost against the attention)

small = (B, H, Lq, Lk, D) = (1, 8, 128, 128, 64), large = (1, 16, 2048,
2048, 64).  ROUNDS rounds (default 5) alternate the paths.  Each figure is
the best of its rounds, attnd's and the core's alike: on a shared virtual
machine other tenants only ever add to a round's CPU time (contended
hypervisor locks, slower wake-ups and copies), and they add more to
attnd's system calls and copies than to the core's arithmetic, so the
best rounds are the closest to what attnd itself costs.  The ratio of the
medians is printed beside it, and the median count of attnd's voluntary
context switches per request (each a sleep waiting for the client, and a
wake-up to pay for).

A lone client leaves attnd idle between an answer and its next request,
so attnd sleeps at least once a request, and the in-process core, calling
back to back, never does.  What one sleep costs the work after it is the
machine's (on a virtual machine, waking the halted vCPU), so for the
small shape the core is also timed sleeping SLEEP_US before every call,
a little less than the client's turn between two requests here, and the
ratio to that is printed too: how far attnd is from a server that adds
nothing but that one wait.

A second table says where the rest goes, per request, in the best
round: the bytes attnd's read and write system calls moved (rchar and
wchar of /proc/PID/io), those calls (syscr, syscw), its minor page
faults (/proc/PID/stat), and every system call from `strace -c -f` on a
sample of requests after the measured ones (its slowdown is not in the
CPU figures; the column reads "-" without strace).  "over the core" is
attnd's CPU per request less the core's per call, and "memcpy" what a
memcpy of the bytes moved costs here (numpy's copy, best of 20): their
quotient says how many times the cost of moving the bytes once attnd
spends beyond the attention.  Prints a table and one JSON line a path
(kind "budget") for tests/bench/report.py's directory when
ATTND_BENCH_DIR is set.
"""
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from multiprocessing import shared_memory

SHAPES = {"small": (1, 8, 128, 128, 64), "large": (1, 16, 2048, 2048, 64)}
# requests measured per round, and warm-up requests before them
COUNTS = {"small": (1000, 50), "large": (10, 2)}
TARGETS = {"shm small": 1.25, "tcp small": 1.5, "tcp256 small": 1.5,
           "unix small": 1.5, "unix256 small": 1.5, "unixbuf small": None,
           "sidecar small": 1.5,
           "tcp large": 1.06, "json small": None}
ALL_PATHS = ["shm small", "tcp small", "tcp256 small", "unix small",
             "unix256 small", "unixbuf small", "sidecar small", "tcp large",
             "json small"]
# BUDGET_PATHS="shm small,tcp small" runs only those.
PATHS = [p for p in ALL_PATHS if p in os.environ.get(
    "BUDGET_PATHS", ",".join(ALL_PATHS)).split(",")]
# "tcp256", "unix256": attnd configured for clients that keep their
# connections, libmicrohttpd reading a body up to about 200 KiB at a time
# instead of 25 KiB (docs/operations.md, "Connection memory").
CONN_MEMORY_KB = 256
MEMORY_FLAGS = ["--conn-memory-kb", str(CONN_MEMORY_KB)]
# "unixbuf": the Unix socket again, the client asking for a 1 MiB send
# buffer (room for the whole 768 KiB upload) instead of the kernel's
# default; the kernel caps it at twice net.core.wmem_max.
UNIX_SNDBUF = 1 << 20
# "sidecar": what attnd_client asks for (its _transport.UNIX_SNDBUF).
SIDECAR_SNDBUF = 4 << 20
# What each kind of path is: its name in the table, whether the client
# uses the Unix socket, the client's SO_SNDBUF (None: the kernel's
# default) and attnd's extra flags.
KINDS = {
    "shm": ("v2, shared memory", False, None, []),
    "tcp": ("v2 binary, TCP", False, None, []),
    "tcp256": ("v2 binary, TCP, --conn-memory-kb 256", False, None,
               MEMORY_FLAGS),
    "unix": ("v2 binary, Unix socket", True, None, []),
    "unix256": ("v2 binary, Unix socket, --conn-memory-kb 256", True, None,
                MEMORY_FLAGS),
    "unixbuf": ("v2 binary, Unix socket, client SO_SNDBUF 1 MiB", True,
                UNIX_SNDBUF, []),
    "sidecar": ("v2 binary, Unix socket, --conn-memory-kb 256, client "
                "SO_SNDBUF 4 MiB", True, SIDECAR_SNDBUF, MEMORY_FLAGS),
    "json": ("/v1 JSON, TCP", False, None, []),
}
# requests under strace -c per path and size (after the measured ones)
STRACE_COUNTS = {"small": 50, "large": 2}
# the core's sleep before each call in its second timing (small shape)
SLEEP_US = 200


def granted_sndbuf(size):
    """The send buffer a Unix socket gets when it asks for size bytes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        return s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket; sndbuf, when given, is the
    socket's SO_SNDBUF (the kernel's default is wmem_default, 208 KiB on
    Debian)."""

    def __init__(self, path, timeout=120, sndbuf=None):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path
        self.sndbuf = sndbuf

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.sndbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def per_thread(pid, name, read):
    """The sum of read(text) over /proc/PID/task/*/NAME: every thread of
    attnd (one that ends meanwhile counts nothing)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/{name}") as f:
                total += read(f.read())
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def cpu_ns(pid):
    """attnd's CPU time so far, in ns: its threads' schedstat."""
    return per_thread(pid, "schedstat", lambda t: int(t.split()[0]))


def switches(pid):
    """attnd's voluntary context switches so far (every thread): how often
    it slept waiting for the client, which costs it a wake-up each."""
    return per_thread(pid, "status", lambda t: int(
        re.search(r"^voluntary_ctxt_switches:\s*(\d+)", t, re.M)[1]))


def minflt(pid):
    """attnd's minor page faults so far (every thread)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


READS = {"read", "readv", "recvfrom", "recvmsg", "recvmmsg"}


def strace_calls(pid, send, n):
    """attnd's system calls per request over n requests (send() each),
    from strace -c -f attached for them alone: (all, reads), or None
    without strace."""
    fd, out = tempfile.mkstemp(prefix="attnd-strace.")
    os.close(fd)
    try:
        st = subprocess.Popen(["strace", "-c", "-f", "-q", "-o", out,
                               "-p", str(pid)], stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        os.unlink(out)
        return None
    time.sleep(0.5)  # attached to every thread
    for _ in range(n):
        send()
    st.send_signal(signal.SIGINT)
    st.wait(30)
    with open(out) as f:
        text = f.read()
    os.unlink(out)
    calls = {m[2]: int(m[1]) for m in re.finditer(
        r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)(?:\s+\d+)?\s+(\w+)$", text, re.M)}
    if "total" not in calls:
        return None
    return (calls["total"] / n,
            sum(c for name, c in calls.items() if name in READS) / n)


def memcpy_us(nbytes):
    """A memcpy of nbytes here (numpy's copy), best of 20, in µs."""
    src = np.ones(max(nbytes, 1), np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def settle(pid, limit=10.0):
    """Waits until attnd is idle: less than 1 ms of CPU in 100 ms.  At
    start OpenBLAS's thread pool spins for a while (about 90 ms of CPU),
    a one-time cost that would otherwise land on the first round's
    requests."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        c0 = cpu_ns(pid)
        time.sleep(0.1)
        if cpu_ns(pid) - c0 < 1_000_000:
            return
    raise RuntimeError("attnd did not become idle")


def tensors(shape):
    b, h, lq, lk, d = shape
    rng = np.random.default_rng(7)
    q = rng.standard_normal((b, h, lq, d), dtype=np.float32)
    k = rng.standard_normal((b, h, lk, d), dtype=np.float32)
    v = rng.standard_normal((b, h, lk, d), dtype=np.float32)
    return q, k, v


def binary_body(q, k, v):
    inputs = []
    for name, t in (("query", q), ("key", k), ("value", v)):
        inputs.append({"name": name, "shape": list(t.shape), "datatype": "FP32",
                       "parameters": {"binary_data_size": t.nbytes}})
    hdr = json.dumps({"inputs": inputs, "outputs": [
        {"name": "output", "parameters": {"binary_data": True}}]}).encode()
    body = hdr + q.tobytes() + k.tobytes() + v.tobytes()
    return body, {"Inference-Header-Content-Length": str(len(hdr))}


def json_body(q, k, v):
    return json.dumps({"query": q.tolist(), "key": k.tolist(),
                       "value": v.tolist(),
                       "return_weights": False}).encode(), {
                           "Content-Type": "application/json"}


def shm_body(q, k, v, out_bytes):
    inputs, off = [], 0
    for name, t in (("query", q), ("key", k), ("value", v)):
        inputs.append({"name": name, "shape": list(t.shape), "datatype": "FP32",
                       "parameters": {"shared_memory_region": "budget_in",
                                      "shared_memory_byte_size": t.nbytes,
                                      "shared_memory_offset": off}})
        off += t.nbytes
    return json.dumps({"inputs": inputs, "outputs": [
        {"name": "output", "parameters": {
            "shared_memory_region": "budget_out",
            "shared_memory_byte_size": out_bytes}}]}).encode(), {}


class Attnd:
    def __init__(self, binary, args):
        self.tmp = tempfile.mkdtemp(prefix="attnd-budget.")
        self.port = free_port()
        self.sock = os.path.join(self.tmp, "attnd.sock")
        cmd = [binary, "--host", "127.0.0.1", "--port", str(self.port),
               "--unix-socket", self.sock, "--allow-client-shm", "1"] + args
        self.log = open(os.path.join(self.tmp, "attnd.log"), "w")
        self.proc = subprocess.Popen(cmd, stderr=self.log)
        end = time.time() + 30
        while time.time() < end:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    c.close()
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("attnd did not become ready")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def post(conn, path, body, headers):
    conn.request("POST", path, body, headers)
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
    return data


def run_path(binary, path_name, data, sample):
    kind, size = path_name.split()
    q, k, v = data[size]
    n, warm = COUNTS[size]
    _, unix, sndbuf, flags = KINDS[kind]
    d = Attnd(binary, ["--access-log", "0"] + flags)
    shms = []
    try:
        if unix:
            conn = UnixHTTPConnection(d.sock, sndbuf=sndbuf)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
        if kind == "shm":
            in_bytes = q.nbytes + k.nbytes + v.nbytes
            out_bytes = q.nbytes  # output (B, H, Lq, Dv) with Dv = D
            tag = f"attnd_budget_{os.getpid()}"
            for name, nbytes in (("in", in_bytes), ("out", out_bytes)):
                m = shared_memory.SharedMemory(name=f"{tag}_{name}", create=True,
                                               size=nbytes)
                shms.append(m)
                post(conn, f"/v2/systemsharedmemory/region/budget_{name}/register",
                     json.dumps({"key": "/" + m.name, "offset": 0,
                                 "byte_size": nbytes}).encode(), {})
            buf = np.ndarray((in_bytes // 4,), np.float32, shms[0].buf)
            buf[:] = np.concatenate([q.ravel(), k.ravel(), v.ravel()])
            del buf
            body, headers = shm_body(q, k, v, out_bytes)
        elif kind == "json":
            body, headers = json_body(q, k, v)
            n, warm = max(n // 10, 2), max(warm // 10, 1)
        else:
            body, headers = binary_body(q, k, v)
        url = ("/v1/attention" if kind == "json"
               else "/v2/models/attention/infer")
        for _ in range(warm):
            post(conn, url, body, headers)
        pid = d.proc.pid
        answer = len(post(conn, url, body, headers))
        settle(pid)
        f0 = minflt(pid)
        s0, c0 = switches(pid), cpu_ns(pid)
        t0 = time.monotonic()
        for _ in range(n):
            post(conn, url, body, headers)
        t1 = time.monotonic()
        c1, s1 = cpu_ns(pid), switches(pid)
        faults = (minflt(pid) - f0) / n
        calls = (strace_calls(pid, lambda: post(conn, url, body, headers),
                              STRACE_COUNTS[size]) if sample else None)
        conn.close()
        # the bytes attnd moves: the wire's both ways, and through shared
        # memory the tensors it reads out of and writes into the regions
        nbytes = len(body) + answer
        if kind == "shm":
            nbytes += in_bytes + out_bytes
        return ((c1 - c0) / n / 1e3, n / (t1 - t0), (s1 - s0) / n,
                (nbytes, faults, calls))
    finally:
        d.stop()
        for m in shms:
            m.close()
            m.unlink()


def core_us(core_rate, shape, seconds, sleep_us=0):
    out = subprocess.run([core_rate, *map(str, shape), str(seconds), "1", "0",
                          str(sleep_us)],
                         check=True, capture_output=True, text=True).stdout
    line = [x for x in out.splitlines() if x.startswith("CORE_RESULT ")][0]
    return json.loads(line[len("CORE_RESULT "):])["cpu_us_per_call"]


def print_moved(attnd, core, moved):
    """Where attnd's CPU beyond the core's goes, per request: the best
    round's, and the first round's strace sample."""
    print("\nPer request: the bytes attnd moves (wire both ways; through "
          "shared memory also the tensors out of and into the regions), its "
          "system calls and the reads among them (strace -c, a sample after "
          "the first round), minor page faults; attnd's CPU over the core's "
          "(best rounds) against a memcpy of the bytes moved\n")
    print("| path | shape | bytes moved | system calls | reads | page faults "
          "| over the core | memcpy of the bytes | over / memcpy | "
          "bytes moved / CPU over the core |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in PATHS:
        kind, size = p.split()
        best = min(range(len(attnd[p])), key=lambda i: attnd[p][i])
        nbytes, faults, _ = moved[p][best]
        st = moved[p][0][2]
        over = attnd[p][best] - min(core[size])
        mc = memcpy_us(int(nbytes))
        bw = f"{nbytes / over / 1e3:.2f} GB/s" if over > 0 else "-"
        calls = "- | -" if st is None else f"{st[0]:.1f} | {st[1]:.1f}"
        print(f"| {KINDS[kind][0]} | {size} | {nbytes / 1024:.0f} KiB | "
              f"{calls} | {faults:.1f} | {over:.0f} µs | {mc:.1f} µs | "
              f"{over / mc if mc > 0 else 0:.1f}x | {bw} |")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, core_rate = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    data = {s: tensors(shape) for s, shape in SHAPES.items()}
    attnd = {p: [] for p in PATHS}
    rate = {p: [] for p in PATHS}
    sw = {p: [] for p in PATHS}
    core = {s: [] for s in SHAPES}
    moved = {p: [] for p in PATHS}  # (bytes, calls, faults, strace, body)
    slept = []  # the small shape's core, sleeping SLEEP_US before each call
    for r in range(rounds):
        for s, shape in SHAPES.items():
            core[s].append(core_us(core_rate, shape, 2 if s == "small" else 4))
        slept.append(core_us(core_rate, SHAPES["small"], 2, SLEEP_US))
        print(f"budget: round {r + 1} core small: {core['small'][-1]:.0f} "
              f"us/call, {slept[-1]:.0f} us/call sleeping {SLEEP_US} us "
              "before each", file=sys.stderr)
        for p in PATHS:
            us, rps, per, m = run_path(binary, p, data, sample=r == 0)
            moved[p].append(m)
            attnd[p].append(us)
            rate[p].append(rps)
            sw[p].append(per)
            print(f"budget: round {r + 1} {p}: attnd {us:.0f} us/request, "
                  f"core {core[p.split()[1]][-1]:.0f} us/call, "
                  f"{1e6 / rps:.0f} us/request in all", file=sys.stderr)
    print("\nattnd's CPU per request against the in-process core's CPU per call "
          f"(one thread), no weights; best of {rounds} rounds, and the ratio of "
          "the medians\n")
    print("| path | shape | attnd CPU / request | core CPU / call | ratio | "
          "ratio of medians | target | attnd sleeps / request | "
          f"core CPU / call, {SLEEP_US} µs sleep before each | ratio to it |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    lines = []
    for p in PATHS:
        kind, size = p.split()
        a, c = min(attnd[p]), min(core[size])
        ratio = a / c
        median = statistics.median(attnd[p]) / statistics.median(core[size])
        t = TARGETS[p]
        verdict = ("none" if t is None else
                   f"<= {t:.2f}x: " + ("met" if ratio <= t else "not met"))
        name = KINDS[kind][0]
        if KINDS[kind][2]:
            name += (" (the kernel reports "
                     f"{granted_sndbuf(KINDS[kind][2]) >> 10} KiB)")
        woken = (f"{min(slept):.0f} µs | {a / min(slept):.2f}x"
                 if size == "small" else "– | –")
        print(f"| {name} | {size} {SHAPES[size]} | {a:.0f} µs | {c:.0f} µs | "
              f"{ratio:.2f}x | {median:.2f}x | {verdict} | "
              f"{statistics.median(sw[p]):.1f} | {woken} |")
        lines.append({"kind": "budget", "path": p, "shape": SHAPES[size],
                      "attnd_us": attnd[p], "core_us": core[size],
                      "ratio": ratio, "median_ratio": median, "target": t,
                      "req_per_s": rate[p], "switches": sw[p],
                      "core_slept_us": slept if size == "small" else None,
                      "moved": moved[p]})
    print_moved(attnd, core, moved)
    out_dir = os.environ.get("ATTND_BENCH_DIR")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "budget.jsonl"), "w") as f:
            for x in lines:
                f.write(json.dumps(x) + "\n")


if __name__ == "__main__":
    main()
