"""Work stops when no one waits for it.

Runs the real build/attnd.  A v2 binary request of q, k, v shaped
(1, 1, N, 1), output only, keeps attnd's workers busy for seconds.  Its
client closes the connection mid-compute, over TCP, TLS and the Unix
socket, and with its tensors in shared memory, or half-closes it, or its deadline (the v2 "timeout" parameter) passes mid-compute:
attnd's CPU time, read from /proc, must fall to idle within a second, the
client that waited must get 504 for a deadline, one that half-closed and
still reads 499, the access log must say 499 for a client that left, and
attnd_cancelled_total must count each.  A
request queued behind a busy worker whose client leaves is never computed,
and gives its queue place and budget back at once: a full queue whose
clients left admits the next request.  A request taken in a batch behind
one still computing is dropped as soon as its client leaves, and hears its
504 at its deadline.  The same holds for a request run on its HTTP
thread (--inline-idle-us) and for one with diagnostics; the largest v2
timeout is a deadline like any other.
The server keeps answering everyone else throughout.  (The request costs
more than --max-request-gflop admits by default, which is the other way
attnd bounds work: these servers run with the limit off.)
"""

import json
import os
import re
import shutil
import socket
import ssl
import struct
import tempfile
import time
import unittest

import harness
from test_limits import read_answer
from test_security import make_cert

SLOW = 10 if harness.VALGRIND else 1
N = 60000 // (4 if harness.VALGRIND else 1)   # seconds of work for 2 workers
SMALL = (b'{"query": [[[1, 0]]], "key": [[[1, 1], [2, 0]]], '
         b'"value": [[[1, 0], [0, 1]]]}')


