"""What a request may take before it runs, against the real build/attnd.

  * Cost: a request estimated above --max-request-gflop gets 413 naming
    the flag and the estimate; keys that causal skips are not charged; a
    binary v2 request is weighed from its JSON part, before its tensors
    arrive (its hold on the memory budget is given back at once); the
    estimates are a histogram in /metrics.
  * Memory from the first byte: a Content-Length that does not fit in what
    is left of --max-inflight-mb gets 503 with Retry-After before the body
    is sent; a body holds a step ahead of its bytes, so clients that send
    headers alone cannot reserve the budget; chunked uploads that stall count as they grow, and the one
    that would overflow is refused when it ends, while a small request is
    still answered; binary inputs read where they lie in the body (FP32,
    and BF16 in BF16 mode) are held with it and not again as tensors;
    attnd_inflight_bytes shows what is held, next to
    attnd_inflight_limit_bytes, and falls back to 0.
  * A body's own deadline (--body-timeout-s): a client that sends its
    headers and then nothing is closed, and one that dribbles its body past
    the deadline gets 408 naming the flag.
  * 413s that help: over --max-body-mb names the flag; weights that would
    not fit in the budget suggest "return_weights": false.
"""

import json
import math
import socket
import struct
import threading
import time

import harness

SLOW = 5 if harness.VALGRIND else 1
MiB = 1 << 20


def connect(srv, timeout=30):
    return socket.create_connection((srv.host, srv.port), timeout=timeout * SLOW)


