"""deploy/clients/attnd_client.py against the real build/attnd.

The client's answers are checked against the float64 reference
(reference.py): /v1 with nested and flat tensors, masks, lengths, heads,
additive scoring, dropout and compression; v2 with binary and JSON tensors
in FP32, FP64, FP16 and BF16, INT32/INT64 lengths and BOOL masks; the
health and metadata helpers; errors as AttndError.  Its FP16/BF16 encoders
are compared with an exact rational rounding written here.

The tests run twice: with nested lists under the python3 that runs them
(numpy or not), and with numpy arrays under Debian's /usr/bin/python3,
which has python3-numpy (a child process when this python3 lacks numpy).
The v2 tests (and the compression test: content coding reaches the HTTP
layer with the v2 routes) are skipped only when the server answers 404 on
/v2.
"""

import json
import math
import os
import random
import socket
import struct
import subprocess
import sys
from fractions import Fraction

import harness
from reference import attention, flatten, nest, rand_request, rand_tensor, shape_of

sys.path.insert(0, os.path.join(harness.ROOT, "deploy", "clients"))
import attnd_client  # noqa: E402
from attnd_client import AttndClient, AttndError  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None

SYSTEM_PYTHON = "/usr/bin/python3"
ONLY = os.environ.get("ATTND_CLIENT_TEST_ONLY")  # set in the numpy child


# ---- exact rounding, independent of the client's bit tricks ----------------

def nearest_even(x, grid):
    """x rounded to the nearest of the sorted candidates in grid (ties: the
    one whose last significand bit is 0, given as (value, bits) pairs)."""
    best = min(grid, key=lambda g: (abs(Fraction(g[0]) - Fraction(x)), g[1] & 1))
    return best


def bf16_exact(x):
    """float32(x) rounded to the nearest BF16, ties to even, by comparing
    exact rationals of the two neighbouring BF16 values."""
    f = struct.unpack("<f", struct.pack("<f", x))[0]
    bits = struct.unpack("<I", struct.pack("<f", f))[0]
    lo = bits & 0xFFFF0000
    cands = []
    for b in (lo, lo + 0x10000):
        b &= 0xFFFFFFFF
        v = struct.unpack("<f", struct.pack("<I", b))[0] if (b >> 23) & 0xFF != 0xFF else \
            math.copysign(math.inf, f)
        cands.append((v, b >> 16))
    v, b16 = nearest_even(f, [c for c in cands if not math.isinf(c[0])] or cands)
    return v, b16


def bf16_direct(x):
    """x rounded once, straight to the nearest BF16 (ties to even): how the
    server reads a BF16 JSON number.  Python's round() of a float is exact
    and ties to even."""
    if x == 0:
        return x
    unit = max(math.frexp(abs(x))[1] - 1, -126) - 7
    return math.copysign(math.ldexp(round(math.ldexp(abs(x), -unit)), unit), x)


