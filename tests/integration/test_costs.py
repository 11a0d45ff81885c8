"""What a request costs before and while it runs, against the real build/attnd.

  * Linear in the input: packed requests of 10,000, 40,000 and 160,000
    one-row sequences (/v1) and a binary v2 request of a million, each
    answered exactly (a one-row sequence sees its own key alone, so its
    output is its value).  attnd's CPU time (utime + stime from
    /proc/<pid>/stat) per sequence is printed for each size and may grow
    at most threefold from the smallest to the largest: the estimate, the
    checks, the task walk and the diagnostics must not walk cu_seqlens
    from the start for every task (which made 40,000 sequences take
    seconds and a million an hour).  Smaller sizes are sent several times
    so that every measurement covers enough sequences for the clock
    ticks of /proc; 0.1 s is allowed beyond the ratio for the ticks.
  * The early weighing of binary v2 (the JSON part in, the tensors still
    to come) does not charge packed sequences as their square: 64
    sequences of 1024 at D = 64 (about 22 GFLOP) are admitted under the
    default 200 GFLOP and answered as the float64 reference says, while
    the same tensors unpacked (1.4e3 GFLOP) are still refused early.
  * One cost model: the inline decision comes from attn_cost_flops, which
    charges the diagnostics' pass over the weights.  A request with
    diagnostics that the products alone would put under --inline-us is
    queued (attnd_inline_requests_total{reason="cheap"} does not move),
    while the same request without diagnostics still runs inline.
  * A subnormal softcap (which would turn a zero score into NaN) is
    refused naming the field, on /v1 and v2; the smallest normal one is
    computed, finite and as the reference says.
"""

import array
import json
import math
import os
import random
import re
import struct

import harness
import reference
import v2client

SLOW = 20 if harness.VALGRIND else 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def metric(srv, name, **labels):
    _, _, body = srv.get("/metrics")
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    pat = r"^%s%s (\S+)$" % (re.escape(name), re.escape("{%s}" % want) if want else "")
    m = re.search(pat, body.decode(), re.M)
    return float(m.group(1)) if m else 0.0


def one_row_values(n):
    """Values exact in float32 and in short decimal text."""
    return [(i % 97) / 8.0 - 6.0 for i in range(n)]


def v1_packed(n):
    """A /v1 body of n one-row sequences, D = 1."""
    vals = one_row_values(n)
    t = {"shape": [1, n, 1], "data": vals}
    cu = list(range(n + 1))
    return json.dumps({"query": t, "key": t, "value": t, "cu_seqlens_q": cu,
                       "cu_seqlens_k": cu, "return_weights": False}).encode(), vals


