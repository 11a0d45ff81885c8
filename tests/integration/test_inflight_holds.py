"""When the in-flight memory budget (--max-inflight-mb, the gauge
attnd_inflight_bytes) is held and let go, against the real attnd:

  * an answer is held until libmicrohttpd has sent it: clients that send
    answer-heavy requests (returned weights, about 13 MB of JSON each;
    v2 binary outputs) and never read them keep those bytes in the gauge,
    byte for byte, and a further request gets the 503 naming
    --max-inflight-mb rather than memory growing; once they read or close,
    the gauge returns to 0 and requests are served again;
  * a request refused after its body arrived (a 400 for JSON that does
    not parse, a 413 for its cost, a shared memory registration that does
    not parse) lets its body's hold go as its answer is queued, not at its
    end: attnd-test holds every request's end 3 s (ATTND_TEST_END_DELAY_MS),
    and a request sent right after the refusal's answer, which fits only
    if the refused body's hold is gone, is served.
"""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_limits import read_answer  # noqa: E402

GAUGE = "attnd_inflight_bytes"


def seq(n, d, seed):
    return [[[((i * 7 + j * 3 + seed) % 11) / 7.0 for j in range(d)] for i in range(n)]]


class SlowReaders(harness.ServerTestCase):
    """One worker and a 32 MiB budget, which a few answers of 8 to 14 MB
    (their requests estimated at about twice that before they run)
    fill."""
    server_args = ("--workers", "1", "--max-inflight-mb", "32")

    def gauge(self):
        return self.srv.metric(GAUGE)

    def post(self, path, body, headers=None, rcvbuf=None):
        """Sends a POST on a new connection (with a small receive buffer
        when rcvbuf is set, for a client that does not read) and returns
        the socket."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(60)
        s.connect((self.srv.host, self.srv.port))
        head = "POST %s HTTP/1.1\r\nHost: attnd\r\nContent-Length: %d\r\n" % (path, len(body))
        for k, v in (headers or {}).items():
            head += "%s: %s\r\n" % (k, v)
        s.sendall(head.encode() + b"\r\n" + body)
        return s

    def outcome(self, ok, busy, before):
        """Waits until one of the counters ok (a 200) and busy (a 503)
        has grown past before, what they were; returns 200 or 503."""
        got = []

        def grown():
            now = (self.count(ok), self.count(busy))
            if now != before:
                got.append(200 if now[0] > before[0] else 503)
            return bool(got)
        self.assertTrue(harness.wait_for(grown, 60), "no answer counted")
        return got[0]

    def count(self, label):
        try:
            return self.srv.metric(label)
        except AssertionError:  # not answered yet: no line
            return 0.0

    def slow_clients_hold_their_answers(self, path, body, headers, route):
        """The test itself for one kind of answer-heavy request."""
        ok = 'attnd_requests_total{route="%s",code="200"}' % route
        busy = 'attnd_requests_total{route="%s",code="503"}' % route
        # A client that reads: the answer's length, and nothing left held.
        s = self.post(path, body, headers)
        status, _, first = read_answer(s)
        s.close()
        self.assertEqual(status, 200, first[:300])
        size = len(first)
        self.assertGreater(size, 4 << 20)
        self.assertTrue(harness.wait_for(lambda: self.gauge() == 0, 30), self.gauge())
        slow = []
        try:
            # Clients that never read, until one is refused (its 503 is
            # counted as it is queued, as every answer is).
            while len(slow) < 8:
                before = (self.count(ok), self.count(busy))
                slow.append(self.post(path, body, headers, rcvbuf=4096))
                if self.outcome(ok, busy, before) == 503:
                    slow.pop().close()
                    break
                # held byte for byte while libmicrohttpd still sends them
                self.assertEqual(self.gauge(), len(slow) * size)
            self.assertGreaterEqual(len(slow), 1)
            self.assertLess(len(slow), 8, "eight unread answers and no 503")
            held = self.gauge()
            self.assertEqual(held, len(slow) * size)
            print("%s: %d unread answers of %d bytes held, %.0f of %.0f bytes of the budget; "
                  "the next refused" % (self._testMethodName, len(slow), size, held,
                                        self.srv.metric("attnd_inflight_limit_bytes")))
            # One more, from a client that reads: the budget's 503.
            s = self.post(path, body, headers)
            status, _, refused = read_answer(s)
            s.close()
            self.assertEqual(status, 503, refused[:300])
            self.assertIn("--max-inflight-mb", json.loads(refused)["error"])
            self.assertEqual(self.gauge(), held)
            # The first reads its answer whole, the others close unread.
            s = slow.pop(0)
            status, _, got = read_answer(s)
            s.close()
            self.assertEqual(status, 200)
            self.assertEqual(got, first)
        finally:
            for s in slow:
                s.close()
        self.assertTrue(harness.wait_for(lambda: self.gauge() == 0, 30),
                        "%s still %s after the slow clients left" % (GAUGE, self.gauge()))
        s = self.post(path, body, headers)
        status, _, again = read_answer(s)
        s.close()
        self.assertEqual(status, 200, again[:300])
        self.assertEqual(again, first)

    def test_v1_answers_held_until_sent(self):
        q, k, v = seq(1024, 4, 1), seq(1024, 4, 2), seq(1024, 4, 3)
        body = json.dumps({"query": q, "key": k, "value": v,
                           "return_weights": True}).encode()
        self.slow_clients_hold_their_answers(
            "/v1/attention", body, {"Content-Type": "application/json"},
            "/v1/attention")

    def test_v2_binary_answers_held_until_sent(self):
        """v2 binary outputs: the answer is the core's own buffers, sent
        as they are; they are held the same way."""
        q, k, v = seq(1024, 4, 1), seq(1024, 4, 2), seq(1024, 4, 3)

        def inp(name, x):
            flat = [c for row in x[0] for c in row]
            return {"name": name, "datatype": "FP32", "shape": [1, len(x[0]), 4], "data": flat}
        # 2048 keys: a 1024 x 2048 weights tensor, 8 MiB of FP32
        k3, v3 = [k[0] * 2], [v[0] * 2]
        req = {"inputs": [inp("query", q), inp("key", k3), inp("value", v3)],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}},
                        {"name": "weights", "parameters": {"binary_data": True}}]}
        body = json.dumps(req).encode()
        self.slow_clients_hold_their_answers(
            "/v2/models/attention/infer", body, {"Content-Type": "application/json"},
            "/v2/models/:m/infer")


class RefusalsLetGoAtTheirAnswer(harness.UnixSocketServer, harness.ServerTestCase):
    """A 4 MiB budget: a refused body of 3 MB and the next request's body
    of 1.2 MB fit together only once the first is let go.  Eight HTTP
    threads give each of the test's connections over the Unix socket a
    thread of its own, so that the refused request's delayed end does not
    hold the next one."""
    server_args = ("--workers", "1", "--http-threads", "8", "--max-inflight-mb", "4",
                   "--max-request-gflop", "1", "--allow-client-shm", "1")
    server_env = {"ATTND_TEST_END_DELAY_MS": "3000"}
    server_binary = harness.TEST_BINARY

    def call(self, method, path, body=None):
        conn = harness.UnixHTTPConnection(self.sock, timeout=60)
        try:
            return harness.exchange(conn, method, path, body,
                                    {"Content-Type": "application/json"} if body else {})
        finally:
            conn.close()

    def gauge(self):
        st, _, body = self.call("GET", "/metrics")
        self.assertEqual(st, 200)
        for line in body.decode().splitlines():
            if line.startswith(GAUGE + " "):
                return float(line.split()[1])
        raise AssertionError("no %s in /metrics" % GAUGE)

    @staticmethod
    def padded(obj, size):
        """obj as JSON, padded with blanks to about size bytes."""
        text = json.dumps(obj).encode()
        return text[:-1] + b" " * max(0, size - len(text)) + b"}"

    def refused_then_served(self, path, refused_body, want):
        # An earlier test's answers are held until their ends, and every
        # request's end, a /metrics GET's too, holds its HTTP thread 3 s:
        # wait that out rather than poll.
        for _ in range(10):
            time.sleep(3.2)
            if self.gauge() == 0:
                break
        t0 = time.monotonic()
        st, _, body = self.call("POST", path, refused_body)
        self.assertEqual(st, want, body[:300])
        held, t_held = self.gauge(), time.monotonic() - t0
        good = self.padded({"query": [[[1.0, 0.0]]], "key": [[[1.0, 0.0]]],
                            "value": [[[1.0, 2.0]]]}, 1200 << 10)
        st, _, body = self.call("POST", "/v1/attention", good)
        t_next = time.monotonic() - t0
        print("%s: %d answered, %.0f bytes held %.3f s after, the next request "
              "%d after %.3f s" % (self._testMethodName, want, held, t_held, st, t_next))
        if t_held < 3.0:
            self.assertEqual(held, 0, "the refused body still held after its answer")
        if t_next >= 3.0:
            self.skipTest("the machine took 3 s, past the refused request's end")
        self.assertEqual(st, 200, body[:300])
        self.assertEqual(json.loads(body)["output"], [[[1.0, 2.0]]])

    def test_a_body_that_does_not_parse(self):
        self.refused_then_served("/v1/attention",
                                 b'{"query": ' + b" " * (3000 << 10) + b"oops}", 400)

    def test_a_request_over_the_cost_limit(self):
        # 2 * 20000 * 20000 * (1 + 1) = 1.6 GFLOP, over the 1 GFLOP limit;
        # the blanks in the query's numbers, which the decoder skips
        x = [[[(i % 5) / 4.0] for i in range(20000)]]
        text = json.dumps({"query": x, "key": x, "value": x}).encode()
        pad = b" " * ((3000 << 10) - len(text))
        self.refused_then_served("/v1/attention", text.replace(b"[[[", b"[[[" + pad, 1), 413)

    def test_a_registration_that_does_not_parse(self):
        self.refused_then_served("/v2/systemsharedmemory/region/r/register",
                                 b'{"key": ' + b" " * (3000 << 10) + b"oops}", 400)


if __name__ == "__main__":
    harness.main()
