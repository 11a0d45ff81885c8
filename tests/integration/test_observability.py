"""What an operator reads when something is off: the access log, request
ids and the process metrics, against the real build/attnd.

- Access lines, text and JSON: an RFC 3339 UTC time with milliseconds
  close to now, the client's address and port (the port of the test's own
  socket), the request id, the traceparent header as sent (escaped, cut
  when long), and on a 4xx/5xx the error message the client got.
- X-Request-ID: a client's id is echoed and logged; without one, or with
  one attnd refuses (too long, spaces, quotes, control or non-ASCII
  bytes), attnd makes a 32-hex-digit id, echoes and logs it.  Errors and
  answers sent before the body (413, a framing 400, 401) echo it too.
- /metrics: process_* values that make sense (RSS > 0, CPU time rising
  under work, a start time of moments ago, open <= max descriptors and
  more open while connections are held), and latency series trimmed to
  full histograms on the inference routes only.
"""

import datetime
import http.client
import json
import re
import socket
import time

import harness
from test_http import counter, parse_metrics

V1 = {"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]],
      "value": [[[1, 0], [0, 1], [1, 1]]]}
V2 = {"inputs": [
    {"name": "query", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 0, 0, 2]},
    {"name": "key", "shape": [1, 3, 2], "datatype": "FP32", "data": [1, 1, 2, 0, 0, 3]},
    {"name": "value", "shape": [1, 3, 2], "datatype": "FP32", "data": [1, 0, 0, 1, 1, 1]}]}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
GENERATED = re.compile(r"^[0-9a-f]{32}$")
TEXT_LINE = re.compile(
    r"^attnd: (?P<time>\S+) (?P<client>\S+) (?P<method>\S+) (?P<path>\S+) "
    r"(?P<status>\d+) in=\d+ out=\d+ ms=\d+\.\d{3} queue_ms=\d+\.\d{3} "
    r"compute_ms=\d+\.\d{3} batch=\d+ id=(?P<id>\S+)"
    r"( traceparent=(?P<traceparent>\S+))?( reason=\"(?P<reason>[^\"]*)\")?$")
# Ids attnd must not keep: each is replaced by one it makes.
BAD_IDS = ["", "has space", 'quo"te', "back\\slash", "x" * 129, "tab\there",
           b"caf\xc3\xa9", b"ctl\x01"]


def send(srv, method, path, body=None, headers=None):
    """One request on a fresh connection: (status, lower-case headers,
    body, the client's own "addr:port")."""
    conn = srv.connection()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        local = "%s:%d" % conn.sock.getsockname()[:2]
        resp = conn.getresponse()
        return (resp.status, {k.lower(): v for k, v in resp.getheaders()},
                resp.read(), local)
    finally:
        conn.close()


def raw_exchange(srv, data):
    """Sends raw bytes, returns the response's status and lower-case
    headers (the connection is closed after it)."""
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    try:
        s.sendall(data)
        resp = http.client.HTTPResponse(s)
        resp.begin()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        s.close()


def unescape_text(field):
    """A text-log field back to bytes: \\xHH is one byte."""
    return re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m.group(1), 16)]),
                  field.encode()).decode("utf-8", "replace")


def wait_for(pred, timeout=10 * (10 if harness.VALGRIND else 1)):
    """Polls pred until it returns something true; returns that or None.
    An access line is written just after the client has its answer."""
    end = time.time() + timeout
    while True:
        got = pred()
        if got or time.time() > end:
            return got
        time.sleep(0.02)


