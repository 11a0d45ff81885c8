"""Sliding windows and per-row diagnostics on both APIs, against the float64
reference (reference.py).

Window: /v1 `window: [left, right]` and the v2 parameters `window_left` /
`window_right`, with and without weights (without them the core's online
path skips key blocks outside the window: long rows with narrow windows
make it skip many), composed with causal (both alignments), valid_lens
(both shapes), a broadcast mask and a bias.

Diagnostics: /v1 `"diagnostics": true` and the v2 outputs allowed_keys
(INT32), entropy, max_weight, jacobian_norm (FP32), JSON and binary, for
every mask kind, rows with no allowed key (all 0), without weights (then
computed but not returned), dropout (the figures describe the pre-dropout
weights) and additive scoring; and the d2l saturation picture: small scores
give entropy near log(n) and a Jacobian norm near sqrt(1/n - 1/n^2), large
ones entropy near 0, a largest weight near 1 and a Jacobian norm near 0.
"""

import json
import math
import os
import random
import re
import subprocess

import harness
from reference import (DIAGNOSTICS, attention, diagnostics, flatten, nest, rand_request,
                       rand_tensor, shape_of)
from v2client import (InferenceServerClient, InferenceServerException, InferInput,
                      InferRequestedOutput)

SYSTEM_PYTHON = "/usr/bin/python3"
OPENAPI = os.path.join(harness.ROOT, "deploy", "openapi.json")
SPEC = harness.oip_spec()

# Validates lines of [document path, schema name, instance] with Debian's
# python3-jsonschema (YAML or JSON documents); exit 1 when one fails.
SCHEMA_CHECK = r"""
import json, sys, yaml, jsonschema
bad = 0
docs = {}
for line in sys.stdin:
    path, name, inst = json.loads(line)
    if path not in docs:
        docs[path] = yaml.safe_load(open(path))
    schemas = docs[path]["components"]["schemas"]
    try:
        jsonschema.validate(inst, {"$ref": "#/components/schemas/" + name,
                                   "components": {"schemas": schemas}})
    except jsonschema.ValidationError as e:
        bad += 1
        print("%s %s: %s" % (os.path.basename(path), name, e.message))
print("checked")
sys.exit(1 if bad else 0)
""".replace("import json,", "import os, json,")

# |got - ref| allowed per diagnostic (plus the same times |ref|); counts exact.
TOL = {"allowed_keys": 0.0, "entropy": 2e-5, "max_weight": 1e-5, "jacobian_norm": 2e-5}


def mask_for(rng, shape, p=0.7):
    if len(shape) == 1:
        return [rng.random() < p for _ in range(shape[0])]
    return [mask_for(rng, shape[1:], p) for _ in range(shape[0])]


class Checks:
    """Comparisons shared by the /v1 and v2 test classes."""

    def assert_close(self, got, ref, what, tol=1e-5):
        self.assertEqual(len(got), len(ref), what + ": element count")
        for n, (g, r) in enumerate(zip(got, ref)):
            self.assertTrue(abs(g - r) <= tol + tol * abs(r),
                            "%s[%d]: got %r, want %r" % (what, n, g, r))

    def assert_weights(self, got, ref, what="weights"):
        self.assertEqual(len(got), len(ref), what + ": element count")
        for n, (g, r) in enumerate(zip(got, ref)):
            if r == 0.0:
                self.assertEqual(g, 0.0, "%s[%d] must be exactly 0" % (what, n))
            else:
                self.assertLessEqual(abs(g - r), 1e-5, "%s[%d]: got %r, want %r" % (what, n, g, r))

    def assert_diag(self, got, ref, what):
        """got: {name: flat list}; ref: {name: nested list} (reference)."""
        counts = flatten(ref["allowed_keys"])
        for name in DIAGNOSTICS:
            g, r = got[name], flatten(ref[name])
            self.assertEqual(len(g), len(r), "%s %s: element count" % (what, name))
            for n, (x, y) in enumerate(zip(g, r)):
                if name == "allowed_keys":
                    self.assertIsInstance(x, int, "%s allowed_keys[%d] is %r" % (what, n, x))
                    self.assertEqual(x, y, "%s allowed_keys[%d]" % (what, n))
                elif counts[n] == 0:
                    self.assertEqual(x, 0.0, "%s %s[%d]: a row with no allowed key is 0"
                                     % (what, name, n))
                else:
                    tol = TOL[name]
                    self.assertTrue(abs(x - y) <= tol + tol * abs(y),
                                    "%s %s[%d]: got %r, want %r" % (what, name, n, x, y))


