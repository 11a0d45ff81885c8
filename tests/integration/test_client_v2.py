"""attnd's Python client (test_client.py installs it) over v2 against the real
build/attnd: every v2 route and datatype, binary and JSON, the Unix socket,
attention() over v2 binary tensors giving /v1's numbers and words, the
variants and the lse, the served model name, deadlines and precision, and the
request attention() builds; each on AttndClient and again on AsyncAttndClient
(test_client.OnAsyncio).
"""

import inspect
import json
import math
import os
import random
import re
import socket
import tempfile
import unittest
from decimal import Decimal
from fractions import Fraction

import harness
import test_client as tc
from reference import (attention, flatten, nest, rand_request, rand_tensor, shape_of)
from test_client import (Case, OnAsyncio, Proxy, f16, rounded, run, np)


def setUpModule():
    tc.install_client()


# ---- v2 ------------------------------------------------------------------------------

def own_memory(a):
    """The array whose memory a views: a itself, or its bases in turn."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class V2Test(Case):
    def test_v2_health_metadata_config_and_stats(self):
        meta = self.c.server_metadata()
        self.assertIn("binary_tensor_data", meta["extensions"])
        m = self.c.model_metadata("attention", version="1")
        self.assertEqual([i["name"] for i in m["inputs"]][:3], ["query", "key", "value"])
        with self.assertRaises(tc.AttndError) as cm:
            self.c.model_metadata("bert")
        self.assertEqual(cm.exception.status, 404)
        cfg = self.c.model_config("attention")
        self.assertEqual(cfg["name"], "attention")
        self.c.infer("attention", {"query": [[[1.0]]], "key": [[[1.0]]], "value": [[[1.0]]]})
        st = self.c.model_statistics("attention")
        self.assertGreaterEqual(st["model_stats"][0]["inference_stats"]["success"]["count"], 1)
        self.assertIn("model_stats", self.c.model_statistics())

    def test_every_float_datatype_binary_and_json(self):
        req = rand_request(31, B=1, H=2, Lq=3, Lk=5, D=8, Dv=4)
        names = ("query", "key", "value")
        np_types = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16,
                    "BF16": np.float32}
        for binary in (True, False):
            for dt in ("FP32", "FP64", "FP16", "BF16"):
                for as_lists in (False, True):
                    if as_lists:
                        inputs = {n: req[n] for n in names}
                        dts = {n: dt for n in names}
                    else:
                        inputs = {n: np.asarray(req[n], np_types[dt]) for n in names}
                        dts = {n: "BF16" for n in names} if dt == "BF16" else {}
                    res = self.c.infer("attention", inputs, binary=binary, datatypes=dts,
                                       request_id="t-" + dt)
                    what = "%s %s %s" % (dt, "binary" if binary else "JSON",
                                         "lists" if as_lists else "arrays")
                    self.assertEqual(self.c.last_response["id"], "t-" + dt, what)
                    self.assertEqual(self.c.last_response["outputs"][0]["datatype"], "FP32")
                    want_ct = "application/octet-stream" if binary else "application/json"
                    self.assertEqual(self.c.last_headers["content-type"], want_ct, what)
                    sent = {n: inputs[n].astype(np.float64).tolist() if not as_lists
                            else req[n] for n in names}
                    # JSON carries the values the binary encoder rounds to
                    ref = {n: rounded(t, dt) for n, t in sent.items()}
                    with self.subTest(what):
                        self.check(res, {n: rounded(t, "FP32") for n, t in ref.items()})

    def test_doubles_halfway_between_floats_round_once_binary_and_json(self):
        """float64 values exactly halfway between two float32 values (and
        others) reach attnd as the float32 nearest them, ties to even, over
        JSON as over binary: their own shortest digits would be rounded a
        second time, by attnd's decimal reader, away from the tie.  One key
        gives the value row back exactly."""
        # (normal numbers: attnd flushes subnormal products P V to 0)
        ties = [1 + 2 ** -24, 1 + 3 * 2 ** -24, -(1 + 2 ** -24), 2 ** -100 * (1 + 2 ** -24),
                2 ** 100 * (1 + 2 ** -24), 0.1, -7.25, 3e38]
        want = np.array(ties, np.float64).astype(np.float32)
        # the double's shortest digits lie past the midpoint it is
        self.assertGreater(Fraction(Decimal(repr(ties[0]))), Fraction(ties[0]))
        v = np.array([[ties]], np.float64)
        q, k = np.ones((1, 1, 1)), np.ones((1, 1, 1))
        for binary in (True, False):
            for dt in ("FP32", "FP64"):
                res = self.c.infer("attention", {"query": q, "key": k, "value": v},
                                   outputs=["output"], binary=binary, datatypes={"value": dt})
                self.assertEqual(res["output"].reshape(-1).tolist(), want.tolist(),
                                 (binary, dt))
            res = self.c.attention(q, k, v.tolist(), binary=binary, return_weights=False)
            self.assertEqual(res["output"].reshape(-1).tolist(), want.tolist(), binary)

    def test_fp16_and_bf16_ties_arrive_as_over_binary(self):
        """Doubles exactly halfway between two FP16 (or BF16) values reach
        attnd as the binary encoder rounds them (ties to even; BF16 through
        float32) over JSON too, the smallest among them, whose shortest
        digits are not the tie itself, included.  One key gives the value
        row back exactly (FP16 subnormals are normal float32 numbers)."""
        for dt, ties in (("FP16", [19 * 2 ** -25, 21 * 2 ** -25, 3 * 2 ** -25, 1 + 2 ** -11,
                                   -(1 + 3 * 2 ** -11), 2 ** -20 * (1 + 2 ** -11)]),
                         ("BF16", [2 ** -100 * (1 + 2 ** -8), 1 + 2 ** -8, -(1 + 3 * 2 ** -8),
                                   2 ** 100 * (1 + 3 * 2 ** -8)])):
            # the first's shortest digits lie past the tie it is
            self.assertNotEqual(Fraction(Decimal(repr(ties[0]))), Fraction(ties[0]))
            want = [f16(x) for x in ties] if dt == "FP16" else \
                [rounded([x], "BF16")[0] for x in ties]
            v = np.array([[ties]], np.float64)
            q, k = np.ones((1, 1, 1)), np.ones((1, 1, 1))
            for binary in (True, False):
                res = self.c.infer("attention", {"query": q, "key": k, "value": v},
                                   outputs=["output"], binary=binary, datatypes={"value": dt})
                self.assertEqual(res["output"].reshape(-1).tolist(), want, (dt, binary))

    def test_binary_outputs_are_writable_and_the_largest_is_not_copied(self):
        """The answer is read into a buffer of its own: the largest output
        (the weights) is used where it lies, aligned; the others are copied
        out, so that keeping one of them alone does not keep the weights."""
        req = rand_request(37, B=1, H=2, Lq=5, Lk=7, D=8, Dv=4)
        arrays = {n: np.asarray(req[n], np.float32) for n in ("query", "key", "value")}
        want = self.c.infer("attention", arrays, binary=False)
        for compression in (None, "gzip"):
            got = self.c.infer("attention", arrays, response_compression=compression)
            for n in ("output", "weights"):
                a = got[n]
                self.assertEqual(a.tolist(), want[n].tolist(), n)
                self.assertTrue(a.flags.writeable and a.flags.aligned, n)
            self.assertFalse(np.shares_memory(got["output"], got["weights"]))
            # an array of its own has no buffer beneath it; uncompressed, the
            # weights are a view of the answer's buffer
            self.assertIsNone(own_memory(got["output"]).base)
            self.assertEqual(own_memory(got["weights"]).base is None,
                             compression is not None)
            got["weights"][0, 0, 0, 0] = 7.0  # writable in place

    def test_numpy_arrays_with_an_empty_axis_refused_before_sending(self):
        """An empty axis of a numpy array is refused as one of nested
        lists is: AttndInputError in attnd's words, nothing sent."""
        for name, shape, dt in (("query", (1, 0, 4), "FP32"), ("value", (1, 3, 0), "FP16"),
                                ("key", (0, 3, 4), "FP64"), ("mask", (1, 2, 0), "BOOL"),
                                ("valid_lens", (0,), "INT32")):
            t = {"query": np.ones((1, 2, 4), np.float32), "key": np.ones((1, 3, 4), np.float32),
                 "value": np.ones((1, 3, 2), np.float32)}
            t[name] = np.ones(shape, {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64,
                                      "BOOL": bool, "INT32": np.int32}[dt])
            want = self.server_error("/v2/models/attention/infer", {"inputs": [
                {"name": n, "shape": list(a.shape), "datatype": dt if n == name else "FP32",
                 "data": [1] * a.size if a.dtype != bool else [True] * a.size}
                for n, a in t.items()]})
            for binary in (True, False):
                got = self.refused(self.c.infer, "attention", t, binary=binary)
                self.assertEqual(got, want, (name, binary))
            if name != "valid_lens":
                self.assertEqual(self.refused(self.c.attention, t["query"], t["key"], t["value"],
                                              mask=t.get("mask")), want, name)

    def test_lengths_mask_parameters_and_output_order(self):
        req = rand_request(32, B=2, Lq=3, Lk=4, D=4, Dv=3)
        mask = [[[True, False, True, True]]]
        lens = [[1, 2, 3], [0, 4, 4]]
        ref = dict({n: rounded(req[n], "FP32") for n in req}, mask=mask, valid_lens=lens,
                   causal=True)
        for lens_in, lens_dt in ((np.asarray(lens, np.int32), "INT32"),
                                 (np.asarray(lens, np.int64), "INT64"), (lens, "INT32")):
            for binary in (True, False):
                inputs = dict(req, valid_lens=lens_in, mask=np.asarray(mask))
                res = self.c.infer("attention", inputs, outputs=["weights", "output"],
                                   parameters={"causal": np.bool_(True)}, binary=binary)
                self.assertEqual(list(res), ["weights", "output"])
                self.assertEqual([o["name"] for o in self.c.last_response["outputs"]],
                                 ["weights", "output"])
                self.check(res, ref)
        res = self.c.infer("attention", req, outputs=["output"])
        self.check(res, {n: rounded(req[n], "FP32") for n in req}, outputs=("output",))

    def test_default_datatypes_on_the_wire(self):
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url)
            q, k, v = [[[1.0, 2.0]]], [[[1.0, 0.0], [0.0, 1.0]]], [[[1.0], [2.0]]]
            cases = [
                ({"query": q, "key": k, "value": v, "valid_lens": [1], "mask": [[[1, 0]]]},
                 ["FP32", "FP32", "FP32", "INT32", "BOOL"]),
                ({"query": np.asarray(q, np.float16), "key": np.asarray(k, np.float64),
                  "value": np.asarray(v, np.int64), "valid_lens": np.asarray([1], np.int64),
                  "mask": np.asarray([[[True, False]]])},
                 ["FP16", "FP64", "FP32", "INT64", "BOOL"]),
                ({"query": np.float32(1.5) * np.ones((1, 1, 2), np.float32), "key": k,
                  "value": v, "valid_lens": np.asarray([2], np.uint8)},
                 ["FP32", "FP32", "FP32", "INT32"]),
            ]
            for inputs, want in cases:
                for binary in (True, False):
                    del proxy.sent[:]
                    res = c.infer("attention", inputs, binary=binary)
                    head = bytes(proxy.sent).split(b"\r\n\r\n", 1)[1]
                    n = len(head)
                    if binary:
                        n = int(re.search(rb"Inference-Header-Content-Length: (\d+)",
                                          bytes(proxy.sent)).group(1))
                    sent = json.loads(head[:n])
                    self.assertEqual([i["datatype"] for i in sent["inputs"]], want)
                    self.assertEqual(list(res), ["output", "weights"])
            c.close()
        finally:
            proxy.close()

    def test_diagnostics_outputs_keep_their_datatypes(self):
        req = rand_request(36, B=2, H=2, Lq=3, Lk=5, D=4, Dv=2)
        lens = [[5, 0, 2], [1, 3, 5]]
        outs = ["output", "allowed_keys", "entropy", "max_weight", "jacobian_norm"]
        ref_req = dict({n: rounded(req[n], "FP32") for n in req}, valid_lens=lens)
        for binary in (True, False):
            res = self.c.infer("attention", dict(req, valid_lens=lens), outputs=outs,
                               binary=binary)
            self.assertEqual(list(res), outs)
            self.check(res, ref_req, outputs=("output",))
            self.check_diagnostics(res, ref_req)

    def test_additive_model_with_version(self):
        req = rand_request(33, B=2, Lq=2, Lk=4, D=3, Dv=2)
        rng = random.Random(34)
        w = {"w_q": rand_tensor(rng, [5, 3]), "w_k": rand_tensor(rng, [5, 3]),
             "w_v": rand_tensor(rng, [5])}
        inputs = {n: np.asarray(t, np.float32) for n, t in list(req.items()) + list(w.items())}
        res = self.c.infer("additive_attention", inputs, version=1)
        ref = {n: rounded(t, "FP32") for n, t in dict(req, **w).items()}
        self.check(res, dict(ref, scoring="additive"))

    def test_server_errors(self):
        req = rand_request(35)
        with self.assertRaises(tc.AttndError) as cm:
            self.c.infer("bert", req)
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(tc.AttndError) as cm:
            self.c.infer("attention", {"query": req["query"], "key": req["key"]})
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.message, "value: required input is missing")
        with self.assertRaises(tc.AttndError) as cm:
            self.c.infer("attention", req, timeout_us=1)
        self.assertEqual(cm.exception.status, 504)
        with self.assertRaises(tc.AttndError) as cm:
            self.c.infer("attention", req, datatypes={"query": "INT32"})
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("datatype INT32 is not supported", cm.exception.message)

    def test_refusals_match_the_servers_binary_and_json_messages(self):
        k, v = [[[1.0, 1.0]]], [[[1.0]]]

        def server_says(q_entry, raw=b""):
            hdr = json.dumps({"inputs": [dict(q_entry, name="query"),
                                         {"name": "key", "shape": [1, 1, 2],
                                          "datatype": "FP32", "data": [1, 1]},
                                         {"name": "value", "shape": [1, 1, 1],
                                          "datatype": "FP32", "data": [1]}]}).encode()
            h = {"Inference-Header-Content-Length": str(len(hdr))} if raw else {}
            return self.server_error("/v2/models/attention/infer", hdr + raw, h)

        # binary: what attnd's binary reader says of the same bytes
        for dt, np_dt, bad in (("FP32", np.float32, np.nan), ("FP16", np.float16, np.inf),
                               ("FP64", np.float64, -np.inf), ("FP64", np.float64, 1e39)):
            q = np.array([[[1.0, bad]]], dtype=np_dt)
            raw = q.astype("<" + q.dtype.str[1:]).tobytes()
            want = server_says({"shape": [1, 1, 2], "datatype": dt,
                                "parameters": {"binary_data_size": len(raw)}}, raw)
            got = self.refused(self.c.infer, "attention", {"query": q, "key": k, "value": v})
            self.assertEqual(got, want, dt)
        q = np.array([[[np.nan, 1.0]]], np.float32)
        self.assertEqual(self.refused(self.c.infer, "attention",
                                      {"query": q, "key": k, "value": v},
                                      datatypes={"query": "BF16"}),
                         "query[0][0][0]: BF16 value is not finite (infinity or NaN)")
        # numbers beyond the datatype: the client words them as attnd words
        # the same number in JSON, binary or not
        for dt, x in (("FP16", 70000.0), ("FP16", 65520.0), ("BF16", 3.4e38),
                      ("FP32", 1e39), ("FP64", -1e39)):
            want = server_says({"shape": [1, 1, 2], "datatype": dt, "data": [1, x]})
            for binary in (False, True):
                if binary and dt == "FP64":
                    continue  # sent as it is: attnd's binary reader refuses it
                got = self.refused(self.c.infer, "attention",
                                   {"query": [[[1, x]]], "key": k, "value": v},
                                   datatypes={"query": dt}, binary=binary)
                self.assertEqual(got, want, (dt, x, binary))
        self.assertEqual(self.refused(self.c.infer, "attention",
                                      {"query": [[[1, math.nan]]], "key": k, "value": v},
                                      binary=False),
                         "query[0][0][1]: NaN is not a JSON number; attnd needs finite values")
        self.assertEqual(self.refused(self.c.infer, "attention",
                                      {"query": [[[1, 2]]], "key": k, "value": v},
                                      parameters={"scale": math.inf}),
                         "parameters.scale: Infinity is not a JSON number; "
                         "attnd needs finite values")
        # ragged lists: v2 takes the shape from the request and any nesting
        # of data with that many numbers, so the client, which takes the
        # shape from the lists, refuses them as attnd's /v1 does
        want = self.server_error("/v1/attention", {"query": [[[1, 2], [3]]], "key": k,
                                                   "value": v})
        got = self.refused(self.c.infer, "attention",
                           {"query": [[[1, 2], [3]]], "key": k, "value": v})
        self.assertEqual(got, want)


