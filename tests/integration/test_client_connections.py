"""attnd's Python client (test_client.py installs it): health, readiness and
its connections against the real build/attnd (keep-alive counted by a proxy,
reconnection, no request sent twice), retries (503 with Retry-After, a
refused connection while attnd restarts, none for registration, read
timeouts and 504), a local server closing a kept-alive connection under the
next request, a 4,000-chunk answer, and one async client across asyncio.run()
calls; on AttndClient and again on AsyncAttndClient (test_client.OnAsyncio).
"""

import asyncio
import email.utils
import json
import signal
import socket
import threading
import time
import unittest

import harness
import test_client as tc
from reference import rand_request
from test_client import (Case, OnAsyncio, Proxy, Synced, free_port, rounded, np)


def setUpModule():
    tc.install_client()


# ---- health, readiness and connections ------------------------------------------------

class HealthTest(Case):
    def test_health_helpers(self):
        self.assertTrue(self.c.healthy())
        self.assertTrue(self.c.ready())
        self.assertTrue(self.c.server_live())
        self.assertTrue(self.c.server_ready())
        self.assertTrue(self.c.model_ready("attention"))
        self.assertTrue(self.c.model_ready("additive_attention", version=1))
        with self.assertRaises(tc.AttndError) as cm:
            self.c.model_ready("bert")
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("bert", cm.exception.message)
        self.assertIn("attnd_requests_total", self.c.metrics())
        self.c.wait_ready(timeout=5)

    def test_nothing_listening_raises_connection_error(self):
        dead = self.client("127.0.0.1:%d" % free_port(), timeout=5)
        for call in (dead.ready, dead.healthy, dead.server_ready,
                     lambda: dead.model_ready("attention"),
                     lambda: dead.attention([[[1.0]]], [[[1.0]]], [[[1.0]]])):
            with self.assertRaises(tc.AttndConnectionError) as cm:
                call()
            self.assertIsNone(cm.exception.status)
            self.assertIsInstance(cm.exception, tc.AttndError)
            self.assertIsInstance(cm.exception.__cause__, OSError)
        t0 = time.monotonic()
        with self.assertRaises(tc.AttndConnectionError):
            dead.wait_ready(timeout=0.3)
        self.assertLess(time.monotonic() - t0, 5)

    def test_not_ready_only_while_draining(self):
        # readiness turns 503 at once; the delay keeps the process serving
        delay = "15000" if harness.VALGRIND else "4000"
        with harness.Attnd(["--workers", "1", "--drain-delay-ms", delay]) as srv:
            c = self.client("127.0.0.1:%d" % srv.port)
            self.assertTrue(c.ready())
            srv.proc.send_signal(signal.SIGTERM)
            end = time.time() + 30
            while c.ready() and time.time() < end:
                time.sleep(0.02)
            self.assertFalse(c.ready())
            self.assertFalse(c.server_ready())
            self.assertFalse(c.model_ready("attention"))
            self.assertTrue(c.healthy())
            c.close()
            self.assertEqual(srv.proc.wait(120), 0)

    def test_one_keepalive_connection_per_thread(self):
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url)
            for i in range(10):
                self.assertTrue(c.ready())
                c.attention([[[1.0, float(i)]]], [[[1.0, 1.0]]], [[[2.0]]])
            self.assertEqual(proxy.accepted, 1)

            def work():
                for _ in range(5):
                    c.infer("attention", {"query": [[[1.0]]], "key": [[[1.0]]],
                                          "value": [[[1.0]]]})
            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(proxy.accepted, 5)
            c.close()
        finally:
            proxy.close()

    def test_head_answer_has_no_body_and_keeps_the_connection(self):
        """attnd answers HEAD with the GET's Content-Length and no body: the
        answer ends at its head, and the next call reuses the connection."""
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url, timeout=10, retries=0)
            status, hdrs, body = c.request("HEAD", "/healthz")
            self.assertEqual((status, body), (200, b""))
            self.assertGreater(int(hdrs["Content-Length"]), 0)
            self.assertTrue(c.ready())
            self.assertEqual(proxy.accepted, 1)
            c.close()
        finally:
            proxy.close()

    def test_reconnects_when_the_server_closed_an_idle_connection(self):
        with harness.Attnd(["--workers", "1", "--conn-timeout-s", "1"]) as srv:
            proxy = Proxy(srv.port)
            try:
                c = self.client(proxy.url)
                q, k, v = [[[1.0, 0.0]]], [[[1.0, 0.0]]], [[[2.0]]]
                self.check(c.attention(q, k, v), {"query": q, "key": k, "value": v})
                time.sleep(2.5)  # attnd closes the idle connection after 1 s
                self.check(c.attention(q, k, v), {"query": q, "key": k, "value": v})
                self.assertEqual(proxy.accepted, 2)
                c.close()
            finally:
                proxy.close()
            self.assertEqual(srv.stop(), 0)

    def test_request_sent_on_a_connection_closed_under_it_is_not_resent(self):
        """A POST on a reused connection that attnd's proxy drops is not sent
        again by the transport; the retry policy sends inference again,
        counted in tries."""
        proxy = Proxy(self.srv.port)
        try:
            req = rand_request(27, B=1, Lq=2, Lk=3)
            want = {n: rounded(t, "FP32") for n, t in req.items()}
            c = self.client(proxy.url, retries=0)
            self.check(c.infer("attention", req), want)
            proxy.drop_next = True
            with self.assertRaises(tc.AttndConnectionError) as cm:
                c.infer("attention", req)
            self.assertEqual(cm.exception.tries, 1)
            self.assertEqual(proxy.accepted, 1)
            c.close()
            c = self.client(proxy.url, retries=1)
            self.check(c.infer("attention", req), want)
            proxy.drop_next = True
            self.check(c.infer("attention", req), want)
            self.assertEqual(proxy.accepted, 3)
            c.close()
        finally:
            proxy.close()