def long_request(n=N, params=None):
    """(headers, body) of the v2 binary request of shape (1, 1, n, 1)."""
    raw = struct.pack("<%df" % n, *[0.5] * n)
    header = {"inputs": [{"name": name, "datatype": "FP32", "shape": [1, 1, n, 1],
                          "parameters": {"binary_data_size": 4 * n}}
                         for name in ("query", "key", "value")],
              "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
    if params:
        header["parameters"] = params
    head = json.dumps(header).encode()
    body = head + raw * 3
    return ("POST /v2/models/attention/infer HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/octet-stream\r\n"
            "Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
            % (len(head), len(body))).encode() + body


def cpu_seconds(pid):
    """attnd's user and system CPU time so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_over(pid, seconds):
    c0 = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - c0


def wait_busy(pid, cpu=0.2, timeout=20):
    """Waits until attnd has used cpu seconds since the call (its workers
    compute; a loaded machine gives them less time); False if it never
    did within timeout."""
    c0 = cpu_seconds(pid)
    return harness.wait_for(lambda: cpu_seconds(pid) - c0 >= cpu, timeout, 0.02)


def cancelled(srv, reason):
    return int(srv.metric('attnd_cancelled_total{reason="%s"}' % reason))


class Cases:
    """The checks, over whatever connect() opens (a socket to attnd)."""

    def connect(self):
        raise NotImplementedError

    def assert_small_answered(self):
        status, _, body = self.srv.request("POST", "/v1/attention", SMALL)
        self.assertEqual(status, 200, body)

    def assert_busy_then_idle(self, leave):
        """Sends the long request, checks attnd computes, calls leave(s)
        and checks attnd's CPU falls to idle."""
        pid = self.srv.proc.pid
        s = self.connect()
        try:
            s.sendall(long_request())
            self.assert_stops(pid, lambda: leave(s))
        finally:
            s.close()

    def assert_stops(self, pid, leave):
        """attnd computes; after leave(), its CPU falls to idle: less than
        half what it used while computing, over a second (on a loaded
        machine both are less), and less than 0.25 s."""
        self.assertTrue(wait_busy(pid, timeout=20 * SLOW), "attnd is not computing")
        busy = cpu_over(pid, 0.5 * SLOW) * 2
        leave()
        time.sleep(0.2 * SLOW)   # within about 100 ms on each worker
        idle = cpu_over(pid, 1.0 * SLOW)
        print("%s: %.2f CPU-seconds in a second while computing, %.2f in the second "
              "after the client left" % (type(self).__name__, busy, idle))
        self.assertLess(idle, max(0.05, min(0.25, busy / 2)) * SLOW,
                        "attnd used %.2f CPU-seconds in the second after, %.2f in one "
                        "while computing" % (idle, busy))

    def test_a_client_that_leaves_mid_compute_stops_its_work(self):
        before = cancelled(self.srv, "disconnect")
        self.assert_busy_then_idle(lambda s: s.close())
        self.assertTrue(harness.wait_for(
            lambda: cancelled(self.srv, "disconnect") == before + 1, 10 * SLOW))
        self.assertTrue(harness.wait_for(
            lambda: re.search(r" POST /v2/models/attention/infer 499 ",
                              "".join(self.srv.log)), 10 * SLOW),
                        "no access-log line with 499")
        self.assert_small_answered()


class TcpCancelTest(Cases, harness.ServerTestCase):
    server_args = ("--workers", "2", "--inline-idle-us", "0", "--max-request-gflop", "0", "--max-body-mb", "8")

    def connect(self):
        return socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)

    def test_a_deadline_mid_compute_answers_504_and_stops_the_work(self):
        before = cancelled(self.srv, "deadline")
        pid = self.srv.proc.pid
        s = self.connect()
        try:
            t0 = time.time()
            s.sendall(long_request(params={"timeout": 500000}))   # 0.5 s
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = s.recv(4096)
                self.assertTrue(chunk, "closed without an answer")
                answer += chunk
            took = time.time() - t0
            self.assertTrue(answer.startswith(b"HTTP/1.1 504 "), answer[:200])
            self.assertLess(took, 3 * SLOW, "the 504 took %.2f s" % took)
            idle = cpu_over(pid, 1.0 * SLOW)
            self.assertLess(idle, 0.25 * SLOW, "attnd still used %.2f CPU-seconds" % idle)
        finally:
            s.close()
        self.assertEqual(cancelled(self.srv, "deadline"), before + 1)
        self.assert_small_answered()

    def test_a_half_close_counts_as_leaving_and_a_reader_hears_499(self):
        # shutdown(SHUT_WR) is a FIN like close(): the work stops, and a
        # client still reading gets nginx's 499 with the message, then EOF
        before = cancelled(self.srv, "disconnect")
        s = self.connect()
        try:
            s.sendall(long_request())
            self.assert_stops(self.srv.proc.pid, lambda: s.shutdown(socket.SHUT_WR))
            status, hdrs, body = read_answer(s)
            self.assertEqual(status, 499, body)
            self.assertEqual(hdrs.get("connection"), "close")
            self.assertEqual(json.loads(body),
                             {"error": "stopped: the client closed the connection"})
            self.assertEqual(s.recv(1), b"")
        finally:
            s.close()
        self.assertEqual(cancelled(self.srv, "disconnect"), before + 1)
        self.assert_small_answered()

    def test_a_reset_counts_as_leaving(self):
        def reset(s):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        before = cancelled(self.srv, "disconnect")
        self.assert_busy_then_idle(reset)
        self.assertTrue(harness.wait_for(
            lambda: cancelled(self.srv, "disconnect") == before + 1, 10 * SLOW))


class InDirectory:
    """A server per class, with files in a directory of its own."""

    @classmethod
    def tearDownClass(cls):
        code = cls.srv.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        if code != 0:
            raise AssertionError("attnd exited %d" % code)


class UnixCancelTest(Cases, InDirectory, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="attnd-cancel-")
        cls.path = os.path.join(cls.dir, "attnd.sock")
        cls.srv = harness.Attnd(["--workers", "2", "--inline-idle-us", "0", "--max-request-gflop", "0",
                                 "--max-body-mb", "8", "--unix-socket", cls.path])

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60 * SLOW)
        s.connect(self.path)
        return s


