"""KServe v2 / Open Inference Protocol refusals and content coding against the
real build/attnd (the client and cases of test_v2.py): every error path with
its message, the server serving after them; gzip/deflate requests and
responses on /v1 and /v2, and a gzip bomb refused without ballooning.
"""

import gzip
import json
import struct
import zlib

import harness
from reference import attention, flatten
from test_v2 import V2Case, rand_inputs, tensor_input
from v2client import InferenceServerException, InferInput, InferRequestedOutput


class ErrorTest(V2Case):
    def qkv(self, seed=13):
        q, k, v = rand_inputs(seed)
        return [tensor_input("query", q), tensor_input("key", k), tensor_input("value", v)]

    def infer_error(self, inputs, want, *phrases, **kw):
        with self.assertRaises(InferenceServerException) as cm:
            self.client.infer("attention", inputs, **kw)
        self.assertEqual(cm.exception.status, want, cm.exception.msg)
        for p in phrases:
            self.assertIn(p, cm.exception.msg)
        return cm.exception.msg

    def test_wrong_byte_size(self):
        inputs = self.qkv()
        raw = inputs[1]._raw
        inputs[1].set_raw(raw[:-4] + b"\0\0", size=len(raw) - 2)
        self.infer_error(inputs, 400, "key: binary_data_size is %d bytes" % (len(raw) - 2),
                         "needs %d" % len(raw))

    def test_byte_count_past_64_bits_is_not_wrapped(self):
        # 2^62 FP32 elements are 2^64 bytes: a wrapped count would say 0
        from v2client import build_request
        inputs = self.qkv()
        inputs[0].set_raw(b"", size=0)
        body, jl = build_request(inputs)
        head = json.loads(body[:jl])
        for i, shape in enumerate(([1 << 30, 1 << 30, 4], [1 << 30, 5, 4], [1 << 30, 5, 3])):
            head["inputs"][i]["shape"] = shape
        head = json.dumps(head).encode()
        status, hdrs, data = self.raw("/v2/models/attention/infer", head + body[jl:],
                                      {"Inference-Header-Content-Length": str(len(head))})
        self.assert_error(status, hdrs, data, 400, "query: binary_data_size is 0 bytes, "
                          "shape [1073741824,1073741824,4] of FP32 needs more than "
                          "18446744073709551615")

    def test_size_past_the_body_and_trailing_bytes(self):
        inputs = self.qkv()
        raw = inputs[2]._raw
        inputs[2].set_raw(raw[:-4], size=len(raw))
        self.infer_error(inputs, 400, "value: binary_data_size", "runs past the end")
        inputs = self.qkv()
        inputs[2].set_raw(inputs[2]._raw + b"1234", size=len(inputs[2]._raw))
        self.infer_error(inputs, 400, "4 bytes after the binary inputs")

    def test_nul_escape_in_any_string_is_refused(self):
        # cJSON's strings end at a NUL: each of these would pass for the
        # name before it (query, FP32, causal) or be echoed cut short
        from v2client import build_request
        body, jl = build_request(self.qkv())
        cases = [("name", lambda r: r["inputs"][0].update(name="query\0zz")),
                 ("datatype", lambda r: r["inputs"][0].update(datatype="FP32\0zz")),
                 ("parameter name", lambda r: r.update(parameters={"causal\0x": True})),
                 ("id", lambda r: r.update(id="ab\0cd"))]
        for what, change in cases:
            with self.subTest(what=what):
                r = json.loads(body[:jl])
                change(r)
                head = json.dumps(r).encode()
                at = head.index(b"\\u0000")
                status, hdrs, data = self.raw(
                    "/v2/models/attention/infer", head + body[jl:],
                    {"Inference-Header-Content-Length": str(len(head))})
                self.assert_error(status, hdrs, data, 400, "body at byte %d of the inference "
                                  "header: \\u0000 in a string; attnd takes no NUL "
                                  "character in a JSON string" % at)
        self.client.infer("attention", self.qkv())  # still served

    def test_header_length_errors(self):
        from v2client import build_request
        body, jl = build_request(self.qkv())
        for value, phrase in ((str(len(body) + 1), "exceeds the body length %d" % len(body)),
                              ("abc", "'abc' is not a byte count"),
                              # 2^64, and a long run of digits, echoed as sent
                              ("18446744073709551616", "Inference-Header-Content-Length: "
                               "'18446744073709551616' is too large to be a byte count "
                               "(the body is %d bytes)" % len(body)),
                              ("9" * 60, "'%s...' is too large" % ("9" * 40)),
                              ("0", "raw binary body"),
                              (str(jl - 3), "not valid JSON"),
                              (str(jl + 3), "unexpected data after the JSON object")):
            status, hdrs, data = self.raw("/v2/models/attention/infer", body,
                                          {"Inference-Header-Content-Length": value})
            self.assert_error(status, hdrs, data, 400, phrase)
        status, hdrs, data = self.raw("/v2/models/attention/infer", body)
        self.assert_error(status, hdrs, data, 400, "Inference-Header-Content-Length")

    def test_unknown_datatype_and_missing_inputs(self):
        inputs = self.qkv()
        inputs[0]._datatype = "FP8"
        self.infer_error(inputs, 400, "query: unknown datatype 'FP8'")
        inputs = self.qkv()
        inputs[2]._datatype = "INT8"
        self.infer_error(inputs, 400, "value: datatype INT8 is not supported")
        self.infer_error(self.qkv()[:2], 400, "value: required input is missing")
        with self.assertRaises(InferenceServerException) as cm:
            self.client.infer("additive_attention", self.qkv())
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("w_q: required input is missing", cm.exception.msg)
        self.infer_error(self.qkv() + [tensor_input("extra", [[1.0]])], 400,
                         "has no input 'extra'")

    def test_bad_parameters_and_outputs(self):
        for params, phrase in (({"causal": "maybe"}, "parameters.causal"),
                               ({"scale": 0}, "parameters.scale: must be non-zero"),
                               ({"scale": "big"}, "parameters.scale: expected a number"),
                               ({"dropout_p": 1.5}, "parameters.dropout_p"),
                               ({"seed": -1}, "parameters.seed"),
                               ({"timeout": 1.5}, "parameters.timeout"),
                               ({"binary_data_output": "yes"},
                                "parameters.binary_data_output")):
            # outputs listed, or the client sets binary_data_output itself
            self.infer_error(self.qkv(), 400, phrase, parameters=params,
                             outputs=[InferRequestedOutput("output")])
        self.infer_error(self.qkv(), 400, "unknown output 'logits'",
                         outputs=[InferRequestedOutput("logits")])

    def test_unknown_parameters_are_refused_with_the_nearest_name(self):
        # ignored, {"causl": true} would answer with non-causal weights
        msg = self.infer_error(self.qkv(), 400, parameters={"causl": True},
                               outputs=[InferRequestedOutput("weights")])
        self.assertEqual(msg, "parameters.causl: unknown parameter (did you mean "
                         "'causal'? request parameters: causal, scale, dropout_p, "
                         "seed, window_left, window_right, timeout, binary_data_output, "
                         "softcap, window_align, precision)")
        self.infer_error(self.qkv(), 400, "parameters.temperature: unknown parameter "
                         "(request parameters: causal,", parameters={"temperature": 0.7})
        inputs = self.qkv()
        inputs[1]._parameters["binary_data_sise"] = 4
        self.infer_error(inputs, 400, "inputs[1].parameters.binary_data_sise: unknown "
                         "parameter (did you mean 'binary_data_size'? input parameters: "
                         "binary_data_size, shared_memory_region, shared_memory_byte_size, "
                         "shared_memory_offset)")
        out = InferRequestedOutput("output")
        out._get_tensor = lambda: {"name": "output", "parameters": {"binary": True}}
        self.infer_error(self.qkv(), 400, "outputs[0].parameters.binary: unknown "
                         "parameter (output parameters: binary_data,", outputs=[out])

    def test_unknown_fields_are_refused_at_every_level(self):
        from v2client import build_request
        body, jl = build_request(self.qkv(), outputs=[InferRequestedOutput("output")],
                                 parameters={"causal": True})
        header = json.loads(body[:jl])
        for mutate, phrase in (
                (lambda h: h.update(paramters=h.pop("parameters")),
                 "unknown field 'paramters' (did you mean 'parameters'? request fields: "
                 "id, parameters, inputs, outputs, model_name, model_version)"),
                (lambda h: h.update(output=h.pop("outputs")),
                 "unknown field 'output' (did you mean 'outputs'?"),
                (lambda h: h["inputs"][2].update(shpae=h["inputs"][2].pop("shape")),
                 "inputs[2]: unknown field 'shpae' (did you mean 'shape'? input fields: "
                 "name, shape, datatype, parameters, data)"),
                (lambda h: h["outputs"][0].update(paramters={}),
                 "outputs[0]: unknown field 'paramters' (did you mean 'parameters'?")):
            h = json.loads(json.dumps(header))
            mutate(h)
            hj = json.dumps(h).encode()
            status, hdrs, data = self.raw("/v2/models/attention/infer", hj + body[jl:],
                                          {"Inference-Header-Content-Length": str(len(hj))})
            self.assert_error(status, hdrs, data, 400, phrase)
        # Triton's own examples name the model in the body: accepted
        h = dict(header, model_name="attention", model_version="1")
        hj = json.dumps(h).encode()
        status, hdrs, data = self.raw("/v2/models/attention/infer", hj + body[jl:],
                                      {"Inference-Header-Content-Length": str(len(hj))})
        self.assertEqual(status, 200, data[:300])

    def test_triton_parameters_attnd_does_not_serve_are_not_supported(self):
        # what tritonclient.http sends for sequence_id=7, priority=1, and
        # InferRequestedOutput(class_count=3)
        for params, phrase in (
                ({"sequence_id": 7, "sequence_start": True, "sequence_end": False},
                 "parameters.sequence_id: not supported (Triton's sequence batching; "
                 "attnd serves the binary_tensor_data, parameters, model_configuration, "
                 "statistics and system_shared_memory extensions)"),
                ({"priority": 1}, "parameters.priority: not supported"),
                ({"headers": {"a": "b"}}, "parameters.headers: not supported"),
                ({"triton_enable_empty_final_response": True},
                 "parameters.triton_enable_empty_final_response: not supported")):
            self.infer_error(self.qkv(), 400, phrase, parameters=params)
        out = InferRequestedOutput("output")
        out._get_tensor = lambda: {"name": "output",
                                   "parameters": {"classification": 3, "binary_data": True}}
        self.infer_error(self.qkv(), 400, "outputs[0].parameters.classification: not "
                         "supported", outputs=[out])

    def test_unknown_datatype_lists_what_the_input_takes(self):
        inputs = self.qkv()
        inputs[0]._datatype = "fp32"
        self.infer_error(inputs, 400, "query: unknown datatype 'fp32' (did you mean "
                         "'FP32'? query takes: FP32, FP64, FP16, BF16)")
        inputs = self.qkv() + [InferInput("valid_lens", [2], "INT23")
                               .set_data_from_list([1, 2], binary_data=False)]
        self.infer_error(inputs, 400, "valid_lens: unknown datatype 'INT23' (did you "
                         "mean 'INT32'? valid_lens takes: INT32, INT64)")

    def test_nan_in_json_data_names_the_input_and_index(self):
        # json.dumps writes NaN and -Infinity for a numpy array's tolist()
        q, k, v = rand_inputs(16)
        q[1][2][3] = float("nan")
        inputs = [tensor_input("query", q, binary=False),
                  tensor_input("key", k, binary=False, nested=True),
                  tensor_input("value", v, binary=False)]
        self.infer_error(inputs, 400, "query.data[23]: NaN is not a JSON number; "
                         "attnd needs finite values")
        q[1][2][3] = 0.5
        k[0][4][1] = float("-inf")
        inputs = [tensor_input("query", q, binary=False),
                  tensor_input("key", k, binary=False, nested=True),
                  tensor_input("value", v, binary=False)]
        self.infer_error(inputs, 400, "key.data[0][4][1]: -Infinity is not a JSON "
                         "number; attnd needs finite values")
        self.infer_error(self.qkv(), 400, "parameters.scale: NaN is not a JSON number",
                         parameters={"scale": float("nan")})

    def test_nul_body_points_at_its_first_byte(self):
        for headers in ({}, {"Inference-Header-Content-Length": "32"}):
            status, hdrs, data = self.raw("/v2/models/attention/infer", b"\0" * 64,
                                          headers)
            msg = self.assert_error(status, hdrs, data, 400, "body is not valid JSON: "
                                    "byte 0", "is a NUL (0x00)")
            self.assertNotIn("empty", msg)

    def test_non_finite_inputs(self):
        inputs = self.qkv()
        raw = bytearray(inputs[0]._raw)
        raw[4:8] = struct.pack("<f", float("inf"))
        inputs[0].set_raw(bytes(raw))
        self.infer_error(inputs, 400, "query[0][0][1]: FP32 value is not finite")
        inputs = self.qkv()
        q = InferInput("query", [2, 3, 4], "FP16")
        q.set_raw(b"\x00\x7e" * 24)  # FP16 NaN
        self.infer_error([q] + inputs[1:], 400, "query[0][0][0]: FP16 value is not finite")

    def test_deadline_parameter(self):
        # one microsecond has passed before the request reaches the queue
        self.infer_error(self.qkv(), 504, timeout=1)
        res = self.client.infer("attention", self.qkv(), timeout=60 * 1000000)
        self.assertEqual(len(res.get_response()["outputs"]), 2)

    def test_server_keeps_serving_after_errors(self):
        for _ in range(3):
            self.test_unknown_datatype_and_missing_inputs()
        self.assertTrue(self.client.is_server_ready())
        q, k, v = rand_inputs(14)
        res = self.client.infer("attention", [tensor_input("query", q),
                                              tensor_input("key", k),
                                              tensor_input("value", v)])
        self.check_result(res, {"query": q, "key": k, "value": v})


