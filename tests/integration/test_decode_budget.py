"""Decoding inside the memory budget, tried as an attacker would: large
JSON bodies, valid and not, sent at once to a daemon with a small
--max-inflight-mb.

  * Bodies of about 60 MB (thirty million numbers) that end in a syntax
    error are refused 400 naming the byte and what was expected; deeper
    nesting than the reader's limit names the limit.
  * Whatever mix arrives, the peak RSS (VmHWM from /proc) grows by no more
    than the budget plus the documented per-lane constant; valid bodies
    are answered 200, or 503 naming --max-inflight-mb when the budget is
    full, and attnd keeps serving.
  * A refused body costs no more CPU than a valid one of the same size
    (utime + stime of the daemon, a generous ratio, never seconds).
  * Valid JSON that the fast reader cannot take as tensors (a huge
    non-tensor array, a string among a tensor's numbers), a top-level
    array, and a gzip body that inflates to 60 MB stay inside the budget.
  * A body with no tensor in it is answered 400 at any size.
  * FP16 numbers on midpoints, each compared exactly with its decimal,
    cost a small factor over others of the same length.

Every figure is printed.
"""

import gzip
import json
import os
import threading
import unittest

import harness

BUDGET_MB = 256
# docs/operations.md: the process itself (OpenBLAS, the libraries, the
# connections) and what each HTTP thread may use outside the budget
CONSTANT_MB = 96
D = 64
LK = 234375                    # key and value: 2 x 15 million numbers


def row(n=D):
    return b"[" + b",".join([b"1"] * n) + b"]"


def v1_body(tail):
    rows = b"[[" + b",".join([row()] * LK) + b"]]"
    return (b'{"query": [[' + row() + b']], "key": ' + rows +
            b', "value": ' + rows + b', "return_weights": false, ' + tail +
            b"}")


def v2_body(tail):
    flat = b"[" + b",".join([b"1"] * (LK * D)) + b"]"

    def inp(name, shape, data):
        return (b'{"name": "%s", "datatype": "FP32", "shape": %s, "data": '
                % (name.encode(), json.dumps(shape).encode()) + data + b"}")
    return (b'{"inputs": [' + inp("query", [1, 1, D], row()) + b", " +
            inp("key", [1, LK, D], flat) + b", " +
            inp("value", [1, LK, D], flat) + b'], "id": ' + tail + b"}")


BODIES = {}


def bodies():
    if not BODIES:
        BODIES["v1 valid"] = v1_body(b'"id": "ok"')
        BODIES["v1 invalid"] = v1_body(b'"id": }')
        BODIES["v2 valid"] = v2_body(b'"ok"')
        BODIES["v2 invalid"] = v2_body(b"}")
    return BODIES


