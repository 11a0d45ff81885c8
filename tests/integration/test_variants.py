"""Learned sinks, soft-capping, ALiBi, packed sequences (cu_seqlens), the
lower-right window and the row log-sum-exp, over HTTP against the float64
reference (reference.py).

/v1: each variant alone and with every older feature (mask, bias,
valid_lens, causal both ways, both window alignments, grouped heads,
additive scoring, dropout), with and without weights, nested and flat, the
lse with -inf as null, rows with nothing allowed (with a sink: w = 0,
out = 0, lse = the sink), a gpt-oss layer, a packed request split across
workers, and every bad value as a 400 naming it.

v2: the inputs sinks and alibi_slopes in FP32, FP64, FP16 and BF16,
cu_seqlens_q/_k in INT32 and INT64, the parameters softcap and
window_align, the lse output as JSON (null) and binary (-inf), in JSON and
binary requests and through shared memory regions; the metadata and
config list them; bad values and misspelt names get 400s that name them.
"""

import json
import math
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_diagnostics import Checks as DiagnosticsChecks  # noqa: E402
from reference import (attention, diagnostics, flatten, lse, nest, rand_request,  # noqa: E402
                       rand_tensor, shape_of)
from v2client import (InferenceServerClient, InferenceServerException, InferInput,  # noqa: E402
                      InferRequestedOutput)

NEG_INF = float("-inf")
OPENAPI = os.path.join(harness.ROOT, "deploy", "openapi.json")


def mask_for(rng, shape, p=0.7):
    if len(shape) == 1:
        return [rng.random() < p for _ in range(shape[0])]
    return [mask_for(rng, shape[1:], p) for _ in range(shape[0])]


def rand_cu(rng, n, length):
    """n + 1 offsets from 0 to length, non-decreasing, empty pieces likely."""
    inner = sorted(rng.randint(0, length) for _ in range(n - 1))
    return [0] + inner + [length]


def slopes_for(H):
    """BLOOM's ALiBi slopes, 2^(-8 (h + 1) / H): exact in every float type
    for H a power of two."""
    return [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]


def new_kinds(rng, req, H, B, kinds):
    """Adds the variants named in kinds (sinks, softcap, ALiBi, the
    lower-right window) to a request."""
    Hn = H or 1
    if "sinks" in kinds:
        req["sinks"] = [rng.choice([-1.5, 0.25, 1.0, 3.0]) for _ in range(Hn)]
        if Hn > 1:
            req["sinks"][-1] = 20.0  # a sink that takes nearly every row
    if "softcap" in kinds:
        req["softcap"] = rng.choice([0.5, 1.5, 4.0])
    if "alibi" in kinds:
        req["alibi_slopes"] = slopes_for(Hn)
    if "alibi2" in kinds:
        req["alibi_slopes"] = [slopes_for(Hn) for _ in range(B)]
    if "lower_right" in kinds:
        req["window_align"] = "lower_right"
    return req


class Checks(DiagnosticsChecks):
    """test_diagnostics' comparisons (assert_close, assert_weights), and the
    lse's."""

    def assert_lse(self, got, ref, what, null_is_inf=True):
        """got: flat lse as answered (JSON null or -inf for -inf)."""
        self.assertEqual(len(got), len(ref), what + ": element count")
        for n, (g, r) in enumerate(zip(got, ref)):
            if r == NEG_INF:
                want = None if null_is_inf else NEG_INF
                self.assertEqual(g, want, "%s[%d]: a row with nothing allowed and no sink"
                                 % (what, n))
            else:
                self.assertIsNotNone(g, "%s[%d]" % (what, n))
                self.assertTrue(abs(g - r) <= 1e-5 + 1e-6 * abs(r),
                                "%s[%d]: got %r, want %r" % (what, n, g, r))


# ---------------------------------------------------------------- /v1