# ---- encoders ---------------------------------------------------------------------

class UnixSocketTest(harness.UnixSocketServer, Case):
    """AttndClient(unix_socket=...) against attnd's --unix-socket."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.c.close()
        cls.c = cls.client(unix_socket=cls.sock)

    def test_v1_and_v2_binary_answers_match_the_reference(self):
        req = rand_request(41, B=1, H=2, Lq=3, Lk=5, D=4, Dv=4)
        self.check(self.c.attention(req["query"], req["key"], req["value"]), req)
        # an upload (513 KiB) over twice the kernel's default send buffer
        req = rand_request(42, B=1, H=1, Lq=4, Lk=1024, D=64, Dv=64)
        names = ("query", "key", "value")
        res = self.c.infer("attention", {n: np.asarray(req[n], np.float32) for n in names})
        self.check(res, {n: rounded(req[n], "FP32") for n in names})
        self.assertTrue(self.c.ready())
        # counted like requests on the port (attention() goes over v2 too)
        self.assertIn('attnd_requests_total{route="/v2/models/:m/infer",code="200"} 2\n',
                      self.c.metrics())

    def test_connections_ask_for_a_send_buffer_that_holds_an_upload(self):
        self.assertTrue(self.c.healthy())
        sock = self.client_socket(self.c)
        with open("/proc/sys/net/core/wmem_max") as f:
            cap = int(f.read())
        got = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        # the kernel doubles what it grants, and grants at most wmem_max
        self.assertEqual(got, 2 * min(4 << 20, cap))

    def test_no_server_at_the_path_names_the_socket(self):
        missing = os.path.join(self.dir, "nobody.sock")
        dead = self.client(unix_socket=missing, timeout=5)
        with self.assertRaises(tc.AttndConnectionError) as cm:
            dead.healthy()
        self.assertIsNone(cm.exception.status)
        self.assertIn("on the Unix socket " + missing, cm.exception.message)
        self.assertIsInstance(cm.exception.__cause__, OSError)


class AttentionOverV2Test(Case):
    """attention() sends v2 binary tensors, answers as /v1 does, and words
    errors in /v1's terms."""

    def v1_answer(self, body):
        status, obj = self.srv.post_json("/v1/attention", body)
        self.assertEqual(status, 200, obj)
        return obj

    def test_numpy_and_lists_go_as_binary_tensors_with_v1s_answer(self):
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url)
            req = rand_request(61, B=2, H=2, Lq=3, Lk=5, D=4, Dv=3)
            arrays = {n: np.asarray(t, np.float32) for n, t in req.items()}
            lens = [[5, 1, 0], [3, 5, 2]]
            # the first call learns the served name
            c.attention([[[1.0]]], [[[1.0]]], [[[1.0]]])
            self.assertTrue(bytes(proxy.sent).startswith(b"GET /v2/models/stats HTTP/1.1\r\n"))
            for q in (arrays["query"], req["query"]):
                del proxy.sent[:]
                res = c.attention(q, arrays["key"], arrays["value"], valid_lens=lens,
                                  causal=True, id="r-1")
                self.assertTrue(bytes(proxy.sent).startswith(
                    b"POST /v2/models/attention/infer HTTP/1.1\r\n"), bytes(proxy.sent)[:60])
                self.assertIn(b"Content-Type: application/octet-stream", bytes(proxy.sent))
                want = self.v1_answer(dict(req, valid_lens=lens, causal=True, id="r-1"))
                self.assertEqual(res["id"], "r-1")
                for n in ("output", "weights"):
                    self.assertEqual(res[n].tolist(), np.asarray(want[n], np.float32).tolist())
                self.assertEqual(c.last_response["outputs"][0]["name"], "output")
            # extra members go as /v1 JSON, as they are
            del proxy.sent[:]
            c.attention(req["query"], req["key"], req["value"], extra={"id": 5})
            self.assertTrue(bytes(proxy.sent).startswith(b"POST /v1/attention "))
            c.close()
        finally:
            proxy.close()

    def test_any_layout_or_byte_order_sends_the_same_bytes(self):
        """Arrays go out as views where they are C-contiguous little-endian
        float32, else as converted copies: Fortran order, a strided view,
        big-endian and float64 arrays of the same values send the same
        request and get the same answer."""
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url)
            req = rand_request(67, B=1, H=2, Lq=4, Lk=6, D=8, Dv=4)
            base = {n: np.asarray(t, np.float32) for n, t in req.items()}
            wide = {n: np.repeat(a, 2, axis=-1) for n, a in base.items()}
            layouts = {
                "C order": base,
                "Fortran order": {n: np.asfortranarray(a) for n, a in base.items()},
                "strided view": {n: a[..., ::2] for n, a in wide.items()},
                "big-endian": {n: a.astype(">f4") for n, a in base.items()},
                "float64": {n: a.astype(np.float64) for n, a in base.items()},
            }
            c.attention(base["query"], base["key"], base["value"])  # learns the name
            sent, got = {}, {}
            for name, arrays in layouts.items():
                del proxy.sent[:]
                res = c.attention(arrays["query"], arrays["key"], arrays["value"])
                sent[name], got[name] = bytes(proxy.sent), res["output"].tolist()
            for name in layouts:
                self.assertEqual(sent[name], sent["C order"], name)
                self.assertEqual(got[name], got["C order"], name)
            c.close()
        finally:
            proxy.close()

    def test_every_option_gives_v1s_numbers(self):
        req = rand_request(62, B=1, H=4, Hkv=2, Lq=4, Lk=6, D=4, Dv=2)
        rng = random.Random(63)
        mask = [[[rng.random() < 0.8 for _ in range(6)] for _ in range(4)]]
        bias = rand_tensor(rng, [4, 6], 0.5)
        w = {"w_q": rand_tensor(rng, [3, 4]), "w_k": rand_tensor(rng, [3, 4]),
             "w_v": rand_tensor(rng, [3])}
        cases = [
            {"mask": mask, "bias": bias, "causal": "lower_right", "scale": -0.3},
            {"valid_lens": [[1, 6, 0, 3]], "window": [1, None], "id": 7},
            {"dropout": {"p": 0.25, "seed": 11}, "window": [None, 2.0]},
            {"diagnostics": True, "return_weights": False, "valid_lens": [4]},
            dict(w, scoring="additive", causal=True),
        ]
        for opts, binary in [(o, b) for o in cases for b in (True, False)]:
            got = self.c.attention(np.asarray(req["query"], np.float32),
                                   np.asarray(req["key"], np.float64), req["value"],
                                   binary=binary, **opts)
            self.assertEqual(self.c.last_headers["content-type"],
                             "application/octet-stream" if binary else "application/json")
            want = self.v1_answer(dict(req, **opts))
            with self.subTest(opts=sorted(opts), binary=binary):
                self.assertEqual(sorted(got), sorted(want))
                for n in ("output", "weights"):
                    if n in want:
                        self.assertEqual(got[n].tolist(),
                                         np.asarray(want[n], np.float32).tolist(), n)
                for n, d in want.get("diagnostics", {}).items():
                    self.assertEqual(got["diagnostics"][n].tolist(),
                                     np.asarray(d, got["diagnostics"][n].dtype).tolist(), n)
                if "id" in want:
                    self.assertEqual(got["id"], want["id"])

    def test_option_errors_name_v1s_fields(self):
        q, k, v = [[[1.0, 0.0]]], [[[1.0, 1.0]]], [[[2.0]]]
        for opts in ({"causal": "lower"}, {"scale": 0}, {"window": [-1, 2]},
                     {"window": [1, 2.5]}, {"dropout": {"p": 1.5}},
                     {"dropout": {"p": 0.5, "seed": -1}}, {"valid_lens": [2]},
                     {"mask": [[[1, 1]]]}, {"scoring": "cosine"}, {"dropout": {"q": 1}},
                     {"window": [1]}, {"return_weights": 1}, {"scoring": "additive"},
                     {"w_q": [[1.0, 1.0]]}):
            want = self.server_error("/v1/attention", dict({"query": q, "key": k, "value": v},
                                                           **opts))
            with self.assertRaises(tc.AttndError) as cm:
                self.c.attention(np.asarray(q, np.float32), k, v, binary=False, **opts)
            self.assertEqual(cm.exception.status, 400)
            self.assertEqual(cm.exception.message, want, opts)
            with self.assertRaises(tc.AttndError) as cm:
                self.c.attention(np.asarray(q, np.float32), k, v, **opts)
            self.assertEqual(cm.exception.status, 400)
            # over v2 attnd's own text, naming the option (v2 or /v1 words)
            self.assertEqual(json.loads(cm.exception.body)["error"], cm.exception.message)
            self.assertTrue(cm.exception.message.startswith("parameters.") or
                            any(n in cm.exception.message for n in opts), cm.exception.message)