class CompressionTest(V2Case):
    def test_gzip_and_deflate_requests_and_responses_on_v2(self):
        q, k, v = rand_inputs(15, Lq=6, Lk=7)
        req = {"query": q, "key": k, "value": v}
        for req_alg in ("gzip", "deflate"):
            for resp_alg in (None, "gzip", "deflate"):
                res = self.client.infer("attention", [tensor_input("query", q),
                                                      tensor_input("key", k, binary=False),
                                                      tensor_input("value", v)],
                                        request_compression_algorithm=req_alg,
                                        response_compression_algorithm=resp_alg)
                self.assertEqual(self.client.last_headers.get("content-encoding"), resp_alg)
                self.check_result(res, req)

    def test_raw_deflate_is_accepted(self):
        q, k, v = rand_inputs(16)
        body = json.dumps({"query": q, "key": k, "value": v}).encode()
        z = zlib.compressobj(6, zlib.DEFLATED, -15)
        raw = z.compress(body) + z.flush()
        status, _, data = self.raw("/v1/attention", raw, {"Content-Encoding": "deflate"})
        self.assertEqual(status, 200, data[:200])

    def test_v1_gzip_request_and_response(self):
        q, k, v = rand_inputs(17)
        req = {"query": q, "key": k, "value": v}
        body = gzip.compress(json.dumps(req).encode())
        status, hdrs, data = self.raw("/v1/attention", body,
                                      {"Content-Encoding": "gzip",
                                       "Accept-Encoding": "deflate;q=0.5, gzip"})
        self.assertEqual(status, 200, data[:200])
        self.assertEqual(hdrs.get("content-encoding"), "gzip")
        self.assertIn("Accept-Encoding", hdrs.get("vary", ""))
        resp = json.loads(gzip.decompress(data))
        ref_out, ref_w = attention(req)
        self.assert_close(flatten(resp["output"]), ref_out, "output")
        self.assert_weights(flatten(resp["weights"]), ref_w)
        status, hdrs, data = self.raw("/v1/attention", json.dumps(req).encode(),
                                      {"Accept-Encoding": "gzip;q=0, identity"})
        self.assertEqual(status, 200)
        self.assertNotIn("content-encoding", hdrs)
        json.loads(data)

    def test_gzip_body_of_several_members(self):
        # RFC 1952: members inflate one after another (gzip -c a b > c)
        q, k, v = rand_inputs(18)
        req = {"query": q, "key": k, "value": v}
        text = json.dumps(req).encode()
        cut = len(text) // 2
        body = gzip.compress(text[:cut]) + gzip.compress(text[cut:])
        status, _, data = self.raw("/v1/attention", body, {"Content-Encoding": "gzip"})
        self.assertEqual(status, 200, data[:200])
        ref_out, _ = attention(req)
        self.assert_close(flatten(json.loads(data)["output"]), ref_out, "output")
        status, hdrs, data = self.raw("/v1/attention", gzip.compress(text) + b"garbage",
                                      {"Content-Encoding": "gzip"})
        self.assert_error(status, hdrs, data, 400,
                          "body: 7 bytes after the end of the compressed stream")

    def test_error_bodies_stay_uncompressed_and_bad_streams_are_400(self):
        # Triton answers errors uncompressed and tritonclient reads them
        # before decompressing: a gzipped error would lose its message.
        for coding in ("gzip", "deflate", "gzip, deflate;q=0.5"):
            status, hdrs, data = self.raw("/v1/attention", b"not gzip at all",
                                          {"Content-Encoding": "gzip",
                                           "Accept-Encoding": coding})
            self.assertNotIn("content-encoding", hdrs, coding)
            self.assert_error(status, hdrs, data, 400, "corrupt gzip stream")
            status, hdrs, data = self.raw("/v2/models/nope/infer", b"{}",
                                          {"Accept-Encoding": coding})
            self.assertNotIn("content-encoding", hdrs, coding)
            self.assert_error(status, hdrs, data, 404, "nope")
        status, hdrs, data = self.raw("/v1/attention", gzip.compress(b"{}")[:-6],
                                      {"Content-Encoding": "gzip"})
        self.assert_error(status, hdrs, data, 400, "truncated")
        status, hdrs, data = self.raw("/v1/attention", b"{}", {"Content-Encoding": "br"})
        self.assert_error(status, hdrs, data, 400, "Content-Encoding: 'br'")

    def lines(self, path, body, lines):
        """POSTs body with the header lines (name, value) as given, a name
        repeated as often as it comes, each its own line: (status, headers
        with lower-case names, body)."""
        conn = self.srv.connection()
        try:
            conn.putrequest("POST", path)
            conn.putheader("Content-Length", str(len(body)))
            for k, v in lines:
                conn.putheader(k, v)  # each its own line, repeats kept
            conn.endheaders(body)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def test_content_encoding_lines_are_one_list(self):
        # RFC 9110 section 5.3: two lines are one comma-joined list, so they
        # get the answer the one line gets (not the first line's coding).
        q, k, v = rand_inputs(19)
        body = gzip.compress(json.dumps({"query": q, "key": k, "value": v}).encode())
        for codings in (("gzip", "gzip"), ("identity", "gzip"), ("gzip", "identity"),
                        ("x" * 30, "y" * 30)):
            joined = ", ".join(codings)
            one = self.lines("/v1/attention", body, [("Content-Encoding", joined)])
            two = self.lines("/v1/attention", body, [("Content-Encoding", c) for c in codings])
            self.assertEqual((two[0], two[2]), (one[0], one[2]), codings)
            self.assert_error(*one, 400, "Content-Encoding: '%s" % joined[:40])
        status, _, data = self.lines("/v1/attention", body, [("Content-Encoding", "gzip")])
        self.assertEqual(status, 200, data[:200])