def f16_value(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def rounded(t, datatype):
    fn = {"FP32": lambda x: struct.unpack("<f", struct.pack("<f", x))[0],
          "FP64": lambda x: x, "FP16": f16_value, "BF16": lambda x: bf16_exact(x)[0]}
    return nest([fn[datatype](x) for x in flatten(t)], shape_of(t))


def to_list(t):
    return t.tolist() if np is not None and isinstance(t, np.ndarray) else t


class ClientCase(harness.ServerTestCase):
    server_args = ("--workers", "2")
    numpy_mode = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.url = "http://127.0.0.1:%d" % cls.srv.port
        cls.c = AttndClient(cls.url, use_numpy=cls.numpy_mode)
        cls.has_v2 = cls.srv.get("/v2")[0] != 404

    def need_v2(self):
        if not self.has_v2:
            self.skipTest("this attnd answers 404 on /v2: the v2 routes have not landed")

    def tensor(self, t, dtype="float32"):
        """t as the client's users would pass it in this mode."""
        return np.asarray(t, dtype=dtype) if self.numpy_mode else t

    def assert_result_type(self, t, shape):
        if self.numpy_mode:
            self.assertIsInstance(t, np.ndarray)
            self.assertEqual(t.dtype, np.float32)
            self.assertEqual(list(t.shape), shape)
        else:
            self.assertIsInstance(t, list)
            self.assertEqual(shape_of(t), shape)

    def assert_close(self, got, ref, what):
        self.assert_result_type(got, shape_of(ref))
        g, r = flatten(to_list(got)), flatten(ref)
        self.assertEqual(len(g), len(r), what)
        for n, (a, b) in enumerate(zip(g, r)):
            self.assertLessEqual(abs(a - b), 1e-5 + 1e-5 * abs(b),
                                 "%s[%d]: got %r, want %r" % (what, n, a, b))

    def assert_weights(self, got, ref):
        self.assert_result_type(got, shape_of(ref))
        for n, (a, b) in enumerate(zip(flatten(to_list(got)), flatten(ref))):
            if b == 0.0:
                self.assertEqual(a, 0.0, "weights[%d] must be exactly 0" % n)
            else:
                self.assertLessEqual(abs(a - b), 1e-5, "weights[%d]" % n)

    def check(self, res, req, outputs=("output", "weights")):
        ref_out, ref_w = attention(req)
        self.assertEqual(sorted(k for k in res if k in ("output", "weights")), sorted(outputs))
        if "output" in outputs:
            self.assert_close(res["output"], ref_out, "output")
        if "weights" in outputs:
            self.assert_weights(res["weights"], ref_w)


class V1Tests:
    def test_health_helpers(self):
        self.assertTrue(self.c.healthy())
        self.assertTrue(self.c.ready())
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        dead = AttndClient("127.0.0.1:%d" % port, timeout=5)
        self.assertFalse(dead.healthy())
        self.assertFalse(dead.ready())
        self.assertIn("attnd_requests_total", self.c.metrics())

    def test_openapi_helper(self):
        doc = self.c.openapi()
        self.assertTrue(doc["openapi"].startswith("3."))
        self.assertIn("/v1/attention", doc["paths"])

    def test_readme_example(self):
        q, k, v = [[[1, 0], [0, 2]]], [[[1, 1], [2, 0], [0, 3]]], [[[1, 0], [0, 1], [1, 1]]]
        res = self.c.attention(self.tensor(q), self.tensor(k), self.tensor(v),
                               valid_lens=self.tensor([2], "int64"), id="ex")
        self.assertEqual(res["id"], "ex")
        self.check(res, {"query": q, "key": k, "value": v, "valid_lens": [2]})
        self.assertEqual(to_list(res["weights"])[0][0][2], 0.0)

    def test_heads_lengths_mask_bias_causal(self):
        req = rand_request(21, B=2, H=4, Hkv=2, Lq=3, Lk=6, D=5, Dv=3)
        rng = random.Random(22)
        mask = [[[rng.random() < 0.7 for _ in range(6)] for _ in range(3)]]
        bias = rand_tensor(rng, [3, 6], 0.5)
        fields = {"valid_lens": [[3, 6, 2], [0, 5, 6]], "mask": mask, "bias": bias,
                  "causal": "lower_right", "scale": -0.4}
        res = self.c.attention(self.tensor(req["query"]), self.tensor(req["key"]),
                               self.tensor(req["value"]),
                               valid_lens=self.tensor(fields["valid_lens"], "int64"),
                               mask=self.tensor(mask, "bool"), bias=self.tensor(bias),
                               causal="lower_right", scale=-0.4)
        self.check(res, dict(req, **fields))

    def test_additive_dropout_window_and_no_weights(self):
        req = rand_request(23, B=1, Lq=4, Lk=5, D=3, Dv=2)
        rng = random.Random(24)
        wq, wk, wv = rand_tensor(rng, [6, 3]), rand_tensor(rng, [6, 3]), rand_tensor(rng, [6])
        res = self.c.attention(self.tensor(req["query"]), self.tensor(req["key"]),
                               self.tensor(req["value"]), scoring="additive",
                               w_q=self.tensor(wq), w_k=self.tensor(wk), w_v=self.tensor(wv),
                               window=[1, 0])
        self.check(res, dict(req, scoring="additive", w_q=wq, w_k=wk, w_v=wv, window=[1, 0]))
        res = self.c.attention(self.tensor(req["query"]), self.tensor(req["key"]),
                               self.tensor(req["value"]), dropout={"p": 0.4, "seed": 9},
                               return_weights=False)
        self.check(res, dict(req, dropout={"p": 0.4, "seed": 9}), outputs=("output",))
        self.assertNotIn("weights", res)

    def test_errors_raise(self):
        with self.assertRaises(AttndError) as cm:
            self.c.attention([[[1, 0]]], [[[1, 1, 3]]], [[[1, 0]]])
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.message, "key: width 3 does not match query width 2")
        with self.assertRaises(AttndError) as cm:
            self.c.attention([[[1, 0]]], [[[1, 1]]], [[[1, 0]]], temperature=2)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("temperature", cm.exception.message)
        with self.assertRaises(AttndError) as cm:
            self.c._get_json("/v3")
        self.assertEqual(cm.exception.status, 404)
        self.assertTrue(self.c.ready())


    def test_token(self):
        with harness.Attnd(["--workers", "1", "--token", "tok-1"]) as srv:
            url = "http://127.0.0.1:%d" % srv.port
            q, k, v = [[[1.0, 2.0]]], [[[0.5, -1.0]]], [[[3.0]]]
            with self.assertRaises(AttndError) as cm:
                AttndClient(url).attention(q, k, v)
            self.assertEqual(cm.exception.status, 401)
            with self.assertRaises(AttndError) as cm:
                AttndClient(url, token="tok-2").attention(q, k, v)
            self.assertEqual(cm.exception.status, 401)
            res = AttndClient(url, token="tok-1", use_numpy=self.numpy_mode).attention(
                self.tensor(q), self.tensor(k), self.tensor(v))
            self.check(res, {"query": q, "key": k, "value": v})
            self.assertTrue(AttndClient(url).ready())
            self.assertEqual(srv.stop(), 0)


