"""KServe v2 / Open Inference Protocol against the real build/attnd.

Every endpoint; JSON and binary (Triton binary tensor extension) requests
and responses through v2client, which speaks like tritonclient.http; every
input datatype checked against the float64 reference (FP16/BF16 inputs:
the reference gets the same rounded values); mixed binary and JSON
outputs; v2 JSON responses validated against the protocol's OpenAPI
schema with Debian's python3-jsonschema; metrics by v2 route.  The error
paths and the content coding are in test_v2_errors.py.
"""

import json
import os
import random
import re
import subprocess
import tempfile
import time
import unittest
from fractions import Fraction

import harness
from reference import attention, flatten, nest, rand_tensor, shape_of
from v2client import (InferenceServerClient, InferInput, InferRequestedOutput, bf16_round,
                      f16_round, f32_round)

SCHEMA = harness.oip_spec()
SYSTEM_PYTHON = "/usr/bin/python3"

ROUND = {"FP32": lambda x: x, "FP64": lambda x: x, "FP16": f16_round, "BF16": bf16_round}


def rand_inputs(seed, B=2, H=None, Hkv=None, Lq=3, Lk=5, D=4, Dv=3):
    """(query, key, value) nested float lists; H None means rank 3."""
    rng = random.Random(seed)
    head = [] if H is None else [H]
    kvh = [] if H is None else [Hkv or H]
    return (rand_tensor(rng, [B] + head + [Lq, D]), rand_tensor(rng, [B] + kvh + [Lk, D]),
            rand_tensor(rng, [B] + kvh + [Lk, Dv]))


def tensor_input(name, t, datatype="FP32", binary=True, nested=False):
    """An InferInput holding nested list t (its values as given)."""
    i = InferInput(name, shape_of(t), datatype)
    i.set_data_from_list(t if nested else flatten(t), binary_data=binary)
    return i


def rounded(t, datatype):
    return nest([ROUND[datatype](x) for x in flatten(t)], shape_of(t))


# ---- FP16 and BF16 decimals next to midpoints ---------------------------
#
# A decimal a hair above or below the midpoint between two neighbouring
# FP16 (or BF16) values has that midpoint for its double; attnd must give
# the neighbour on the decimal's side, as the binary form would, not the
# double's tie to even.

HALF = {"FP16": (10, -14, 15), "BF16": (7, -126, 127)}  # mantissa bits, emin, emax


def half_exact(x, dt):
    """The Fraction x rounded once, to nearest with ties to even, onto dt's
    grid (None past its largest finite value), as a float."""
    mant, emin, emax = HALF[dt]
    a = abs(x)
    if a == 0:
        return 0.0
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < Fraction(2) ** e:
        e -= 1                                   # a in [2^e, 2^(e+1))
    unit = Fraction(2) ** (max(e, emin) - mant)  # the grid's spacing there
    v = round(a / unit) * unit                   # Fraction rounds ties to even
    if v >= Fraction(2) ** (emax + 1):
        return None
    return float(v) if x > 0 else -float(v)


def decimal_text(n, k, form):
    """n * 10^-k (n > 0 an integer) as JSON text in one of three forms."""
    s = str(n)
    if form == 0:
        return "%se-%d" % (s, k)
    if form == 1:
        if len(s) <= k:
            return "0." + "0" * (k - len(s)) + s
        return s[:len(s) - k] + "." + s[len(s) - k:] if k else s
    return "%s.%sE%+d" % (s[0], s[1:] or "0", len(s) - 1 - k)


def midpoint_tokens(rng, n, dt, lo, hi):
    """n decimals on, a hair above or a hair below midpoints of dt's grid
    whose binary exponents are in [lo, hi] (below emin: the subnormals'),
    either sign, in every form; 40 digits and more off the midpoints."""
    mant, emin, _ = HALF[dt]
    out = []
    for i in range(n):
        e = rng.randint(lo, hi)
        unit = Fraction(2) ** (max(e, emin) - mant)
        j = rng.randrange(2 ** mant) + (2 ** mant if e >= emin else 0)
        mid = (2 * j + 1) * unit / 2
        k = 0
        while (mid * 10 ** k).denominator != 1:
            k += 1
        digits, side = mid * 10 ** k, i % 3 - 1
        if side:
            digits, k = digits * 10 ** 30 + side, k + 30
        out.append(("-" if rng.random() < 0.5 else "") +
                   decimal_text(int(digits), k, rng.randrange(3)))
    return out


