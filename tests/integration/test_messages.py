"""Error messages through the real build/attnd, as a client reads them.

Each refusal must name the field or the flag, say what the client wrote
and what is allowed:

  * the decoder's element limit (413) names --max-inflight-mb, how the
    limit follows from it, and "return_weights": false when the weights
    are what make the request too large; so does the count of a body's
    numbers before it is parsed;
  * a body nested deeper than the JSON reader's limit says how deep and
    the limit (/v1 and v2), not that it is not JSON;
  * numbers out of range are echoed as written (1e400, 1e300), and an
    axis too long states the largest;
  * "id" is at most 256 bytes of UTF-8 (/v1 and v2): longer, or not
    UTF-8, is 400 naming it, never echoed;
  * 503 names --max-queue when the queue is full; 504 names the deadline
    that passed, the request's "timeout" or the server's --timeout-ms.
"""

import json
import random
import socket

import harness
from test_cancel import N, SMALL, long_request, wait_busy

SLOW = 10 if harness.VALGRIND else 1
V1 = "/v1/attention"
V2 = "/v2/models/attention/infer"
QKV1 = '"query": [[[1, 2]]], "key": [[[1, 2]]], "value": [[[1, 2]]]'


def v2_body(q="[1, 2]", id_json=None, qshape="[1, 1, 2]"):
    inputs = ['{"name": "query", "datatype": "FP32", "shape": %s, "data": %s}'
              % (qshape, q)]
    inputs += ['{"name": "%s", "datatype": "FP32", "shape": [1, 1, 2], '
               '"data": [1, 2]}' % n for n in ("key", "value")]
    head = '"id": %s, ' % id_json if id_json is not None else ""
    return '{%s"inputs": [%s]}' % (head, ", ".join(inputs))