def gzip_bomb(size):
    """gzip of size zero bytes, built a MiB at a time (the test process
    never holds the inflated form)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    return b"".join(z.compress(chunk) for _ in range(size >> 20)) + z.flush()


def inflated_size(gz):
    """Bytes gz inflates to, counted a MiB at a time."""
    d, n, data = zlib.decompressobj(31), 0, gz
    while data:
        n += len(d.decompress(data, 1 << 20))
        data = d.unconsumed_tail
    return n + len(d.flush())


def vm_hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


class BombTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--max-body-mb", "2")

    def test_gzip_bomb_is_413_without_ballooning(self):
        bomb = gzip_bomb(512 << 20)
        self.assertEqual(inflated_size(bomb), 512 << 20)
        self.assertLess(len(bomb), 1 << 20)  # within the body limit compressed
        before = vm_hwm_kb(self.srv.proc.pid)
        for path in ("/v1/attention", "/v2/models/attention/infer"):
            status, hdrs, data = self.srv.request("POST", path, bomb,
                                                  {"Content-Encoding": "gzip"})
            self.assertEqual(status, 413, data[:200])
            self.assertIn("inflates past the limit of 2 MiB (--max-body-mb)",
                          json.loads(data)["error"])
        if not harness.VALGRIND:
            grown = vm_hwm_kb(self.srv.proc.pid) - before
            self.assertLess(grown, 64 << 10, "peak RSS grew %d KiB" % grown)
        status, _, _ = self.srv.get("/v2/health/ready")
        self.assertEqual(status, 200)


if __name__ == "__main__":
    harness.main()