def v2_body(inputs, outputs, parameters=None):
    """(JSON part, whole body) of a binary v2 request; inputs are
    (name, datatype, shape, raw bytes)."""
    req = {"inputs": [{"name": n, "datatype": dt, "shape": shape,
                       "parameters": {"binary_data_size": len(raw)}}
                      for n, dt, shape, raw in inputs],
           "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs]}
    if parameters:
        req["parameters"] = parameters
    header = json.dumps(req).encode()
    return header, header + b"".join(raw for _, _, _, raw in inputs)


def v2_post(srv, header, body, timeout=600):
    status, hdrs, data = srv.request(
        "POST", "/v2/models/attention/infer", body,
        {"Inference-Header-Content-Length": str(len(header)),
         "Content-Type": "application/octet-stream"}, timeout=timeout)
    if status != 200:
        return status, json.loads(data)
    hl = hdrs.get("Inference-Header-Content-Length") or hdrs.get("inference-header-content-length")
    return status, v2client.InferResult(data, int(hl))


def f32_bytes(vals):
    return array.array("f", vals).tobytes()


def v2_packed(n):
    vals = one_row_values(n)
    raw = f32_bytes(vals)
    cu = array.array("i", range(n + 1)).tobytes()
    return v2_body([("query", "FP32", [1, n, 1], raw), ("key", "FP32", [1, n, 1], raw),
                    ("value", "FP32", [1, n, 1], raw),
                    ("cu_seqlens_q", "INT32", [n + 1], cu),
                    ("cu_seqlens_k", "INT32", [n + 1], cu)], ["output"]), vals


class LinearTest(harness.ServerTestCase):
    server_args = ("--workers", "2")

    def per_sequence(self, n, repeats, send):
        """CPU seconds of attnd per sequence over `repeats` requests of n."""
        pid = self.srv.proc.pid
        before = cpu_seconds(pid)
        for _ in range(repeats):
            send(n)
        return (cpu_seconds(pid) - before) / (n * repeats)

    def send_v1(self, n):
        body, vals = v1_packed(n)
        status, obj = self.srv.post_json("/v1/attention", body)
        self.assertEqual(status, 200, str(obj)[:300])
        out = obj["output"]
        got = out["data"] if isinstance(out, dict) else reference.flatten(out)
        self.assertTrue(got == vals, "a one-row sequence's output is not its value")

    def send_v2(self, n):
        (header, body), vals = v2_packed(n)
        status, res = v2_post(self.srv, header, body)
        self.assertEqual(status, 200, res if status != 200 else "")
        got = res.as_list("output")
        self.assertEqual(len(got), n)
        self.assertTrue(got == vals, "a one-row sequence's output is not its value")

    def test_time_per_sequence_does_not_grow_with_the_sequences(self):
        if harness.VALGRIND:
            self.skipTest("160,000 sequences under valgrind take too long")
        sizes = ((10000, 16), (40000, 4), (160000, 1))
        figures = [(n, self.per_sequence(n, r, self.send_v1)) for n, r in sizes]
        for n, s in figures:
            print("test_costs: /v1 %7d one-row sequences: %.2f us of attnd CPU a sequence"
                  % (n, s * 1e6))
        small, large = figures[0][1], figures[-1][1]
        self.assertLessEqual(large, 3 * small + 0.1 / 160000,
                             "per-sequence CPU grew from %.2f us to %.2f us"
                             % (small * 1e6, large * 1e6))

    def test_a_million_packed_rows_cost_what_their_sequences_cost(self):
        if harness.VALGRIND:
            self.skipTest("a million sequences under valgrind take too long")
        small = self.per_sequence(10000, 50, self.send_v2)
        large = self.per_sequence(1000000, 1, self.send_v2)
        print("test_costs: v2 %7d one-row sequences: %.2f us of attnd CPU a sequence"
              % (10000, small * 1e6))
        print("test_costs: v2 %7d one-row sequences: %.2f us of attnd CPU a sequence"
              % (1000000, large * 1e6))
        self.assertLessEqual(large, 3 * small + 0.1 / 1000000,
                             "per-sequence CPU grew from %.2f us to %.2f us"
                             % (small * 1e6, large * 1e6))


def float_block(rng, n):
    """n float32 values in +-[0.5, 1), from random bytes (fast for many)."""
    raw = bytearray(rng.randbytes(4 * n))
    raw[2::4] = bytes(raw[2::4]).translate(bytes((b & 0x7F) for b in range(256)))
    raw[3::4] = bytes(raw[3::4]).translate(bytes((b & 0x80) | 0x3F for b in range(256)))
    return bytes(raw)


class EarlyWeighTest(harness.ServerTestCase):
    server_args = ("--workers", "2")
    S, L, D = 64, 1024, 64

    def tensors(self):
        rng = random.Random(42)
        n = self.S * self.L
        return [float_block(rng, n * self.D) for _ in range(3)]

    def test_packed_binary_request_is_weighed_by_its_sequences(self):
        S, L, D = self.S, self.L, self.D
        n = S * L
        q, k, v = self.tensors()
        cu = array.array("i", range(0, n + 1, L)).tobytes()
        qkv = [("query", "FP32", [1, n, D], q), ("key", "FP32", [1, n, D], k),
               ("value", "FP32", [1, n, D], v)]
        packed = qkv + [("cu_seqlens_q", "INT32", [S + 1], cu),
                        ("cu_seqlens_k", "INT32", [S + 1], cu)]
        header, body = v2_body(packed, ["output"])
        self.assertGreater(len(body) - len(header), 256 << 10)  # weighed early
        status, res = v2_post(self.srv, header, body)
        self.assertEqual(status, 200, res if status != 200 else "")
        out = res.as_list("output")
        self.assertEqual(len(out), n * D)
        Q = array.array("f", q)
        K = array.array("f", k)
        V = array.array("f", v)
        scale = 1.0 / math.sqrt(D)
        for s in range(S):
            i = s * L + (s * 37) % L  # one row of each sequence
            qi = Q[i * D:(i + 1) * D]
            sc = [scale * sum(a * b for a, b in zip(qi, K[j * D:(j + 1) * D]))
                  for j in range(s * L, (s + 1) * L)]
            m = max(sc)
            w = [math.exp(x - m) for x in sc]
            z = sum(w)
            for c in range(D):
                ref = sum(w[j] * V[(s * L + j) * D + c] for j in range(L)) / z
                self.assertAlmostEqual(out[i * D + c], ref, delta=1e-4 + 1e-4 * abs(ref),
                                       msg="sequence %d row %d column %d" % (s, i, c))
        # The same tensors unpacked are the whole square: still refused
        # from the JSON part alone.
        header, body = v2_body(qkv, ["output"])
        status, obj = v2_post(self.srv, header, body)
        self.assertEqual(status, 413, obj)
        self.assertIn("--max-request-gflop", obj["error"])
        self.assertRegex(obj["error"], r"about 1\.\d+e\+03 GFLOP")


class InlineTest(harness.ServerTestCase):
    """--inline-idle-us 0: only the --inline-us bound (100 us) lets a
    request run on its HTTP thread."""
    server_args = ("--workers", "1", "--inline-idle-us", "0")

    def request(self, diagnostics):
        # L = 160, D = 8: the products and softmax about 60 us; with the
        # diagnostics the weights are written and each one's log taken,
        # about 0.6 ms.
        req = reference.rand_request(5, B=1, Lq=160, Lk=160, D=8, Dv=8)
        inputs = [(name, "FP32", reference.shape_of(req[name]),
                   f32_bytes(reference.flatten(req[name])))
                  for name in ("query", "key", "value")]
        outputs = ["output"] + (["allowed_keys", "max_weight"] if diagnostics else [])
        return req, v2_body(inputs, outputs)

    def cheap_runs(self):
        return metric(self.srv, "attnd_inline_requests_total", reason="cheap")

    def run_one(self, diagnostics):
        req, (header, body) = self.request(diagnostics)
        before = self.cheap_runs()
        status, res = v2_post(self.srv, header, body)
        self.assertEqual(status, 200, res if status != 200 else "")
        out, weights = reference.attention(req)
        got = res.as_list("output")
        for a, b in zip(got, reference.flatten(out)):
            self.assertAlmostEqual(a, b, delta=1e-5 + 1e-5 * abs(b))
        if diagnostics:
            self.assertEqual(res.as_list("allowed_keys"), [160] * 160)
            for a, row in zip(res.as_list("max_weight"), weights[0]):
                self.assertAlmostEqual(a, max(row), delta=1e-6 + 1e-5 * max(row))
        return self.cheap_runs() - before

    def test_diagnostics_are_charged_in_the_inline_decision(self):
        self.assertEqual(self.run_one(False), 1, "without diagnostics it runs inline")
        self.assertEqual(self.run_one(True), 0, "with diagnostics it is queued")


class SoftcapTest(harness.ServerTestCase):
    server_args = ("--workers", "1")

    def test_a_subnormal_softcap_is_refused_naming_it(self):
        req = reference.rand_request(8, B=1, Lq=3, Lk=4, D=4, Dv=2)
        for cap in (1e-40, 1.1754942e-38):
            status, obj = self.srv.post_json("/v1/attention", dict(req, softcap=cap))
            self.assertEqual(status, 400, obj)
            self.assertIn("softcap", obj["error"])
            self.assertIn("normal", obj["error"])
            inputs = [(name, "FP32", reference.shape_of(req[name]),
                       f32_bytes(reference.flatten(req[name])))
                      for name in ("query", "key", "value")]
            header, body = v2_body(inputs, ["output"], {"softcap": cap})
            status, obj = v2_post(self.srv, header, body)
            self.assertEqual(status, 400, obj)
            self.assertIn("parameters.softcap", obj["error"])

    def test_the_smallest_normal_softcap_is_computed_without_nan(self):
        flt_min = struct.unpack("f", struct.pack("I", 0x00800000))[0]
        req = reference.rand_request(9, B=1, Lq=3, Lk=5, D=4, Dv=2)
        # a zero query: zero scores, which a subnormal cap made NaN
        req["query"] = [[[0.0] * 4 for _ in range(3)]]
        for r in (req, dict(reference.rand_request(10, B=1, Lq=3, Lk=5, D=4, Dv=2))):
            r = dict(r, softcap=flt_min, return_weights=True)
            status, obj = self.srv.post_json("/v1/attention", r)
            self.assertEqual(status, 200, obj)
            out, weights = reference.attention(r)
            for a, b in zip(reference.flatten(obj["output"]), reference.flatten(out)):
                self.assertTrue(math.isfinite(a))
                self.assertAlmostEqual(a, b, delta=1e-5 + 1e-5 * abs(b))
            for a, b in zip(reference.flatten(obj["weights"]), reference.flatten(weights)):
                self.assertAlmostEqual(a, b, delta=1e-6)


if __name__ == "__main__":
    harness.main()