class V2Tests:
    def test_compressed_request_and_response(self):
        # HTTP content coding arrives in the server with the v2 routes
        self.need_v2()
        req = rand_request(25, B=2, Lq=6, Lk=8)
        for alg in ("gzip", "deflate"):
            res = self.c.attention(self.tensor(req["query"]), self.tensor(req["key"]),
                                   self.tensor(req["value"]), compress=alg)
            self.assertEqual(self.c.last_headers.get("content-encoding"), "gzip")
            self.check(res, req)

    def test_v2_health_and_metadata(self):
        self.need_v2()
        self.assertTrue(self.c.server_live())
        self.assertTrue(self.c.server_ready())
        self.assertTrue(self.c.model_ready("attention"))
        self.assertTrue(self.c.model_ready("additive_attention", version=1))
        self.assertFalse(self.c.model_ready("bert"))
        meta = self.c.server_metadata()
        self.assertIn("binary_tensor_data", meta["extensions"])
        m = self.c.model_metadata("attention", version="1")
        self.assertEqual([i["name"] for i in m["inputs"]][:3], ["query", "key", "value"])
        with self.assertRaises(AttndError) as cm:
            self.c.model_metadata("bert")
        self.assertEqual(cm.exception.status, 404)

    def test_v2_every_float_datatype_binary_and_json(self):
        self.need_v2()
        req = rand_request(31, B=1, H=2, Lq=3, Lk=5, D=8, Dv=4)
        np_types = {"FP32": "float32", "FP64": "float64", "FP16": "float16"}
        for binary in (True, False):
            for dt in ("FP32", "FP64", "FP16", "BF16"):
                inputs = {n: self.tensor(req[n], np_types.get(dt, "float32"))
                          for n in ("query", "key", "value")}
                dts = {"query": "BF16", "key": "BF16", "value": "BF16"} if dt == "BF16" else {}
                if not self.numpy_mode:
                    dts = {n: dt for n in inputs}
                res = self.c.infer("attention", inputs, binary=binary, datatypes=dts,
                                   request_id="t-" + dt)
                self.assertEqual(self.c.last_response["id"], "t-" + dt)
                want_ct = "application/octet-stream" if binary else "application/json"
                self.assertEqual(self.c.last_headers["content-type"], want_ct)
                ref = {n: rounded(req[n], dt) for n in ("query", "key", "value")}
                if dt == "BF16" and not binary:
                    # JSON numbers: the server rounds what was sent (the
                    # float32 array's values in numpy mode) straight to BF16
                    sent = {n: rounded(req[n], "FP32") if self.numpy_mode else req[n]
                            for n in ("query", "key", "value")}
                    ref = {n: nest([bf16_direct(x) for x in flatten(t)], shape_of(t))
                           for n, t in sent.items()}
                self.check(res, ref)

    def test_v2_lengths_mask_parameters_and_output_order(self):
        self.need_v2()
        req = rand_request(32, B=2, Lq=3, Lk=4, D=4, Dv=3)
        mask = [[[True, False, True, True]]]
        for lens_dt in ("INT32", "INT64"):
            np_dt = "int32" if lens_dt == "INT32" else "int64"
            inputs = {"query": self.tensor(req["query"]), "key": self.tensor(req["key"]),
                      "value": self.tensor(req["value"]),
                      "valid_lens": self.tensor([[1, 2, 3], [0, 4, 4]], np_dt),
                      "mask": self.tensor(mask, "bool")}
            res = self.c.infer("attention", inputs, outputs=["weights", "output"],
                               datatypes={} if self.numpy_mode else {"valid_lens": lens_dt},
                               parameters={"causal": True})
            self.assertEqual([o["name"] for o in self.c.last_response["outputs"]],
                             ["weights", "output"])
            self.check(res, dict(req, mask=mask, valid_lens=[[1, 2, 3], [0, 4, 4]],
                                 causal=True))
        res = self.c.infer("attention", {n: self.tensor(req[n]) for n in
                                         ("query", "key", "value")}, outputs=["output"],
                           compress="gzip")
        self.check(res, req, outputs=("output",))

    def test_v2_additive(self):
        self.need_v2()
        req = rand_request(33, B=2, Lq=2, Lk=4, D=3, Dv=2)
        rng = random.Random(34)
        w = {"w_q": rand_tensor(rng, [5, 3]), "w_k": rand_tensor(rng, [5, 3]),
             "w_v": rand_tensor(rng, [5])}
        inputs = {n: self.tensor(t) for n, t in list(req.items()) + list(w.items())}
        res = self.c.infer("additive_attention", inputs, version=1)
        self.check(res, dict(req, scoring="additive", **w))

    def test_v2_errors(self):
        self.need_v2()
        req = rand_request(35)
        inputs = {n: self.tensor(req[n]) for n in ("query", "key", "value")}
        with self.assertRaises(AttndError) as cm:
            self.c.infer("bert", inputs)
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(AttndError) as cm:
            self.c.infer("attention", {"query": inputs["query"], "key": inputs["key"]})
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("value", cm.exception.message)
        with self.assertRaises(AttndError) as cm:
            self.c.infer("attention", inputs, timeout_us=1)
        self.assertEqual(cm.exception.status, 504)