class MessagesTest(harness.ServerTestCase):
    # 64 MiB: an element limit of 16 Mi elements, reached by small bodies
    server_args = ("--workers", "1", "--max-inflight-mb", "64")

    def refused(self, path, body, status=400):
        got, obj = self.srv.post_json(path, body)
        self.assertEqual(got, status, obj)
        return obj["error"]

    def test_element_limit_names_the_flag_and_the_weights(self):
        # (1, 5000, 1) with weights: 25 M weights, past 16 Mi elements;
        # without them 20,000 elements would do.
        t = {"shape": [1, 5000, 1], "data": [0.25] * 5000}
        msg = self.refused(V1, {"query": t, "key": t, "value": t}, 413)
        self.assertIn("needs 25020000 tensor elements", msg)
        self.assertIn("limit of 16777216 (--max-inflight-mb, 64 MiB, at 4 "
                      "bytes an element)", msg)
        self.assertIn('send "return_weights": false', msg)
        # as v2 JSON, asking for the weights
        inputs = [{"name": n, "datatype": "FP32", "shape": [1, 5000, 1],
                   "data": [0.25] * 5000} for n in ("query", "key", "value")]
        msg = self.refused(V2, {"inputs": inputs, "outputs": [
            {"name": "output"}, {"name": "weights"}]}, 413)
        self.assertIn("--max-inflight-mb", msg)
        self.assertIn('"outputs" without "weights"', msg)
        # without the weights it is served
        status, _ = self.srv.post_json(V1, {"query": t, "key": t, "value": t,
                                            "return_weights": False})
        self.assertEqual(status, 200)

    def test_nesting_past_the_limit_says_how_deep_and_the_limit(self):
        deep = "[" * 1200 + "]" * 1200
        for path, body in ((V1, '{"id": %s}' % deep),
                           (V2, '{"inputs": %s}' % deep)):
            msg = self.refused(path, body)
            self.assertEqual(msg, "body is nested 1001 levels deep at byte "
                             "%d; the limit is 1000 levels" % (body.index("[") + 999))

    def test_a_number_past_float32_is_echoed_as_written(self):
        want = "query[0][0][1]: 1e400 is out of float32 range (the largest is 3.4028235e38)"
        self.assertEqual(self.refused(V1, '{"query": [[[1, 1e400]]], "key": [[[1, 2]]], '
                                          '"value": [[[1, 2]]]}'), want)
        self.assertEqual(self.refused(V1, '{"query": {"shape": [1, 1, 2], "data": '
                                          '[1, 1e400]}, "key": [[[1, 2]]], '
                                          '"value": [[[1, 2]]]}'), want)
        self.assertEqual(self.refused(V2, v2_body("[1, 1e400]")), want)
        self.assertIn("-1E+0400 is out of float32 range",
                      self.refused(V1, '{"query": [[[1, -1E+0400]]], "key": [[[1, 2]]], '
                                       '"value": [[[1, 2]]]}'))

    def test_valid_lens_past_the_key_length_is_echoed_as_written(self):
        msg = self.refused(V1, '{%s, "valid_lens": [1e300]}' % QKV1)
        self.assertEqual(msg, "valid_lens[0]=1e300 exceeds key length 1")

    def test_an_axis_too_long_states_the_largest(self):
        want = "query: shape[0]=4294967296 is too large (the largest is 2147483647)"
        self.assertEqual(self.refused(V1, '{"query": {"shape": [4294967296, 1, 2], '
                                          '"data": [1, 2]}, "key": [[[1, 2]]], '
                                          '"value": [[[1, 2]]]}'), want)
        self.assertEqual(self.refused(V2, v2_body(qshape="[4294967296, 1, 2]")), want)

    def test_options_out_of_range_echo_what_was_sent(self):
        self.assertEqual(self.refused(V1, '{%s, "dropout": {"p": 1.5}}' % QKV1),
                         "dropout.p: must be a number in [0, 1), got 1.5")
        self.assertEqual(self.refused(V1, '{%s, "window": [1e300, 0]}' % QKV1),
                         "window[0]: expected an integer in [0, 2^53] or null, got 1e300")
        body = json.loads(v2_body())
        body["parameters"] = {"timeout": -5}
        self.assertEqual(self.refused(V2, body), "parameters.timeout: must be a "
                         "whole number of microseconds in [0, 2^53], got -5")
        body["parameters"] = {"window_left": "wide"}
        self.assertEqual(self.refused(V2, body), "parameters.window_left: must be "
                         "an integer in [0, 2^53] (or null: unbounded), got \"wide\"")

    def test_id_longer_than_the_limit_is_refused_not_echoed(self):
        for n in (257, 100000):
            idv = json.dumps("x" * n)
            for path, body in ((V1, '{%s, "id": %s}' % (QKV1, idv)),
                               (V2, v2_body(id_json=idv))):
                msg = self.refused(path, body)
                self.assertEqual(msg, "id: %d bytes long; the limit is 256 bytes" % n)
        # 256 bytes (here 128 two-byte characters) are taken and echoed
        idv = "\u00e9" * 128
        for path, body in ((V1, '{%s, "id": %s}' % (QKV1, json.dumps(idv))),
                           (V2, v2_body(id_json=json.dumps(idv)))):
            status, obj = self.srv.post_json(path, body)
            self.assertEqual((status, obj["id"]), (200, idv))

    def test_number_id_is_echoed_as_written(self):
        # past 2^53 a double holds another integer; v2 takes string ids only
        for idv in ("9007199254740993", "1.0", "-2.50e-3"):
            status, hdrs, data = self.srv.request("POST", V1, ('{%s, "id": %s}' % (QKV1, idv))
                                                  .encode())
            self.assertEqual(status, 200, data)
            self.assertTrue(data.startswith(b'{"id":%s,' % idv.encode()), data)
        self.assertEqual(self.refused(V2, v2_body(id_json="9007199254740993")),
                         "id: expected a string")

    def test_id_that_is_not_utf8_is_refused(self):
        for path, body in ((V1, ('{%s, "id": "ab\xff"}' % QKV1).encode("latin-1")),
                           (V2, v2_body(id_json='"ab\xff"').encode("latin-1"))):
            msg = self.refused(path, body)
            self.assertEqual(msg, "id: byte 2 (0xff) is not valid UTF-8; the id "
                             "must be UTF-8 text")