def half_body(tensors, way, params=None):
    """A v2 attention body of (name, datatype, shape, tokens): the tokens as
    one list ("leaf"), the last in a list of its own ("copy": the others
    then go through numscan's copy of the body), or under the member name
    "d\\u0061ta", which only the cJSON path reads ("cjson")."""
    ins = []
    for name, dt, shape, toks in tensors:
        last = "[%s]" % toks[-1] if way == "copy" else toks[-1]
        data = "[%s]" % ",".join(toks[:-1] + [last])
        ins.append('{"name":"%s","datatype":"%s","shape":%s,"%s":%s}' % (
            name, dt, json.dumps(shape), "d\\u0061ta" if way == "cjson" else "data",
            data))
    return '{"inputs":[%s]%s}' % (",".join(ins), ',"parameters":' + json.dumps(params)
                                  if params else "")


class V2Case(harness.ServerTestCase):
    server_args = ("--workers", "2")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.client = InferenceServerClient("127.0.0.1:%d" % cls.srv.port)

    def assert_close(self, got, ref, what):
        ref = flatten(ref)
        self.assertEqual(len(got), len(ref), what + " size")
        for n, (g, r) in enumerate(zip(got, ref)):
            self.assertLessEqual(abs(g - r), 1e-5 + 1e-5 * abs(r),
                                 "%s[%d]: got %r, want %r" % (what, n, g, r))

    def assert_weights(self, got, ref):
        ref = flatten(ref)
        self.assertEqual(len(got), len(ref), "weights size")
        for n, (g, r) in enumerate(zip(got, ref)):
            if r == 0.0:
                self.assertEqual(g, 0.0, "weights[%d] must be exactly 0" % n)
            else:
                self.assertLessEqual(abs(g - r), 1e-5, "weights[%d]" % n)

    def check_result(self, res, req, outputs=("output", "weights")):
        ref_out, ref_w = attention(req)
        names = [o["name"] for o in res.get_response()["outputs"]]
        self.assertEqual(names, list(outputs))
        if "output" in outputs:
            out = res.get_output("output")
            self.assertEqual(out["datatype"], "FP32")
            self.assertEqual(out["shape"], shape_of(ref_out))
            self.assert_close(res.as_list("output"), ref_out, "output")
        if "weights" in outputs:
            self.assertEqual(res.get_output("weights")["shape"], shape_of(ref_w))
            self.assert_weights(res.as_list("weights"), ref_w)
        self.assertEqual(res.trailing, 0, "bytes after the binary outputs")

    def raw(self, path, body, headers=None, method="POST"):
        return self.srv.request(method, path, body, headers or {})

    def upload_checked(self, conn, seed, lk, what=""):
        """Posts on conn a v2 binary request of query (1, 1, 2, 32) and key
        and value (1, 1, lk, 32), about 256 bytes per lk, and checks its
        output against the reference.  Returns (answer headers, body
        bytes)."""
        from v2client import InferResult, build_request
        q, k, v = rand_inputs(seed, B=1, H=1, Lq=2, Lk=lk, D=32, Dv=32)
        body, jl = build_request([tensor_input("query", q), tensor_input("key", k),
                                  tensor_input("value", v)],
                                 outputs=[InferRequestedOutput("output")])
        status, hdrs, data = harness.exchange(
            conn, "POST", "/v2/models/attention/infer", body,
            {"Inference-Header-Content-Length": str(jl)})
        self.assertEqual(status, 200, "%s Lk=%d: %r" % (what, lk, data[:300]))
        res = InferResult(data, int(hdrs["inference-header-content-length"]))
        self.check_result(res, {"query": q, "key": k, "value": v}, outputs=("output",))
        return hdrs, len(body)

    def assert_error(self, status, hdrs, body, want, *phrases):
        self.assertEqual(status, want, body[:300])
        self.assertTrue(hdrs.get("content-type", "").startswith("application/json"))
        msg = json.loads(body)["error"]
        for p in phrases:
            self.assertIn(p, msg)
        return msg