class V1Variants(harness.ServerTestCase, Checks):
    server_args = ("--workers", "3")

    def post(self, req, status=200):
        st, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(st, status, resp)
        return resp

    def run_case(self, req, what):
        """Weights and lse, then no weights (the online path) with the lse;
        each against the reference.  Returns the reference lse."""
        ref_out, ref_w = attention(req)
        ref_l = lse(req)
        full = self.post(dict(req, return_weights=True, return_lse=True))
        self.assertEqual(shape_of(full["output"]), shape_of(ref_out), what)
        self.assertEqual(shape_of(full["lse"]), shape_of(ref_out)[:-1], what + " lse shape")
        self.assert_close(flatten(full["output"]), flatten(ref_out), what + " output")
        self.assert_weights(flatten(full["weights"]), flatten(ref_w), what + " weights")
        self.assert_lse(flatten(full["lse"]), flatten(ref_l), what + " lse")
        lean = self.post(dict(req, return_weights=False, return_lse=True))
        self.assertNotIn("weights", lean)
        self.assert_close(flatten(lean["output"]), flatten(ref_out), what + " output (online)")
        self.assert_lse(flatten(lean["lse"]), flatten(ref_l), what + " lse (online)")
        plain = self.post(dict(req, return_weights=False))
        self.assertNotIn("lse", plain, what + ": lse only on request")
        return ref_l

    def cases(self, kinds, older, seed, packed=False, shapes=None):
        rng = random.Random(seed)
        shapes = shapes or ((2, None, None, 5, 7), (2, 4, 2, 6, 9), (1, 2, 1, 9, 5))
        n = 0
        for B, H, Hkv, Lq, Lk in shapes:
            if packed:
                B = 1
            n += 1
            req = rand_request(seed * 100 + n, B=B, H=H, Hkv=Hkv, Lq=Lq, Lk=Lk, D=4, Dv=3)
            req = new_kinds(rng, req, H, B, kinds)
            if packed:
                ns = rng.randint(1, 4)
                req["cu_seqlens_q"] = rand_cu(rng, ns, Lq)
                req["cu_seqlens_k"] = rand_cu(rng, ns, Lk)
            for name, val in older.items():
                req[name] = val(rng, B, H, Lq, Lk) if callable(val) else val
            yield req, "%s + %s, shape %s" % ("+".join(kinds) or "plain", ",".join(older) or
                                               "nothing", (B, H, Hkv, Lq, Lk))

    # older features, as request fields (callables get rng, B, H, Lq, Lk)
    OLDER = {
        "mask": {"mask": lambda r, B, H, Lq, Lk: mask_for(r, [Lq, Lk])},
        "bias": {"bias": lambda r, B, H, Lq, Lk: rand_tensor(r, [1, Lk], 2.0)},
        "valid_lens": {"valid_lens": lambda r, B, H, Lq, Lk: [r.randint(0, Lk) for _ in range(B)]},
        "valid_lens (B, Lq)": {"valid_lens": lambda r, B, H, Lq, Lk:
                               [[r.randint(0, Lk) for _ in range(Lq)] for _ in range(B)]},
        "causal": {"causal": True},
        "causal lower_right": {"causal": "lower_right"},
        "window": {"window": [2, 1]},
        "window lower_right": {"window": [3, 0], "causal": "lower_right",
                               "window_align": "lower_right"},
        "dropout": {"dropout": {"p": 0.3, "seed": 7}},
        "everything": {"mask": lambda r, B, H, Lq, Lk: mask_for(r, [Lq, Lk], 0.85),
                       "bias": lambda r, B, H, Lq, Lk: rand_tensor(r, [Lk]),
                       "causal": "lower_right", "window": [4, 2]},
    }

    def test_each_variant_alone(self):
        for kinds in (("sinks",), ("softcap",), ("alibi",), ("alibi2",), ("lower_right",)):
            extra = {"window": [2, 1]} if kinds == ("lower_right",) else {}
            for req, what in self.cases(kinds, extra, seed=len(kinds[0])):
                self.run_case(req, what)

    def test_packed_sequences_alone_and_with_causal_and_windows(self):
        for older in ({}, {"causal": True}, {"causal": "lower_right"}, {"window": [1, 1]},
                      {"window": [2, 0], "window_align": "lower_right", "causal": "lower_right"}):
            for req, what in self.cases((), older, seed=3, packed=True):
                self.run_case(req, "packed " + what)

    def test_sinks_softcap_alibi_with_every_older_feature(self):
        for i, (name, older) in enumerate(self.OLDER.items()):
            for req, what in self.cases(("sinks", "softcap", "alibi"), older, seed=10 + i):
                self.run_case(req, what)

    def test_packed_with_the_new_variants_and_older_features(self):
        for i, (name, older) in enumerate(self.OLDER.items()):
            if name.startswith("valid_lens"):
                continue  # refused with packing (test_bad_values)
            for req, what in self.cases(("sinks", "softcap", "alibi"), older, seed=30 + i,
                                        packed=True):
                self.run_case(req, "packed " + what)

    def test_additive_scoring_with_the_variants(self):
        rng = random.Random(5)
        for packed in (False, True):
            req = rand_request(51, B=1, H=2, Hkv=1, Lq=6, Lk=8, D=5, Dv=2)
            req.update(scoring="additive", w_q=rand_tensor(rng, [3, 5]),
                       w_k=rand_tensor(rng, [3, 5]), w_v=rand_tensor(rng, [3], 2.0),
                       sinks=[0.5, -1.0], softcap=1.5, alibi_slopes=[0.5, 0.25], causal=True)
            if packed:
                req.update(cu_seqlens_q=[0, 2, 6], cu_seqlens_k=[0, 3, 8])
            self.run_case(req, "additive packed %s" % packed)

    def test_all_masked_row_with_a_sink_is_zero_and_its_lse_the_sink(self):
        req = rand_request(6, B=1, H=2, Lq=3, Lk=4)
        req.update(sinks=[1.5, -2.0], mask=[[True] * 4, [False] * 4, [True, False, False, True]],
                   return_weights=True, return_lse=True)
        for rw in (True, False):
            resp = self.post(dict(req, return_weights=rw))
            for h in range(2):
                self.assertEqual(resp["output"][0][h][1], [0.0, 0.0, 0.0])
                self.assertAlmostEqual(resp["lse"][0][h][1], req["sinks"][h], places=6)
                if rw:
                    self.assertEqual(resp["weights"][0][h][1], [0.0] * 4)
        # no sink: -inf, printed as null
        del req["sinks"]
        resp = self.post(req)
        self.assertEqual([resp["lse"][0][h][1] for h in range(2)], [None, None])
        del req["return_lse"], req["return_weights"]
        self.run_case(req, "masked row, no sink")

    def test_weights_sum_below_one_with_a_sink_and_exp_of_s_minus_lse(self):
        req = rand_request(7, B=1, H=2, Lq=4, Lk=6)
        req.update(sinks=[0.0, 2.0], causal=True)
        self.run_case(req, "sinks sum")
        resp = self.post(dict(req, return_lse=True))
        for h in range(2):
            for i in range(4):
                row = resp["weights"][0][h][i]
                total = sum(row)
                want = 1.0 - math.exp(req["sinks"][h] - resp["lse"][0][h][i])
                self.assertLess(abs(total - want), 2e-6, (h, i, total, want))

    def test_flat_form_returns_a_flat_lse(self):
        req = rand_request(8, B=1, Lq=5, Lk=3)
        req = {k: {"shape": shape_of(v), "data": flatten(v)} for k, v in req.items()}
        req.update(cu_seqlens_q=[0, 2, 5], cu_seqlens_k=[0, 0, 3], sinks=None,
                   return_lse=True, causal="lower_right")
        nested = {k: nest(v["data"], v["shape"]) for k, v in req.items() if isinstance(v, dict)}
        ref_out, _ = attention(dict(req, **nested))
        ref_l = lse(dict(req, **nested))
        resp = self.post(req)
        self.assertEqual(resp["lse"]["shape"], [1, 5])
        self.assertEqual(resp["lse"]["data"][:2], [None, None])  # a sequence with no keys
        self.assert_lse(resp["lse"]["data"], flatten(ref_l), "flat lse")
        self.assert_close(resp["output"]["data"], flatten(ref_out), "flat output")

    def test_gpt_oss_layer(self):
        """GQA (8 query heads on 2 kv heads), a sink per head, and
        sliding_window = 128 as window [127, 0] with causal: every query
        sees itself and the 127 keys before it."""
        H, Hkv, L, D = 8, 2, 140, 4
        req = rand_request(9, B=1, H=H, Hkv=Hkv, Lq=L, Lk=L, D=D, Dv=2)
        req.update(sinks=[0.5 * h - 1.0 for h in range(H)], window=[127, 0], causal=True,
                   diagnostics=True, return_lse=True, return_weights=False)
        resp = self.post(req)
        allowed = resp["diagnostics"]["allowed_keys"][0][0]
        self.assertEqual(allowed, [min(i + 1, 128) for i in range(L)])
        ref_out, _ = attention(req)
        self.assert_close(flatten(resp["output"]), flatten(ref_out), "gpt-oss output")
        self.assert_lse(flatten(resp["lse"]), flatten(lse(req)), "gpt-oss lse")

    def test_diagnostics_with_sinks_describe_the_returned_weights(self):
        req = rand_request(10, B=1, H=2, Lq=4, Lk=5)
        req.update(sinks=[1.0, -1.0], causal=True)
        ref = diagnostics(req)
        resp = self.post(dict(req, diagnostics=True))
        for name in ("allowed_keys", "entropy", "max_weight", "jacobian_norm"):
            self.assert_close(flatten(resp["diagnostics"][name]), flatten(ref[name]),
                              "diagnostics " + name, tol=2e-5)

    def test_packed_request_split_across_workers(self):
        # enough work that idle workers help; the split must not matter
        req = rand_request(12, B=1, H=4, Hkv=2, Lq=200, Lk=180, D=16, Dv=4)
        req.update(cu_seqlens_q=[0, 70, 70, 200], cu_seqlens_k=[0, 50, 90, 180],
                   sinks=[0.1, 0.2, 0.3, 0.4], alibi_slopes=slopes_for(4), softcap=3.0,
                   causal="lower_right", return_lse=True, return_weights=False)
        ref_out, _ = attention(req)
        ref_l = lse(req)
        first = None
        for _ in range(3):
            resp = self.post(req)
            self.assert_close(flatten(resp["output"]), flatten(ref_out), "split output")
            self.assert_lse(flatten(resp["lse"]), flatten(ref_l), "split lse")
            if first is None:
                first = resp
            self.assertEqual(resp, first, "the same bits every time")

    def test_requests_and_answers_validate_against_openapi(self):
        """deploy/openapi.json documents the new fields and the lse (null
        for -inf), and the check can fail."""
        from test_diagnostics import SCHEMA_CHECK, SYSTEM_PYTHON
        req = rand_request(15, B=1, H=2, Lq=3, Lk=4)
        req.update(sinks=[0.5, 1.0], softcap=2.0, alibi_slopes=[0.5, 0.25],
                   cu_seqlens_q=[0, 1, 3], cu_seqlens_k=[0, 0, 4], window=[1, 0],
                   window_align="lower_right", return_lse=True)
        items = []
        for body in (req, dict(req, sinks=None, return_weights=False)):
            resp = self.post(body)
            items += [[OPENAPI, "AttentionRequest", body], [OPENAPI, "AttentionResponse", resp]]
        self.assertIsNone(resp["lse"][0][0][0])  # a null was validated
        feed = "".join(json.dumps(x) + "\n" for x in items)
        proc = subprocess.run([SYSTEM_PYTHON, "-c", SCHEMA_CHECK], input=feed,
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        bad = [[OPENAPI, "AttentionRequest", dict(req, window_align="middle")],
               [OPENAPI, "AttentionResponse", dict(resp, lse=[[["x"]]])]]
        for b in bad:
            proc = subprocess.run([SYSTEM_PYTHON, "-c", SCHEMA_CHECK],
                                  input=json.dumps(b) + "\n", capture_output=True, text=True)
            self.assertEqual(proc.returncode, 1, b)

    def test_api_md_examples_are_what_attnd_answers(self):
        """Every example of docs/api.md written as an indented request on
        the README's tensors ({Q, K, V, ...}) and its answer: the answer,
        its line breaks taken out, byte for byte."""
        qkv = ('"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]], '
               '"value": [[[1, 0], [0, 1], [1, 1]]]')
        with open(os.path.join(harness.ROOT, "docs", "api.md")) as f:
            lines = f.read().split("\n")
        examples, n = [], 0
        while n < len(lines):
            if not lines[n].startswith("    {Q, K, V"):
                n += 1
                continue
            block = []
            while n < len(lines) and lines[n].startswith("    "):
                block.append(lines[n][4:].strip())
                n += 1
            # the request runs until its braces close; the answer follows
            depth, k = 0, 0
            for k, line in enumerate(block):
                depth += line.count("{") - line.count("}")
                if depth == 0:
                    break
            examples.append((" ".join(block[:k + 1]), "".join(block[k + 1:])))
        self.assertGreaterEqual(len(examples), 7, "examples found in docs/api.md")
        for req_text, want in examples:
            body = req_text.replace("Q, K, V", qkv, 1)
            st, _, data = self.srv.request("POST", "/v1/attention", body.encode(),
                                           {"Content-Type": "application/json"})
            self.assertEqual(st, 200, data)
            self.assertEqual(data.decode(), want, req_text)

    def test_bad_values_are_refused_naming_them(self):
        base = rand_request(13, B=1, H=2, Lq=4, Lk=5)
        two = rand_request(14, B=2, H=2, Lq=4, Lk=5)
        cases = (
            (dict(base, sinks=[1.0]), "sinks: shape [1] is not (H,) = [2]"),
            (dict(base, sinks=[1.0, "x"]), "sinks: expected a number at [1]"),
            (dict(base, sinks=[1.0, 1e39]), "sinks[1]"),
            (dict(base, alibi_slopes=[1.0, 2.0, 3.0]), "alibi_slopes: shape [3] is neither"),
            (dict(base, alibi_slopes=[[1.0, 2.0], [1.0, 2.0]]), "alibi_slopes: shape [2,2]"),
            (dict(base, alibi_slopes=[1.0, 1e39]), "alibi_slopes[1]"),
            (dict(base, softcap=0), "softcap: 0 is not a finite number > 0"),
            (dict(base, softcap=-2), "softcap: -2 is not a finite number > 0"),
            (dict(base, softcap=1e39), "softcap: 1e+39 is not a finite number > 0"),
            (dict(base, softcap="big"), "softcap: expected a number > 0"),
            (dict(base, window_align="lower-right"), "window_align: unknown value \"lower-right\""),
            (dict(base, return_lse="yes"), "return_lse: expected true or false"),
            (dict(base, cu_seqlens_q=[0, 4]), "cu_seqlens_q: given without cu_seqlens_k"),
            (dict(base, cu_seqlens_k=[0, 5]), "cu_seqlens_k: given without cu_seqlens_q"),
            (dict(base, cu_seqlens_q=[0, 3, 2, 4], cu_seqlens_k=[0, 1, 2, 5]),
             "cu_seqlens_q[2]=2 is less than cu_seqlens_q[1]=3"),
            (dict(base, cu_seqlens_q=[0, 2, 3], cu_seqlens_k=[0, 2, 5]),
             "cu_seqlens_q[2]=3: the last offset must be the query length 4"),
            (dict(base, cu_seqlens_q=[0, 4], cu_seqlens_k=[1, 5]),
             "cu_seqlens_k[0]=1: must be 0"),
            (dict(base, cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 6]),
             "cu_seqlens_k[1]=6 exceeds key length 5"),
            (dict(base, cu_seqlens_q=[0, -1, 4], cu_seqlens_k=[0, 1, 5]), "cu_seqlens_q[1]"),
            (dict(base, cu_seqlens_q=[0, 1.5, 4], cu_seqlens_k=[0, 1, 5]),
             "cu_seqlens_q: expected an integer at [1], got 1.5"),
            (dict(base, cu_seqlens_q=[0, 2, 4], cu_seqlens_k=[0, 5]),
             "cu_seqlens_k: 2 entries do not match cu_seqlens_q's 3"),
            (dict(base, cu_seqlens_q=[4], cu_seqlens_k=[5]), "cu_seqlens_q: expected shape (N + 1,)"),
            (dict(two, cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 5]),
             "cu_seqlens_q: packed sequences need batch 1, got 2"),
            (dict(base, cu_seqlens_q=[0, 4], cu_seqlens_k=[0, 5], valid_lens=[3]),
             "valid_lens: not allowed with cu_seqlens_q/cu_seqlens_k"),
            (dict(base, sink=[1.0, 2.0]), "unknown field 'sink' (did you mean 'sinks'?"),
            (dict(base, soft_cap=2.0), "did you mean 'softcap'?"),
            (dict(base, cu_seqlen_q=[0, 4]), "did you mean 'cu_seqlens_q'?"),
            (dict(base, alibi_slope=[1.0, 1.0]), "did you mean 'alibi_slopes'?"),
            (dict(base, return_lses=True), "did you mean 'return_lse'?"),
            (dict(base, window_allign="lower_right"), "did you mean 'window_align'?"),
        )
        for req, phrase in cases:
            resp = self.post(req, status=400)
            self.assertIn(phrase, resp["error"])
        # and the server still answers
        self.run_case(dict(base, sinks=[0.0, 1.0]), "after the errors")


