"""What a request costs before and while it runs grows linearly with its
size, against the real build/attnd, counted in attnd's own CPU time
(/proc/<pid>/stat: every thread's user and system time), which other
processes on a loaded machine do not add to.

  * Packed sequences: 640,000 one-row sequences sent as 64 /v1 requests
    of 10,000, as 16 of 40,000 and as 4 of 160,000 (parse, checks, the
    cost estimate, the core's task walk) take about the same CPU time;
    walking cu_seqlens from the start for each task made the last sixteen
    times the first.  The figures are printed.
  * A million-row packed binary v2 request (62,500 sequences of 16 rows)
    is answered, each sequence attending to its own keys alone.
"""

import json
import os
import random
import struct
import time
import unittest

import harness

SEQS = 640000
SIZES = (10000, 40000, 160000)
# Per-sequence CPU time at 160,000 at most this many times that at
# 10,000: linear gives about 1 (less: the small requests' fixed costs);
# quadratic gives 16.
MARGIN = 3.0


def cpu_s(pid):
    """utime + stime of every thread of pid, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_row_sequences(n, seed):
    """A /v1 body of n one-row sequences, D = 1, outputs only."""
    rnd = random.Random(seed)
    t = {"shape": [1, n, 1], "data": [round(rnd.uniform(-1, 1), 3) for _ in range(n)]}
    cu = list(range(n + 1))
    return json.dumps({"query": t, "key": t, "value": t, "cu_seqlens_q": cu,
                       "cu_seqlens_k": cu, "return_weights": False}).encode()


@unittest.skipIf(harness.VALGRIND, "CPU time under valgrind measures valgrind")
class PackedSequencesTest(harness.ServerTestCase):
    server_args = ("--workers", "2", "--max-request-gflop", "0",
                   "--max-body-mb", "64", "--max-inflight-mb", "1024")

    def post(self, body, path="/v1/attention", headers=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return self.srv.request("POST", path, body, h, timeout=600)

    def test_time_grows_linearly_with_the_number_of_sequences(self):
        pid = self.srv.proc.pid
        per_seq = {}
        for n in SIZES:
            body = one_row_sequences(n, n)
            t0, c0 = time.monotonic(), cpu_s(pid)
            for _ in range(SEQS // n):
                status, _, data = self.post(body)
                self.assertEqual(status, 200, data[:300])
            c1, t1 = cpu_s(pid), time.monotonic()
            # one-row sequences: each output row is its own value row
            got = json.loads(data)["output"]["data"]
            want = json.loads(body)["value"]["data"]
            for i in range(0, n, 997):
                self.assertAlmostEqual(got[i], want[i], places=5)
            per_seq[n] = (c1 - c0) / SEQS
            print("\ntest_linear: %d requests of %d one-row sequences: attnd CPU "
                  "%.3f s (%.2f us a sequence), %.2f s wall" %
                  (SEQS // n, n, c1 - c0, per_seq[n] * 1e6, t1 - t0))
        ratio = per_seq[SIZES[-1]] / max(per_seq[SIZES[0]], 1e-9)
        print("test_linear: per-sequence CPU at %d / at %d = %.2f (at most %.1f)" %
              (SIZES[-1], SIZES[0], ratio, MARGIN))
        self.assertLessEqual(ratio, MARGIN)

    def test_a_million_row_packed_request(self):
        n, ln = 62500, 16
        L = n * ln
        rnd = random.Random(3)
        q = struct.pack("<%df" % L, *[rnd.uniform(-1, 1) for _ in range(L)])
        # sequence s's values are all s % 7 + 1, and so is its output
        v = struct.pack("<%df" % L, *[float(i // ln % 7 + 1) for i in range(L)])
        cu = struct.pack("<%di" % (n + 1), *range(0, L + 1, ln))
        tensors = [("query", "FP32", [1, L, 1], q), ("key", "FP32", [1, L, 1], q),
                   ("value", "FP32", [1, L, 1], v),
                   ("cu_seqlens_q", "INT32", [n + 1], cu),
                   ("cu_seqlens_k", "INT32", [n + 1], cu)]
        header = json.dumps({
            "inputs": [{"name": nm, "datatype": dt, "shape": sh,
                        "parameters": {"binary_data_size": len(data)}}
                       for nm, dt, sh, data in tensors],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
        body = header + b"".join(t[3] for t in tensors)
        c0, t0 = cpu_s(self.srv.proc.pid), time.monotonic()
        status, hdrs, data = self.post(
            body, "/v2/models/attention/infer",
            {"Content-Type": "application/octet-stream",
             "Inference-Header-Content-Length": str(len(header))})
        c1, t1 = cpu_s(self.srv.proc.pid), time.monotonic()
        self.assertEqual(status, 200, data[:300])
        print("\ntest_linear: %d packed rows in %d sequences: attnd CPU %.3f s, "
              "%.2f s wall" % (L, n, c1 - c0, t1 - t0))
        jlen = int(hdrs["inference-header-content-length"])
        out = struct.unpack("<%df" % L, data[jlen:jlen + 4 * L])
        for i in range(0, L, 4999):
            self.assertAlmostEqual(out[i], i // ln % 7 + 1, places=4)


if __name__ == "__main__":
    harness.main()