class EndpointTest(V2Case):
    def test_server_metadata(self):
        meta = self.client.get_server_metadata()
        self.assertEqual(meta["name"], "attnd")
        self.assertTrue(meta["version"])
        self.assertIn("binary_tensor_data", meta["extensions"])

    def test_model_config_is_tritons_form_of_the_metadata(self):
        # What perf_analyzer reads before it sends a request: max_batch_size,
        # and per tensor its TYPE_ data type, dims and whether it is optional.
        self.assertIn("model_configuration", self.client.get_server_metadata()["extensions"])
        for model in ("attention", "additive_attention"):
            meta = self.client.get_model_metadata(model)
            for path in ("/v2/models/%s/config" % model,
                         "/v2/models/%s/versions/1/config" % model):
                status, hdrs, body = self.srv.get(path)
                self.assertEqual(status, 200, body[:200])
                self.assertTrue(hdrs["content-type"].startswith("application/json"))
                cfg = json.loads(body)
                self.assertEqual((cfg["name"], cfg["platform"], cfg["max_batch_size"]),
                                 (model, "attnd", 0))
                for kind, key in (("input", "inputs"), ("output", "outputs")):
                    self.assertEqual([(t["name"], t["data_type"], t["dims"]) for t in cfg[kind]],
                                     [(t["name"], "TYPE_" + t["datatype"], t["shape"])
                                      for t in meta[key]], path + " " + kind)
                optional = {t["name"] for t in cfg["input"] if t["optional"]}
                self.assertEqual(optional, {"valid_lens", "mask", "bias", "sinks",
                                            "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k"})
                self.assertEqual(cfg["instance_group"][0]["kind"], "KIND_CPU")
                self.assertEqual(cfg["instance_group"][0]["count"], 2)  # --workers 2
                self.assertFalse(cfg["model_transaction_policy"]["decoupled"])

    def test_health_live_and_ready(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        status, _, body = self.srv.get("/v2/health/ready")
        self.assertEqual(status, 200, body)

    def test_model_metadata_with_and_without_version(self):
        for model, n_inputs in (("attention", 10), ("additive_attention", 13)):
            for version in ("", "1"):
                meta = self.client.get_model_metadata(model, version)
                self.assertEqual(meta["name"], model)
                self.assertEqual(meta["versions"], ["1"])
                names = [i["name"] for i in meta["inputs"]]
                self.assertEqual(names[:3], ["query", "key", "value"])
                self.assertEqual(len(names), n_inputs)
                q = meta["inputs"][0]
                self.assertEqual((q["datatype"], q["shape"]), ("FP32", [-1, -1, -1, -1]))
                self.assertEqual(dict((o["name"], o["datatype"]) for o in meta["outputs"]),
                                 {"output": "FP32", "weights": "FP32",
                                  "allowed_keys": "INT32", "entropy": "FP32",
                                  "max_weight": "FP32", "jacobian_norm": "FP32",
                                  "lse": "FP32"})

    def test_model_ready(self):
        for path in ("/v2/models/attention/ready", "/v2/models/attention/versions/1/ready",
                     "/v2/models/attention/versions/01/ready",
                     "/v2/models/additive_attention/ready"):
            status, _, body = self.srv.get(path)
            self.assertEqual(status, 200, path)
            self.assertEqual(json.loads(body)["ready"], True)

    def test_unknown_model_or_version_is_404(self):
        for method, path, phrase in (
                ("GET", "/v2/models/bert", "unknown model 'bert'"),
                ("GET", "/v2/models/attention/versions/2", "no version '2'"),
                ("GET", "/v2/models/bert/ready", "unknown model"),
                ("POST", "/v2/models/bert/infer", "unknown model"),
                ("POST", "/v2/models/attention/versions/7/infer", "no version '7'"),
                ("GET", "/v2/models/bert/config", "unknown model"),
                ("GET", "/v2/models/attention/versions/2/stats", "no version '2'"),
                ("GET", "/v2/models/attention/trace/setting", None),
                ("GET", "/v2/health/dead", None)):
            status, hdrs, body = self.raw(path, b"{}" if method == "POST" else None,
                                          method=method)
            self.assert_error(status, hdrs, body, 404, *([phrase] if phrase else []))

    def test_wrong_method_is_405(self):
        for method, path in (("GET", "/v2/models/attention/infer"), ("POST", "/v2"),
                             ("DELETE", "/v2/models/attention"),
                             ("POST", "/v2/models/attention/config"),
                             ("POST", "/v2/models/stats"),
                             ("POST", "/v2/health/live")):
            status, hdrs, body = self.raw(path, None, method=method)
            self.assert_error(status, hdrs, body, 405)
            self.assertTrue(hdrs.get("allow"))


class StatisticsTest(V2Case):
    def stats(self, path="/v2/models/attention/stats"):
        status, _, body = self.srv.get(path)
        self.assertEqual(status, 200, body[:200])
        return {m["name"]: m for m in json.loads(body)["model_stats"]}

    def test_each_phase_counts_the_v2_requests_of_its_model(self):
        # Triton's statistics extension, as perf_analyzer reads it around
        # each measurement: counts and nanoseconds per phase, per model.
        self.assertIn("statistics", self.client.get_server_metadata()["extensions"])
        before = self.stats("/v2/models/stats")
        self.assertEqual(set(before), {"attention", "additive_attention"})
        t0 = int(time.time() * 1000)
        q, k, v = rand_inputs(31)
        for binary in (False, True, True):
            res = self.client.infer("attention", [tensor_input("query", q, binary=binary),
                                                  tensor_input("key", k, binary=binary),
                                                  tensor_input("value", v, binary=binary)])
            self.check_result(res, {"query": q, "key": k, "value": v})
        for bad in (b"{}", b"not json"):
            status, _, _ = self.raw("/v2/models/attention/infer", bad)
            self.assertEqual(status, 400)
        self.srv.post_json("/v1/attention", {"query": q, "key": k, "value": v})
        t1 = int(time.time() * 1000) + 1
        after = self.stats()["attention"]
        self.assertEqual(after, self.stats("/v2/models/attention/versions/1/stats")["attention"])
        was = before["attention"]
        self.assertEqual(after["version"], "1")
        self.assertLessEqual(t0, after["last_inference"])
        self.assertLessEqual(after["last_inference"], t1)
        # /v1 requests are not the v2 model's; the two failures are.
        self.assertEqual(after["inference_count"] - was["inference_count"], 3)
        self.assertEqual(after["execution_count"] - was["execution_count"], 3)
        got = {k: (after["inference_stats"][k]["count"] - was["inference_stats"][k]["count"],
                   after["inference_stats"][k]["ns"] - was["inference_stats"][k]["ns"])
               for k in after["inference_stats"]}
        for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            self.assertEqual(got[phase][0], 3, phase)
            self.assertGreater(got[phase][1], 0, phase)
        self.assertEqual(got["fail"][0], 2)
        self.assertEqual(got["cache_hit"], (0, 0))
        # the phases of the three successes lie within their own spans
        self.assertGreaterEqual(got["success"][1], sum(
            got[p][1] for p in ("queue", "compute_input", "compute_infer", "compute_output")))
        self.assertEqual(after["batch_stats"][0]["batch_size"], 1)
        self.assertEqual(after["batch_stats"][0]["compute_infer"]["count"],
                         after["inference_count"])
        # the other model saw none of it
        self.assertEqual(self.stats("/v2/models/stats")["additive_attention"],
                         before["additive_attention"])


class InferJsonTest(V2Case):
    def test_rank3_nested_and_flat_data_with_id(self):
        q, k, v = rand_inputs(1)
        for nested in (False, True):
            res = self.client.infer(
                "attention", [tensor_input("query", q, binary=False, nested=nested),
                              tensor_input("key", k, binary=False, nested=nested),
                              tensor_input("value", v, binary=False, nested=nested)],
                outputs=[InferRequestedOutput("output", False),
                         InferRequestedOutput("weights", False)], request_id="abc")
            body = res.get_response()
            self.assertEqual((body["model_name"], body["model_version"], body["id"]),
                             ("attention", "1", "abc"))
            self.check_result(res, {"query": q, "key": k, "value": v})

    def test_rank4_grouped_heads_with_lengths_mask_bias_and_parameters(self):
        q, k, v = rand_inputs(2, B=2, H=4, Hkv=2, Lq=3, Lk=6)
        rng = random.Random(3)
        mask = [[[rng.random() < 0.8 for _ in range(6)] for _ in range(3)]]
        bias = rand_tensor(rng, [3, 6], 0.5)
        for lens_type in ("INT32", "INT64"):
            req = {"query": q, "key": k, "value": v, "valid_lens": [4, 6], "mask": mask,
                   "bias": bias, "causal": "lower_right", "scale": 0.3}
            inputs = [tensor_input("query", q, binary=False),
                      tensor_input("key", k, binary=False),
                      tensor_input("value", v, binary=False),
                      InferInput("valid_lens", [2], lens_type).set_data_from_list(
                          [4, 6], binary_data=False),
                      InferInput("mask", [1, 3, 6], "BOOL").set_data_from_list(
                          mask, binary_data=False),
                      tensor_input("bias", bias, binary=False)]
            res = self.client.infer("attention", inputs,
                                    outputs=[InferRequestedOutput("output", False),
                                             InferRequestedOutput("weights", False)],
                                    parameters={"causal": "lower_right", "scale": 0.3})
            self.check_result(res, req)

    def test_fp16_and_bf16_accepted_in_json(self):
        q, k, v = rand_inputs(4)
        for dt in ("FP16", "BF16", "FP64"):
            res = self.client.infer(
                "attention", [tensor_input("query", q, dt, binary=False),
                              tensor_input("key", k, dt, binary=False),
                              tensor_input("value", v, dt, binary=False)],
                outputs=[InferRequestedOutput("output", False),
                         InferRequestedOutput("weights", False)])
            self.check_result(res, {"query": rounded(q, dt), "key": rounded(k, dt),
                                    "value": rounded(v, dt)})

    def post_half(self, tensors, way, params=None):
        status, res = self.srv.post_json("/v2/models/attention/infer",
                                         half_body(tensors, way, params))
        self.assertEqual(status, 200, "%s: %s" % (way, res))
        return {o["name"]: o["data"] for o in res["outputs"]}

    def test_fp16_and_bf16_decimals_by_midpoints_round_once(self):
        # 1. value alone decides the output (one key: its weight is 1), so
        #    each element is compared exactly; not BF16's subnormals, which
        #    P V flushes to 0 (below FLT_MIN).
        # 2. subnormal queries times a key of 2^14 (FP16) or 2^126 (BF16):
        #    one step of their grid moves a score by 2^-10 or 2^-7, and the
        #    output, the weight of the key, well past the tolerance.
        # 3. q, k and v all of such decimals.
        rng = random.Random(31)
        for dt in ("FP16", "BF16"):
            mant, emin, _ = HALF[dt]
            subs = midpoint_tokens(rng, 30, dt, emin - mant, emin - 1)
            toks = midpoint_tokens(rng, 30, dt, -6, 6) + (subs if dt == "FP16" else [])
            want = [half_exact(Fraction(t), dt) for t in toks]
            big = 2 ** (14 if dt == "FP16" else 126)
            q2 = [half_exact(Fraction(t), dt) for t in subs]
            req2 = {"query": [[[x] for x in q2]], "key": [[[0.0], [float(big)]]],
                    "value": [[[0.0], [1.0]]], "scale": 1.0}
            q3 = midpoint_tokens(rng, 8, dt, -3, 0)
            k3 = midpoint_tokens(rng, 12, dt, -3, 0)
            v3 = midpoint_tokens(rng, 12, dt, -3, 0)
            req3 = {n: nest([half_exact(Fraction(t), dt) for t in tk], sh)
                    for n, tk, sh in (("query", q3, [1, 2, 4]), ("key", k3, [1, 3, 4]),
                                      ("value", v3, [1, 3, 4]))}
            # the double's tie to even differs for many: the test can fail
            differ = [t for t in toks + subs + q3 + k3 + v3
                      if half_exact(Fraction(t), dt) != half_exact(Fraction(float(t)), dt)]
            self.assertGreater(len(differ), 20)
            out1 = flatten(attention({"query": [[[1.0]]], "key": [[[1.0]]],
                                      "value": [[want]]})[0])
            for way in ("leaf", "copy", "cjson"):
                what = "%s %s" % (dt, way)
                got = self.post_half([("query", "FP32", [1, 1, 1], ["1"]),
                                      ("key", "FP32", [1, 1, 1], ["1"]),
                                      ("value", dt, [1, 1, len(toks)], toks)], way)
                for n, (g, r, t) in enumerate(zip(got["output"], out1, toks)):
                    # the float32 printed shortest, read back exactly
                    self.assertEqual(f32_round(g), r, "%s value[%d] = %s" % (what, n, t))
                got = self.post_half([("query", dt, [1, len(subs), 1], subs),
                                      ("key", "FP32", [1, 2, 1], ["0", str(big)]),
                                      ("value", "FP32", [1, 2, 1], ["0", "1"])], way,
                                     {"scale": 1})
                self.assert_close(got["output"], attention(req2)[0], what + " subnormals")
                got = self.post_half([("query", dt, [1, 2, 4], q3),
                                      ("key", dt, [1, 3, 4], k3),
                                      ("value", dt, [1, 3, 4], v3)], way)
                ref_out, ref_w = attention(req3)
                self.assert_close(got["output"], ref_out, what + " output")
                self.assert_weights(got["weights"], ref_w)

    def test_additive_model(self):
        q, k, v = rand_inputs(5, Lq=2, Lk=4, D=3, Dv=2)
        rng = random.Random(6)
        wq, wk, wv = rand_tensor(rng, [5, 3]), rand_tensor(rng, [5, 3]), rand_tensor(rng, [5])
        req = {"query": q, "key": k, "value": v, "scoring": "additive",
               "w_q": wq, "w_k": wk, "w_v": wv, "valid_lens": [3, 4]}
        inputs = [tensor_input(n, t) for n, t in
                  (("query", q), ("key", k), ("value", v), ("w_q", wq), ("w_k", wk),
                   ("w_v", wv))]
        inputs.append(InferInput("valid_lens", [2], "INT32").set_data_from_list([3, 4]))
        self.check_result(self.client.infer("additive_attention", inputs), req)

    def test_dropout_with_seed(self):
        q, k, v = rand_inputs(7)
        req = {"query": q, "key": k, "value": v, "dropout": {"p": 0.3, "seed": 11}}
        res = self.client.infer("attention", [tensor_input("query", q),
                                              tensor_input("key", k),
                                              tensor_input("value", v)],
                                parameters={"dropout_p": 0.3, "seed": 11})
        self.check_result(res, req)


class InferBinaryTest(V2Case):
    def test_every_float_datatype_binary_in_and_out(self):
        q, k, v = rand_inputs(8, B=1, H=2, Lq=4, Lk=5, D=8, Dv=3)
        for dt in ("FP32", "FP64", "FP16", "BF16"):
            res = self.client.infer("attention", [tensor_input("query", q, dt),
                                                  tensor_input("key", k, dt),
                                                  tensor_input("value", v, dt)])
            hdrs = self.client.last_headers
            self.assertEqual(hdrs["content-type"], "application/octet-stream")
            self.assertIn("inference-header-content-length", hdrs)
            for o in res.get_response()["outputs"]:
                self.assertNotIn("data", o)
            self.check_result(res, {"query": rounded(q, dt), "key": rounded(k, dt),
                                    "value": rounded(v, dt)})

    def test_mixed_binary_and_json_outputs_keep_the_requested_order(self):
        q, k, v = rand_inputs(9)
        inputs = [tensor_input("query", q, "FP16"), tensor_input("key", k, binary=False),
                  tensor_input("value", v, "BF16")]
        req = {"query": rounded(q, "FP16"), "key": k, "value": rounded(v, "BF16")}
        res = self.client.infer("attention", inputs,
                                outputs=[InferRequestedOutput("weights", True),
                                         InferRequestedOutput("output", False)])
        self.assertIn("data", res.get_output("output"))
        self.assertEqual(res.get_output("weights")["parameters"]["binary_data_size"],
                         2 * 3 * 5 * 4)
        self.check_result(res, req, outputs=("weights", "output"))
        # binary_data_output for all, overridden by one output's binary_data
        res = self.client.infer("attention", inputs,
                                outputs=[InferRequestedOutput("output", False)],
                                parameters={"binary_data_output": True})
        self.check_result(res, req, outputs=("output",))
        self.assertIn("data", res.get_output("output"))

    def test_output_only_skips_weights(self):
        q, k, v = rand_inputs(10, Lq=4, Lk=9)
        res = self.client.infer("attention", [tensor_input("query", q),
                                              tensor_input("key", k),
                                              tensor_input("value", v)],
                                outputs=[InferRequestedOutput("output")])
        self.check_result(res, {"query": q, "key": k, "value": v}, outputs=("output",))
        res = self.client.infer("attention", [tensor_input("query", q),
                                              tensor_input("key", k),
                                              tensor_input("value", v)],
                                outputs=[InferRequestedOutput("weights")])
        self.check_result(res, {"query": q, "key": k, "value": v}, outputs=("weights",))

    def test_binary_output_alone_is_the_same_answer_whatever_the_id(self):
        # An output sent alone as binary data follows its JSON part in one
        # buffer when that part fits in the room before it; an id of 100
        # control characters (100 bytes, 600 as JSON escapes) does not
        # fit, and the answer goes in pieces.  Both are the same answer.
        q, k, v = rand_inputs(12, Lq=5, Lk=7)
        req = {"query": q, "key": k, "value": v}
        got = []
        for rid in ("r", "\x01" * 100):
            res = self.client.infer("attention", [tensor_input("query", q),
                                                  tensor_input("key", k),
                                                  tensor_input("value", v)],
                                    outputs=[InferRequestedOutput("output")],
                                    request_id=rid)
            self.assertEqual(res.get_response()["id"], rid)
            self.check_result(res, req, outputs=("output",))
            got.append(res.as_list("output"))
        self.assertEqual(got[0], got[1])

    def test_binary_lengths_and_mask(self):
        q, k, v = rand_inputs(11, B=2, Lq=3, Lk=4)
        mask = [[[True, False, True, True]]]
        for lens_type in ("INT32", "INT64"):
            inputs = [tensor_input("query", q), tensor_input("key", k),
                      tensor_input("value", v),
                      InferInput("valid_lens", [2, 3], lens_type).set_data_from_list(
                          [1, 2, 3, 0, 4, 4]),
                      InferInput("mask", [1, 1, 4], "BOOL").set_data_from_list(flatten(mask))]
            res = self.client.infer("attention", inputs,
                                    parameters={"causal": True})
            self.check_result(res, {"query": q, "key": k, "value": v, "mask": mask,
                                    "valid_lens": [[1, 2, 3], [0, 4, 4]], "causal": True})

    def test_any_content_type_is_accepted(self):
        q, k, v = rand_inputs(12)
        from v2client import build_request
        body, jl = build_request([tensor_input("query", q), tensor_input("key", k),
                                  tensor_input("value", v)])
        for ctype in (None, "application/octet-stream", "text/plain", "application/json"):
            h = {"Inference-Header-Content-Length": str(jl)}
            if ctype:
                h["Content-Type"] = ctype
            status, hdrs, data = self.raw("/v2/models/attention/versions/1/infer", body, h)
            self.assertEqual(status, 200, data[:200])
            header_len = int(hdrs["inference-header-content-length"])
            outs = json.loads(data[:header_len])["outputs"]
            self.assertEqual(len(data) - header_len,
                             sum(o["parameters"]["binary_data_size"] for o in outs))

    def test_binary_body_in_odd_chunks_with_and_without_length(self):
        # The body as attnd receives it: FP32 inputs are read where they lie
        # when aligned, copied after an odd-sized BOOL mask; with and without
        # Content-Length (chunked, so the buffer grows), a bad value after
        # the good ones still named.
        from v2client import InferResult, build_request
        q, k, v = rand_inputs(15, B=1, H=2, Lq=6, Lk=7, D=8, Dv=5)
        mask = [[[[True, True, False, True, True, True, False]]]]
        plain = [tensor_input("query", q), tensor_input("key", k),
                 tensor_input("value", v)]
        masked = [InferInput("mask", [1, 1, 1, 7], "BOOL").set_data_from_list(
            flatten(mask))] + plain
        bad = [tensor_input("query", q), tensor_input("key", k),
               InferInput("value", [1, 2, 7, 5], "FP32").set_data_from_list(
                   flatten(v)[:-1] + [float("nan")])]
        for inputs, req in ((plain, {"query": q, "key": k, "value": v}),
                            (masked, {"query": q, "key": k, "value": v, "mask": mask}),
                            (bad, None)):
            body, jl = build_request(inputs, parameters={"binary_data_output": True})
            for chunked in (False, True):
                h = {"Inference-Header-Content-Length": str(jl)}
                conn = self.srv.connection()
                try:
                    if chunked:
                        pieces = [body[i:i + 37] for i in range(0, len(body), 37)]
                        h["Transfer-Encoding"] = "chunked"
                        conn.request("POST", "/v2/models/attention/infer", body=iter(pieces),
                                     encode_chunked=True, headers=h)
                    else:
                        conn.request("POST", "/v2/models/attention/infer", body=body,
                                     headers=h)
                    resp = conn.getresponse()
                    data = resp.read()
                    hdrs = {k2.lower(): v2 for k2, v2 in resp.getheaders()}
                finally:
                    conn.close()
                if req is None:
                    self.assert_error(resp.status, hdrs, data, 400,
                                      "value[0][1][6][4]: FP32 value is not finite")
                    continue
                self.assertEqual(resp.status, 200, data[:300])
                res = InferResult(data, int(hdrs["inference-header-content-length"]))
                self.check_result(res, req)


class ConnMemoryTest(harness.UnixSocketServer, V2Case):
    """--conn-memory-kb 256: libmicrohttpd reads a body 128 KiB or more at a
    time.  Uploads of 128 KiB to 768 KiB on one kept connection, over TCP
    and the Unix socket, get the reference's answers; a header block that
    the default 32 KiB refuses fits."""
    server_args = ("--workers", "2", "--conn-memory-kb", "256")

    def test_large_uploads_on_kept_connections_get_the_reference_answers(self):
        for name, conn in (("tcp", self.srv.connection()),
                           ("unix", harness.UnixHTTPConnection(self.sock))):
            try:
                # Bodies of about 125, 250, 500 and 750 KiB, around
                # multiples of the read size.
                for n, lk in enumerate((500, 1000, 2000, 3000)):
                    hdrs, _ = self.upload_checked(conn, 40 + n, lk, name)
                    self.assertNotEqual(hdrs.get("connection"), "close")
            finally:
                conn.close()

    def test_a_header_block_past_32_kib_fits(self):
        big = {"X-Padding": "a" * (40 << 10)}
        self.assertEqual(self.srv.request("GET", "/v2/health/ready", headers=big)[0], 200)
        with harness.Attnd(["--workers", "1"]) as small:
            self.assertEqual(small.request("GET", "/v2/health/ready", headers=big)[0], 431)
            self.assertEqual(small.stop(), 0)


class ReadSizeTest(V2Case):
    """At the default --conn-memory-kb (32), libmicrohttpd grows its read
    buffer past half its memory while a body arrives (http.c,
    MHD_OPTION_CONNECTION_MEMORY_INCREMENT): seen with strace, a 768 KiB
    upload is read more than 16 KiB at a time, and answered right."""

    @staticmethod
    def traced(pid, tracer):
        """Whether every thread of pid is traced by tracer."""
        task = "/proc/%d/task" % pid
        for tid in os.listdir(task):
            try:
                with open("%s/%s/status" % (task, tid)) as f:
                    if "\nTracerPid:\t%d\n" % tracer not in f.read():
                        return False
            except FileNotFoundError:
                pass
        return True

    @unittest.skipIf(harness.VALGRIND, "strace cannot trace valgrind's guest")
    def test_a_body_is_read_half_the_memory_or_more_at_a_time(self):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "reads")
            tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=recvfrom",
                                       "-o", log, "-p", str(self.srv.proc.pid)],
                                      stderr=subprocess.PIPE, text=True)
            try:
                attached = harness.wait_for(
                    lambda: (tracer.poll() is not None or
                             self.traced(self.srv.proc.pid, tracer.pid)), 20)
                if tracer.poll() is not None:
                    # No ptrace here (a container without CAP_SYS_PTRACE).
                    self.skipTest("strace could not attach: %s" % tracer.stderr.read())
                self.assertTrue(attached, "strace did not attach within 20 s")
                conn = self.srv.connection()
                try:
                    _, sent = self.upload_checked(conn, 61, 3000)  # 750 KiB
                finally:
                    conn.close()
            finally:
                tracer.terminate()
                tracer.wait(30)
                tracer.stderr.close()
            with open(log) as f:
                reads = [int(n) for n in re.findall(r"^\d+ +recvfrom\(.*\) = (\d+)$",
                                                     f.read(), re.M)]
        self.assertGreater(sum(reads), sent)
        # libmicrohttpd 0.9.75 reads about three quarters of the 32 KiB
        # pool at a time with the increment attnd gives it; 1.0 half of it
        # whatever the increment (docs/decisions.md, "Read sizes").
        if harness.library_versions()["libmicrohttpd"] >= (1, 0):
            self.assertGreater(max(reads), 15 << 10, "read sizes: %s" % reads)
        else:
            self.assertGreater(max(reads), 20 << 10, "read sizes: %s" % reads)


