"""attnd's HTTP surface, exercised against the real build/attnd.

Routes and their bodies, error statuses (400/404/405/413/503/504) with
{"error": ...} bodies, batching under concurrent clients, and the
Prometheus exposition.  Tolerant of a loaded 2-core machine and of
valgrind: no tight timing assertions, modest request counts.
"""

import gzip
import http.client
import json
import math
import random
import re
import socket
import struct
import threading
import time

import harness


# -- a small float64 reference: rank-3, optional per-item valid_lens ------
def reference(q, k, v, valid_lens=None, scale=None):
    """Returns (output, weights) as nested lists for (B, L, D) inputs."""
    out, weights = [], []
    for b in range(len(q)):
        d = len(q[b][0])
        s = 1.0 / math.sqrt(d) if scale is None else scale
        limit = len(k[b]) if valid_lens is None else valid_lens[b]
        ob, wb = [], []
        for qi in q[b]:
            scores = [sum(x * y for x, y in zip(qi, kj)) * s for kj in k[b][:limit]]
            if scores:
                m = max(scores)
                e = [math.exp(x - m) for x in scores]
                w = [x / sum(e) for x in e] + [0.0] * (len(k[b]) - limit)
            else:
                w = [0.0] * len(k[b])
            ob.append([sum(w[j] * v[b][j][c] for j in range(len(k[b])))
                       for c in range(len(v[b][0]))])
            wb.append(w)
        out.append(ob)
        weights.append(wb)
    return out, weights


def flat(t):
    if isinstance(t, list):
        return [x for e in t for x in flat(e)]
    return [t]


def rand3(rng, B, L, D):
    return [[[rng.uniform(-1, 1) for _ in range(D)] for _ in range(L)] for _ in range(B)]


def make_request(seed, B=1, Lq=4, Lk=6, D=8, Dv=4, weights=True):
    rng = random.Random(seed)
    return {"query": rand3(rng, B, Lq, D), "key": rand3(rng, B, Lk, D),
            "value": rand3(rng, B, Lk, Dv), "return_weights": weights}