class TlsCancelTest(Cases, InDirectory, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("openssl"):
            raise AssertionError("openssl is missing: make deps")
        cls.dir = tempfile.mkdtemp(prefix="attnd-cancel-tls-")
        cls.cert, cls.key = make_cert(cls.dir)
        cls.srv = harness.Attnd(["--workers", "2", "--inline-idle-us", "0", "--max-request-gflop", "0",
                                 "--max-body-mb", "8", "--tls-cert", cls.cert,
                                 "--tls-key", cls.key])
        cls.ctx = ssl.create_default_context(cafile=cls.cert)

    def connect(self):
        raw = socket.create_connection(("127.0.0.1", self.srv.port), timeout=60 * SLOW)
        return self.ctx.wrap_socket(raw, server_hostname="127.0.0.1")

    def assert_small_answered(self):
        import http.client
        conn = http.client.HTTPSConnection("127.0.0.1", self.srv.port, context=self.ctx,
                                           timeout=60)
        try:
            conn.request("POST", "/v1/attention", SMALL)
            self.assertEqual(conn.getresponse().status, 200)
        finally:
            conn.close()

    def test_a_client_that_leaves_mid_compute_stops_its_work(self):
        # /metrics and the access log as over TCP, through HTTPS
        before = self.metric()
        self.assert_busy_then_idle(lambda s: s.close())
        self.assertTrue(harness.wait_for(lambda: self.metric() == before + 1, 10 * SLOW))
        self.assert_small_answered()

    def metric(self):
        import http.client
        conn = http.client.HTTPSConnection("127.0.0.1", self.srv.port, context=self.ctx,
                                           timeout=60)
        try:
            conn.request("GET", "/metrics")
            body = conn.getresponse().read().decode()
        finally:
            conn.close()
        return int(re.search(r'^attnd_cancelled_total\{reason="disconnect"\} (\d+)$',
                             body, re.M).group(1))


class ShmCancelTest(Cases, harness.ServerTestCase):
    """q, k and v in a shared memory region the client registered."""
    server_args = ("--workers", "2", "--inline-idle-us", "0", "--max-request-gflop", "0", "--allow-client-shm", "1")

    def setUp(self):
        from multiprocessing import shared_memory
        self.shm = shared_memory.SharedMemory(create=True, size=12 * N)
        self.shm.buf[:12 * N] = struct.pack("<%df" % (3 * N), *[0.5] * (3 * N))
        body = json.dumps({"key": "/" + self.shm.name, "offset": 0,
                           "byte_size": 12 * N}).encode()
        status, _, data = self.srv.request(
            "POST", "/v2/systemsharedmemory/region/qkv/register", body)
        self.assertEqual(status, 200, data)

    def tearDown(self):
        self.srv.request("POST", "/v2/systemsharedmemory/unregister", b"")
        self.shm.close()
        self.shm.unlink()

    def connect(self):
        return socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)

    def assert_busy_then_idle(self, leave):
        """As Cases', with the request's tensors in the region."""
        header = {"inputs": [{"name": name, "datatype": "FP32", "shape": [1, 1, N, 1],
                              "parameters": {"shared_memory_region": "qkv",
                                             "shared_memory_offset": 4 * N * i,
                                             "shared_memory_byte_size": 4 * N}}
                             for i, name in enumerate(("query", "key", "value"))],
                  "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
        body = json.dumps(header).encode()
        request = ("POST /v2/models/attention/infer HTTP/1.1\r\nHost: x\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % len(body)).encode() + body
        pid = self.srv.proc.pid
        s = self.connect()
        try:
            s.sendall(request)
            self.assert_stops(pid, lambda: leave(s))
        finally:
            s.close()


class QueuedCancelTest(harness.ServerTestCase):
    # One worker: the second long request waits in the queue.
    server_args = ("--workers", "1", "--inline-idle-us", "0", "--max-request-gflop", "0", "--max-body-mb", "8")

    def test_a_queued_request_whose_client_left_is_never_computed(self):
        pid = self.srv.proc.pid
        before = cancelled(self.srv, "disconnect")
        a = socket.create_connection((self.srv.host, self.srv.port), timeout=120 * SLOW)
        b = socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)
        try:
            a.sendall(long_request(N // 2))      # about a second on one worker
            time.sleep(0.2 * SLOW)
            b.sendall(long_request(N // 2))      # queued behind it
            time.sleep(0.2 * SLOW)
            b.close()                            # leaves while queued
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = a.recv(65536)
                self.assertTrue(chunk, "closed without an answer")
                answer += chunk
            self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer[:200])
            idle = cpu_over(pid, 1.0 * SLOW)
            self.assertLess(idle, 0.25 * SLOW,
                            "attnd computed %.2f CPU-seconds after the first answer" % idle)
        finally:
            a.close()
            b.close()
        self.assertTrue(harness.wait_for(
            lambda: cancelled(self.srv, "disconnect") == before + 1, 10 * SLOW))


class InlineCancelTest(Cases, harness.ServerTestCase):
    """A long request run on its HTTP thread (alone on the server, under
    --inline-idle-us) is watched as a queued one is: its client leaving
    stops it."""
    # the request is estimated at several seconds (work_ns), so the bound
    # is far above it
    server_args = ("--workers", "2", "--inline-us", "1", "--inline-idle-us", "60000000",
                   "--max-request-gflop", "0", "--max-body-mb", "8")

    def connect(self):
        return socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)

    def assert_busy_then_idle(self, leave):
        inline = 'attnd_inline_requests_total{reason="idle"}'
        before = self.srv.metric(inline)
        Cases.assert_busy_then_idle(self, leave)
        self.assertTrue(harness.wait_for(lambda: self.srv.metric(inline) == before + 1,
                                         10 * SLOW), "the request did not run inline")


class CheapInlineDeadlineTest(harness.ServerTestCase):
    """A request counted cheap by an --inline-us raised far above its
    default, run on its HTTP thread, is watched however long it runs (only
    requests expected within 100 us, BATCHER_BRIEF_NS, run unwatched): its
    deadline passing mid-compute stops it with a 504 then, not after."""
    server_args = ("--workers", "1", "--inline-us", "1000000", "--inline-idle-us", "0",
                   "--max-request-gflop", "0", "--max-body-mb", "8")

    def test_a_deadline_stops_a_long_cheap_request_run_inline(self):
        # (1, 1, 24000, 1): estimated under a second, so cheap here, and
        # hundreds of milliseconds of compute, past its 100 ms timeout
        cheap = 'attnd_inline_requests_total{reason="cheap"}'
        before = self.srv.metric(cheap)
        late = cancelled(self.srv, "deadline")
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)
        try:
            s.sendall(long_request(24000, {"timeout": 100000}))
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = s.recv(65536)
                self.assertTrue(chunk, "closed without an answer")
                answer += chunk
        finally:
            s.close()
        self.assertTrue(answer.startswith(b"HTTP/1.1 504 "), answer[:200])
        self.assertEqual(self.srv.metric(cheap), before + 1, "the request did not run inline")
        self.assertEqual(cancelled(self.srv, "deadline"), late + 1)


class DiagnosticsCancelTest(harness.ServerTestCase):
    """A request with diagnostics (the weights path, then the diagnostics,
    then the encoding) whose client leaves mid-compute stops.  Additive
    scoring, a tanh per hidden unit per score, makes seconds of work of
    weights that fit in memory."""
    server_args = ("--workers", "2", "--inline-idle-us", "0", "--max-request-gflop", "0",
                   "--max-body-mb", "16")

    def test_a_client_that_leaves_a_diagnostics_request_stops_it(self):
        # Many keys and few rows: a key block of the weights path is then
        # 64 rows by 512 keys by Hd tanh, milliseconds even under the
        # sanitizers, while the request is seconds of work.
        Lq, Lk, D, Hd = (128 if harness.VALGRIND else 512), 65536, 8, 128

        def tensor(name, shape, value):
            n = 1
            for x in shape:
                n *= x
            return name, shape, struct.pack("<%df" % n, *[value] * n)
        ts = [tensor("query", [1, 1, Lq, D], 0.25), tensor("key", [1, 1, Lk, D], 0.25),
              tensor("value", [1, 1, Lk, D], 0.25), tensor("w_q", [Hd, D], 0.01),
              tensor("w_k", [Hd, D], 0.01), tensor("w_v", [Hd], 0.01)]
        header = {"inputs": [{"name": n, "datatype": "FP32", "shape": shape,
                              "parameters": {"binary_data_size": len(raw)}}
                             for n, shape, raw in ts],
                  "outputs": [{"name": n, "parameters": {"binary_data": True}}
                              for n in ("output", "entropy", "jacobian_norm")]}
        head = json.dumps(header).encode()
        body = head + b"".join(raw for _, _, raw in ts)
        request = ("POST /v2/models/additive_attention/infer HTTP/1.1\r\nHost: x\r\n"
                   "Content-Type: application/octet-stream\r\n"
                   "Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                   % (len(head), len(body))).encode() + body
        before = cancelled(self.srv, "disconnect")
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)
        try:
            s.sendall(request)
            Cases.assert_stops(self, self.srv.proc.pid, s.close)
        finally:
            s.close()
        self.assertTrue(harness.wait_for(
            lambda: cancelled(self.srv, "disconnect") == before + 1, 10 * SLOW))
        status, _, body = self.srv.request("POST", "/v1/attention", SMALL)
        self.assertEqual(status, 200, body)


class QueueGiveBackTest(harness.ServerTestCase):
    """Queued requests whose clients leave give their queue places and
    budget back at once, not when a worker would have taken them."""
    server_args = ("--workers", "1", "--max-queue", "2", "--inline-idle-us", "0",
                   "--max-request-gflop", "0", "--max-body-mb", "8")

    def test_a_full_queue_whose_clients_left_admits_at_once(self):
        pid = self.srv.proc.pid
        before = cancelled(self.srv, "disconnect")
        busy = socket.create_connection((self.srv.host, self.srv.port), timeout=120 * SLOW)
        queued = [socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)
                  for _ in range(2)]
        try:
            # holds the one worker for about 10 s, longer than the waits below
            busy.sendall(long_request(2 * N))
            self.assertTrue(wait_busy(pid, timeout=20 * SLOW), "attnd is not computing")
            for q in queued:
                q.sendall(long_request())
            self.assertTrue(harness.wait_for(
                lambda: self.srv.metric("attnd_queue_depth") == 2, 20 * SLOW),
                "the two requests are not queued")
            held = self.srv.metric("attnd_inflight_bytes")
            status, _, _ = self.srv.request("POST", "/v1/attention", SMALL)
            self.assertEqual(status, 503, "the queue is not full")
            for q in queued:
                q.close()
            self.assertTrue(harness.wait_for(
                lambda: cancelled(self.srv, "disconnect") == before + 2, 5 * SLOW),
                "the queued requests were not completed when their clients left")
            print("queue: %d requests queued, %.1f MiB held; after their clients left: "
                  "queue %d, %.1f MiB" % (2, held / 2**20, self.srv.metric("attnd_queue_depth"),
                                          self.srv.metric("attnd_inflight_bytes") / 2**20))
            self.assertEqual(self.srv.metric("attnd_queue_depth"), 0)
            self.assertLess(self.srv.metric("attnd_inflight_bytes"), held * 0.5)
            status, _, body = self.srv.request("POST", "/v1/attention", SMALL)
            self.assertEqual(status, 200, body)
        finally:
            busy.close()
            for q in queued:
                q.close()


class BatchMateTest(harness.ServerTestCase):
    """Two requests of one shape queued behind a busy worker leave together
    as one batch; the second, waiting behind the first, is answered at its
    deadline, or dropped when its client leaves, while the first still
    computes, not when it is done."""
    server_args = ("--workers", "1", "--max-batch", "4", "--inline-idle-us", "0",
                   "--max-request-gflop", "0", "--max-body-mb", "8")

    def connect(self):
        return socket.create_connection((self.srv.host, self.srv.port), timeout=60 * SLOW)

    def batch_behind(self, params):
        """Sends a long request, then two of another shape (the second with
        params) and lets the first go: returns (mate, waiting, sent), the
        sockets of the batch of two and when the second was sent."""
        pid = self.srv.proc.pid
        busy, mate, waiting = self.connect(), self.connect(), self.connect()
        self.socks = [busy, mate, waiting]
        busy.sendall(long_request(3 * N))
        self.assertTrue(wait_busy(pid, timeout=20 * SLOW), "attnd is not computing")
        mate.sendall(long_request(2 * N))     # seconds of work, stopped by tearDown
        sent = time.monotonic()
        waiting.sendall(long_request(2 * N, params=params))
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_queue_depth") == 2, 20 * SLOW),
            "the two requests are not queued")
        busy.close()   # stops; the two leave as one batch, the mate starts
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_queue_depth") == 1, 5 * SLOW),
            "the waiting request is not counted as queued")
        return mate, waiting, sent

    def assert_mate_computing(self, mate):
        mate.setblocking(False)
        try:
            self.assertRaises(BlockingIOError, mate.recv, 1)
        finally:
            mate.setblocking(True)

    def tearDown(self):
        for s in getattr(self, "socks", []):
            s.close()

    def test_a_deadline_in_a_batch_answers_504_on_time(self):
        before = cancelled(self.srv, "deadline")
        mate, waiting, sent = self.batch_behind({"timeout": 1500000})   # 1.5 s
        status, _, body = read_answer(waiting)
        late = time.monotonic() - sent
        print("BatchMateTest: 504 %.2f s after sending, timeout 1.5 s" % late)
        self.assertEqual(status, 504, body[:200])
        self.assertLess(late, 1.5 + 2.0 * SLOW)
        self.assert_mate_computing(mate)
        self.assertEqual(cancelled(self.srv, "deadline"), before + 1)

    def test_a_client_that_leaves_its_batch_is_dropped_at_once(self):
        before = cancelled(self.srv, "disconnect")
        mate, waiting, _ = self.batch_behind(None)
        held = self.srv.metric("attnd_inflight_bytes")
        waiting.close()
        self.assertTrue(harness.wait_for(
            lambda: cancelled(self.srv, "disconnect") == before + 2, 2 * SLOW),
            "dropped only when its batch mate is done")
        self.assert_mate_computing(mate)
        self.assertEqual(self.srv.metric("attnd_queue_depth"), 0)
        self.assertLess(self.srv.metric("attnd_inflight_bytes"), held)


class FarDeadlineTest(harness.ServerTestCase):
    """A v2 timeout of 2^53 - 1 us, the largest, is a deadline the watcher
    waits for without wrapping: the request completes normally."""
    server_args = ("--workers", "1", "--inline-idle-us", "0", "--max-request-gflop", "0",
                   "--max-body-mb", "8")

    def test_the_largest_timeout_completes_normally(self):
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=120 * SLOW)
        try:
            s.sendall(long_request(N // 8, params={"timeout": 2**53 - 1}))
            status, _, body = read_answer(s)
            self.assertEqual(status, 200, body[:200])
        finally:
            s.close()
        self.assertEqual(cancelled(self.srv, "deadline"), 0)


if __name__ == "__main__":
    harness.main()