class Interrupted(BaseException):
    """What a signal handler raises in the middle of a call (as Ctrl-C's
    KeyboardInterrupt does)."""


class InterruptedCallTest(Case):
    def test_a_call_interrupted_mid_request_leaves_no_half_used_connection(self):
        """A blocking call interrupted while it waits for its answer (Ctrl-C
        in a notebook) closes its connection: the thread's next call opens
        a new one instead of failing on one whose answer is still due."""
        proxy = Proxy(self.srv.port)
        old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(Interrupted()))
        try:
            c = self.client(proxy.url, timeout=10, retries=0)
            self.assertTrue(c.ready())
            proxy.hold = True
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with self.assertRaises(Interrupted):
                c.ready()
            proxy.hold = False
            self.assertTrue(c.ready())
            q, k, v = [[[1.0, 0.0]]], [[[1.0, 0.0]]], [[[2.0]]]
            self.check(c.attention(q, k, v), {"query": q, "key": k, "value": v})
            self.assertEqual(proxy.accepted, 2)
            c.close()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            proxy.close()


class SilentServer:
    """A listening socket that accepts and never answers."""

    def __init__(self):
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.port = self.lsock.getsockname()[1]

    def close(self):
        self.lsock.close()


class RetryTest(Case):
    def setUp(self):
        self.proxy = Proxy(self.srv.port)
        self.addCleanup(self.proxy.close)
        self.req = rand_request(71, B=1, Lq=2, Lk=3)
        self.ref = {n: rounded(t, "FP32") for n, t in self.req.items()}

    def test_503_is_tried_again_after_retry_after(self):
        self.proxy.reject = 2
        c = self.client(self.proxy.url)
        t0 = time.monotonic()
        self.check(c.infer("attention", self.req), self.ref)
        self.assertGreaterEqual(time.monotonic() - t0, 0.4)  # two Retry-After: 0.2
        self.assertEqual(self.proxy.accepted, 3)
        self.proxy.reject = 1
        self.check(c.attention(self.req["query"], self.req["key"], self.req["value"]),
                   self.req)
        self.assertTrue(c.ready())
        c.close()

    def test_retry_after_as_a_date_or_unreadable(self):
        """Retry-After as an HTTP-date (RFC 9110, as some load balancers
        send it) is waited for; one that is not a finite number of seconds
        or a date (a proxy's "nan") is not, and the backoff is used."""
        for value, want in (("nan", None), ("inf", None), ("-3", 0.0), ("soon", None)):
            self.proxy.retry_after = value
            self.proxy.reject = 1
            c = self.client(self.proxy.url, backoff=0.01, retries=0)
            with self.assertRaises(tc.AttndError) as cm:
                c.infer("attention", self.req)
            self.assertEqual((cm.exception.status, cm.exception.retry_after), (503, want))
            self.proxy.reject = 1
            c = self.client(self.proxy.url, backoff=0.01)
            self.check(c.infer("attention", self.req), self.ref)
            c.close()
        self.proxy.retry_after = email.utils.formatdate(time.time() + 2.5, usegmt=True)
        self.proxy.reject = 1
        c = self.client(self.proxy.url)
        t0 = time.monotonic()
        self.check(c.infer("attention", self.req), self.ref)
        self.assertGreaterEqual(time.monotonic() - t0, 1.0)  # the date is to the second
        c.close()

    def test_429_over_max_conns_per_ip_is_tried_again(self):
        """attnd answers a connection over --max-conns-per-ip with 429 and
        Retry-After before it reads a request: inference and reads are
        sent again after the wait (once another connection has closed,
        served); registration is not."""
        with harness.Attnd(["--workers", "1", "--max-conns-per-ip", "1"]) as srv:
            url = "127.0.0.1:%d" % srv.port
            held = srv.connection()  # answered once: attnd counts it
            held.request("GET", "/healthz")
            self.assertEqual(held.getresponse().status, 200)
            c = self.client(url, retries=0)
            with self.assertRaises(tc.AttndError) as cm:
                c.infer("attention", self.req)
            self.assertEqual((cm.exception.status, cm.exception.retry_after,
                              cm.exception.tries), (429, 1.0, 1))
            self.assertIn("--max-conns-per-ip", cm.exception.message)
            c.close()
            c = self.client(url)
            with self.assertRaises(tc.AttndError) as cm:
                c.register_system_shared_memory("r", "/attnd-client-test-429", 64)
            self.assertEqual((cm.exception.status, cm.exception.tries), (429, 1))
            threading.Timer(0.3, held.close).start()
            self.check(c.infer("attention", self.req), self.ref)
            c.close()
            self.assertEqual(srv.stop(), 0)

    def test_waits_are_spread_out_after_the_same_retry_after(self):
        """Clients turned away with the same Retry-After (attnd sends 1)
        wait no less than it and at most a quarter more, not all alike;
        the backoff without one spreads over half to all of it.  (The
        policy is the base class's, the same for both clients.)"""
        c = tc.attnd_client.AttndClient(self.proxy.url, backoff=0.1, max_backoff=10)
        call = c._probe_call("/readyz")
        busy = tc.attnd_client.AttndError(503, "busy", 1.0)
        waits = [c._retry_wait(call, busy, 1, 2, None) for _ in range(200)]
        self.assertGreaterEqual(min(waits), 1.0)
        self.assertLessEqual(max(waits), 1.25)
        self.assertGreater(max(waits) - min(waits), 0.1)
        gone = tc.attnd_client.AttndConnectionError("reset", before_answer=True)
        waits = [c._retry_wait(call, gone, 2, 2, None) for _ in range(200)]
        self.assertGreaterEqual(min(waits), 0.1)
        self.assertLessEqual(max(waits), 0.2)
        self.assertGreater(max(waits) - min(waits), 0.05)
        c.close()

    def test_tries_run_out_and_the_error_says_how_many(self):
        self.proxy.reject = 100
        for retries, tries in ((2, 3), (0, 1), (4, 5)):
            c = self.client(self.proxy.url, retries=retries, max_backoff=0.05)
            before = self.proxy.accepted
            with self.assertRaises(tc.AttndError) as cm:
                c.attention(self.req["query"], self.req["key"], self.req["value"])
            e = cm.exception
            self.assertEqual((e.status, e.tries, e.retry_after), (503, tries, 0.2))
            self.assertEqual(e.message, "queue full: try again later")
            if tries > 1:
                self.assertTrue(str(e).endswith("(after %d tries)" % tries), str(e))
            self.assertEqual(self.proxy.accepted - before, tries)
            c.close()
        self.assertEqual(tc.attnd_client.DEFAULT_RETRIES, 2)

    def test_a_wait_past_the_timeout_is_not_made(self):
        self.proxy.reject = 100
        self.proxy.retry_after = "30"
        c = self.client(self.proxy.url, timeout=1.0, retries=5, max_backoff=10)
        t0 = time.monotonic()
        with self.assertRaises(tc.AttndError) as cm:
            c.infer("attention", self.req)
        self.assertEqual((cm.exception.status, cm.exception.tries), (503, 1))
        self.assertLess(time.monotonic() - t0, 1.0)
        # capped by max_backoff, within the timeout: waited, tried again
        c = self.client(self.proxy.url, timeout=5.0, retries=1, max_backoff=0.3)
        t0 = time.monotonic()
        with self.assertRaises(tc.AttndError) as cm:
            c.infer("attention", self.req)
        self.assertEqual(cm.exception.tries, 2)
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)

    def test_connection_refused_while_attnd_restarts(self):
        port = free_port()
        started = []

        def start():
            time.sleep(0.4)
            started.append(harness.Attnd(["--workers", "1", "--port", str(port)]))
        th = threading.Thread(target=start)
        th.start()
        try:
            c = self.client("127.0.0.1:%d" % port, retries=8, backoff=0.1, max_backoff=0.5)
            self.check(c.attention(self.req["query"], self.req["key"], self.req["value"]),
                       self.req)
            c.close()
        finally:
            th.join(60)
            for srv in started:
                self.assertEqual(srv.stop(), 0)
        c = self.client("127.0.0.1:%d" % free_port(), retries=0)
        with self.assertRaises(tc.AttndConnectionError) as cm:
            c.healthy()
        self.assertEqual(cm.exception.tries, 1)

    def test_shared_memory_registration_is_not_retried_inference_is(self):
        self.proxy.drop_all = True
        c = self.client(self.proxy.url, backoff=0.01)
        for call in (lambda: c.register_system_shared_memory("r", "/attnd_none", 4096),
                     lambda: c.unregister_system_shared_memory("r")):
            before = self.proxy.accepted
            with self.assertRaises(tc.AttndConnectionError) as cm:
                call()
            self.assertEqual(cm.exception.tries, 1)
            self.assertEqual(self.proxy.accepted - before, 1)
        before = self.proxy.accepted
        with self.assertRaises(tc.AttndConnectionError) as cm:
            c.infer("attention", self.req)
        self.assertEqual(cm.exception.tries, 3)
        self.assertEqual(self.proxy.accepted - before, 3)
        c.close()

    def test_read_timeouts_and_504_are_not_retried(self):
        silent = SilentServer()
        self.addCleanup(silent.close)
        c = self.client("127.0.0.1:%d" % silent.port, timeout=0.5)
        t0 = time.monotonic()
        with self.assertRaises(tc.AttndConnectionError) as cm:
            c.infer("attention", self.req)
        self.assertEqual(cm.exception.tries, 1)
        self.assertLess(time.monotonic() - t0, 3)
        with self.assertRaises(tc.AttndError) as cm:
            self.c.infer("attention", self.req, timeout_us=1)
        self.assertEqual((cm.exception.status, cm.exception.tries), (504, 1))


