"""Out-of-memory paths of the real attnd, the SQLite way: for every N, a
fresh attnd whose N-th allocation after start-up fails
(ATTND_FAIL_ALLOC_AT=N, proto/mem.h, in build/attnd-test, the test build)
gets one request, then the same request again.  Through decoding, batching, computing and encoding:

  * the first answer is a 500 or 503 with a JSON {"error": "..."} body, or,
    where the failure is benign (a response that could not be compressed
    goes out uncompressed), the correct answer;
  * the second answer is the correct one: the server keeps serving;
  * both carry an X-Request-ID, even when the request's own context could
    not be allocated;
  * attnd exits 0 on SIGTERM - under valgrind (make valgrind) or
    LeakSanitizer (make SANITIZE=address test) that also means it leaked
    nothing.

A first run with the fault set past the end counts the allocations the
request makes (attnd logs the count and the failures at exit); N then
covers every one of them.  Under valgrind, where each start costs
seconds, N advances in steps of VALGRIND_STRIDE.
"""

import gzip
import json
import os
import re
import struct
import sys
import unittest
import zlib
from multiprocessing import shared_memory

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

VALGRIND_STRIDE = 7
INJECTED_RE = re.compile(r"failure injection: (\d+) of (\d+) allocations failed")

V1_BODY = json.dumps({
    "query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]],
    "value": [[[1, 0], [0, 1], [1, 1]]], "valid_lens": [3],
    "causal": True, "id": "oom"}).encode()

# sinks, softcap, ALiBi, packed sequences, a lower-right window and the lse
V1_VARIANTS_BODY = json.dumps({
    "query": [[[[1, 0], [0, 2], [1, 1]], [[0, 1], [2, 0], [1, 2]]]],
    "key": [[[[1, 1], [2, 0], [0, 3], [1, 2]]]],
    "value": [[[[1, 0], [0, 1], [1, 1], [2, 2]]]],
    "sinks": [0.5, -1.0], "softcap": 2.0, "alibi_slopes": [0.5, 0.25],
    "cu_seqlens_q": [0, 1, 3], "cu_seqlens_k": [0, 2, 4], "causal": "lower_right",
    "window": [1, 0], "window_align": "lower_right", "return_lse": True,
    "id": "oom-variants"}).encode()


def v2_variants_body():
    """A v2 request with binary sinks (FP16), cu_seqlens (INT64) and the
    lse as a binary output: returns (body, headers)."""
    header = json.dumps({
        "inputs": [
            {"name": "query", "datatype": "FP32", "shape": [1, 3, 2],
             "parameters": {"binary_data_size": 24}},
            {"name": "key", "datatype": "FP32", "shape": [1, 4, 2],
             "parameters": {"binary_data_size": 32}},
            {"name": "value", "datatype": "FP32", "shape": [1, 4, 2],
             "parameters": {"binary_data_size": 32}},
            {"name": "sinks", "datatype": "FP16", "shape": [1],
             "parameters": {"binary_data_size": 2}},
            {"name": "alibi_slopes", "datatype": "FP32", "shape": [1], "data": [0.5]},
            {"name": "cu_seqlens_q", "datatype": "INT64", "shape": [3],
             "parameters": {"binary_data_size": 24}},
            {"name": "cu_seqlens_k", "datatype": "INT64", "shape": [3],
             "parameters": {"binary_data_size": 24}}],
        "parameters": {"softcap": 3.0, "causal": True},
        "outputs": [{"name": "output", "parameters": {"binary_data": True}},
                    {"name": "lse", "parameters": {"binary_data": True}}]}).encode()
    raw = (header + struct.pack("<6f", 1, 0, 0, 2, 1, 1) +
           struct.pack("<8f", 1, 1, 2, 0, 0, 3, 1, 2) +
           struct.pack("<8f", 1, 0, 0, 1, 1, 1, 2, 2) + struct.pack("<e", 0.5) +
           struct.pack("<3q", 0, 1, 3) + struct.pack("<3q", 0, 2, 4))
    return raw, {"Inference-Header-Content-Length": str(len(header))}