def parse_metrics(text):
    """{(name, frozenset(labels)): value} for every sample line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$', line)
        assert m, "bad exposition line: %r" % line
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def counter(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


class CheckMixin:
    def assert_close(self, got, ref, what):
        g, r = flat(got), flat(ref)
        self.assertEqual(len(g), len(r), what + " size")
        for n, (x, y) in enumerate(zip(g, r)):
            self.assertLessEqual(abs(x - y), 1e-5 + 1e-5 * abs(y),
                                 "%s[%d]: got %r, want %r" % (what, n, x, y))

    def assert_error(self, status, hdrs, body, want_status):
        self.assertEqual(status, want_status, body[:200])
        self.assertTrue(hdrs.get("content-type", "").startswith("application/json"))
        obj = json.loads(body)
        self.assertIsInstance(obj.get("error"), str)
        self.assertTrue(obj["error"])
        return obj

    def metrics(self):
        status, hdrs, body = self.srv.get("/metrics")
        self.assertEqual(status, 200)
        return parse_metrics(body.decode())


class RoutesTest(CheckMixin, harness.ServerTestCase):
    server_args = ("--workers", "2", "--max-body-mb", "1")

    def test_healthz_reports_ok(self):
        status, hdrs, body = self.srv.get("/healthz")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), {"status": "ok"})
        self.assertTrue(hdrs["content-type"].startswith("application/json"))

    def test_readyz_is_200_once_listening(self):
        status, _, body = self.srv.get("/readyz")
        self.assertEqual(status, 200, body)

    def test_design_example_returns_reference_numbers(self):
        req = {"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]],
               "value": [[[1, 0], [0, 1], [1, 1]]], "valid_lens": [2],
               "causal": False, "scale": 0.7071, "mask": None, "bias": None,
               "return_weights": True, "id": "optional"}
        out, w = reference(req["query"], req["key"], req["value"], [2], 0.7071)
        status, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 200, resp)
        self.assertEqual(resp["id"], "optional")
        self.assert_close(resp["output"], out, "output")
        self.assert_close(resp["weights"], w, "weights")
        self.assertEqual(resp["weights"][0][0][2], 0.0)  # masked: exactly 0
        self.assertEqual(resp["weights"][0][1][2], 0.0)

    def test_without_weights_omits_them(self):
        req = make_request(7, weights=False)
        out, _ = reference(req["query"], req["key"], req["value"])
        status, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 200, resp)
        self.assertNotIn("weights", resp)
        self.assert_close(resp["output"], out, "output")

    def test_bad_json_is_400_with_error(self):
        status, hdrs, body = self.srv.request("POST", "/v1/attention", b'{"query": [[[1,',
                                              {"Content-Type": "application/json"})
        self.assert_error(status, hdrs, body, 400)

    def test_invalid_shapes_are_400_and_server_keeps_serving(self):
        req = make_request(3)
        req["key"] = rand3(random.Random(1), 1, 6, 5)  # width 5 != query width 8
        status, hdrs, body = self.srv.request("POST", "/v1/attention", json.dumps(req).encode())
        obj = self.assert_error(status, hdrs, body, 400)
        self.assertIn("key", obj["error"])
        self.assertEqual(self.srv.get("/healthz")[0], 200)

    def test_unknown_path_is_404_naming_it(self):
        status, hdrs, body = self.srv.get("/foo")
        obj = self.assert_error(status, hdrs, body, 404)
        self.assertIn("/foo", obj["error"])

    def test_wrong_method_is_405_with_allow(self):
        status, hdrs, body = self.srv.get("/v1/attention")
        self.assert_error(status, hdrs, body, 405)
        self.assertIn("POST", hdrs.get("allow", ""))
        status, hdrs, body = self.srv.request("POST", "/healthz", b"{}")
        self.assert_error(status, hdrs, body, 405)
        self.assertIn("GET", hdrs.get("allow", ""))

    def test_content_length_over_limit_is_413_before_the_body(self):
        # Only the headers are sent: attnd must answer from Content-Length
        # alone, without waiting for (or reading) the body.
        sock = socket.create_connection((self.srv.host, self.srv.port), timeout=60)
        try:
            sock.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % (1024 * 1024 + 1))
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            sock.close()
        obj = self.assert_error(resp.status, hdrs, data, 413)
        self.assertIn("limit", obj["error"])

    def test_a_client_that_writes_all_before_reading_gets_the_early_answer(self):
        # http.client (like requests) sends the whole body before it reads.
        # attnd answers from the headers and closes; without the lingering
        # close, the unread body made that close a reset and the client
        # saw ConnectionResetError instead of the answer.  Also for a
        # refusal of the path (404) and of the framing (400).
        body = b"[" + b"1," * (2 << 20) + b"1]"   # 4 MiB, over the 1 MiB limit
        cases = [("POST", "/v1/attention", {}, 413, "limit"),
                 ("POST", "/no/such/route", {}, 404, "no route"),
                 ("PUT", "/v1/attention", {}, 405, "not allowed")]
        for method, path, extra, want, words in cases:
            conn = self.srv.connection()
            try:
                conn.request(method, path, body=body,
                             headers=dict({"Content-Type": "application/json"}, **extra))
                resp = conn.getresponse()
                data = resp.read()
                hdrs = {k.lower(): v for k, v in resp.getheaders()}
            finally:
                conn.close()
            obj = self.assert_error(resp.status, hdrs, data, want)
            self.assertIn(words, obj["error"], (method, path))
        status, resp = self.srv.post_json("/v1/attention", make_request(4))
        self.assertEqual(status, 200)

    def test_chunked_body_over_limit_is_413(self):
        chunk = b" " * 65536

        def chunks():
            for _ in range(20):  # 1.25 MiB > 1 MiB, no Content-Length
                yield chunk
        conn = self.srv.connection()
        try:
            conn.request("POST", "/v1/attention", body=chunks(), encode_chunked=True,
                         headers={"Transfer-Encoding": "chunked"})
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            self.assert_error(resp.status, hdrs, data, 413)
        finally:
            conn.close()

    def test_a_refused_chunked_body_that_never_ends_is_cut_off(self):
        # Past the limit the body is dropped while attnd waits for its end
        # to answer 413; a stream that does not end is closed once it has
        # sent 64 times the limit (1 MiB here), instead of being read forever.
        self.assertIsNotNone(self.srv.stream_endless_chunks("/v1/attention"),
                             "the server read a refused body to its end")
        status, resp = self.srv.post_json("/v1/attention", make_request(3))
        self.assertEqual(status, 200)

    def test_chunked_body_under_limit_is_decoded(self):
        req = make_request(11)
        raw = json.dumps(req).encode()
        pieces = [raw[i:i + 100] for i in range(0, len(raw), 100)]
        conn = self.srv.connection()
        try:
            conn.request("POST", "/v1/attention", body=iter(pieces), encode_chunked=True,
                         headers={"Transfer-Encoding": "chunked"})
            resp = conn.getresponse()
            obj = json.loads(resp.read())
            self.assertEqual(resp.status, 200, obj)
        finally:
            conn.close()
        out, w = reference(req["query"], req["key"], req["value"])
        self.assert_close(obj["output"], out, "output")
        self.assert_close(obj["weights"], w, "weights")

    def test_playground_page_is_served_at_root(self):
        status, hdrs, body = self.srv.get("/")
        self.assertEqual(status, 200)
        self.assertTrue(hdrs["content-type"].startswith("text/html"))
        self.assertIn(b"<html", body.lower())
        for script in ("app.js", "tensors.js"):
            status, hdrs, body = self.srv.get("/" + script)
            self.assertEqual(status, 200)
            self.assertIn("javascript", hdrs["content-type"])
            self.assertIn(('<script src="%s">' % script).encode(),
                          self.srv.get("/")[2])
        status, hdrs, body = self.srv.request("POST", "/", b"{}")
        self.assert_error(status, hdrs, body, 405)

    def test_metrics_is_valid_exposition(self):
        self.srv.get("/healthz")
        status, hdrs, body = self.srv.get("/metrics")
        self.assertEqual(status, 200)
        ctype = hdrs["content-type"]
        self.assertTrue(ctype.startswith("text/plain"), ctype)
        self.assertIn("version=0.0.4", ctype)
        text = body.decode()
        self.assertTrue(text.endswith("\n"))
        typed = {}
        for line in text.splitlines():
            m = re.match(r"# TYPE (\S+) (counter|gauge|histogram|summary)$", line)
            if m:
                self.assertNotIn(m.group(1), typed, "TYPE repeated")
                typed[m.group(1)] = m.group(2)
            elif line.startswith("# HELP "):
                continue
            else:
                name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                self.assertTrue(name in typed or base in typed, "no TYPE before " + line)
        for name, kind in [("attnd_requests_total", "counter"),
                           ("attnd_inflight_requests", "gauge"),
                           ("attnd_queue_depth", "gauge"),
                           ("attnd_request_bytes_total", "counter"),
                           ("attnd_response_bytes_total", "counter"),
                           ("attnd_build_info", "gauge"),
                           ("attnd_batch_size", "histogram"),
                           ("attnd_request_duration_seconds", "histogram"),
                           ("attnd_queue_duration_seconds", "histogram"),
                           ("attnd_compute_duration_seconds", "histogram"),
                           ("attnd_other_request_duration_seconds", "summary"),
                           ("process_cpu_seconds_total", "counter"),
                           ("process_resident_memory_bytes", "gauge"),
                           ("process_virtual_memory_bytes", "gauge"),
                           ("process_open_fds", "gauge"),
                           ("process_max_fds", "gauge"),
                           ("process_start_time_seconds", "gauge")]:
            self.assertEqual(typed.get(name), kind, name)
            self.assertIn("# HELP %s " % name, text)
        samples = parse_metrics(text)
        self.assertTrue(any(n == "attnd_build_info" and dict(l).get("version") and v == 1
                            for (n, l), v in samples.items()))
        # Histogram buckets are cumulative and end in +Inf == _count.
        buckets = [(float("inf") if dict(l)["le"] == "+Inf" else float(dict(l)["le"]), v)
                   for (n, l), v in samples.items() if n == "attnd_batch_size_bucket"]
        buckets.sort()
        self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets))
        self.assertEqual(buckets[-1][1], counter(samples, "attnd_batch_size_count"))

    def test_metrics_count_by_route_and_code(self):
        before = self.metrics()
        self.srv.get("/healthz")
        self.srv.get("/nowhere")
        self.srv.post_json("/v1/attention", make_request(5))
        self.srv.post_json("/v1/attention", "not json")
        after = self.metrics()
        for route, code in [("/healthz", "200"), ("other", "404"),
                            ("/v1/attention", "200"), ("/v1/attention", "400")]:
            self.assertEqual(counter(after, "attnd_requests_total", route=route, code=code),
                             counter(before, "attnd_requests_total", route=route, code=code) + 1,
                             (route, code))
        self.assertGreater(counter(after, "attnd_request_bytes_total"),
                           counter(before, "attnd_request_bytes_total"))
        self.assertGreater(counter(after, "attnd_response_bytes_total"),
                           counter(before, "attnd_response_bytes_total"))

    def test_access_log_has_one_line_per_request(self):
        self.srv.get("/healthz")
        # The line is written when MHD reports the request complete, just
        # after the client has its answer, so give it a moment to appear.
        pattern = re.compile(r"GET /healthz 200 in=0 out=\d+ ms=[0-9.]+")
        for _ in range(200):
            if pattern.search("".join(self.srv.log)):
                break
            time.sleep(0.05)
        self.assertRegex("".join(self.srv.log), pattern)


class AccessLogOffTest(harness.ServerTestCase):
    server_args = ("--access-log", "0")

    def test_no_access_lines_but_requests_still_counted(self):
        status, _, _ = self.srv.get("/healthz")
        self.assertEqual(status, 200)
        status, _, body = self.srv.get("/metrics")
        self.assertEqual(status, 200)
        self.assertRegex(body.decode(), r'attnd_requests_total\{route="/healthz",code="200"\} 1')
        # Given the time the line would have taken to appear (see above).
        time.sleep(0.5)
        self.assertNotRegex("".join(self.srv.log), r"GET /healthz 200")


class ConcurrencyTest(CheckMixin, harness.ServerTestCase):
    # One worker, so that requests arriving while it computes queue up and
    # leave together in the next greedy batch.
    server_args = ("--workers", "1", "--max-batch", "16")

    def test_concurrent_clients_same_shape_all_correct(self):
        n_threads, per_thread = 8, 3
        inputs = [make_request(100 + i, B=2, Lq=16, Lk=24, D=16, Dv=8) for i in range(4)]
        refs = [reference(r["query"], r["key"], r["value"]) for r in inputs]
        before = self.metrics()
        failures, barrier = [], threading.Barrier(n_threads)

        def client(t):
            barrier.wait()
            for i in range(per_thread):
                which = (t + i) % len(inputs)
                req = dict(inputs[which], id="%d-%d" % (t, i))
                try:
                    status, resp = self.srv.post_json("/v1/attention", req)
                    if status != 200:
                        failures.append((status, resp))
                        continue
                    self.assertEqual(resp["id"], req["id"])
                    self.assert_close(resp["output"], refs[which][0], "output")
                    self.assert_close(resp["weights"], refs[which][1], "weights")
                except Exception as e:  # collected and reported below
                    failures.append(repr(e))
        threads = [threading.Thread(target=client, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(failures, [])
        after = self.metrics()
        total = n_threads * per_thread
        self.assertEqual(counter(after, "attnd_requests_total", route="/v1/attention", code="200")
                         - counter(before, "attnd_requests_total", route="/v1/attention", code="200"),
                         total)
        # Every request ran in exactly one batch.
        self.assertEqual(counter(after, "attnd_batch_size_sum")
                         - counter(before, "attnd_batch_size_sum"), total)
        batches = (counter(after, "attnd_batch_size_count")
                   - counter(before, "attnd_batch_size_count"))
        self.assertGreaterEqual(batches, 1)
        self.assertLessEqual(batches, total)

    def test_different_shapes_interleaved_all_correct(self):
        shapes = [dict(Lq=3, Lk=5, D=4, Dv=2), dict(Lq=7, Lk=2, D=6, Dv=5),
                  dict(Lq=1, Lk=9, D=2, Dv=3)]
        reqs = [make_request(200 + i, **shapes[i % 3]) for i in range(9)]
        results = [None] * len(reqs)

        def client(i):
            results[i] = self.srv.post_json("/v1/attention", reqs[i])
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        for req, (status, resp) in zip(reqs, results):
            self.assertEqual(status, 200, resp)
            out, w = reference(req["query"], req["key"], req["value"])
            self.assert_close(resp["output"], out, "output")
            self.assert_close(resp["weights"], w, "weights")


class DelayedBatchTest(CheckMixin, harness.ServerTestCase):
    # A generous --max-delay-us makes a batch wait for company, so that
    # simultaneous same-shape requests must share one.
    server_args = ("--workers", "1", "--max-batch", "4", "--max-delay-us", "300000")

    def test_simultaneous_requests_share_a_batch(self):
        req = make_request(42)
        out, w = reference(req["query"], req["key"], req["value"])
        results, barrier = [], threading.Barrier(4)

        def client():
            barrier.wait()
            results.append(self.srv.post_json("/v1/attention", req))
        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(len(results), 4)
        for status, resp in results:
            self.assertEqual(status, 200, resp)
            self.assert_close(resp["output"], out, "output")
        samples = self.metrics()
        # Some batch held more than one request: fewer batches than requests.
        self.assertLess(counter(samples, "attnd_batch_size_count"),
                        counter(samples, "attnd_batch_size_sum"))


def heavy_request(seed):
    """A request whose weights (Lq x Lk) make the worker's encode slow
    compared with decoding it."""
    return make_request(seed, B=2, Lq=192, Lk=192, D=4, Dv=4)


class QueueFullTest(CheckMixin, harness.ServerTestCase):
    # --inline-idle-us 0: every request queues, even one alone in flight,
    # so that the flood overflows the queue of one.
    server_args = ("--workers", "1", "--max-batch", "1", "--max-queue", "1",
                   "--inline-idle-us", "0")

    def test_flood_gets_503_with_retry_after(self):
        body = json.dumps(heavy_request(1)).encode()
        results, barrier = [], threading.Barrier(12)

        def client():
            barrier.wait()
            status, hdrs, data = self.srv.request("POST", "/v1/attention", body)
            results.append((status, hdrs, data))
        threads = [threading.Thread(target=client) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        codes = sorted(s for s, _, _ in results)
        self.assertEqual(len(codes), 12)
        self.assertTrue(set(codes) <= {200, 503}, codes)
        self.assertIn(503, codes)
        self.assertIn(200, codes)
        for status, hdrs, data in results:
            if status == 503:
                self.assert_error(status, hdrs, data, 503)
                self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        self.assertEqual(self.srv.get("/healthz")[0], 200)


class DeadlineTest(CheckMixin, harness.ServerTestCase):
    # 1 ms from the request's arrival: decoding a few hundred kilobytes of
    # JSON alone takes longer, so the request expires before it runs.
    server_args = ("--workers", "1", "--timeout-ms", "1")

    def test_request_past_deadline_gets_504(self):
        req = make_request(9, B=4, Lq=128, Lk=128, D=32, Dv=32)
        status, hdrs, data = self.srv.request("POST", "/v1/attention", json.dumps(req).encode())
        obj = self.assert_error(status, hdrs, data, 504)
        self.assertIn("deadline", obj["error"])
        self.assertEqual(self.srv.get("/healthz")[0], 200)
        samples = self.metrics()
        self.assertGreaterEqual(counter(samples, "attnd_requests_total",
                                        route="/v1/attention", code="504"), 1)


DESIGN_V2 = {
    "inputs": [
        {"name": "query", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 0, 0, 2]},
        {"name": "key", "shape": [1, 3, 2], "datatype": "FP32", "data": [1, 1, 2, 0, 0, 3]},
        {"name": "value", "shape": [1, 3, 2], "datatype": "FP32", "data": [1, 0, 0, 1, 1, 1]},
        {"name": "valid_lens", "shape": [1], "datatype": "INT32", "data": [2]}],
    "parameters": {"scale": 0.7071}, "id": "v2-example"}


class V2Test(CheckMixin, harness.ServerTestCase):
    server_args = ("--workers", "2")

    def reference(self):
        return reference([[[1, 0], [0, 2]]], [[[1, 1], [2, 0], [0, 3]]],
                         [[[1, 0], [0, 1], [1, 1]]], [2], 0.7071)

    def test_v2_metadata_and_health(self):
        for path in ("/v2", "/v2/health/live", "/v2/health/ready",
                     "/v2/models/attention", "/v2/models/attention/ready",
                     "/v2/models/additive_attention/versions/1"):
            status, hdrs, body = self.srv.get(path)
            self.assertEqual(status, 200, path)
            json.loads(body)
        status, _, body = self.srv.get("/v2")
        self.assertIn("binary_tensor_data", json.loads(body)["extensions"])

    def test_v2_unknown_model_version_or_action_is_404(self):
        for path in ("/v2/models/nope", "/v2/models/attention/versions/9",
                     "/v2/models/attention/bogus", "/v2/models/a/b/c/d/e"):
            status, hdrs, body = self.srv.get(path)
            self.assert_error(status, hdrs, body, 404)

    def test_v2_infer_wrong_method_is_405(self):
        status, hdrs, body = self.srv.get("/v2/models/attention/infer")
        self.assert_error(status, hdrs, body, 405)
        self.assertEqual(hdrs.get("allow"), "POST")

    def test_v2_infer_json_returns_reference_numbers(self):
        out, w = self.reference()
        status, resp = self.srv.post_json("/v2/models/attention/infer", DESIGN_V2)
        self.assertEqual(status, 200, resp)
        self.assertEqual(resp["model_name"], "attention")
        self.assertEqual(resp["id"], "v2-example")
        got = {o["name"]: o for o in resp["outputs"]}
        self.assertEqual(got["output"]["shape"], [1, 2, 2])
        self.assert_close(got["output"]["data"], flat(out), "output")
        self.assert_close(got["weights"]["data"], flat(w), "weights")

    def test_v2_binary_output_follows_the_json_header(self):
        req = dict(DESIGN_V2, outputs=[{"name": "output", "parameters": {"binary_data": True}}])
        status, hdrs, body = self.srv.request("POST", "/v2/models/attention/infer",
                                              json.dumps(req).encode())
        self.assertEqual(status, 200, body[:200])
        hl = int(hdrs["inference-header-content-length"])
        header = json.loads(body[:hl])
        self.assertEqual(header["outputs"][0]["parameters"]["binary_data_size"], 16)
        self.assertEqual(len(header["outputs"]), 1)  # weights not asked for
        self.assert_close(list(struct.unpack("<4f", body[hl:])), flat(self.reference()[0]),
                          "binary output")

    def test_gzip_request_and_response(self):
        req = make_request(21, Lq=16, Lk=16, D=8, Dv=8)
        out, w = reference(req["query"], req["key"], req["value"])
        status, hdrs, body = self.srv.request(
            "POST", "/v1/attention", gzip.compress(json.dumps(req).encode()),
            {"Content-Encoding": "gzip", "Accept-Encoding": "gzip"})
        self.assertEqual(status, 200, body[:200])
        self.assertEqual(hdrs.get("content-encoding"), "gzip")
        resp = json.loads(gzip.decompress(body))
        self.assert_close(resp["output"], out, "output")
        self.assert_close(resp["weights"], w, "weights")

    def test_corrupt_gzip_body_is_400(self):
        status, hdrs, body = self.srv.request("POST", "/v1/attention", b"\x1f\x8b not gzip",
                                              {"Content-Encoding": "gzip"})
        self.assert_error(status, hdrs, body, 400)


class TokenTest(CheckMixin, harness.ServerTestCase):
    server_args = ("--token", "s3cret-token")

    def test_inference_needs_the_bearer_token(self):
        body = json.dumps(make_request(1)).encode()
        for hdrs in ({}, {"Authorization": "Bearer wrong-token!"},
                     {"Authorization": "Bearer s3cret-toke"},
                     {"Authorization": "Basic s3cret-token"}):
            status, rh, data = self.srv.request("POST", "/v1/attention", body, hdrs)
            self.assert_error(status, rh, data, 401)
            self.assertTrue(rh.get("www-authenticate", "").startswith('Bearer realm="attnd"'))
        status, _, data = self.srv.request("POST", "/v1/attention", body,
                                           {"Authorization": "Bearer s3cret-token"})
        self.assertEqual(status, 200, data)

    def test_probes_and_metrics_stay_open(self):
        for path in ("/healthz", "/readyz", "/metrics", "/v2/health/live", "/v2/health/ready"):
            self.assertEqual(self.srv.get(path)[0], 200, path)

    def test_v2_metadata_needs_the_token(self):
        status, hdrs, body = self.srv.get("/v2/models/attention")
        self.assert_error(status, hdrs, body, 401)
        status, _, _ = self.srv.request("GET", "/v2/models/attention", None,
                                        {"Authorization": "Bearer s3cret-token"})
        self.assertEqual(status, 200)


if __name__ == "__main__":
    harness.main()