class AsyncHealthTest(OnAsyncio, HealthTest):
    def test_one_keepalive_connection_per_thread(self):
        """One pool: calls one after another reuse one connection, and
        concurrent calls open one each, kept for later."""
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url)
            for i in range(10):
                self.assertTrue(c.ready())
                c.attention([[[1.0, float(i)]]], [[[1.0, 1.0]]], [[[2.0]]])
            self.assertEqual(proxy.accepted, 1)

            async def four():
                one = {"query": [[[1.0]]], "key": [[[1.0]]], "value": [[[1.0]]]}
                return await asyncio.gather(*[c.ac.infer("attention", one)
                                              for _ in range(4)])
            self.loop.run_until_complete(four())
            self.assertEqual(proxy.accepted, 4)
            self.loop.run_until_complete(four())
            self.assertEqual(proxy.accepted, 4)
            c.close()
        finally:
            proxy.close()

    def test_many_concurrent_calls_share_a_bounded_number_of_connections(self):
        """A gather() of many calls has at most max_connections (64 by
        default) connections in use, the rest waiting for one: so many
        calls do not run the process out of descriptors, nor past attnd's
        --max-conns-per-ip, which refuses the connections over it (with a
        429, or closing them).  Over 80: the 64 in use and up to POOL_SIZE
        (16) idle; without the bound, one connection per call."""
        one = {"query": [[[1.0]]], "key": [[[1.0]]], "value": [[[2.0]]]}

        async def many(ac, n):
            return await asyncio.gather(*[ac.infer("attention", one, outputs=["output"])
                                          for _ in range(n)])
        for per_ip, n, kw in ((80, 2000, {}), (6, 300, {"max_connections": 6, "retries": 0})):
            with harness.Attnd(["--workers", "1", "--max-conns-per-ip", str(per_ip)]) as srv:
                c = self.client("127.0.0.1:%d" % srv.port, **kw)
                res = self.loop.run_until_complete(many(c.ac, n))
                self.assertEqual([r["output"].tolist() for r in res], [[[[2.0]]]] * n)
                c.close()
                self.assertEqual(srv.stop(), 0)
        self.assertEqual(tc.attnd_client._async.MAX_CONNECTIONS, 64)
        # a call that finds every connection busy past its timeout gives
        # up, and takes no connection with it
        silent = SilentServer()
        self.addCleanup(silent.close)
        c = self.client("127.0.0.1:%d" % silent.port, max_connections=1, timeout=0.5,
                        retries=0)

        async def two():
            return await asyncio.gather(c.ac.ready(), c.ac.ready(), return_exceptions=True)
        errs = self.loop.run_until_complete(two())
        self.assertTrue(all(isinstance(e, tc.AttndConnectionError) for e in errs), errs)
        self.assertIn("max_connections", str(errs[1]))
        self.assertEqual(c.ac._transport._slots._value, 1)
        c.close()
        with self.assertRaises(ValueError):
            self.client(self.url, max_connections=0)

    def test_cancelling_a_call_closes_its_connection(self):
        """A server that reads the request and never answers (attnd busy
        with it) sees the connection end as soon as the call is
        cancelled; the client then goes on, on a new connection."""
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        self.addCleanup(lsock.close)
        got = {"bytes": 0, "ended": threading.Event()}

        def serve():
            conn, _ = lsock.accept()
            with conn:
                try:
                    while True:
                        data = conn.recv(65536)
                        if not data:
                            break
                        got["bytes"] += len(data)
                except OSError:
                    pass
            got["ended"].set()
        threading.Thread(target=serve, daemon=True).start()
        ac = tc.attnd_client.AsyncAttndClient("127.0.0.1:%d" % lsock.getsockname()[1])
        q = np.ones((1, 4, 256, 64), np.float32)

        async def main():
            task = asyncio.ensure_future(ac.attention(q, q, q, model="attention"))
            while got["bytes"] < 3 * q.nbytes:  # the whole request is in
                await asyncio.sleep(0.01)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertEqual(ac._transport._idle, [])
        self.loop.run_until_complete(asyncio.wait_for(main(), 60))
        self.assertTrue(got["ended"].wait(10), "the connection stayed open")
        self.loop.run_until_complete(ac.aclose())
        # a cancelled call against attnd leaves the client usable
        c = self.client(self.url)

        async def cancel_then_call():
            task = asyncio.ensure_future(c.ac.attention(q, q, q))
            await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            return await c.ac.attention([[[1.0, 0.0]]], [[[1.0, 0.0]]], [[[2.0]]])
        res = self.loop.run_until_complete(cancel_then_call())
        self.assertEqual(res["output"].tolist(), [[[2.0]]])
        c.close()


    def test_aclose_closes_the_connections_of_calls_still_running(self):
        """A call in flight when aclose() runs ends normally, and its
        connection is closed then, not put back in the pool."""
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        self.addCleanup(lsock.close)
        got, go, ended = threading.Event(), threading.Event(), threading.Event()

        def serve():
            conn, _ = lsock.accept()
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                got.set()
                go.wait(30)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                try:
                    while conn.recv(4096):
                        pass
                except OSError:
                    pass
            ended.set()
        threading.Thread(target=serve, daemon=True).start()
        ac = tc.attnd_client.AsyncAttndClient("127.0.0.1:%d" % lsock.getsockname()[1])

        async def main():
            task = asyncio.ensure_future(ac.ready())
            while not got.is_set():
                await asyncio.sleep(0.01)
            await ac.aclose()
            go.set()
            self.assertTrue(await task)
            self.assertEqual(ac._transport._idle, [])
        self.loop.run_until_complete(asyncio.wait_for(main(), 60))
        self.assertTrue(ended.wait(10), "the connection stayed open after aclose()")

    def test_large_tensors_are_encoded_and_decoded_off_the_loop(self):
        """Over OFFLOAD_BYTES, building the request and reading the answer
        run in the executor's threads; small ones on the loop's."""
        ac = tc.attnd_client.AsyncAttndClient(self.url)
        seen = []
        build = ac._attention_call

        def traced_build(*args):
            seen.append(("build", threading.current_thread()))
            call = build(*args)
            parse = call.parse

            def traced_parse(*a):
                seen.append(("parse", threading.current_thread()))
                return parse(*a)
            call.parse = traced_parse
            return call
        ac._attention_call = traced_build
        main = threading.current_thread()
        big = np.ones((1, 8, 512, 64), np.float32)  # 1 MiB a tensor, 8 MiB of weights
        for q, off in (([[[1.0, 0.0]]], False), (big, True)):
            del seen[:]
            res = self.loop.run_until_complete(ac.attention(q, q, q))
            self.assertEqual(res["output"].shape, np.asarray(q).shape)
            self.assertEqual([w for w, _ in seen], ["build", "parse"])
            for what, th in seen:
                self.assertEqual(th is not main, off, (what, th.name))
        self.loop.run_until_complete(ac.aclose())