# ---------------------------------------------------------------- v2

def v2_inputs(req, binary, dtypes=None):
    """InferInputs for a /v1-style request dict.  dtypes: {name: v2 type}
    (FP32 floats, INT32 lengths, BOOL mask by default)."""
    dtypes = dtypes or {}
    out = []
    for name in ("query", "key", "value", "valid_lens", "mask", "bias", "sinks",
                 "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k"):
        if req.get(name) is None:
            continue
        t = req[name]
        dt = dtypes.get(name) or ("INT32" if name in ("valid_lens", "cu_seqlens_q",
                                                      "cu_seqlens_k")
                                  else "BOOL" if name == "mask" else "FP32")
        i = InferInput(name, shape_of(t), dt)
        i.set_data_from_list(flatten(t), binary_data=binary)
        out.append(i)
    return out


def v2_params(req):
    p = {}
    if req.get("causal"):
        p["causal"] = req["causal"]
    if req.get("window") is not None:
        left, right = req["window"]
        if left is not None:
            p["window_left"] = left
        if right is not None:
            p["window_right"] = right
    for name in ("softcap", "window_align"):
        if req.get(name) is not None:
            p[name] = req[name]
    return p


class V2Variants(harness.ServerTestCase, Checks):
    server_args = ("--workers", "2")

    def client(self):
        return InferenceServerClient("127.0.0.1:%d" % self.srv.port)

    def infer(self, req, outputs, binary=True, out_binary=True, dtypes=None):
        return self.client().infer(
            "attention", v2_inputs(req, binary, dtypes),
            outputs=[InferRequestedOutput(o, binary_data=out_binary) for o in outputs],
            parameters=v2_params(req))

    def request(self, seed=1):
        req = rand_request(seed, B=1, H=4, Hkv=2, Lq=7, Lk=9, D=4, Dv=3)
        # values every float type holds exactly, so the reference sees what
        # the server reads
        req.update(sinks=[0.5, -1.25, 2.0, 0.375], alibi_slopes=slopes_for(4), softcap=2.5,
                   cu_seqlens_q=[0, 3, 3, 7], cu_seqlens_k=[0, 0, 4, 9], causal="lower_right",
                   window=[3, 1], window_align="lower_right")
        return req

    def test_every_datatype_json_and_binary_with_lse(self):
        req = self.request()
        ref_out, ref_w = attention(req)
        ref_l = flatten(lse(req))
        # the sequence without keys: its rows' lse is their head's sink
        self.assertEqual(ref_l[:3], [0.5] * 3)
        for fdt, ldt in (("FP32", "INT32"), ("FP64", "INT64"), ("FP16", "INT32"),
                         ("BF16", "INT64")):
            dtypes = {"sinks": fdt, "alibi_slopes": fdt, "cu_seqlens_q": ldt,
                      "cu_seqlens_k": ldt}
            for binary in (True, False):
                for out_binary in (True, False):
                    what = "%s/%s binary in %s out %s" % (fdt, ldt, binary, out_binary)
                    res = self.infer(req, ("output", "weights", "lse"), binary, out_binary,
                                     dtypes)
                    self.assertEqual(res.get_output("lse")["shape"], [1, 4, 7], what)
                    self.assertEqual(res.get_output("lse")["datatype"], "FP32", what)
                    self.assert_close(res.as_list("output"), flatten(ref_out), what)
                    self.assert_weights(res.as_list("weights"), flatten(ref_w), what)
                    self.assert_lse(res.as_list("lse"), ref_l, what, null_is_inf=not out_binary)

    def test_lse_without_weights_runs_the_online_path(self):
        req = self.request(2)
        del req["sinks"]  # then the sequence without keys has lse -inf
        self.assertIn(NEG_INF, flatten(lse(req)))
        res = self.infer(req, ("lse",), out_binary=False)
        self.assert_lse(res.as_list("lse"), flatten(lse(req)), "lse as JSON")
        res = self.infer(req, ("lse", "output"))
        self.assertEqual([o["name"] for o in res.get_response()["outputs"]], ["lse", "output"])
        self.assert_close(res.as_list("output"), flatten(attention(req)[0]), "online output")
        self.assert_lse(res.as_list("lse"), flatten(lse(req)), "online lse", null_is_inf=False)

    def test_rank3_and_per_item_slopes(self):
        req = rand_request(3, B=2, Lq=5, Lk=6)
        req.update(sinks=[0.75], alibi_slopes=[[0.5], [0.25]], softcap=1.0, causal=True)
        res = self.infer(req, ("output", "weights", "lse"))
        ref_out, ref_w = attention(req)
        self.assertEqual(res.get_output("lse")["shape"], [2, 5])
        self.assert_close(res.as_list("output"), flatten(ref_out), "rank 3")
        self.assert_weights(res.as_list("weights"), flatten(ref_w), "rank 3")
        self.assert_lse(res.as_list("lse"), flatten(lse(req)), "rank 3", null_is_inf=False)

    def test_metadata_and_config_list_the_new_tensors(self):
        meta = self.client().get_model_metadata("attention")
        names = [i["name"] for i in meta["inputs"]]
        for n in ("sinks", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k"):
            self.assertIn(n, names)
        self.assertNotIn("w_q", names)
        self.assertIn("lse", [o["name"] for o in meta["outputs"]])
        st, _, body = self.srv.get("/v2/models/attention/config")
        self.assertEqual(st, 200)
        cfg = json.loads(body)
        inputs = {i["name"]: i for i in cfg["input"]}
        self.assertTrue(inputs["sinks"]["optional"])
        self.assertEqual(inputs["cu_seqlens_q"]["data_type"], "TYPE_INT32")
        self.assertIn("lse", [o["name"] for o in cfg["output"]])

    def test_v2_json_validates_against_openapi(self):
        """The v2 inputs, parameters and the lse output (null for -inf in
        JSON data) as deploy/openapi.json documents them."""
        from test_diagnostics import SCHEMA_CHECK, SYSTEM_PYTHON
        req = self.request(6)
        del req["sinks"]
        body = {"inputs": [i._get_tensor() for i in v2_inputs(req, False)],
                "parameters": v2_params(req),
                "outputs": [{"name": "output"}, {"name": "lse"}]}
        st, resp = self.srv.post_json("/v2/models/attention/infer", body)
        self.assertEqual(st, 200, resp)
        self.assertIn(None, resp["outputs"][1]["data"])
        feed = "".join(json.dumps(x) + "\n" for x in (
            [OPENAPI, "InferenceRequest", body], [OPENAPI, "InferenceResponse", resp]))
        proc = subprocess.run([SYSTEM_PYTHON, "-c", SCHEMA_CHECK], input=feed,
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_bad_values_and_names(self):
        req = self.request(4)
        cases = (
            (dict(req, softcap=0), "parameters.softcap: must be a finite number > 0"),
            (dict(req, softcap="x"), "parameters.softcap"),
            (dict(req, window_align="lower"), "parameters.window_align: unknown value \"lower\""),
            (dict(req, sinks=[1.0, 2.0]), "sinks: shape [2] is not (H,) = [4]"),
            (dict(req, cu_seqlens_q=[0, 5, 3, 7]), "cu_seqlens_q[2]=3 is less than"),
            (dict(req, cu_seqlens_k=[0, 0, 4, 8]), "cu_seqlens_k[3]=8: the last offset must be"),
            (dict(req, cu_seqlens_k=[0, 0, 4, 10]), "cu_seqlens_k[3]=10 exceeds key length 9"),
            (dict(req, cu_seqlens_k=None), "cu_seqlens_q: given without cu_seqlens_k"),
        )
        for bad, phrase in cases:
            for binary in (True, False):
                with self.assertRaises(InferenceServerException) as cm:
                    self.infer(bad, ("output",), binary)
                self.assertEqual(cm.exception.status, 400, bad)
                self.assertIn(phrase, cm.exception.msg)
        # datatypes and names
        inputs = v2_inputs(req, True)
        inputs[-1] = InferInput("cu_seqlens_k", [4], "FP32").set_data_from_list([0, 0, 4, 9])
        with self.assertRaises(InferenceServerException) as cm:
            self.client().infer("attention", inputs, parameters=v2_params(req))
        self.assertIn("cu_seqlens_k: datatype FP32 is not supported for this input "
                      "(expected INT32 or INT64)", cm.exception.msg)
        inputs = v2_inputs(req, True)
        inputs[6] = InferInput("sink", [4], "FP32").set_data_from_list(req["sinks"])
        with self.assertRaises(InferenceServerException) as cm:
            self.client().infer("attention", inputs, parameters=v2_params(req))
        self.assertIn("has no input 'sink' (did you mean 'sinks'?", cm.exception.msg)
        with self.assertRaises(InferenceServerException) as cm:
            self.infer(req, ("lses",))
        self.assertIn("unknown output 'lses' of model attention (did you mean 'lse'?",
                      cm.exception.msg)
        with self.assertRaises(InferenceServerException) as cm:
            self.client().infer("attention", v2_inputs(req, True),
                                parameters=dict(v2_params(req), soft_cap=1.0))
        self.assertIn("parameters.soft_cap: unknown parameter (did you mean 'softcap'?",
                      cm.exception.msg)
        # non-finite binary sinks and slopes are refused, naming the element
        for name, dt, raw, phrase in (
                ("sinks", "FP32", struct.pack("<4f", 0, float("nan"), 1, 2),
                 "sinks[1]: FP32 value is not finite"),
                ("sinks", "FP16", struct.pack("<4e", 0, 1, float("inf"), 2),
                 "sinks[2]: FP16 value is not finite"),
                ("alibi_slopes", "BF16", b"\x80\x3f" * 3 + b"\x80\x7f",
                 "alibi_slopes[3]: BF16 value is not finite")):
            inputs = [i for i in v2_inputs(req, True) if i.name() != name]
            inputs.append(InferInput(name, [4], dt).set_raw(raw))
            with self.assertRaises(InferenceServerException) as cm:
                self.client().infer("attention", inputs, parameters=v2_params(req))
            self.assertEqual(cm.exception.status, 400)
            self.assertIn(phrase, cm.exception.msg)
        # binary INT64 offsets beyond int32 are refused, not wrapped
        inputs = v2_inputs(req, True, {"cu_seqlens_q": "INT64", "cu_seqlens_k": "INT64"})
        raw = struct.pack("<4q", 0, 0, 4, 1 << 33)
        inputs[-1] = InferInput("cu_seqlens_k", [4], "INT64").set_raw(raw)
        with self.assertRaises(InferenceServerException) as cm:
            self.client().infer("attention", inputs, parameters=v2_params(req))
        self.assertIn("cu_seqlens_k[3]=8589934592 exceeds key length 9", cm.exception.msg)


if __name__ == "__main__":
    harness.main()