# ---------------------------------------------------------------- /v1

class V1Test(harness.ServerTestCase, Checks):
    server_args = ("--workers", "4")

    def post(self, req):
        status, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 200, resp)
        return resp

    def run_case(self, req, what):
        """req with weights, without weights, and with diagnostics (with and
        without weights), each against the reference."""
        ref_out, ref_w = attention(req)
        ref_d = diagnostics(req)
        oshape = shape_of(ref_out)
        full = self.post(dict(req, return_weights=True))
        self.assertEqual(shape_of(full["output"]), oshape, what)
        self.assert_close(flatten(full["output"]), flatten(ref_out), what + " output")
        self.assert_weights(flatten(full["weights"]), flatten(ref_w), what + " weights")
        self.assertNotIn("diagnostics", full, what + ": diagnostics only on request")
        lean = self.post(dict(req, return_weights=False))
        self.assertNotIn("weights", lean)
        self.assert_close(flatten(lean["output"]), flatten(ref_out), what + " output (online)")
        for rw in (True, False):
            resp = self.post(dict(req, return_weights=rw, diagnostics=True))
            self.assertEqual("weights" in resp, rw, what)
            self.assert_close(flatten(resp["output"]), flatten(ref_out),
                              what + " output (diagnostics)")
            d = resp["diagnostics"]
            self.assertEqual(sorted(d), sorted(DIAGNOSTICS), what)
            for name in DIAGNOSTICS:
                self.assertEqual(shape_of(d[name]), oshape[:-1], "%s %s shape" % (what, name))
            self.assert_diag({n: flatten(d[n]) for n in DIAGNOSTICS}, ref_d,
                             "%s (return_weights %s)" % (what, rw))
        return ref_d

    # -- window ----------------------------------------------------------
    def test_window_composed_with_causal_valid_lens_and_mask(self):
        rng = random.Random(3)
        n = 0
        for window in ([1, 1], [2, 0], [0, None], [None, 1], [0, 0], [50, 50]):
            for causal in (False, True, "lower_right"):
                for extra in ("none", "valid_lens", "per_query", "mask", "bias"):
                    n += 1
                    H = 2 if n % 2 else None
                    req = rand_request(n, B=2, H=H, Hkv=1 if H else None, Lq=5, Lk=7)
                    req["window"] = window
                    req["causal"] = causal
                    if extra == "valid_lens":
                        req["valid_lens"] = [3, 7]
                    elif extra == "per_query":
                        req["valid_lens"] = [[rng.randint(0, 7) for _ in range(5)] for _ in range(2)]
                    elif extra == "mask":
                        req["mask"] = mask_for(rng, [5, 7])
                    elif extra == "bias":
                        req["bias"] = rand_tensor(rng, [1, 7])
                    self.run_case(req, "window %s causal %s %s" % (window, causal, extra))

    def test_window_on_long_rows_skips_blocks_outside(self):
        # long rows and a narrow band: the online path skips most key blocks
        for window, causal in (([3, 2], False), ([16, 0], True), ([0, 40], "lower_right"),
                               ([None, 5], False)):
            req = rand_request(11, B=1, H=2, Hkv=2, Lq=150, Lk=300, D=8, Dv=4)
            req["window"], req["causal"] = window, causal
            req["valid_lens"] = [260]
            ref_out, ref_w = attention(req)
            lean = self.post(dict(req, return_weights=False))
            self.assert_close(flatten(lean["output"]), flatten(ref_out), "online %s" % window)
            full = self.post(req)
            self.assert_weights(flatten(full["weights"]), flatten(ref_w), "weights %s" % window)

    def test_window_flat_form_and_empty_rows(self):
        # window [3, 0] with causal lower_right and Lq > Lk: early rows see nothing
        req = rand_request(5, B=1, Lq=6, Lk=3)
        req = {k: {"shape": shape_of(v), "data": flatten(v)} for k, v in req.items()}
        req.update(window=[3, 0], causal="lower_right")
        nested = {k: nest(v["data"], v["shape"]) for k, v in req.items() if isinstance(v, dict)}
        ref_out, ref_w = attention(dict(req, **nested))
        ref_d = diagnostics(dict(req, **nested))
        self.assertEqual(flatten(ref_d["allowed_keys"]), [0, 0, 0, 1, 1, 1])
        resp = self.post(dict(req, diagnostics=True))
        self.assertEqual(resp["output"]["shape"], [1, 6, 3])
        self.assert_close(resp["output"]["data"], flatten(ref_out), "output")
        self.assert_weights(resp["weights"]["data"], flatten(ref_w))
        for name in DIAGNOSTICS:
            self.assertEqual(resp["diagnostics"][name]["shape"], [1, 6], name)
        self.assert_diag({n: resp["diagnostics"][n]["data"] for n in DIAGNOSTICS}, ref_d, "flat")

    # -- diagnostics -----------------------------------------------------
    def test_diagnostics_every_mask_kind(self):
        rng = random.Random(8)
        cases = {
            "none": {},
            "valid_lens with a 0": {"valid_lens": [0, 4]},
            "per-query valid_lens with 0s": {"valid_lens": [[0, 1, 7, 3, 0], [2, 0, 0, 5, 7]]},
            "causal": {"causal": True},
            "lower_right, Lq > Lk": {"causal": "lower_right", "_Lq": 9},
            "window": {"window": [1, 2]},
            "mask with empty rows": {"mask": [[[False] * 7, [True] * 7, [True, False] * 3 + [True],
                                              [False] * 6 + [True], [False] * 7]]},
            "mask (B, 1, Lk) broadcast": {"mask": mask_for(rng, [2, 1, 7])},
            "bias": {"bias": rand_tensor(rng, [2, 5, 7], 3.0)},
            "everything": {"valid_lens": [6, 2], "causal": "lower_right", "window": [3, 1],
                           "mask": mask_for(rng, [5, 7], 0.8), "bias": rand_tensor(rng, [7])},
        }
        for n, (what, extra) in enumerate(cases.items()):
            extra = dict(extra)
            Lq = extra.pop("_Lq", 5)
            for H in (None, 2):
                req = rand_request(100 + n, B=2, H=H, Lq=Lq, Lk=7)
                req.update(extra)
                if H and "mask" in extra and shape_of(extra["mask"])[0] == 2:
                    # (B, Lq, Lk) -> (B, 1, Lq, Lk) for the rank-4 query
                    req["mask"] = [[m] for m in extra["mask"]] if len(shape_of(extra["mask"])) == 3 \
                        else extra["mask"]
                ref_d = self.run_case(req, "%s (H %s)" % (what, H))
                if "empty" in what or "0" in what:
                    self.assertIn(0, flatten(ref_d["allowed_keys"]), what + ": has an empty row")

    def test_diagnostics_additive_dropout_and_grouped_heads(self):
        rng = random.Random(21)
        req = rand_request(21, B=2, H=4, Hkv=2, Lq=6, Lk=9, D=5, Dv=2)
        req.update(scoring="additive", w_q=rand_tensor(rng, [3, 5]), w_k=rand_tensor(rng, [3, 5]),
                   w_v=rand_tensor(rng, [3]), valid_lens=[9, 4], window=[2, None])
        self.run_case(req, "additive")
        # dropout: the diagnostics describe the pre-dropout weights
        req = rand_request(22, B=1, H=2, Lq=4, Lk=8)
        req.update(dropout={"p": 0.5, "seed": 9}, causal=True)
        ref_d = diagnostics(req)
        resp = self.post(dict(req, diagnostics=True))
        self.assert_close(flatten(resp["output"]), flatten(attention(req)[0]), "dropout output")
        self.assert_diag({n: flatten(resp["diagnostics"][n]) for n in DIAGNOSTICS}, ref_d,
                         "dropout")

    def test_d2l_saturation(self):
        # d2l 11.3: scores of variance D saturate the softmax unless scaled
        # by 1/sqrt(D).  One query row against n = 64 keys, D = 256.
        n, D = 64, 256
        rng = random.Random(4)
        q = [[rand_tensor(rng, [D])]]
        k = [rand_tensor(rng, [n, D])]
        v = [rand_tensor(rng, [n, 2])]
        got = {}
        for scale in (1e-4, 1.0 / math.sqrt(D), 1.0, 4.0):
            req = {"query": q, "key": k, "value": v, "scale": scale, "diagnostics": True,
                   "return_weights": False}
            resp = self.post(req)
            d = {name: flatten(resp["diagnostics"][name])[0] for name in DIAGNOSTICS}
            ref = {name: flatten(x)[0] for name, x in diagnostics(req).items()}
            self.assert_diag({name: [d[name]] for name in d}, {x: [ref[x]] for x in ref},
                             "scale %g" % scale)
            self.assertEqual(d["allowed_keys"], n)
            got[scale] = d
        uniform = got[1e-4]
        self.assertLess(abs(uniform["entropy"] - math.log(n)), 1e-3, uniform)
        self.assertLess(abs(uniform["max_weight"] - 1.0 / n), 1e-3, uniform)
        self.assertLess(abs(uniform["jacobian_norm"] - math.sqrt(1.0 / n - 1.0 / n ** 2)), 1e-3,
                        uniform)
        hard = got[4.0]
        self.assertLess(hard["entropy"], 0.05, hard)
        self.assertGreater(hard["max_weight"], 0.99, hard)
        self.assertLess(hard["jacobian_norm"], 0.05, hard)
        # scaled by 1/sqrt(D) sits between the two; unscaled is near one-hot
        mid = got[1.0 / math.sqrt(D)]
        self.assertGreater(mid["entropy"], got[1.0]["entropy"])
        self.assertLess(mid["entropy"], uniform["entropy"])
        self.assertGreater(mid["jacobian_norm"], 5 * got[1.0]["jacobian_norm"], got)

    def schema_check(self, items):
        feed = "".join(json.dumps(x) + "\n" for x in items)
        return subprocess.run([SYSTEM_PYTHON, "-c", SCHEMA_CHECK], input=feed,
                              capture_output=True, text=True)

    @staticmethod
    def schema_request():
        """A /v1 request with a window, causal masking and diagnostics."""
        req = rand_request(41, B=1, H=2, Lq=3, Lk=4)
        req.update(window=[1, None], causal=True, diagnostics=True)
        return req

    def v2_diagnostics_answers(self, req):
        """(v2 request, its 200 answer with every diagnostic output, the
        model's metadata) for /v1 request req."""
        v2 = {"inputs": [i._get_tensor() for i in v2_inputs(req, False)],
              "parameters": {"window_left": 1, "window_right": None, "causal": True},
              "outputs": [{"name": n} for n in ("output",) + DIAGNOSTICS]}
        status, resp = self.srv.post_json("/v2/models/attention/infer", v2)
        self.assertEqual(status, 200, resp)
        self.assertEqual([o["datatype"] for o in resp["outputs"]],
                         ["FP32", "INT32", "FP32", "FP32", "FP32"])
        status, _, body = self.srv.get("/v2/models/attention")
        self.assertEqual(status, 200, body)
        return v2, resp, json.loads(body)

    def test_responses_validate_against_the_documents(self):
        """deploy/openapi.json documents the request fields, the response's
        diagnostics and the v2 outputs and parameters."""
        req = self.schema_request()
        flat = {k: {"shape": shape_of(v), "data": flatten(v)} for k, v in req.items()
                if isinstance(v, list) and k in ("query", "key", "value")}
        items = []
        for body in (req, dict(req, return_weights=False), dict(req, **flat)):
            items.append([OPENAPI, "AttentionRequest", body])
            items.append([OPENAPI, "AttentionResponse", self.post(body)])
        v2, resp, meta = self.v2_diagnostics_answers(req)
        items += [[OPENAPI, "InferenceRequest", v2], [OPENAPI, "InferenceResponse", resp],
                  [OPENAPI, "MetadataModelResponse", meta]]
        proc = self.schema_check(items)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("checked", proc.stdout)
        # and the check can fail: a diagnostics object missing a field, a
        # misspelt v2 output, a fractional allowed_keys
        for bad in ([OPENAPI, "AttentionResponse", {"output": [[[1]]], "diagnostics": {
                        "allowed_keys": [[1]], "entropy": [[0]], "max_weight": [[1]]}}],
                    [OPENAPI, "InferenceRequest", dict(v2, outputs=[{"name": "entropies"}])],
                    [OPENAPI, "AttentionResponse", {"output": [[[1]]], "diagnostics": {
                        "allowed_keys": [[1.5]], "entropy": [[0]], "max_weight": [[1]],
                        "jacobian_norm": [[0]]}}],
                    [OPENAPI, "AttentionRequest", dict(req, diagnostics="yes")]):
            proc = self.schema_check([bad])
            self.assertEqual(proc.returncode, 1, (bad, proc.stdout + proc.stderr))

    def test_v2_answers_validate_against_the_protocol_schema(self):
        """The v2 answer with diagnostics outputs and the model metadata
        validate against the Open Inference Protocol's own schema."""
        if SPEC is None:
            self.skipTest(harness.OIP_SPEC_MISSING)
        _, resp, meta = self.v2_diagnostics_answers(self.schema_request())
        proc = self.schema_check([[SPEC, "inference_response", resp],
                                  [SPEC, "metadata_model_response", meta]])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("checked", proc.stdout)
        # and the check can fail: an answer without its outputs
        proc = self.schema_check([[SPEC, "inference_response", {"model_name": "attention"}]])
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)

    def test_diagnostics_field_is_a_boolean(self):
        req = rand_request(1, B=1, Lq=2, Lk=2)
        for bad in (1, "yes", [True], {}):
            status, resp = self.srv.post_json("/v1/attention", dict(req, diagnostics=bad))
            self.assertEqual(status, 400, resp)
            self.assertIn("diagnostics", resp["error"])
        resp = self.post(dict(req, diagnostics=False))
        self.assertNotIn("diagnostics", resp)
        resp = self.post(dict(req, diagnostics=None))
        self.assertNotIn("diagnostics", resp)