def v2_binary_body():
    """A gzip-compressed v2 request with binary inputs and outputs:
    returns (body, headers)."""
    header = json.dumps({
        "inputs": [
            {"name": "query", "datatype": "FP32", "shape": [1, 2, 2],
             "parameters": {"binary_data_size": 16}},
            {"name": "key", "datatype": "FP16", "shape": [1, 3, 2],
             "parameters": {"binary_data_size": 12}},
            {"name": "value", "datatype": "FP32", "shape": [1, 3, 2],
             "parameters": {"binary_data_size": 24}}],
        "parameters": {"binary_data_output": True}}).encode()
    raw = (header + struct.pack("<4f", 1, 0, 0, 2) +
           struct.pack("<6e", 1, 1, 2, 0, 0, 3) +
           struct.pack("<6f", 1, 0, 0, 1, 1, 1))
    return gzip.compress(raw), {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Encoding": "gzip", "Accept-Encoding": "deflate"}


def decoded(headers, body):
    coding = headers.get("content-encoding")
    if coding == "gzip":
        return gzip.decompress(body)
    if coding == "deflate":
        return zlib.decompress(body)
    return body


class FailEveryAllocation(unittest.TestCase):

    def run_one(self, n, method, path, body, headers, twice):
        """Starts attnd failing allocation n, sends the request (twice when
        asked), stops it; returns (answers, injected, allocations)."""
        srv = harness.Attnd(["--workers", "1"],
                            env={"ATTND_FAIL_ALLOC_AT": str(n)},
                            binary=harness.TEST_BINARY)
        try:
            answers = [srv.request(method, path, body, headers)
                       for _ in range(2 if twice else 1)]
        finally:
            code = srv.stop()
        log = "".join(srv.log)
        self.assertEqual(code, 0, "allocation %d: exit %d\n%s"
                         % (n, code, log[-3000:]))
        m = INJECTED_RE.search(log)
        self.assertIsNotNone(m, "attnd did not report the injection:\n"
                             + log[-3000:])
        return answers, int(m.group(1)), int(m.group(2))

    def sweep(self, name, method, path, body=None, headers=None,
              same_answer=True):
        """Fails each allocation the request makes in turn; returns how
        many allocations that was."""
        # Counting run: the fault set past the end never fires.
        answers, injected, total = self.run_one(10 ** 9, method, path, body,
                                                headers, False)
        st, hd, data = answers[0]
        self.assertEqual((st, injected), (200, 0), data[:200])
        want = decoded(hd, data)
        self.assertGreater(total, 0)
        step = VALGRIND_STRIDE if harness.VALGRIND else 1
        for n in range(1, total + 1, step):
            where = "%s, allocation %d of %d" % (name, n, total)
            answers, injected, _ = self.run_one(n, method, path, body,
                                                headers, True)
            (st, hd, data), (st2, hd2, data2) = answers
            self.assertEqual(injected, 1, where)
            # Every answer names its request, the ones out of memory too.
            for h in (hd, hd2):
                self.assertRegex(h.get("x-request-id", ""), r"^[0-9a-f]{32}$", where)
            self.assertEqual(st2, 200, "%s: the request after the failure "
                             "got %d %r" % (where, st2, data2[:200]))
            if same_answer:
                self.assertEqual(decoded(hd2, data2), want, where)
            if st == 200:  # benign: e.g. the answer went out uncompressed
                if same_answer:
                    self.assertEqual(decoded(hd, data), want, where)
                continue
            self.assertIn(st, (500, 503), "%s: %d %r" % (where, st, data[:200]))
            self.assertTrue(hd.get("content-type", "").startswith(
                "application/json"), where)
            err = json.loads(decoded(hd, data))
            self.assertIsInstance(err.get("error"), str, where)
            self.assertTrue(err["error"], where)
            if st == 503:
                self.assertIn("retry-after", hd, where)
        return total

    def test_v1_json_compressed_answer(self):
        # cJSON's nodes, the tensors, the queue, scratch, the answer, zlib
        self.assertGreater(self.sweep(
            "v1", "POST", "/v1/attention", V1_BODY,
            {"Content-Type": "application/json", "Accept-Encoding": "gzip"}),
            30)

    def test_v2_binary_gzip_body(self):
        body, headers = v2_binary_body()
        self.assertGreater(self.sweep(
            "v2 binary", "POST", "/v2/models/attention/infer", body,
            headers), 30)

    def test_v1_sinks_softcap_alibi_packed_lse(self):
        self.assertGreater(self.sweep(
            "v1 variants", "POST", "/v1/attention", V1_VARIANTS_BODY,
            {"Content-Type": "application/json"}), 30)

    def test_v2_binary_sinks_offsets_and_lse(self):
        body, headers = v2_variants_body()
        self.assertGreater(self.sweep(
            "v2 variants", "POST", "/v2/models/attention/infer", body, headers), 30)

    def test_v2_binary_body_weighed_before_its_tensors(self):
        # Uncompressed, and with 320 KiB of tensors to follow its JSON
        # part, so that the JSON part is decoded for its cost as soon as
        # it has arrived (--max-request-gflop), before the tensors.
        L = 16384
        header = json.dumps({"inputs": [
            {"name": "query", "datatype": "FP32", "shape": [1, 2, L],
             "parameters": {"binary_data_size": 8 * L}},
            {"name": "key", "datatype": "FP32", "shape": [1, 3, L],
             "parameters": {"binary_data_size": 12 * L}},
            {"name": "value", "datatype": "FP32", "shape": [1, 3, 2],
             "parameters": {"binary_data_size": 24}}],
            "parameters": {"binary_data_output": True}}).encode()
        body = (header + struct.pack("<%df" % (5 * L), *([0.5] * (5 * L))) +
                struct.pack("<6f", 1, 0, 0, 1, 1, 1))
        self.assertGreater(self.sweep(
            "v2 binary, weighed early", "POST", "/v2/models/attention/infer",
            body, {"Inference-Header-Content-Length": str(len(header))}), 30)

    def test_shared_memory_register_infer_status_unregister(self):
        """The system shared memory routes and a request through regions,
        as one sequence: each allocation along it fails in turn.  A
        failed step answers 500/503 (or, after a failed register, the
        region is unknown: 404); the same sequence then runs again on the
        same server and gives the counting run's answers, with the output
        written into its region."""
        obj = shared_memory.SharedMemory(create=True, size=8192)
        try:
            self.shm_sweep(obj)
        finally:
            obj.close()
            obj.unlink()

    def shm_sweep(self, obj):
        obj.buf[0:64] = (struct.pack("<4f", 1, 0, 0, 2) + struct.pack("<6f", 1, 1, 2, 0, 0, 3) +
                         struct.pack("<6f", 1, 0, 0, 1, 1, 1))

        def shm(off, size):
            return {"shared_memory_region": "r", "shared_memory_offset": off,
                    "shared_memory_byte_size": size}
        infer = json.dumps({"inputs": [
            {"name": "query", "datatype": "FP32", "shape": [1, 2, 2], "parameters": shm(0, 16)},
            {"name": "key", "datatype": "FP32", "shape": [1, 3, 2], "parameters": shm(16, 24)},
            {"name": "value", "datatype": "FP32", "shape": [1, 3, 2], "parameters": shm(40, 24)}],
            "outputs": [{"name": "output", "parameters": shm(4096, 16)},
                        {"name": "weights"}]}).encode()
        steps = [("POST", "/v2/systemsharedmemory/region/r/register",
                  json.dumps({"key": "/" + obj.name, "offset": 0, "byte_size": 8192}).encode()),
                 ("POST", "/v2/models/attention/infer", infer),
                 ("GET", "/v2/systemsharedmemory/status", None),
                 ("POST", "/v2/systemsharedmemory/unregister", b"")]
        clean = ("POST", "/v2/systemsharedmemory/unregister", b"")

        def run(n, rounds):
            srv = harness.Attnd(["--workers", "1", "--allow-client-shm", "1"],
                                env={"ATTND_FAIL_ALLOC_AT": str(n)},
                                binary=harness.TEST_BINARY)
            try:
                answers = []
                for r in range(rounds):
                    if r:
                        self.assertEqual(srv.request(*clean)[0], 200)
                        obj.buf[4096:4112] = bytes(16)
                    answers.append([srv.request(m, p, b) for m, p, b in steps])
            finally:
                code = srv.stop()
            log = "".join(srv.log)
            self.assertEqual(code, 0, "allocation %d: exit %d\n%s" % (n, code, log[-3000:]))
            m = INJECTED_RE.search(log)
            self.assertIsNotNone(m, log[-3000:])
            return answers, int(m.group(1)), int(m.group(2))

        answers, injected, total = run(10 ** 9, 1)
        want = [(st, data) for st, _, data in answers[0]]
        self.assertEqual([st for st, _ in want], [200, 200, 200, 200], want)
        written = bytes(obj.buf[4096:4112])
        self.assertGreater(total, 20)
        step = VALGRIND_STRIDE if harness.VALGRIND else 1
        for n in range(1, total + 1, step):
            where = "shared memory, allocation %d of %d" % (n, total)
            (first, again), injected, _ = run(n, 2)
            self.assertEqual(injected, 1, where)
            self.assertEqual([(st, data) for st, _, data in again], want, where)
            self.assertEqual(bytes(obj.buf[4096:4112]), written, where)
            registered = first[0][0] == 200
            for (st, hd, data), (wst, wdata), (_, path, _) in zip(first, want, steps):
                if (st, data) == (wst, wdata):
                    continue
                if not registered and path.endswith("/infer") and st == 404:
                    continue
                if not registered and path.endswith("/status") and data == b"[]":
                    continue
                self.assertIn(st, (500, 503), "%s: %s: %d %r" % (where, path, st, data[:200]))
                self.assertTrue(json.loads(data)["error"], where)

    def test_metadata_and_metrics(self):
        self.sweep("v2 metadata", "GET", "/v2/models/additive_attention")
        self.sweep("metrics", "GET", "/metrics", same_answer=False)


if __name__ == "__main__":
    harness.main()