def assert_recent_utc(case, stamp, slack=120):
    case.assertRegex(stamp, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
    t = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    case.assertEqual(t.utcoffset(), datetime.timedelta(0))
    case.assertLess(abs(t.timestamp() - time.time()), slack, stamp)


class TextLogTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--max-body-mb", "1")

    def line_for(self, rid):
        """The parsed text access line whose id is rid."""
        def find():
            for line in list(self.srv.log):
                m = TEXT_LINE.match(line.rstrip("\n"))
                if m and m.group("id") == rid:
                    return m
            return None
        m = wait_for(find)
        self.assertIsNotNone(m, "no access line with id %s:\n%s"
                             % (rid, "".join(self.srv.log[-20:])))
        return m

    def test_line_has_time_client_id_and_request(self):
        status, hdrs, _, local = send(self.srv, "GET", "/healthz",
                                      headers={"X-Request-ID": "op-1234"})
        self.assertEqual(status, 200)
        self.assertEqual(hdrs.get("x-request-id"), "op-1234")
        m = self.line_for("op-1234")
        assert_recent_utc(self, m.group("time"))
        self.assertEqual(m.group("client"), local)
        self.assertEqual((m.group("method"), m.group("path"), m.group("status")),
                         ("GET", "/healthz", "200"))
        self.assertIsNone(m.group("reason"))
        self.assertIsNone(m.group("traceparent"))

    def test_an_id_is_made_when_the_client_sends_none(self):
        ids = []
        for _ in range(3):
            status, hdrs, _, _ = send(self.srv, "POST", "/v1/attention",
                                      json.dumps(V1).encode())
            self.assertEqual(status, 200)
            self.assertRegex(hdrs.get("x-request-id", ""), GENERATED)
            ids.append(hdrs["x-request-id"])
        self.assertEqual(len(set(ids)), 3, ids)
        for rid in ids:
            self.assertEqual(self.line_for(rid).group("path"), "/v1/attention")

    def test_an_unsafe_id_is_replaced(self):
        for bad in BAD_IDS:
            status, hdrs, _, _ = send(self.srv, "GET", "/readyz",
                                      headers={"X-Request-ID": bad})
            self.assertEqual(status, 200)
            rid = hdrs.get("x-request-id", "")
            self.assertRegex(rid, GENERATED, repr(bad))
            self.line_for(rid)
        longest = "k" * 128
        _, hdrs, _, _ = send(self.srv, "GET", "/readyz",
                             headers={"X-Request-ID": longest})
        self.assertEqual(hdrs.get("x-request-id"), longest)
        self.line_for(longest)

    def test_traceparent_is_logged_as_sent(self):
        send(self.srv, "GET", "/healthz", headers={
            "X-Request-ID": "tp-1", "traceparent": TRACEPARENT})
        self.assertEqual(self.line_for("tp-1").group("traceparent"), TRACEPARENT)
        send(self.srv, "GET", "/healthz", headers={
            "X-Request-ID": "tp-2", "traceparent": 'odd "value" \\ here'})
        self.assertEqual(self.line_for("tp-2").group("traceparent"),
                         r"odd\x20\x22value\x22\x20\x5c\x20here")
        send(self.srv, "GET", "/healthz", headers={
            "X-Request-ID": "tp-3", "traceparent": "f" * 1000})
        tp = self.line_for("tp-3").group("traceparent")
        self.assertTrue(tp.endswith("..."), tp)
        self.assertLessEqual(len(tp), 256)

    def test_errors_log_the_message_the_client_got(self):
        cases = [("POST", "/v1/attention", b"not json", 400),
                 ("GET", '/no/"such"', None, 404),
                 ("DELETE", "/healthz", None, 405),
                 ("POST", "/v2/models/attention/infer", b"{}", 400)]
        for n, (method, path, body, want) in enumerate(cases):
            rid = "err-%d" % n
            status, hdrs, data, _ = send(self.srv, method, path, body,
                                         {"X-Request-ID": rid})
            self.assertEqual(status, want, data)
            self.assertEqual(hdrs.get("x-request-id"), rid)
            m = self.line_for(rid)
            self.assertEqual(m.group("status"), str(want))
            self.assertIsNotNone(m.group("reason"), m.group(0))
            self.assertEqual(unescape_text(m.group("reason")),
                             json.loads(data)["error"])
        # The quotes of the path are escaped, in the path and the reason.
        m = self.line_for("err-1")
        self.assertEqual(m.group("path"), r"/no/\x22such\x22")
        self.assertIn(r"\x22such\x22", m.group("reason"))

    def test_early_answers_echo_the_id(self):
        # 413 announced before any body is sent.
        conn = self.srv.connection()
        conn.putrequest("POST", "/v1/attention")
        conn.putheader("Content-Length", str(2 << 20))
        conn.putheader("X-Request-ID", "big-1")
        conn.endheaders()
        resp = conn.getresponse()
        self.assertEqual(resp.status, 413)
        self.assertEqual(resp.getheader("X-Request-ID"), "big-1")
        conn.close()
        m = self.line_for("big-1")
        self.assertIn("exceeds the limit", m.group("reason"))
        # Framing that two parsers could read two ways: 400 at once.
        status, hdrs = raw_exchange(self.srv, (
            b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nX-Request-ID: smug-1\r\n"
            b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
        self.assertEqual(status, 400)
        self.assertEqual(hdrs.get("x-request-id"), "smug-1")
        self.assertIn("Transfer-Encoding", unescape_text(
            self.line_for("smug-1").group("reason")))


class JsonLogTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--log", "json")

    def access(self, rid):
        """The parsed JSON access line whose request_id is rid."""
        def find():
            for line in list(self.srv.log):
                if line.startswith("{") and '"path"' in line:
                    obj = json.loads(line)
                    if obj["request_id"] == rid:
                        return obj, line
            return None
        got = wait_for(find)
        self.assertIsNotNone(got, "no access line with id %s" % rid)
        return got

    def test_every_line_is_a_json_object_with_a_time(self):
        send(self.srv, "GET", "/healthz", headers={"X-Request-ID": "j-0"})
        self.access("j-0")
        for line in list(self.srv.log):
            obj = json.loads(line)  # every line, messages too
            assert_recent_utc(self, obj["time"])
            self.assertEqual(list(obj)[0], "time")
        self.assertTrue(any(json.loads(l).get("msg", "").startswith("listening on")
                            for l in self.srv.log))

    def test_line_has_every_field(self):
        status, hdrs, _, local = send(
            self.srv, "POST", "/v1/attention", json.dumps(V1).encode(),
            {"X-Request-ID": "j-1", "traceparent": TRACEPARENT})
        self.assertEqual(status, 200)
        self.assertEqual(hdrs.get("x-request-id"), "j-1")
        a, _ = self.access("j-1")
        self.assertEqual(list(a), [
            "time", "remote_addr", "remote_port", "request_id", "method", "path",
            "status", "bytes_in", "bytes_out", "ms", "queue_ms", "compute_ms",
            "batch", "traceparent"])
        assert_recent_utc(self, a["time"])
        self.assertEqual("%s:%d" % (a["remote_addr"], a["remote_port"]), local)
        self.assertEqual((a["method"], a["path"], a["status"]),
                         ("POST", "/v1/attention", 200))
        self.assertEqual(a["bytes_in"], len(json.dumps(V1)))
        self.assertEqual(a["traceparent"], TRACEPARENT)
        self.assertNotIn("reason", a)
        self.assertGreaterEqual(a["ms"], a["queue_ms"])

    def test_ids_are_made_or_replaced(self):
        for headers in ({}, {"X-Request-ID": "a b"}, {"X-Request-ID": "y" * 200}):
            _, hdrs, _, _ = send(self.srv, "GET", "/v2/health/live", headers=headers)
            rid = hdrs.get("x-request-id", "")
            self.assertRegex(rid, GENERATED, headers)
            a, _ = self.access(rid)
            self.assertEqual(a["path"], "/v2/health/live")
            self.assertNotIn("traceparent", a)

    def test_reason_and_path_are_escaped(self):
        # %01 and %ff reach the path as the bytes 0x01 and 0xff (not UTF-8).
        status, hdrs, data, _ = send(self.srv, "GET", "/x%01%ff%22y",
                                     headers={"X-Request-ID": "j-esc"})
        self.assertEqual(status, 404)
        a, line = self.access("j-esc")
        self.assertNotIn("\ufffd", line)  # the line itself was UTF-8
        self.assertEqual(a["path"], '/x\x01\ufffd"y')
        self.assertTrue(a["reason"].startswith("no route for /x\x01"), a)
        self.assertEqual(a["status"], 404)
        status, _, data, _ = send(self.srv, "POST", "/v1/attention",
                                  b'{"query": 1}', {"X-Request-ID": "j-400"})
        self.assertEqual(status, 400)
        self.assertEqual(self.access("j-400")[0]["reason"], json.loads(data)["error"])


class TokenLogTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--log", "json", "--token", "s3cret")

    def test_401_echoes_the_id_and_logs_why(self):
        status, hdrs, data, _ = send(self.srv, "POST", "/v1/attention",
                                     json.dumps(V1).encode(), {"X-Request-ID": "t-1"})
        self.assertEqual(status, 401)
        self.assertEqual(hdrs.get("x-request-id"), "t-1")

        def find():
            for line in list(self.srv.log):
                if '"request_id":"t-1"' in line:
                    return json.loads(line)
            return None
        a = wait_for(find)
        self.assertIsNotNone(a)
        self.assertEqual((a["status"], a["reason"]), (401, json.loads(data)["error"]))
        self.assertNotIn("s3cret", "".join(self.srv.log))


class ProcessMetricsTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--access-log", "0")

    @classmethod
    def setUpClass(cls):
        cls.started = time.time()
        super().setUpClass()

    def scrape(self):
        status, _, body = self.srv.get("/metrics")
        self.assertEqual(status, 200)
        return parse_metrics(body.decode())

    def test_values_are_plausible(self):
        s = self.scrape()
        rss = counter(s, "process_resident_memory_bytes")
        self.assertGreater(rss, 1 << 20)
        self.assertGreaterEqual(counter(s, "process_virtual_memory_bytes"), rss)
        start = counter(s, "process_start_time_seconds")
        # /proc/stat's boot time is whole seconds; starttime is in ticks.
        self.assertGreaterEqual(start, self.started - 2)
        self.assertLessEqual(start, time.time() + 1)
        open_fds, max_fds = counter(s, "process_open_fds"), counter(s, "process_max_fds")
        self.assertGreaterEqual(open_fds, 3)
        self.assertLessEqual(open_fds, max_fds)
        self.assertGreater(counter(s, "process_cpu_seconds_total"), 0)

    def test_open_fds_follow_connections(self):
        # Measured as the fall when 8 held connections close: sockets of
        # earlier tests that attnd has yet to see closed can only lower
        # the count meanwhile, never hide the 8.
        held = []
        try:
            for _ in range(8):
                c = self.srv.connection()
                c.request("GET", "/healthz")
                c.getresponse().read()
                held.append(c)  # kept alive: attnd holds its socket
            during = counter(self.scrape(), "process_open_fds")
        finally:
            for c in held:
                c.close()
        self.assertTrue(wait_for(
            lambda: counter(self.scrape(), "process_open_fds") <= during - 8))

    def test_cpu_seconds_rise_under_work(self):
        body = json.dumps({"query": [[[0.5] * 32] * 64], "key": [[[0.25] * 32] * 256],
                           "value": [[[1.0] * 32] * 256]}).encode()
        first = last = counter(self.scrape(), "process_cpu_seconds_total")
        end = time.time() + 60
        while last <= first and time.time() < end:
            for _ in range(20):
                self.assertEqual(self.srv.request("POST", "/v1/attention", body)[0], 200)
            now = counter(self.scrape(), "process_cpu_seconds_total")
            self.assertGreaterEqual(now, last)  # a counter never goes down
            last = now
        self.assertGreater(last, first)


class TrimmedSeriesTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--access-log", "0")

    def test_histograms_only_on_inference_routes(self):
        srv = self.srv
        # 15 requests over several routes, then the size of the exposition
        # (23 KB when every route had a 17-bucket histogram; the request
        # cost histogram and the memory budget's gauges take 1.1 KB).
        for path in ["/healthz"] * 3 + ["/readyz"] * 2 + [
                "/v2", "/v2/models/attention", "/", "/nowhere", "/metrics"]:
            srv.get(path)
        for body in (V1, V1, "bad"):
            srv.request("POST", "/v1/attention", json.dumps(body).encode())
        for _ in range(2):
            srv.request("POST", "/v2/models/attention/infer", json.dumps(V2).encode())
        status, _, text = srv.get("/metrics")
        self.assertEqual(status, 200)
        self.assertLess(len(text), 11200, "exposition after 15 requests")
        samples = parse_metrics(text.decode())
        bucket_routes = {dict(l)["route"] for (n, l), _ in samples.items()
                         if n == "attnd_request_duration_seconds_bucket"}
        self.assertEqual(bucket_routes, {"/v1/attention", "/v2/models/:m/infer"})
        self.assertEqual(counter(samples, "attnd_request_duration_seconds_count",
                                 route="/v1/attention"), 3)
        # Every other route: a count (and a sum) that agrees with the
        # requests counted for it.
        for route, n in [("/healthz", 3), ("/readyz", 2), ("/v2", 1),
                         ("/v2/models/:m", 1), ("static", 1), ("other", 1),
                         ("/metrics", 1)]:
            self.assertEqual(counter(samples, "attnd_other_request_duration_seconds_count",
                                     route=route), n, route)
            self.assertGreater(counter(samples, "attnd_other_request_duration_seconds_sum",
                                       route=route), 0, route)
        self.assertNotIn("attnd_other_request_duration_seconds_bucket",
                         {n for n, _ in samples})
        self.assertNotIn(("attnd_other_request_duration_seconds_count",
                          frozenset({("route", "/v1/attention")})), samples)


if __name__ == "__main__":
    harness.main()
