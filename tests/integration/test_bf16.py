"""BF16 mode through the real build/attnd: /v1 "precision": "bf16" and the
v2 parameter precision, with JSON numbers and with BF16 tensors (binary
and JSON), against the float64 reference and docs/api.md's error bound.

For each request, on the weights path and the online path:
  * output within ((1 + rho)(1 + u)^2 (1 + g) - 1) sum_j w_j |v_j| of the
    reference of the operands as sent, rho = e^(2 Delta)(1 + e)^2 (1 + 2g)
    - 1, Delta = (2u + u^2) |scale| max sum_d |q_d k_d| + (D + 8) 2^-24 M,
    u = 2^-8, e = 2^-16, g = (Lk + 8) 2^-24 (docs/api.md);
  * within the same with Delta = (D + 8) 2^-24 M and one u less of the
    reference of the operands rounded to BF16;
  * returned weights are BF16 values within their bound, masked ones and
    empty rows exactly 0; lse within Delta.
And the refusals (unknown precision, bf16 with additive scoring), that
precision "fp32" answers the bits of no precision at all, and that
--version and /metrics name the kernels: amx-bf16 where the CPU has AMX
(attnd asks for the permission at start, and says so when it does not
come).  Shapes off every tile edge (rows and keys not multiples of 16, D
not one of 32, Dk != Dv) go through whichever kernels run.
"""

import json
import math
import random
import struct
import subprocess

import harness
import v2client
from reference import (_as4, attention, flatten, lse, rand_request,
                       rand_tensor, shape_of)
from v2client import InferenceServerClient, InferenceServerException, InferInput

U = 2.0 ** -8
EXP_ERR = 2.0 ** -16


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16(x):
    """float32(x) rounded to BF16 (what the core does to an operand)."""
    return v2client.bf16_round(f32(x))


def is_bf16(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] & 0xFFFF == 0


def map_nested(t, fn):
    if isinstance(t, list):
        return [map_nested(x, fn) for x in t]
    return fn(t)


def rounded(req):
    out = dict(req)
    for name in ("query", "key", "value"):
        out[name] = map_nested(req[name], bf16)
    return out


def deltas(req):
    """(Delta for the operands as sent, Delta for BF16-rounded ones)."""
    rank = len(shape_of(req["query"]))
    Q, K = _as4(req["query"], rank), _as4(req["key"], rank)
    B, H, Lq, D = shape_of(Q)
    Hkv, Lk = shape_of(K)[1], shape_of(K)[2]
    scale = req.get("scale") or 1.0 / math.sqrt(D)
    A = 0.0
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(Lq):
                for j in range(Lk):
                    a = sum(abs(Q[b][h][i][d] * K[b][g][j][d]) for d in range(D))
                    A = max(A, abs(scale) * a)
    M = A + 1.0 + (req.get("softcap") or 0.0)
    if req.get("bias") is not None:
        M += max(abs(x) for x in flatten(req["bias"]))
    if req.get("alibi_slopes") is not None:
        M += max(abs(x) for x in flatten(req["alibi_slopes"])) * (Lq + Lk)
    small = (D + 8) * 2.0 ** -24 * M
    return (2 * U + U * U) * A + small, small


def factors(Lk, delta, round_v):
    g = (Lk + 8) * 2.0 ** -24
    rho = math.exp(2 * delta) * (1 + EXP_ERR) ** 2 * (1 + 2 * g) - 1
    out = (1 + rho) * (1 + U) ** (1 + round_v) * (1 + g) - 1
    return out, (1 + rho) * (1 + U) - 1