class VariantsTest(Case):
    """sinks, softcap, alibi_slopes, packed sequences, window_align and the
    lse through attention() (v2 binary and /v1 JSON) and infer()."""

    def request(self, seed, **kw):
        req = rand_request(seed, **kw)
        return {n: rounded(t, "FP32") for n, t in req.items()}

    def attend(self, req, opts, binary):
        """attention() with numpy tensors and the options, checked to have
        gone the way binary says."""
        got = self.c.attention(*(np.asarray(req[n], np.float32)
                                 for n in ("query", "key", "value")),
                               binary=binary, **opts)
        self.assertEqual(self.c.last_headers["content-type"],
                         "application/octet-stream" if binary else "application/json")
        return got

    def test_each_variant_matches_the_reference_binary_and_json(self):
        req = self.request(71, B=2, H=2, Lq=4, Lk=6, D=4, Dv=3)
        sinks, slopes = [0.5, -1.25], [0.5, 0.25]
        cases = [
            {"sinks": sinks},
            {"softcap": 0.75},
            {"alibi_slopes": slopes},
            {"alibi_slopes": [[0.5, 0.25], [0.125, 1.0]]},
            {"window": [1, 0], "window_align": "lower_right"},
            {"window": [0, 1], "window_align": "upper_left", "return_weights": False},
            {"sinks": sinks, "softcap": 2.0, "alibi_slopes": slopes, "causal": "lower_right",
             "window": [2, 0], "window_align": "lower_right", "mask": [[[True] * 5 + [False]]]},
        ]
        for opts, binary in [(o, b) for o in cases for b in (True, False)]:
            sent = dict(opts, return_lse=True)
            for n in ("sinks", "alibi_slopes"):
                if n in sent and binary:
                    sent[n] = np.asarray(sent[n], np.float64 if n == "sinks" else np.float32)
            with self.subTest(opts=sorted(opts), binary=binary):
                got = self.attend(req, sent, binary)
                ref = dict(req, **opts)
                outputs = ("output",) if opts.get("return_weights") is False else \
                    ("output", "weights")
                self.check(got, ref, outputs)
                self.assert_lse(got["lse"], ref)
                if binary:
                    self.assertEqual([o["name"] for o in self.c.last_response["outputs"]],
                                     list(outputs) + ["lse"])
        got = self.c.attention(req["query"], req["key"], req["value"], sinks=sinks)
        self.assertNotIn("lse", got)

    def test_all_masked_row_lse_is_minus_inf_without_a_sink_and_the_sink_with_one(self):
        q, k, v = [[[1.0, 0.5], [0.25, -1.0]]], [[[1.0, 1.0], [0.0, 2.0], [-1.0, 0.5]]], \
            [[[2.0], [1.0], [-3.0]]]
        mask = [[[False, False, False], [True, False, True]]]
        req = {"query": q, "key": k, "value": v, "mask": mask}
        for binary in (True, False):
            for sinks in (None, [0.5]):
                with self.subTest(binary=binary, sinks=sinks):
                    got = self.attend(req, {"mask": np.asarray(mask), "sinks": sinks,
                                            "return_lse": True}, binary)
                    ref = dict(req, sinks=sinks)
                    self.check(got, ref)
                    self.assertEqual(got["output"][0, 0].tolist(), [0.0])
                    self.assertEqual(got["weights"][0, 0].tolist(), [0.0] * 3)
                    self.assert_lse(got["lse"], ref)
                    self.assertEqual(got["lse"][0, 0], -np.inf if sinks is None else 0.5)
                    if not binary and sinks is None:
                        # what attnd writes for -inf in JSON (the answer's
                        # tensors take the query's form: {"shape", "data"})
                        sent = self.c.last_response["lse"]
                        self.assertIsNone(flatten(sent["data"] if isinstance(sent, dict)
                                                  else sent)[0])

    def test_packed_sequences_match_the_reference(self):
        req = self.request(72, B=1, H=2, Lq=5, Lk=7, D=4, Dv=3)
        cu_q, cu_k = [0, 2, 2, 5], [0, 3, 4, 7]   # the middle sequence has no query
        cases = [
            {},
            {"causal": "lower_right", "alibi_slopes": [0.5, 0.125]},
            {"causal": True, "sinks": [0.25, -0.5], "return_weights": False},
            {"window": [1, 0], "window_align": "lower_right", "softcap": 1.5},
        ]
        for opts, binary in [(o, b) for o in cases for b in (True, False)]:
            for ints in (np.int32, np.int64, None):
                packed = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
                sent = dict(opts, return_lse=True, **({n: np.asarray(c, ints)
                                                       for n, c in packed.items()}
                                                      if ints else packed))
                with self.subTest(opts=sorted(opts), binary=binary, ints=ints):
                    got = self.attend(req, sent, binary)
                    ref = dict(req, **opts, **packed)
                    outputs = ("output",) if opts.get("return_weights") is False else \
                        ("output", "weights")
                    self.check(got, ref, outputs)
                    self.assert_lse(got["lse"], ref)
        # a query whose sequence has no key: nothing allowed, lse -inf
        req = {"query": [[[1.0, 0.0], [0.0, 1.0]]], "key": [[[1.0, 1.0], [2.0, 0.5], [0.0, 1.0]]],
               "value": [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]}
        packed = {"cu_seqlens_q": [0, 1, 2], "cu_seqlens_k": [0, 0, 3]}
        for binary in (True, False):
            got = self.attend(req, dict(packed, return_lse=True), binary)
            self.check(got, dict(req, **packed))
            self.assertEqual(got["lse"][0, 0], -np.inf)
            self.assert_lse(got["lse"], dict(req, **packed))

    def test_variant_errors_name_v1s_fields(self):
        q, k, v = [[[1.0, 0.0], [0.0, 1.0]]], [[[1.0, 1.0], [0.5, 0.0]]], [[[2.0], [1.0]]]
        cases = [({"softcap": 0}, "softcap"), ({"softcap": -1.5}, "softcap"),
                 ({"window_align": "middle"}, "window_align"),
                 ({"sinks": [1.0, 2.0]}, "sinks"),
                 ({"alibi_slopes": [[1.0], [2.0]]}, "alibi_slopes"),
                 ({"cu_seqlens_q": [0, 2]}, "cu_seqlens"),
                 ({"cu_seqlens_q": [0, 2, 1, 2], "cu_seqlens_k": [0, 1, 1, 2]}, "cu_seqlens_q"),
                 ({"cu_seqlens_q": [0, 2], "cu_seqlens_k": [0, 1]}, "cu_seqlens_k"),
                 ({"cu_seqlens_q": [0, 2], "cu_seqlens_k": [0, 2], "valid_lens": [1]},
                  "valid_lens"),
                 ({"return_lse": 1}, "return_lse")]
        for opts, field in cases:
            want = self.server_error("/v1/attention", dict({"query": q, "key": k, "value": v},
                                                           **opts))
            for binary in (True, False):
                with self.subTest(opts=opts, binary=binary):
                    with self.assertRaises(tc.AttndError) as cm:
                        self.c.attention(np.asarray(q, np.float32), k, v, binary=binary,
                                         **opts)
                    self.assertEqual(cm.exception.status, 400)
                    if not binary:
                        self.assertEqual(cm.exception.message, want)
                    self.assertEqual(json.loads(cm.exception.body)["error"],
                                     cm.exception.message)
                    self.assertIn(field, cm.exception.message)

    def test_infer_decodes_lse_with_minus_inf_binary_and_json(self):
        req = {"query": [[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]],
               "key": [[[1.0, 1.0], [2.0, 0.5], [0.0, 1.0]]],
               "value": [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]}
        packed = {"cu_seqlens_q": [0, 1, 3], "cu_seqlens_k": [0, 0, 3]}
        for binary in (True, False):
            for sinks in (None, [0.75]):
                inputs = dict(req, cu_seqlens_q=np.asarray(packed["cu_seqlens_q"], np.int32),
                              cu_seqlens_k=np.asarray(packed["cu_seqlens_k"], np.int64))
                if sinks:
                    inputs["sinks"] = np.asarray(sinks, np.float32)
                with self.subTest(binary=binary, sinks=sinks):
                    res = self.c.infer("attention", inputs, outputs=["output", "lse"],
                                       parameters={"softcap": 2.5}, binary=binary)
                    ref = dict(req, softcap=2.5, sinks=sinks, **packed)
                    self.check(res, ref, outputs=("output",))
                    self.assert_lse(res["lse"], ref)
                    self.assertEqual(res["lse"][0, 0], -np.inf if sinks is None else 0.75)