class EncodingTests:
    def test_bf16_and_fp16_encoding_is_exact(self):
        rng = random.Random(41)
        xs = [rng.gauss(0, 1) * 10 ** rng.randint(-30, 30) for _ in range(3000)]
        # ties: float32 values exactly halfway between two BF16 values
        xs += [struct.unpack("<f", struct.pack("<I", b))[0]
               for b in (0x3F808000, 0x3F818000, 0xBF808000, 0x00008000, 0x00018000)]
        xs += [0.0, -0.0, 1.0, 3.0e38, -1e-40, 1.00390625]
        got = attnd_client._encode_list(xs, "BF16")
        want = struct.pack("<%dH" % len(xs), *[bf16_exact(x)[1] for x in xs])
        self.assertEqual(got, want)
        ys = [x for x in xs if abs(x) < 65504]
        self.assertEqual(attnd_client._decode_list(attnd_client._encode_list(ys, "FP16"),
                                                   "FP16"), [f16_value(y) for y in ys])
        back = attnd_client._decode_list(got, "BF16")
        self.assertEqual(back, [bf16_exact(x)[0] for x in xs])
        if self.numpy_mode:
            for dt, npt in (("BF16", "float32"), ("BF16", "float64"), ("FP16", "float64"),
                            ("FP32", "float64"), ("FP64", "float64")):
                vals = ys if dt == "FP16" else xs
                if dt == "FP32":
                    vals = [x for x in xs if abs(x) < 3e38]
                a = np.asarray(vals, dtype=npt)
                self.assertEqual(attnd_client._np_encode(a, dt),
                                 attnd_client._encode_list(a.tolist(), dt), dt)
                dec = attnd_client._np_decode(attnd_client._np_encode(a, dt), dt, [len(vals)])
                self.assertEqual(dec.tolist(), attnd_client._decode_list(
                    attnd_client._encode_list(a.tolist(), dt), dt))

    def test_client_mode(self):
        if self.numpy_mode:
            self.assertTrue(AttndClient(self.url).numpy)
        elif np is None:
            self.assertFalse(AttndClient(self.url).numpy)  # auto: no numpy, lists
            with self.assertRaises(ImportError):
                AttndClient(self.url, use_numpy=True)
        self.assertEqual(self.c.numpy, self.numpy_mode)


class ListClientTest(ClientCase, V1Tests, V2Tests, EncodingTests):
    numpy_mode = False


if np is not None:
    class NumpyClientTest(ClientCase, V1Tests, V2Tests, EncodingTests):
        numpy_mode = True
elif ONLY is None:
    class NumpyUnderSystemPythonTest(harness.unittest.TestCase):
        def test_numpy_mode(self):
            """Runs NumpyClientTest in Debian's python3, which has numpy."""
            proc = subprocess.run([SYSTEM_PYTHON, os.path.abspath(__file__)],
                                  env=dict(os.environ, ATTND_CLIENT_TEST_ONLY="numpy"),
                                  capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            self.assertRegex(proc.stdout, r"\b[1-9]\d* passed, 0 failed")


if __name__ == "__main__":
    if ONLY == "numpy":
        del ListClientTest
        if np is None:
            sys.exit("ATTND_CLIENT_TEST_ONLY=numpy needs numpy")
    harness.main()