class ElementCountMessageTest(harness.ServerTestCase):
    # 1 MiB: 262,144 elements; the body is counted before it is parsed
    server_args = ("--workers", "1", "--max-inflight-mb", "1")

    def test_a_body_with_more_numbers_than_the_limit_names_the_flag(self):
        n = 300000
        body = ('{"query": {"shape": [1, %d, 1], "data": [%s]}, "key": [[[1]]], '
                '"value": [[[1]]]}' % (n, ",".join(["0"] * n)))
        status, obj = self.srv.post_json(V1, body)
        self.assertEqual(status, 413, obj)
        self.assertEqual(obj["error"], "request has more than 262144 tensor elements, "
                         "the server's limit (--max-inflight-mb, 1 MiB, at 4 bytes an "
                         "element); send smaller tensors, or split the batch")


class QueueFullMessageTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--max-queue", "1", "--inline-idle-us", "0",
                   "--max-request-gflop", "0", "--max-body-mb", "8")

    def test_a_full_queue_names_max_queue(self):
        busy = socket.create_connection((self.srv.host, self.srv.port), timeout=120 * SLOW)
        queued = socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)
        try:
            busy.sendall(long_request(2 * N))
            self.assertTrue(wait_busy(self.srv.proc.pid, timeout=20 * SLOW),
                            "attnd is not computing")
            queued.sendall(long_request())
            self.assertTrue(harness.wait_for(
                lambda: self.srv.metric("attnd_queue_depth") == 1, 20 * SLOW),
                "the second request is not queued")
            status, obj = self.srv.post_json(V1, SMALL)
            self.assertEqual(status, 503, obj)
            self.assertEqual(obj["error"], "server busy: 1 requests are queued, the "
                             "server's limit (--max-queue 1); retry later")
        finally:
            busy.close()
            queued.close()


def slow_body():
    """A /v1 request whose decoding alone takes longer than 1 ms."""
    rng = random.Random(3)
    t = {"shape": [8, 128, 32], "data": [round(rng.uniform(-1, 1), 4)
                                         for _ in range(8 * 128 * 32)]}
    return {"query": t, "key": t, "value": t, "return_weights": False}


def slow_v2_body(timeout):
    """A v2 request with parameters.timeout whose decoding alone takes
    longer than 1 ms (four times slow_body's elements: v2 decodes faster)."""
    t = slow_body()["query"]
    return {"parameters": {"timeout": timeout},
            "inputs": [{"name": n, "datatype": "FP32", "shape": [32, 128, 32],
                        "data": t["data"] * 4} for n in ("query", "key", "value")],
            "outputs": [{"name": "output"}]}


class ServerDeadlineMessageTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--timeout-ms", "1")

    def test_the_504_names_timeout_ms(self):
        status, obj = self.srv.post_json(V1, slow_body())
        self.assertEqual(status, 504, obj)
        self.assertEqual(obj["error"], "deadline passed before the request "
                         "finished: the server's --timeout-ms of 1 ms")

    def test_timeout_0_leaves_the_servers_deadline(self):
        status, obj = self.srv.post_json(V2, slow_v2_body(0))
        self.assertEqual(status, 504, obj)
        self.assertEqual(obj["error"], "deadline passed before the request "
                         "finished: the server's --timeout-ms of 1 ms")


class OwnDeadlineMessageTest(harness.ServerTestCase):
    server_args = ("--workers", "1", "--timeout-ms", "60000")

    def test_the_504_names_the_timeout_parameter(self):
        body = json.loads(v2_body())
        body["parameters"] = {"timeout": 1}
        status, obj = self.srv.post_json(V2, body)
        self.assertEqual(status, 504, obj)
        self.assertEqual(obj["error"], "deadline passed before the request "
                         "finished: its \"timeout\" parameter of 1 us")

    def test_timeout_0_is_no_deadline_of_its_own(self):
        # 0 us as a deadline would have passed on arrival
        status, obj = self.srv.post_json(V2, slow_v2_body(0))
        self.assertEqual(status, 200, obj)
        self.assertEqual(obj["outputs"][0]["shape"], [32, 128, 32])


if __name__ == "__main__":
    harness.main()