# ---------------------------------------------------------------- v2

def v2_inputs(req, binary, extra=("valid_lens", "mask", "bias")):
    """InferInputs for a /v1-style request dict (FP32, INT32, BOOL)."""
    out = []
    for name in ("query", "key", "value") + tuple(extra):
        if req.get(name) is None:
            continue
        t = req[name]
        dt = "INT32" if name == "valid_lens" else "BOOL" if name == "mask" else "FP32"
        i = InferInput(name, shape_of(t), dt)
        i.set_data_from_list(flatten(t), binary_data=binary)
        out.append(i)
    return out


class SplitTest(harness.ServerTestCase, Checks):
    post = V1Test.post
    # Four workers, and no request run on its HTTP thread: a large request
    # goes to a worker, which splits it with the idle ones (exec.c).
    server_args = ("--workers", "4", "--inline-idle-us", "0")

    def helper_tasks(self):
        status, _, body = self.srv.get("/metrics")
        self.assertEqual(status, 200)
        m = re.search(r"^attnd_split_helper_tasks_total (\d+)$", body.decode(), re.M)
        self.assertIsNotNone(m, "no attnd_split_helper_tasks_total in /metrics")
        return int(m.group(1))

    def test_diagnostics_on_a_request_split_across_workers(self):
        # Repeated until a second worker has run part of one (the metric
        # counts the tasks helpers ran): how much they take is up to timing.
        req = rand_request(31, B=2, H=4, Lq=256, Lk=200, D=16, Dv=8)
        req.update(causal=True, window=[40, None], valid_lens=[200, 120])
        ref_d = diagnostics(req)
        before = self.helper_tasks()
        for i in range(60):
            resp = self.post(dict(req, diagnostics=True, return_weights=False))
            self.assert_diag({n: flatten(resp["diagnostics"][n]) for n in DIAGNOSTICS}, ref_d,
                             "split")
            if i >= 2 and self.helper_tasks() > before:
                break
        self.assertGreater(self.helper_tasks(), before, "no helper worker ran a task")