class AsyncV2Test(OnAsyncio, V2Test):
    pass


class AsyncUnixSocketTest(OnAsyncio, UnixSocketTest):
    pass


class AsyncAttentionOverV2Test(OnAsyncio, AttentionOverV2Test):
    pass


class AsyncVariantsTest(OnAsyncio, VariantsTest):
    pass


# ---- the served model name, deadlines, precision ----------------------------------

class RenamedModelTest(Case):
    """attnd --model-name sdpa: attention() learns the dot-product model's
    name once and sends there, binary and JSON alike."""

    server_args = ("--workers", "1", "--model-name", "sdpa")

    def test_attention_follows_the_served_name(self):
        req = rand_request(451, B=1, Lq=3, Lk=4)
        for binary in (True, False):
            c = self.client(self.url)
            self.check(c.attention(req["query"], req["key"], req["value"], binary=binary),
                       req)
            if binary:
                self.assertEqual(c.last_response["model_name"], "sdpa")
                self.check(c.attention(req["query"], req["key"], req["value"]), req)
            c.close()
        with self.assertRaises(tc.AttndError) as cm:
            self.c.attention(req["query"], req["key"], req["value"], model="attention")
        self.assertEqual(cm.exception.status, 404)
        self.check(self.c.attention(req["query"], req["key"], req["value"], model="sdpa"), req)

    def test_timeout_us_is_the_v2_deadline(self):
        req = rand_request(452, B=1, Lq=3, Lk=4)
        self.check(self.c.attention(req["query"], req["key"], req["value"],
                                    timeout_us=60 * 10**6), req)
        with self.assertRaises(tc.AttndError) as cm:
            self.c.attention(req["query"], req["key"], req["value"], timeout_us=1)
        self.assertEqual(cm.exception.status, 504)
        with self.assertRaises(ValueError) as cm:
            self.c.attention(req["query"], req["key"], req["value"], timeout_us=1,
                             binary=False)
        self.assertIn("timeout_us", str(cm.exception))

    def test_precision_reaches_the_server(self):
        req = rand_request(453, B=1, Lq=3, Lk=4)
        for binary in (True, False):
            try:
                r = self.c.attention(req["query"], req["key"], req["value"],
                                     precision="bf16", binary=binary)
            except tc.AttndError as e:
                if e.status == 400 and "precision" in e.message:
                    self.skipTest("server has no precision parameter")
                raise
            same = self.c.attention(req["query"], req["key"], req["value"], binary=binary)
            r32 = self.c.attention(req["query"], req["key"], req["value"], precision="fp32",
                                   binary=binary)
            self.assertEqual(r32["output"].tolist(), same["output"].tolist())
            want = attention(req)
            for n, (a, b) in enumerate(zip(r["output"].reshape(-1).tolist(),
                                           flatten(want[0]))):
                self.assertLessEqual(abs(a - b), 3e-2 + 3e-2 * abs(b), "output[%d]" % n)

    def test_headers_case_insensitive(self):
        self.c.attention([[[1.0]]], [[[1.0]]], [[[2.0]]])
        h = self.c.last_headers
        self.assertEqual(h["Content-Type"], h["content-type"])
        self.assertEqual(h.get("CONTENT-TYPE"), h["content-type"])
        self.assertIn("Content-Type", h)
        self.assertIsNone(h.get("X-Not-There"))