def read_answer(s):
    """One HTTP answer: (status, headers dict lower-cased, body bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("closed before an answer: %r" % data[:200])
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        hdrs[k.strip().lower()] = v.strip()
    n = int(hdrs.get("content-length", "0"))
    while len(body) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, hdrs, body[:n]


def v1_body(L, D=1, **extra):
    t = {"shape": [1, L, D], "data": [0.25] * (L * D)}
    req = {"query": t, "key": t, "value": t}
    req.update(extra)
    return json.dumps(req).encode()


def v2_binary(L, D=1, outputs=("output",)):
    """(JSON part, whole body) of a binary v2 request of zeros."""
    header = json.dumps({
        "inputs": [{"name": n, "datatype": "FP32", "shape": [1, L, D],
                    "parameters": {"binary_data_size": 4 * L * D}}
                   for n in ("query", "key", "value")],
        "outputs": [{"name": o} for o in outputs]}).encode()
    return header, header + bytes(12 * L * D)


class CostTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--max-request-gflop", "1")

    def test_a_request_over_the_cost_limit_is_413_naming_the_flag(self):
        # L = 4000, D = 1, no weights: 16 M scores, about 1.3 GFLOP.
        status, obj = self.srv.post_json(
            "/v1/attention", v1_body(4000, return_weights=False))
        self.assertEqual(status, 413, obj)
        self.assertIn("--max-request-gflop", obj["error"])
        self.assertRegex(obj["error"], r"about 1\.\d+ GFLOP")
        self.assertEqual(self.srv.post_json("/v1/attention", v1_body(8))[0], 200)

    def test_keys_that_causal_skips_are_not_charged(self):
        # The same shape with causal computes about half the scores.
        status, obj = self.srv.post_json(
            "/v1/attention", v1_body(4000, return_weights=False, causal=True))
        self.assertEqual(status, 200, obj)

    def test_a_binary_v2_request_is_weighed_before_its_tensors_arrive(self):
        header, body = v2_binary(30000)  # 352 KiB of tensors to follow
        s = connect(self.srv)
        try:
            s.sendall(b"POST /v2/models/attention/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\nInference-Header-Content-Length: %d"
                      b"\r\n\r\n" % (len(body), len(header)))
            s.sendall(body[:len(header) + 4096])
            # It held a step ahead of its bytes; refused by its shapes, it
            # holds nothing while the rest is still to come.
            self.assertTrue(harness.wait_for(
                lambda: self.srv.metric("attnd_inflight_bytes") == 0, 10 * SLOW))
            s.sendall(body[len(header) + 4096:])
            status, _, data = read_answer(s)
        finally:
            s.close()
        self.assertEqual(status, 413, data)
        self.assertIn("--max-request-gflop", json.loads(data)["error"])

    def test_the_estimates_are_a_histogram(self):
        before = self.srv.metric("attnd_request_cost_gflop_count")
        self.assertEqual(self.srv.post_json("/v1/attention", v1_body(16))[0], 200)
        self.assertEqual(self.srv.metric("attnd_request_cost_gflop_count"),
                         before + 1)
        _, _, text = self.srv.get("/metrics")
        self.assertIn(b'attnd_request_cost_gflop_bucket{le="+Inf"}', text)


class BudgetTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--max-inflight-mb", "8",
                   "--body-timeout-s", "60")

    def start_upload(self, length):
        """Headers announcing length bytes, and no body yet."""
        s = connect(self.srv, timeout=60)
        s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % length)
        return s

    def test_a_content_length_that_does_not_fit_is_503_before_the_body(self):
        held = self.start_upload(6 * MiB)
        try:
            # All of it but its last byte sent: held up to its Content-Length
            held.sendall(b" " * (6 * MiB - 1))
            self.assertTrue(harness.wait_for(
                lambda: self.srv.metric("attnd_inflight_bytes") >= 6 * MiB,
                10 * SLOW))
            self.assertEqual(self.srv.metric("attnd_inflight_limit_bytes"), 8 * MiB)
            s = self.start_upload(4 * MiB)
            try:
                status, hdrs, body = read_answer(s)  # no body byte sent
            finally:
                s.close()
            self.assertEqual(status, 503, body)
            self.assertIn("retry-after", hdrs)
            self.assertIn("--max-inflight-mb", json.loads(body)["error"])
            # A small request still fits.
            self.assertEqual(self.srv.post_json("/v1/attention", v1_body(8))[0], 200)
            # Its last byte ends it (blanks are not JSON: 400), and its hold
            # goes.  Not a close: libmicrohttpd 0.9.75 can miss a close that
            # comes right behind the bytes it is still reading, and then
            # the hold stays until --body-timeout-s.
            held.sendall(b" ")
            self.assertEqual(read_answer(held)[0], 400)
        finally:
            held.close()
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_inflight_bytes") == 0, 10 * SLOW))

    def test_headers_alone_cannot_reserve_the_budget(self):
        # Each announces 6 MiB, which fits alone, and sends none of it: it
        # holds its first 64 KiB, and more only as its bytes come.
        socks = [self.start_upload(6 * MiB) for _ in range(16)]
        try:
            self.assertTrue(harness.wait_for(
                lambda: self.srv.metric("attnd_inflight_bytes") == 16 << 16,
                10 * SLOW))
            # A 4 MiB request is served meanwhile.
            L, D = 8192, 64
            header = json.dumps({
                "inputs": [{"name": n, "datatype": "FP32", "shape": [1, m, D],
                            "parameters": {"binary_data_size": 4 * m * D}}
                           for n, m in (("query", 1), ("key", L), ("value", L))],
                "outputs": [{"name": "output",
                             "parameters": {"binary_data": True}}]}).encode()
            status, _, data = self.srv.request(
                "POST", "/v2/models/attention/infer",
                header + bytes(4 * D * (1 + 2 * L)),
                {"Inference-Header-Content-Length": str(len(header)),
                 "Content-Type": "application/octet-stream"})
            self.assertEqual(status, 200, data[:300])
        finally:
            for s in socks:
                s.close()
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_inflight_bytes") == 0, 10 * SLOW))

    def test_a_body_larger_than_the_whole_budget_is_413(self):
        s = self.start_upload(9 * MiB)
        try:
            status, _, body = read_answer(s)
        finally:
            s.close()
        self.assertEqual(status, 413, body)
        self.assertIn("--max-inflight-mb", json.loads(body)["error"])

    def test_stalled_chunked_uploads_cannot_overflow_the_budget(self):
        chunk = b"100000\r\n" + b" " * MiB + b"\r\n"  # 1 MiB of blanks
        socks = []
        try:
            for _ in range(2):
                s = connect(self.srv, timeout=60)
                s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n")
                socks.append(s)
            for _ in range(5):  # 5 MiB each: the second cannot all fit
                for s in socks:
                    s.sendall(chunk)
            time.sleep(0.5)
            self.assertLessEqual(self.srv.metric("attnd_inflight_bytes"), 8 * MiB)
            self.assertEqual(self.srv.post_json("/v1/attention", v1_body(8))[0], 200)
            answers = []
            for s in socks:
                s.sendall(b"0\r\n\r\n")
                answers.append(read_answer(s))
        finally:
            for s in socks:
                s.close()
        statuses = sorted(a[0] for a in answers)
        # The one kept is blanks (400: not JSON); the other was dropped.
        self.assertEqual(statuses, [400, 503], answers)
        refused = [a for a in answers if a[0] == 503][0]
        self.assertIn("retry-after", refused[1])
        self.assertIn("--max-inflight-mb", json.loads(refused[2])["error"])
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_inflight_bytes") == 0, 10 * SLOW))

    def held_once(self, dtype, Lk, delta, parameters=None):
        """A request whose key and value fill about half the 8 MiB budget,
        read where they lie in the body: held with it, not again as
        tensors.  Values k/256 - 1/2 are exact in
        BF16 and FP32; the first query's output is checked against float64."""
        Lq, D = 16, 64
        x = [((i * 7919) % 256) / 256.0 - 0.5 for i in range(Lk * D)]
        if dtype == "BF16":
            def pack(v):
                return b"".join(struct.pack("<f", f)[2:] for f in v)
        else:
            def pack(v):
                return struct.pack("<%df" % len(v), *v)
        size = 2 if dtype == "BF16" else 4
        header = json.dumps({
            "inputs": [{"name": n, "datatype": dtype, "shape": [1, L, D],
                        "parameters": {"binary_data_size": size * L * D}}
                       for n, L in (("query", Lq), ("key", Lk), ("value", Lk))],
            "parameters": parameters or {},
            "outputs": [{"name": "output",
                         "parameters": {"binary_data": True}}]}).encode()
        kv = pack(x)
        status, hdrs, data = self.srv.request(
            "POST", "/v2/models/attention/infer", header + pack(x[:Lq * D]) + kv + kv,
            {"Inference-Header-Content-Length": str(len(header)),
             "Content-Type": "application/octet-stream"})
        self.assertEqual(status, 200, data[:300])
        hlen = int(hdrs["inference-header-content-length"])
        out = struct.unpack("<%df" % (Lq * D), data[hlen:])
        s = [sum(x[d] * x[j * D + d] for d in range(D)) / 8.0 for j in range(Lk)]
        m = max(s)
        w = [math.exp(v - m) for v in s]
        z = sum(w)
        for d in range(D):
            ref = sum(w[j] * x[j * D + d] for j in range(Lk)) / z
            self.assertAlmostEqual(out[d], ref, delta=delta)
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_inflight_bytes") == 0, 10 * SLOW))

    def test_float32_tensors_read_where_they_lie_in_the_body_are_held_once(self):
        self.held_once("FP32", 8192, 1e-5)

    def test_bf16_tensors_read_where_they_lie_in_the_body_are_held_once(self):
        # 3 MiB, which the hold counted as 6 MiB of float32 before.
        self.held_once("BF16", 12288, 3e-3, {"precision": "bf16"})

    def test_weights_over_the_budget_suggest_asking_for_the_output_alone(self):
        status, obj = self.srv.post_json("/v1/attention", v1_body(1200))
        self.assertEqual(status, 413, obj)
        self.assertIn("--max-inflight-mb", obj["error"])
        self.assertIn('"return_weights": false', obj["error"])
        status, obj = self.srv.post_json(
            "/v1/attention", v1_body(1200, return_weights=False))
        self.assertEqual(status, 200, obj)


class BodyLimitTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--max-body-mb", "1")

    def test_a_body_over_the_limit_names_the_flag(self):
        s = connect(self.srv)
        try:
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\n\r\n" % (2 * MiB))
            status, _, body = read_answer(s)
        finally:
            s.close()
        self.assertEqual(status, 413)
        self.assertIn("--max-body-mb", json.loads(body)["error"])
        s = connect(self.srv)
        try:
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            s.sendall((b"100000\r\n" + b" " * MiB + b"\r\n") * 2 + b"0\r\n\r\n")
            status, _, body = read_answer(s)
        finally:
            s.close()
        self.assertEqual(status, 413)
        self.assertIn("--max-body-mb", json.loads(body)["error"])


class BodyDeadlineTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--body-timeout-s", "2",
                   "--conn-timeout-s", "60")

    def test_a_client_that_sends_no_body_is_closed_at_the_deadline(self):
        s = connect(self.srv)
        t0 = time.monotonic()
        try:
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 1000\r\n\r\n")
            self.assertTrue(harness.wait_for(
                lambda: self.srv.metric("attnd_inflight_bytes") == 1000, 5 * SLOW))
            try:
                self.assertEqual(s.recv(100), b"")
            except ConnectionResetError:
                pass
            took = time.monotonic() - t0
        finally:
            s.close()
        # Well before --conn-timeout-s's 60 s.
        self.assertLess(took, 10 * SLOW)
        self.assertGreater(took, 1.5)
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_inflight_bytes") == 0, 5 * SLOW))

    def test_a_body_dribbled_past_the_deadline_is_408(self):
        body = v1_body(4)
        s = connect(self.srv)
        try:
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            end = time.monotonic() + 2.6
            i = 0
            while time.monotonic() < end:
                s.sendall(body[i:i + 1])
                i += 1
                time.sleep(0.4)
            s.sendall(body[i:])
            status, _, data = read_answer(s)
        finally:
            s.close()
        self.assertEqual(status, 408, data)
        self.assertIn("--body-timeout-s", json.loads(data)["error"])
        self.assertEqual(self.srv.metric("attnd_inflight_bytes"), 0)

    def test_a_body_in_time_is_served(self):
        self.assertEqual(self.srv.post_json("/v1/attention", v1_body(4))[0], 200)


if __name__ == "__main__":
    harness.main()