class V2Test(harness.ServerTestCase, Checks):
    server_args = ("--workers", "2")

    def client(self):
        return InferenceServerClient("127.0.0.1:%d" % self.srv.port)

    def params_of(self, req):
        p = {}
        causal = req.get("causal")
        if causal:
            p["causal"] = causal
        if req.get("window") is not None:
            left, right = req["window"]
            if left is not None:
                p["window_left"] = left
            if right is not None:
                p["window_right"] = right
        return p

    def infer(self, req, outputs, binary=True, out_binary=True):
        return self.client().infer(
            "attention", v2_inputs(req, binary),
            outputs=[InferRequestedOutput(o, binary_data=out_binary) for o in outputs],
            parameters=self.params_of(req))

    def test_metadata_lists_the_diagnostics(self):
        for model in ("attention", "additive_attention"):
            md = self.client().get_model_metadata(model)
            outs = {o["name"]: o for o in md["outputs"]}
            self.assertEqual(list(outs), ["output", "weights"] + list(DIAGNOSTICS) + ["lse"])
            self.assertEqual(outs["allowed_keys"]["datatype"], "INT32")
            for name in DIAGNOSTICS[1:]:
                self.assertEqual(outs[name]["datatype"], "FP32")
            for name in DIAGNOSTICS:
                self.assertEqual(outs[name]["shape"], [-1, -1, -1])

    def test_window_parameters_with_and_without_weights(self):
        rng = random.Random(6)
        n = 0
        for window in ([1, 1], [2, 0], [0, None], [None, 1], [40, 40]):
            for causal in (False, True, "lower_right"):
                n += 1
                H = 2 if n % 2 else None
                req = rand_request(200 + n, B=2, H=H, Lq=5, Lk=8)
                req.update(window=window, causal=causal, valid_lens=[8, 6],
                           mask=mask_for(rng, [1, 8], 0.8))
                ref_out, ref_w = attention(req)
                what = "window %s causal %s" % (window, causal)
                res = self.infer(req, ["output"], binary=n % 3 != 0, out_binary=n % 2 == 0)
                self.assertIsNone(res.get_output("weights"))
                self.assert_close(res.as_list("output"), flatten(ref_out), what + " (online)")
                res = self.infer(req, ["output", "weights"])
                self.assert_close(res.as_list("output"), flatten(ref_out), what)
                self.assert_weights(res.as_list("weights"), flatten(ref_w), what)

    def test_window_on_long_rows(self):
        req = rand_request(7, B=1, H=1, Lq=130, Lk=260, D=8, Dv=2)
        req.update(window=[4, 9], causal="lower_right")
        ref_out, _ = attention(req)
        res = self.infer(req, ["output"])
        self.assert_close(res.as_list("output"), flatten(ref_out), "long rows")

    def test_window_parameter_errors(self):
        req = rand_request(1, B=1, Lq=2, Lk=2)
        for name in ("window_left", "window_right"):
            for bad in (-1, 1.5, "2", True, [1]):
                with self.assertRaises(InferenceServerException) as cm:
                    self.client().infer("attention", v2_inputs(req, False), parameters={name: bad})
                self.assertEqual(cm.exception.status, 400)
                self.assertIn("parameters." + name, cm.exception.msg)
        # null is an unbounded side, like /v1's null
        res = self.client().infer("attention", v2_inputs(req, False),
                                  outputs=[InferRequestedOutput("weights", False)],
                                  parameters={"window_left": None, "window_right": 0})
        self.assert_weights(res.as_list("weights"), flatten(attention(dict(req, window=[None, 0]))[1]))

    def test_diagnostics_outputs_every_mask_kind(self):
        rng = random.Random(9)
        cases = [
            {},
            {"valid_lens": [0, 5]},
            {"valid_lens": [[0, 2, 6, 1], [6, 0, 3, 0]]},
            {"causal": True},
            {"causal": "lower_right", "_Lk": 3},
            {"window": [0, 1]},
            {"mask": [[[False] * 6, [True] * 6, [False] * 5 + [True], [False] * 6]]},
            {"valid_lens": [5, 3], "causal": True, "window": [2, None],
             "mask": mask_for(rng, [2, 4, 6], 0.8)},
        ]
        for n, extra in enumerate(cases):
            extra = dict(extra)
            Lk = extra.pop("_Lk", 6)
            for H in (None, 3):
                req = rand_request(300 + n, B=2, H=H, Lq=4, Lk=Lk)
                req.update(extra)
                if H and "mask" in req and len(shape_of(req["mask"])) == 3:
                    req["mask"] = [[m] for m in req["mask"]]
                ref_out, ref_w = attention(req)
                ref_d = diagnostics(req)
                dshape = shape_of(ref_out)[:-1]
                what = "case %d H %s" % (n, H)
                for k, outs in enumerate((list(DIAGNOSTICS), ["output"] + list(DIAGNOSTICS),
                                          ["entropy", "weights", "allowed_keys", "output",
                                           "jacobian_norm", "max_weight"])):
                    res = self.infer(req, outs, binary=k != 1, out_binary=k != 0)
                    names = [o["name"] for o in res.get_response()["outputs"]]
                    self.assertEqual(names, outs, what)
                    for name in DIAGNOSTICS:
                        o = res.get_output(name)
                        self.assertEqual(o["shape"], dshape, what + " " + name)
                        self.assertEqual(o["datatype"],
                                         "INT32" if name == "allowed_keys" else "FP32")
                    self.assert_diag({x: res.as_list(x) for x in DIAGNOSTICS}, ref_d, what)
                    if "output" in outs:
                        self.assert_close(res.as_list("output"), flatten(ref_out), what)
                    if "weights" in outs:
                        self.assert_weights(res.as_list("weights"), flatten(ref_w), what)

    def test_no_outputs_listed_returns_output_and_weights_only(self):
        # diagnostics cost a weights pass, so they come only when named
        req = rand_request(2, B=1, Lq=3, Lk=4)
        body = {"inputs": [i._get_tensor() for i in v2_inputs(req, False)]}
        status, resp = self.srv.post_json("/v2/models/attention/infer", body)
        self.assertEqual(status, 200, resp)
        self.assertEqual([o["name"] for o in resp["outputs"]], ["output", "weights"])
        res = self.client().infer("attention", v2_inputs(req, True))  # binary_data_output
        self.assertEqual([o["name"] for o in res.get_response()["outputs"]],
                         ["output", "weights"])

    def test_additive_model_diagnostics(self):
        rng = random.Random(12)
        req = rand_request(12, B=1, H=2, Lq=3, Lk=5, D=4)
        w = {"w_q": rand_tensor(rng, [2, 4]), "w_k": rand_tensor(rng, [2, 4]),
             "w_v": rand_tensor(rng, [2])}
        req.update(w, scoring="additive", valid_lens=[4])
        ref_d = diagnostics(req)
        inputs = v2_inputs(req, True, extra=("valid_lens", "w_q", "w_k", "w_v"))
        res = self.client().infer("additive_attention", inputs,
                                  outputs=[InferRequestedOutput(x) for x in DIAGNOSTICS])
        self.assert_diag({x: res.as_list(x) for x in DIAGNOSTICS}, ref_d, "additive")

    def test_unknown_output_lists_the_diagnostics(self):
        req = rand_request(1, B=1, Lq=2, Lk=2)
        with self.assertRaises(InferenceServerException) as cm:
            self.client().infer("attention", v2_inputs(req, False),
                                outputs=[InferRequestedOutput("diagnostics")])
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("jacobian_norm", cm.exception.msg)


if __name__ == "__main__":
    harness.main()