class AsyncRenamedModelTest(OnAsyncio, RenamedModelTest):
    pass


class RequestTest(unittest.TestCase):
    """The request attention() builds, without a server."""

    def built(self, cls, **kw):
        class Client(cls):
            def _attention(self, o):
                return self._attention_call(o)
        call = Client("127.0.0.1:9").attention([[[1.0, 0.0]]], [[[1.0, 1.0]]], [[[2.0]]],
                                               model="m", **kw)
        body = call.body.tobytes() if hasattr(call.body, "tobytes") else call.body
        if call.path.endswith("/infer"):
            n = int(call.headers["Inference-Header-Content-Length"])
            return call.path, json.loads(body[:n])
        return call.path, json.loads(body)

    def test_float32_arrays_go_as_views_not_copies(self):
        q = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
        k, v = q + 1, q[..., :3] * 2
        for cls in (tc.AttndClient, tc.attnd_client.AsyncAttndClient):
            class Client(cls):
                def _attention(self, o):
                    return self._attention_call(o)
            call = Client("127.0.0.1:9").attention(q, k, v, model="m")
            header, *tensors = call.body.parts
            self.assertEqual(len(call.body), len(header) + q.nbytes + k.nbytes + v.nbytes)
            for part, a in zip(tensors, (q, k, np.ascontiguousarray(v))):
                sent = np.frombuffer(part, np.float32)
                self.assertEqual(sent.tolist(), a.reshape(-1).tolist())
            # q and k are C-contiguous float32: their own memory goes out
            self.assertTrue(np.shares_memory(np.frombuffer(tensors[0], np.float32), q))
            self.assertTrue(np.shares_memory(np.frombuffer(tensors[1], np.float32), k))

    def test_precision_and_timeout_on_the_wire(self):
        for cls in (tc.AttndClient, tc.attnd_client.AsyncAttndClient):
            path, head = self.built(cls, precision="bf16", timeout_us=5000)
            self.assertEqual(path, "/v2/models/m/infer")
            self.assertEqual(head["parameters"], {"precision": "bf16", "timeout": 5000})
            path, body = self.built(cls, precision="fp32", binary=False)
            self.assertEqual(path, "/v1/attention")
            self.assertEqual(body["precision"], "fp32")
            path, head = self.built(cls)
            self.assertNotIn("parameters", head)

    def test_one_signature_and_docstring(self):
        a, s = tc.AttndClient.attention, tc.attnd_client.AsyncAttndClient.attention
        self.assertIs(a, s)
        params = inspect.signature(a).parameters
        for n in ("model", "timeout_us", "precision", "window_align"):
            self.assertEqual(params[n].kind, inspect.Parameter.KEYWORD_ONLY)
        with self.assertRaises(TypeError):
            tc.AttndClient("127.0.0.1:9").attention([[[1.0]]], [[[1.0]]], [[[1.0]]], None)

    def test_module_help(self):
        p = run([tc.VENV_PYTHON, "-m", "attnd_client", "--help"], cwd=tempfile.gettempdir())
        self.assertIn("usage: python3 -m attnd_client", p.stdout)
        self.assertIn("url", p.stdout)


if __name__ == "__main__":
    tc.run_under_capable_python(__file__)
    harness.main()