class AsyncRetryTest(OnAsyncio, RetryTest):
    pass


# ---- a server that closes a kept-alive connection ---------------------------------

class CloseAfterFirst:
    """HTTP/1.1 on a local socket: on each connection it answers the first
    request with `answer` (keep-alive), reads the next one whole and closes
    the connection without answering, as a server closing an idle
    connection just as a request arrives.  got: (method, path) of every
    request read; hosts: their Host headers.  host: the address it listens
    on ("::1" for IPv6)."""

    def __init__(self, answer, host="127.0.0.1"):
        self.answer = answer
        self.got = []
        self.hosts = []
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.lsock = socket.socket(family)
        self.lsock.bind((host, 0))
        self.lsock.listen(8)
        self.port = self.lsock.getsockname()[1]
        self.url = "http://%s:%d" % ("[%s]" % host if ":" in host else host, self.port)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn, conn.makefile("rb") as f:
            for first in (True, False):
                line = f.readline()
                if not line:
                    return
                method, path = line.decode().split()[:2]
                length = 0
                while True:
                    h = f.readline()
                    if h in (b"\r\n", b""):
                        break
                    name, _, v = h.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(v)
                    if name.strip().lower() == "host":
                        self.hosts.append(v.strip())
                f.read(length)
                self.got.append((method, path))
                if first:
                    conn.sendall(self.answer)

    def close(self):
        self.lsock.close()