def cpu_s(pid):
    """utime + stime of the process, seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


class DecodeBudgetTest(harness.ServerTestCase):
    server_args = ("--max-inflight-mb", str(BUDGET_MB), "--max-body-mb",
                   "128", "--workers", "1", "--http-threads", "2")

    @classmethod
    def setUpClass(cls):
        # Under AddressSanitizer (make SANITIZE=address test) freed blocks
        # stay resident in its quarantine, 256 MiB by default: the peak
        # would measure the sanitizer, not attnd.  Without a sanitizer
        # the variable is not read.
        asan = os.environ.get("ASAN_OPTIONS", "")
        cls.srv = harness.Attnd(cls.server_args, env={
            "ASAN_OPTIONS": (asan + ":" if asan else "") +
            "quarantine_size_mb=0"})
        cls.hwm0 = cls.srv.status_kb("VmHWM")

    def post(self, path, body, headers=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        status, _, data = self.srv.request("POST", path, body, h,
                                           timeout=300)
        return status, json.loads(data)

    def path_of(self, name):
        return "/v1/attention" if name.startswith("v1") else \
            "/v2/models/attention/infer"

    def assert_within_budget(self, what):
        grown = (self.srv.status_kb("VmHWM") - self.hwm0) >> 10
        print("\n%s: peak RSS grew by %d MiB (budget %d + %d MiB)"
              % (what, grown, BUDGET_MB, CONSTANT_MB))
        self.assertLessEqual(grown, BUDGET_MB + CONSTANT_MB, what)

    def assert_serving(self):
        status, ans = self.post("/v1/attention", json.dumps({
            "query": [[[1, 0]]], "key": [[[1, 0]]], "value": [[[2]]]}).encode())
        self.assertEqual(status, 200, ans)
        self.assertEqual(ans["output"], [[[2.0]]])

    def assert_answer(self, name, status, ans, busy=False):
        """busy: the budget may be full (503 naming it)."""
        body = bodies()[name]
        if busy and status == 503:
            self.assertIn("--max-inflight-mb", ans["error"])
        elif name.endswith("invalid"):
            at = body.rindex(b"}", 0, len(body) - 1)
            self.assertEqual(status, 400, ans)
            self.assertEqual(ans["error"], "body is not valid JSON at byte "
                             "%d: expected a value, got '}'" % at)
        else:
            self.assertEqual(status, 200, ans)

    def test_concurrent_invalid_and_valid_bodies(self):
        names = ["v1 invalid", "v1 invalid", "v1 valid", "v2 invalid",
                 "v2 valid"]
        got = {}

        def send(i, name):
            got[i] = self.post(self.path_of(name), bodies()[name])
        threads = [threading.Thread(target=send, args=(i, n))
                   for i, n in enumerate(names)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        for i, name in enumerate(names):
            status, ans = got[i]
            print("\n%s (%d bytes): %d %s" % (name, len(bodies()[name]),
                                               status, ans.get("error", "")))
            self.assert_answer(name, status, ans, busy=True)
        self.assertIn(400, [got[i][0] for i in got])
        self.assert_within_budget("5 bodies of ~60 MB at once")
        # alone, each valid body fits and is answered
        for name in ("v1 valid", "v2 valid"):
            status, ans = self.post(self.path_of(name), bodies()[name])
            self.assertEqual(status, 200, "%s: %s" % (name, ans))
        self.assert_within_budget("then each valid body alone")
        self.assert_serving()

    def test_invalid_body_costs_no_more_cpu_than_a_valid_one(self):
        pid = self.srv.proc.pid
        spent = {}
        for name in ("v1 valid", "v1 invalid", "v2 valid", "v2 invalid"):
            before = cpu_s(pid)
            status, ans = self.post(self.path_of(name), bodies()[name])
            spent[name] = cpu_s(pid) - before
            print("\n%s: %d, %.2f s of CPU for %d bytes" % (
                name, status, spent[name], len(bodies()[name])))
            self.assert_answer(name, status, ans)
        for api in ("v1", "v2"):
            self.assertLessEqual(spent[api + " invalid"],
                                 3 * spent[api + " valid"] + 0.05, api)
        self.assert_serving()

    def test_numbers_on_half_midpoints_cost_what_others_do(self):
        # FP16 values whose doubles sit exactly on a midpoint each take an
        # exact comparison of the decimal: linear in the body all the same,
        # a small factor over values of the same length that do not
        n = 2000000
        pid = self.srv.proc.pid
        spent = {}
        for what, tok in (("plain", b"1.100488281250000000000000000001"),
                          ("midpoint", b"1.000488281250000000000000000001")):
            data = b"[" + b",".join([tok] * n) + b"]"
            body = (b'{"inputs": [{"name": "query", "datatype": "FP32", '
                    b'"shape": [1, 1, 1], "data": [1]}, {"name": "key", '
                    b'"datatype": "FP32", "shape": [1, %d, 1], "data": [' % n +
                    b",".join([b"0"] * n) + b']}, {"name": "value", '
                    b'"datatype": "FP16", "shape": [1, %d, 1], "data": ' % n +
                    data + b'}], "outputs": [{"name": "output"}]}')
            before = cpu_s(pid)
            status, ans = self.post("/v2/models/attention/infer", body)
            spent[what] = cpu_s(pid) - before
            print("\n%s FP16 values: %d, %.2f s of CPU for %d bytes"
                  % (what, status, spent[what], len(body)))
            self.assertEqual(status, 200, ans)
            # every value the same: the output is that value, the decimal
            # rounded once (1 + 2^-10 above the midpoint, 1.1005859375 else)
            want = 1.0009765625 if what == "midpoint" else 1.1005859375
            self.assertAlmostEqual(ans["outputs"][0]["data"][0], want,
                                   delta=2e-4)
        self.assertLessEqual(spent["midpoint"], 4 * spent["plain"] + 0.1)
        self.assert_serving()

    def test_a_syntax_error_among_the_numbers_is_found(self):
        # among the numbers, which the first pass only scans for their end:
        # numscan's reader finds it, and the message is the check's
        body = bytearray(bodies()["v1 valid"])
        at = len(body) - 1000
        at = body.index(b",", at)
        body[at] = ord(b" ")
        status, ans = self.post("/v1/attention", bytes(body))
        print("\none byte wrong among %d: %d %s" % (len(body), status,
                                                    ans["error"]))
        self.assertEqual(status, 400, ans)
        self.assertEqual(ans["error"], "body is not valid JSON at byte %d: "
                         "expected ',' or ']', got '1'" % (at + 1))
        self.assert_within_budget("a syntax error among the numbers")
        self.assert_serving()

    def test_valid_json_the_fast_reader_does_not_take(self):
        big = b",".join([b"1"] * 30000000)
        cases = [
            # thirty million numbers where a string belongs
            ("a huge id", b'{"query": [[[1]]], "key": [[[1]]], "value": '
             b'[[[1]]], "id": [' + big + b"]}", "id"),
            # a string after thirty million numbers of a tensor
            ("a string in a tensor", b'{"query": [[[1]]], "key": [[[1]]], '
             b'"value": [[[' + big + b',"x"]]]}', "value"),
            ("a top-level array", b"[" + big + b"]", "got an array"),
        ]
        for what, body, named in cases:
            status, ans = self.post("/v1/attention", body)
            print("\n%s (%d bytes): %d %s" % (what, len(body), status,
                                               ans["error"]))
            self.assertIn(status, (400, 413, 503), ans)
            if status == 400:
                self.assertIn(named, ans["error"])
            else:
                self.assertIn("--max-inflight-mb", ans["error"])
            self.assert_within_budget(what)
        self.assert_serving()

    def test_bodies_without_tensors_are_answered_at_any_size(self):
        # nothing for the fast reader to shorten: its copy is as long as
        # the body, the case that once spun an HTTP thread forever
        for path, named in (("/v1/attention", "query"),
                            ("/v2/models/attention/infer", "inputs")):
            for n in (4090, 5000, 100000):
                body = json.dumps({"id": "x" * n}).encode()
                status, _, data = self.srv.request(
                    "POST", path, body,
                    {"Content-Type": "application/json"}, timeout=60)
                ans = json.loads(data)
                self.assertEqual(status, 400, ans)
                self.assertIn(named, ans["error"])
        self.assert_serving()

    def test_nesting_deeper_than_the_limit_names_it(self):
        # the object is the first level, "id" holds the others
        head = b'{"query": [[[1]]], "key": [[[1]]], "value": [[[1]]], "id": '
        for depth in (1000, 1001):
            body = head + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
            status, ans = self.post("/v1/attention", body)
            self.assertEqual(status, 400, ans)
            if depth == 1000:
                self.assertTrue(ans["error"].startswith("id: "), ans)
            else:
                self.assertEqual(ans["error"], "body is nested 1001 levels "
                                 "deep at byte %d; the limit is 1000 levels"
                                 % (len(head) + 999))
        self.assert_serving()

    def test_a_gzip_body_inflates_inside_the_budget(self):
        body = bodies()["v1 invalid"]
        packed = gzip.compress(body, 1)
        status, ans = self.post("/v1/attention", packed,
                                {"Content-Encoding": "gzip"})
        print("\ngzip, %d bytes inflating to %d: %d %s"
              % (len(packed), len(body), status, ans["error"]))
        self.assert_answer("v1 invalid", status, ans)
        self.assert_within_budget("a gzip body")
        self.assert_serving()


if __name__ == "__main__":
    harness.main()