SCHEMA_CHECK = r"""
import json, sys, yaml, jsonschema
spec = yaml.safe_load(open(sys.argv[1]))
schemas = spec["components"]["schemas"]
bad = 0
for line in sys.stdin:
    name, doc = json.loads(line)
    schema = dict(schemas[name], components={"schemas": schemas})
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        bad += 1
        print("%s: %s" % (name, e.message))
print("checked")
sys.exit(1 if bad else 0)
"""


class SchemaTest(V2Case):
    def test_json_responses_validate_against_the_openapi_schema(self):
        if SCHEMA is None:
            self.skipTest(harness.OIP_SPEC_MISSING)
        docs = []
        status, _, body = self.srv.get("/v2")
        docs.append(("metadata_server_response", json.loads(body)))
        for model in ("attention", "additive_attention"):
            status, _, body = self.srv.get("/v2/models/" + model)
            docs.append(("metadata_model_response", json.loads(body)))
        q, k, v = rand_inputs(18)
        res = self.client.infer("attention", [tensor_input("query", q, binary=False),
                                              tensor_input("key", k, binary=False),
                                              tensor_input("value", v, binary=False)],
                                outputs=[InferRequestedOutput("output", False),
                                         InferRequestedOutput("weights", False)],
                                request_id="s1")
        docs.append(("inference_response", res.get_response()))
        status, _, body = self.srv.get("/v2/models/nope")
        docs.append(("metadata_model_error_response", json.loads(body)))
        status, _, body = self.raw("/v2/models/attention/infer", b"{}")
        docs.append(("inference_error_response", json.loads(body)))
        # the checker must be able to fail: a response missing "outputs"
        proc = subprocess.run([SYSTEM_PYTHON, "-c", SCHEMA_CHECK, SCHEMA],
                              input=json.dumps(["inference_response", {"model_name": "x"}]),
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        feed = "".join(json.dumps(d) + "\n" for d in docs)
        proc = subprocess.run([SYSTEM_PYTHON, "-c", SCHEMA_CHECK, SCHEMA], input=feed,
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("checked", proc.stdout)


class MetricsTest(V2Case):
    def samples(self):
        from test_http import parse_metrics
        status, _, body = self.srv.get("/metrics")
        return parse_metrics(body.decode())

    def count(self, samples, route, code):
        return samples.get(("attnd_requests_total",
                            frozenset({("route", route), ("code", code)})), 0.0)

    def test_v2_routes_are_counted(self):
        before = self.samples()
        self.srv.get("/v2")
        self.srv.get("/v2/health/ready")
        self.srv.get("/v2/models/attention")
        self.srv.get("/v2/models/attention/ready")
        self.srv.get("/v2/models/bert")
        q, k, v = rand_inputs(19)
        self.client.infer("attention", [tensor_input("query", q), tensor_input("key", k),
                                        tensor_input("value", v)])
        self.raw("/v2/models/attention/infer", b"{")
        after = self.samples()
        for route, code in (("/v2", "200"), ("/v2/health/ready", "200"),
                            ("/v2/models/:m", "200"), ("/v2/models/:m/ready", "200"),
                            ("/v2/models/:m", "404"), ("/v2/models/:m/infer", "200"),
                            ("/v2/models/:m/infer", "400")):
            self.assertEqual(self.count(after, route, code),
                             self.count(before, route, code) + 1, (route, code))


if __name__ == "__main__":
    harness.main()