def cpu_has_amx():
    """True when Linux reports AMX-TILE, AMX-BF16 and AVX512-BF16 (it
    drops the AMX flags where the OS does not enable their state)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f
                          if l.startswith("flags")), [])
    except OSError:
        return False
    return {"amx_tile", "amx_bf16", "avx512_bf16", "avx512bw"} <= set(flags)


class Bf16Test(harness.ServerTestCase):
    server_args = ("--workers", "2")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.client = InferenceServerClient("127.0.0.1:%d" % cls.srv.port)

    # -- the bound ----------------------------------------------------------
    def check_against(self, req, out, wts, ref_req, delta, round_v, what):
        rank = len(shape_of(ref_req["query"]))
        ref_out, ref_w = attention(ref_req)
        V = _as4(ref_req["value"], rank)
        O, R = _as4(out, rank), _as4(ref_out, rank)
        RW = _as4(ref_w, rank)
        W = _as4(wts, rank) if wts is not None else None
        B, H, Lq, Dv = shape_of(R)
        Lk, Hkv = shape_of(V)[2], shape_of(V)[1]
        fo, fw = factors(Lk, delta, round_v)
        for b in range(B):
            for h in range(H):
                g = h // (H // Hkv)
                for i in range(Lq):
                    rw = RW[b][h][i]
                    for d in range(Dv):
                        s = sum(rw[j] * abs(V[b][g][j][d]) for j in range(Lk))
                        err = abs(O[b][h][i][d] - R[b][h][i][d])
                        self.assertLessEqual(
                            err, fo * s + 1e-37, "%s: out[%d][%d][%d][%d] %r vs "
                            "%r" % (what, b, h, i, d, O[b][h][i][d], R[b][h][i][d]))
                    if W is None:
                        continue
                    for j in range(Lk):
                        x = W[b][h][i][j]
                        self.assertTrue(is_bf16(x), "%s: weight %r is not BF16" % (what, x))
                        if rw[j] == 0.0 and not any(rw):
                            self.assertEqual(x, 0.0, "%s: empty row weight" % what)
                        self.assertLessEqual(abs(x - rw[j]), fw * rw[j] + 1e-37,
                                             "%s: weight[%d][%d][%d][%d] %r vs %r"
                                             % (what, b, h, i, j, x, rw[j]))

    def check_masked_zero(self, req, wts, out):
        _, ref_w = attention(req)
        for x, r in zip(flatten(wts), flatten(ref_w)):
            if r == 0.0:
                self.assertEqual(x, 0.0, "a masked weight is not exactly 0")
        ref_out, _ = attention(req)
        rank = len(shape_of(req["query"]))
        RW, O = _as4(ref_w, rank), _as4(out, rank)
        for b, hs in enumerate(RW):
            for h, rows in enumerate(hs):
                for i, row in enumerate(rows):
                    if not any(row):
                        self.assertTrue(all(x == 0.0 for x in O[b][h][i]),
                                        "an empty row's output is not 0")

    def run_v1(self, req, what):
        req = dict(req, precision="bf16")
        da, db = deltas(req)
        for weights in (True, False):
            body = dict(req, return_weights=weights, return_lse=True)
            status, resp = self.srv.post_json("/v1/attention", body)
            self.assertEqual(status, 200, resp)
            wts = resp.get("weights")
            path = what + (" weights" if weights else " online")
            self.check_against(req, resp["output"], wts, req, da, 1, path)
            self.check_against(req, resp["output"], wts, rounded(req), db, 0,
                               path + " (bf16 operands)")
            if weights:
                self.check_masked_zero(req, wts, resp["output"])
            Lk = shape_of(req["key"])[-2]
            for got, want in zip(flatten(resp["lse"]), flatten(lse(req))):
                if math.isinf(want):
                    self.assertEqual(got, "-inf" if isinstance(got, str) else got)
                    continue
                tol = da + 2 * EXP_ERR + (Lk + 8) * 2.0 ** -23 + 2.0 ** -23 * abs(want)
                self.assertLessEqual(abs(got - want), tol, path + ": lse")

    # -- /v1 ------------------------------------------------------------------
    def test_v1_variants_within_the_bound(self):
        rng = random.Random(43)
        cases = [
            ("plain", {}),
            ("causal", {"causal": True}),
            ("lower right", {"causal": "lower_right"}),
            ("window", {"window": [2, 1]}),
            ("bias", {"bias": "bias"}),
            ("mask", {"mask": "mask"}),
            ("softcap alibi sinks", {"softcap": 2.5, "alibi_slopes": [0.5, 0.25],
                                     "sinks": [0.3, 4.0]}),
            ("packed", {"cu_seqlens_q": [0, 2, 5], "cu_seqlens_k": [0, 4, 7]}),
        ]
        for n, (what, extra) in enumerate(cases):
            B = 1 if "cu_seqlens_q" in extra else 2
            req = rand_request(100 + n, B=B, H=2, Hkv=2, Lq=5, Lk=7, D=16, Dv=6)
            req.pop("valid_lens", None) if "cu_seqlens_q" in extra else None
            if extra.get("bias") == "bias":
                extra = {"bias": rand_tensor(rng, [B, 2, 5, 7], 2.0)}
            if extra.get("mask") == "mask":
                m = [[[[rng.random() < 0.6 for _ in range(7)] for _ in range(5)]
                      for _ in range(2)] for _ in range(B)]
                m[0][0][1] = [False] * 7
                extra = {"mask": m}
            req.update(extra)
            self.run_v1(req, what)

    def test_v1_tile_edges_within_the_bound(self):
        rng = random.Random(47)
        req = rand_request(147, B=1, H=2, Hkv=1, Lq=33, Lk=47, D=40, Dv=20)
        self.run_v1(req, "33 rows, 47 keys, D 40, Dv 20")
        m = [[[[rng.random() < 0.7 for _ in range(47)] for _ in range(33)]
              for _ in range(2)]]
        m[0][1][16] = [False] * 47
        self.run_v1(dict(req, mask=m, causal="lower_right"),
                    "masked, causal, an empty row 16")

    def test_v1_refusals_name_the_field(self):
        req = rand_request(7, B=1, H=1, Hkv=1, Lq=2, Lk=3, D=4, Dv=2)
        for bad in ("fp16", "BF16", 16, True):
            status, resp = self.srv.post_json("/v1/attention", dict(req, precision=bad))
            self.assertEqual(status, 400, resp)
            self.assertIn("precision", resp["error"])
            self.assertIn('"fp32", "bf16"', resp["error"])
            if isinstance(bad, str):
                self.assertIn('precision: unknown value "%s"' % bad, resp["error"])
        add = {"query": [[[1.0, 2.0]]], "key": [[[1.0, 0.5]]], "value": [[[1.0]]],
               "scoring": "additive", "w_q": [[1.0, 0.0]], "w_k": [[0.0, 1.0]],
               "w_v": [1.0], "precision": "bf16"}
        status, resp = self.srv.post_json("/v1/attention", add)
        self.assertEqual(status, 400, resp)
        self.assertIn("precision", resp["error"])
        self.assertIn("additive", resp["error"])
        add["precision"] = "fp32"
        status, resp = self.srv.post_json("/v1/attention", add)
        self.assertEqual(status, 200, resp)

    def test_fp32_precision_is_the_default_bit_for_bit(self):
        req = rand_request(9, B=2, H=2, Hkv=1, Lq=6, Lk=9, D=8, Dv=4)
        s1, r1 = self.srv.post_json("/v1/attention", req)
        s2, r2 = self.srv.post_json("/v1/attention", dict(req, precision="fp32"))
        self.assertEqual((s1, s2), (200, 200))
        self.assertEqual(json.dumps(r1, sort_keys=True), json.dumps(r2, sort_keys=True))

    # -- v2 -------------------------------------------------------------------
    def v2_case(self, seed, binary):
        rng = random.Random(seed)
        shp = {"query": [2, 2, 5, 16], "key": [2, 1, 9, 16], "value": [2, 1, 9, 6]}
        vals = {n: [bf16(rng.gauss(0, 1)) for _ in range(math.prod(s))]
                for n, s in shp.items()}
        inputs = []
        for n in ("query", "key", "value"):
            x = InferInput(n, shp[n], "BF16")
            x.set_data_from_list(vals[n], binary_data=binary)
            inputs.append(x)
        def nest(flat, s):
            from reference import nest as _nest
            return _nest(flat, s)
        req = {n: nest(vals[n], shp[n]) for n in shp}
        return inputs, req

    def test_v2_bf16_inputs_binary_and_json_within_the_bound(self):
        for binary in (True, False):
            inputs, req = self.v2_case(11 + binary, binary)
            outs = [v2client.InferRequestedOutput("output", binary_data=binary),
                    v2client.InferRequestedOutput("weights", binary_data=binary)]
            res = self.client.infer("attention", inputs, outputs=outs,
                                    parameters={"precision": "bf16", "causal": True})
            req["causal"] = True
            da, db = deltas(req)
            out = v2client_nest(res.as_list("output"), [2, 2, 5, 6])
            wts = v2client_nest(res.as_list("weights"), [2, 2, 5, 9])
            what = "v2 %s" % ("binary" if binary else "JSON")
            # BF16 inputs are their own rounding: both references agree
            self.check_against(req, out, wts, req, db, 0, what)
            self.check_masked_zero(req, wts, out)
            res = self.client.infer("attention", inputs,
                                    outputs=[v2client.InferRequestedOutput("output", binary_data=binary)],
                                    parameters={"precision": "bf16", "causal": True})
            out2 = v2client_nest(res.as_list("output"), [2, 2, 5, 6])
            self.check_against(req, out2, None, req, db, 0, what + " online")

    def test_v2_refusals_name_the_parameter(self):
        inputs, _ = self.v2_case(3, True)
        for bad in ("fp64", 1, None):
            with self.assertRaises(InferenceServerException) as cm:
                self.client.infer("attention", inputs, parameters={"precision": bad})
            self.assertEqual(cm.exception.status, 400)
            self.assertIn("parameters.precision", cm.exception.msg)
            self.assertIn('"fp32", "bf16"', cm.exception.msg)
        q = InferInput("query", [1, 1, 2], "FP32"); q.set_data_from_list([1.0, 2.0])
        k = InferInput("key", [1, 1, 2], "FP32"); k.set_data_from_list([1.0, 0.5])
        v = InferInput("value", [1, 1, 1], "FP32"); v.set_data_from_list([1.0])
        wq = InferInput("w_q", [1, 2], "FP32"); wq.set_data_from_list([1.0, 0.0])
        wk = InferInput("w_k", [1, 2], "FP32"); wk.set_data_from_list([0.0, 1.0])
        wv = InferInput("w_v", [1], "FP32"); wv.set_data_from_list([1.0])
        with self.assertRaises(InferenceServerException) as cm:
            self.client.infer("additive_attention", [q, k, v, wq, wk, wv],
                              parameters={"precision": "bf16"})
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("parameters.precision", cm.exception.msg)
        self.assertIn("additive_attention", cm.exception.msg)

    def test_v2_nonfinite_bf16_input_is_refused_in_bf16_mode(self):
        inputs, _ = self.v2_case(5, True)
        raw = bytearray(v2client.serialize([1.0] * 32, "BF16"))
        raw[6:8] = struct.pack("<H", 0x7FC0)  # NaN at element 3
        k = InferInput("key", [2, 1, 9, 16], "BF16")
        k.set_raw(bytes(raw) + bytes(2 * (2 * 9 * 16 - 32)))
        with self.assertRaises(InferenceServerException) as cm:
            self.client.infer("attention", [inputs[0], k, inputs[2]],
                              parameters={"precision": "bf16"})
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("key[0][0][0][3]", cm.exception.msg)

    def test_model_config_lists_the_precisions(self):
        for model, want in (("attention", "fp32,bf16"), ("additive_attention", "fp32")):
            status, _, body = self.srv.get("/v2/models/%s/config" % model)
            self.assertEqual(status, 200, body[:200])
            cfg = json.loads(body)
            self.assertEqual(cfg["parameters"]["precision"], {"string_value": want})

    # -- which kernels ------------------------------------------------------------
    def test_version_and_metrics_name_the_kernels(self):
        out = subprocess.run([harness.BINARY, "--version"], capture_output=True,
                             text=True, check=True).stdout
        line = [x for x in out.splitlines() if x.startswith("kernels: ")]
        self.assertEqual(len(line), 1, out)
        status, _, body = self.srv.get("/metrics")
        self.assertEqual(status, 200)
        text = body.decode() if isinstance(body, bytes) else body
        info = [x for x in text.splitlines() if x.startswith("attnd_kernel_info{")]
        self.assertEqual(len(info), 1, text[-400:])
        fp32 = line[0].split("fp32 ")[1].split(",")[0]
        bf = line[0].split("bf16 ")[1]
        self.assertIn('fp32="%s"' % fp32, info[0])
        self.assertIn('bf16="%s"' % bf, info[0])
        self.assertIn(fp32, ("avx512", "blas"))
        self.assertIn(bf, ("amx-bf16", "avx512bf16", "avx512", "blas"))
        if not cpu_has_amx() or harness.VALGRIND:
            self.assertNotEqual(bf, "amx-bf16")
        elif bf != "amx-bf16":  # the permission did not come: said once
            said = [x for x in self.srv.log if "AMX: " in x]
            self.assertEqual(len(said), 1, "".join(self.srv.log[-20:]))


def v2client_nest(flat, shape):
    from reference import nest
    return nest(flat, shape)


if __name__ == "__main__":
    harness.main()