def json_answer(doc, chunk=None):
    """An HTTP/1.1 200 with doc as JSON, in chunks of chunk bytes when given."""
    body = json.dumps(doc).encode()
    if chunk is None:
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)) + body
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + chunk]), body[i:i + chunk])
             for i in range(0, len(body), chunk)]
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(parts) + b"0\r\n\r\n")


class ResendTest(unittest.TestCase):
    """Only what is safe twice goes again on a new connection: a GET;
    never shared memory registration, and inference only by the retry
    policy (counted in tries)."""

    kind = staticmethod(lambda *a, **kw: tc.AttndClient(*a, **kw))
    META = {"name": "attnd", "version": "0", "extensions": []}

    def test_closed_under_a_request(self):
        srv = CloseAfterFirst(json_answer(self.META))
        self.addCleanup(srv.close)
        c = self.kind(srv.url, retries=0)
        self.assertEqual(c.server_metadata(), self.META)
        with self.assertRaises(tc.AttndConnectionError) as cm:
            c.register_system_shared_memory("r", "/attnd-test", 4096)
        self.assertEqual(cm.exception.tries, 1)
        self.assertEqual([m for m, _ in srv.got], ["GET", "POST"])
        del srv.got[:]
        self.assertEqual(c.server_metadata(), self.META)  # a new connection
        self.assertEqual(c.server_metadata(), self.META)  # closed under it, sent again
        self.assertEqual(srv.got, [("GET", "/v2")] * 3)
        del srv.got[:]
        with self.assertRaises(tc.AttndConnectionError):
            c.infer("attention", {"query": [[[1.0]]], "key": [[[1.0]]], "value": [[[1.0]]]})
        self.assertEqual([m for m, _ in srv.got], ["POST"])
        c.close()

    def test_many_chunk_answer(self):
        doc = dict(self.META, extensions=["x%05d" % i for i in range(4000)])
        srv = CloseAfterFirst(json_answer(doc, chunk=7))
        self.addCleanup(srv.close)
        c = self.kind(srv.url)
        self.assertEqual(c.server_metadata(), doc)
        c.close()


    def test_an_ipv6_address_is_bracketed_in_the_host_header(self):
        """Host names an IPv6 literal in brackets (RFC 3986), as proxies in
        front of attnd require: [::1]:port, not ::1:port."""
        try:
            srv = CloseAfterFirst(json_answer(self.META), host="::1")
        except OSError as e:
            self.skipTest("no IPv6 loopback: %s" % e)
        self.addCleanup(srv.close)
        c = self.kind(srv.url)
        self.assertEqual(c.server_metadata(), self.META)
        self.assertEqual(srv.hosts, ["[::1]:%d" % srv.port])
        c.close()

    def test_an_answer_that_is_not_attnds_raises_attnd_error(self):
        """A 200 whose body is not the answer (a web page from whatever
        listens at the URL, a proxy's login page) raises AttndError with
        the status and the body, from every kind of call."""
        page = b"<html><body>Welcome to nginx!</body></html>"
        answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(page), page))
        srv = CloseAfterFirst(answer)
        self.addCleanup(srv.close)
        one = [[[1.0]]]
        calls = (lambda c: c.server_metadata(), lambda c: c.model_statistics(),
                 lambda c: c.get_system_shared_memory_status(),
                 lambda c: c.infer("attention", {"query": one, "key": one, "value": one}),
                 lambda c: c.infer("attention", {"query": one, "key": one, "value": one},
                                   binary=False),
                 lambda c: c.attention(one, one, one, model="attention"),
                 lambda c: c.attention(one, one, one, binary=False))
        for n, call in enumerate(calls):
            c = self.kind(srv.url, retries=0)
            with self.assertRaises(tc.AttndError, msg=n) as cm:
                call(c)
            self.assertEqual((cm.exception.status, cm.exception.body), (200, page), n)
            self.assertIn("not attnd's", cm.exception.message)
            c.close()


class AsyncResendTest(ResendTest):
    def setUp(self):
        self.loop = asyncio.new_event_loop()
        self.addCleanup(self.loop.close)
        self.kind = lambda *a, **kw: Synced(tc.attnd_client.AsyncAttndClient(*a, **kw), self.loop)


class EventLoopsTest(Case):
    server_args = ("--workers", "1")

    def test_one_client_across_two_asyncio_runs(self):
        req = rand_request(454, B=1, Lq=3, Lk=4)
        ac = tc.attnd_client.AsyncAttndClient(self.url)

        async def work():
            r = await ac.attention(req["query"], req["key"], req["value"])
            r2 = await ac.infer("attention", req)
            return r, r2
        for _ in range(3):
            r, r2 = asyncio.run(work())
            self.check(r, req)
            self.check(r2, {n: rounded(t, "FP32") for n, t in req.items()})
        asyncio.run(ac.aclose())


if __name__ == "__main__":
    tc.run_under_capable_python(__file__)
    harness.main()
