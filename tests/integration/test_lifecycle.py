"""attnd's process lifecycle: configuration, startup, drain and exit.

Runs the real build/attnd.  SIGTERM while requests are in flight must
answer every started request (200, or 503 once draining) and exit 0,
also under keep-alive load, and cancel with 503 what outlasts --drain-s;
readiness turns 503 at once; a second signal
exits at once; bad
configuration exits 2 with a message naming the flag or variable.
"""

import json
import os
import random
import http.client
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import harness

VALGRIND = harness.VALGRIND
SLOW = 10 if VALGRIND else 1


def run_attnd(args, env=None, timeout=60):
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run([harness.BINARY] + list(args), capture_output=True,
                       env=full_env, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def heavy_body(seed, L=128):
    rng = random.Random(seed)

    def t(B, L_, D):
        return [[[rng.uniform(-1, 1) for _ in range(D)] for _ in range(L_)] for _ in range(B)]
    return json.dumps({"query": t(2, L, 4), "key": t(2, L, 4), "value": t(2, L, 4),
                       "return_weights": True}).encode()


wait_for = harness.wait_for


class ConfigTest(unittest.TestCase):
    def test_help_lists_every_flag_with_default_and_env(self):
        code, out, _ = run_attnd(["--help"])
        self.assertEqual(code, 0)
        for flag, env in [("--host", "ATTND_HOST"), ("--port", "ATTND_PORT"),
                          ("--workers", "ATTND_WORKERS"), ("--max-batch", "ATTND_MAX_BATCH"),
                          ("--max-delay-us", "ATTND_MAX_DELAY_US"),
                          ("--max-queue", "ATTND_MAX_QUEUE"),
                          ("--max-inflight-mb", "ATTND_MAX_INFLIGHT_MB"),
                          ("--max-body-mb", "ATTND_MAX_BODY_MB"),
                          ("--timeout-ms", "ATTND_TIMEOUT_MS"),
                          ("--drain-delay-ms", "ATTND_DRAIN_DELAY_MS"),
                          ("--drain-s", "ATTND_DRAIN_S"), ("--max-conns", "ATTND_MAX_CONNS"),
                          ("--conn-memory-kb", "ATTND_CONN_MEMORY_KB"),
                          ("--conn-timeout-s", "ATTND_CONN_TIMEOUT_S"), ("--log", "ATTND_LOG")]:
            self.assertIn(flag, out)
            self.assertIn(env, out)
        self.assertIn("default 8000", out)

    def test_help_lines_fit_in_100_columns(self):
        code, out, _ = run_attnd(["--help"])
        self.assertEqual(code, 0)
        long = [l for l in out.splitlines() if len(l) > 100]
        self.assertEqual(long, [])
        self.assertIn("--unix-socket PATH", out)
        self.assertIn("env ATTND_UNIX_SOCKET_MODE", out)

    def test_one_http_thread_starts_without_an_error_line(self):
        # libmicrohttpd warns when given a thread pool of 1
        with harness.Attnd(["--http-threads", "1", "--workers", "1"]) as srv:
            self.assertEqual(srv.get("/healthz")[0], 200)
            self.assertEqual(srv.stop(), 0)
        log = "".join(srv.log)
        self.assertNotIn("error", log)
        self.assertNotIn("Warning", log)

    def test_help_lines_fit_100_columns(self):
        code, out, _ = run_attnd(["--help"])
        self.assertEqual(code, 0)
        for line in out.splitlines():
            self.assertLessEqual(len(line), 100, line)
        for flag, env in (("--allow-client-shm", "ATTND_ALLOW_CLIENT_SHM"),
                          ("--shm-max-regions", "ATTND_SHM_MAX_REGIONS"),
                          ("--shm-max-mb", "ATTND_SHM_MAX_MB")):
            self.assertIn(flag, out)
            self.assertIn(env, out)

    def test_version_prints_and_exits_0(self):
        code, out, _ = run_attnd(["--version"])
        self.assertEqual(code, 0)
        self.assertRegex(out, r"^attnd \d+\.\d+")

    def test_bad_flag_value_exits_2_naming_the_flag(self):
        for args, name in [(["--workers", "0"], "--workers"),
                           (["--port", "70000"], "--port"),
                           (["--max-batch", "12x"], "--max-batch"),
                           (["--conn-memory-kb", "16"], "--conn-memory-kb"),
                           (["--conn-memory-kb", "4097"], "--conn-memory-kb"),
                           (["--log", "xml"], "--log"),
                           (["--host", "not-an-address"], "--host"),
                           (["--no-such-flag"], "--no-such-flag")]:
            code, _, err = run_attnd(args)
            self.assertEqual(code, 2, args)
            self.assertIn(name, err)

    def test_token_file_is_read_and_a_missing_one_exits_2(self):
        code, _, err = run_attnd(["--token-file", "/nonexistent/attnd-token"])
        self.assertEqual(code, 2)
        self.assertIn("--token-file", err)
        fd, path = tempfile.mkstemp(prefix="attnd-token-")
        with os.fdopen(fd, "w") as f:
            f.write("from-a-file\n")
        try:
            with harness.Attnd(["--token-file", path]) as srv:
                body = b'{"query": [[[1]]], "key": [[[1]]], "value": [[[5]]]}'
                self.assertEqual(srv.request("POST", "/v1/attention", body)[0], 401)
                status, _, data = srv.request("POST", "/v1/attention", body,
                                              {"Authorization": "Bearer from-a-file"})
                self.assertEqual(status, 200, data)
                self.assertEqual(srv.stop(), 0)
        finally:
            os.unlink(path)

    def test_bad_env_value_exits_2_naming_the_variable(self):
        code, _, err = run_attnd([], env={"ATTND_MAX_QUEUE": "lots"})
        self.assertEqual(code, 2)
        self.assertIn("ATTND_MAX_QUEUE", err)


class EnvTest(unittest.TestCase):
    @staticmethod
    def post_chunked(srv, nbytes):
        # Chunked, so that attnd reads the whole body and answers at its
        # end (an early answer would race with the upload).
        conn = srv.connection()
        try:
            conn.request("POST", "/v1/attention", encode_chunked=True,
                         body=iter([b" " * 65536] * (nbytes // 65536 + 1)),
                         headers={"Transfer-Encoding": "chunked"})
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    def test_env_sets_a_limit_and_the_flag_wins(self):
        size = 1024 * 1024 + 100  # blanks, not JSON: 413 if over, else 400
        with harness.Attnd([], env={"ATTND_MAX_BODY_MB": "1"}) as srv:
            self.assertEqual(self.post_chunked(srv, size), 413)
            self.assertEqual(srv.stop(), 0)
        with harness.Attnd(["--max-body-mb", "2"], env={"ATTND_MAX_BODY_MB": "1"}) as srv:
            self.assertEqual(self.post_chunked(srv, size), 400)
            self.assertEqual(srv.stop(), 0)

    def test_json_log_lines_are_json_objects(self):
        with harness.Attnd(["--log", "json"]) as srv:
            srv.get("/healthz")
            self.assertEqual(srv.stop(), 0)
        access = [json.loads(l) for l in srv.log if l.startswith("{") and '"path"' in l]
        self.assertTrue(any(a["path"] == "/healthz" and a["status"] == 200 for a in access),
                        srv.log)
        for a in access:
            for key in ("method", "bytes_in", "bytes_out", "queue_ms", "compute_ms", "batch"):
                self.assertIn(key, a)


class ProbeTest(unittest.TestCase):
    def test_probe_exits_0_for_a_healthy_attnd_and_1_otherwise(self):
        with harness.Attnd([]) as srv:
            code, _, err = run_attnd(["--probe"], env={"ATTND_HOST": "0.0.0.0",
                                                       "ATTND_PORT": str(srv.port)})
            self.assertEqual(code, 0, err)
            self.assertEqual(srv.stop(), 0)
        code, _, err = run_attnd(["--probe", "--port", str(srv.port)])
        self.assertEqual(code, 1)
        self.assertIn("healthz", err)


class DrainTest(unittest.TestCase):
    def test_sigterm_with_requests_in_flight_answers_all_and_exits_0(self):
        n = 8
        # The drain delay keeps accepting briefly after the signal, so that
        # a client thread that had not connected yet is not refused.
        srv = harness.Attnd(["--workers", "1", "--max-batch", "1",
                             "--drain-delay-ms", "5000" if VALGRIND else "1000"])
        try:
            body = heavy_body(1)
            results = []

            def client():
                try:
                    results.append(srv.request("POST", "/v1/attention", body)[0])
                except Exception as e:  # a refused or cut request is a failure
                    results.append(repr(e))
            threads = [threading.Thread(target=client) for _ in range(n)]
            for t in threads:
                t.start()
            # Signal once at least half of them are inside the server.
            self.assertTrue(wait_for(lambda: srv.metric("attnd_inflight_requests") >= n // 2
                                     or len(results) == n, 120))
            srv.proc.send_signal(signal.SIGTERM)
            for t in threads:
                t.join(300)
            code = srv.proc.wait(120)  # no second signal: that would exit at once
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
        self.assertEqual(code, 0)
        self.assertEqual(len(results), n)
        self.assertTrue(all(r in (200, 503) for r in results), results)
        self.assertIn(200, results)

    def test_work_that_outlasts_the_drain_is_cancelled_with_503_and_exit_0(self):
        # One worker: one long request computing, one queued behind it,
        # each seconds of work; --drain-s 1 cannot wait for them.  Both
        # are answered 503 naming the drain, and attnd exits 0 promptly.
        from test_cancel import N, long_request, wait_busy
        from test_limits import read_answer
        srv = harness.Attnd(["--workers", "1", "--inline-idle-us", "0",
                             "--max-request-gflop", "0", "--max-body-mb", "8",
                             "--drain-delay-ms", "0", "--drain-s", "1"])
        socks = []
        try:
            for _ in range(2):   # the second once the first computes, not batched with it
                s = socket.create_connection((srv.host, srv.port), timeout=60 * SLOW)
                s.sendall(long_request(2 * N))   # about 10 s of work each
                socks.append(s)
                self.assertTrue(wait_busy(srv.proc.pid, timeout=20 * SLOW))
            self.assertTrue(wait_for(lambda: srv.metric("attnd_queue_depth") == 1, 20 * SLOW))
            t0 = time.time()
            srv.proc.send_signal(signal.SIGTERM)
            answers = [read_answer(s) for s in socks]
            code = srv.proc.wait(60 * SLOW)
            took = time.time() - t0
        finally:
            for s in socks:
                s.close()
            if srv.proc.poll() is None:
                srv.proc.kill()
        print("drain: --drain-s 1, attnd exited %d after %.2f s" % (code, took))
        for status, _, body in answers:
            self.assertEqual(status, 503, body)
            self.assertIn(b"--drain-s", body)
        self.assertEqual(code, 0, "".join(srv.log[-10:]))
        self.assertLess(took, 10 * SLOW)

    def test_readiness_503_at_once_while_work_is_still_served(self):
        with harness.Attnd(["--drain-delay-ms", "3000" if not VALGRIND else "15000"]) as srv:
            self.assertEqual(srv.get("/readyz")[0], 200)
            srv.proc.send_signal(signal.SIGTERM)
            self.assertTrue(wait_for(lambda: srv.get("/readyz")[0] == 503, 30))
            status, _, body = srv.get("/readyz")
            self.assertIn("error", json.loads(body))
            self.assertEqual(srv.get("/healthz")[0], 200)
            self.assertEqual(srv.get("/v2/health/ready")[0], 503)
            self.assertEqual(srv.get("/v2/health/live")[0], 200)
            status, obj = srv.post_json("/v1/attention", {
                "query": [[[1, 0]]], "key": [[[1, 0]]], "value": [[[2, 3]]]})
            self.assertEqual(status, 200, obj)
            self.assertEqual(obj["output"], [[[2, 3]]])
            self.assertEqual(srv.proc.wait(120), 0)

    def test_sigterm_under_keep_alive_load_exits_0(self):
        # The drain stops the listening while the HTTP threads are busy
        # serving (libmicrohttpd's own quiesce can abort the process then).
        body = json.dumps({"query": [[[1, 0]]], "key": [[[1, 0]]],
                           "value": [[[2, 3]]]})
        for round_ in range(3):
            srv = harness.Attnd(["--drain-delay-ms", "0", "--access-log", "0"])
            stop = threading.Event()
            served = []  # one entry per answer

            def client():
                try:
                    c = srv.connection(timeout=30)
                    while not stop.is_set():
                        c.request("POST", "/v1/attention", body)
                        r = c.getresponse()
                        r.read()
                        served.append(r.status)
                        if r.getheader("Connection") == "close":
                            break
                except (OSError, http.client.HTTPException):
                    pass  # closed by the drain
            threads = [threading.Thread(target=client) for _ in range(8)]
            try:
                for t in threads:
                    t.start()
                self.assertTrue(wait_for(lambda: len(served) >= 200, 60 * SLOW))
                srv.proc.send_signal(signal.SIGTERM)
                code = srv.proc.wait(60 * SLOW)
            finally:
                stop.set()
                for t in threads:
                    t.join(60)
                if srv.proc.poll() is None:
                    srv.proc.kill()
            self.assertEqual(code, 0, "round %d:\n%s" % (round_, "".join(srv.log[-20:])))
            self.assertNotIn("epoll", "".join(srv.log))
            self.assertTrue(set(served) <= {200, 503}, set(served))

    def test_second_signal_exits_at_once(self):
        srv = harness.Attnd(["--drain-delay-ms", "600000"])
        try:
            srv.proc.send_signal(signal.SIGTERM)
            self.assertTrue(wait_for(lambda: srv.get("/readyz")[0] == 503, 30))
            srv.proc.send_signal(signal.SIGINT)
            code = srv.proc.wait(60)
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
        self.assertNotEqual(code, 0)

    def test_idle_server_exits_0_promptly(self):
        with harness.Attnd([]) as srv:
            srv.get("/healthz")
            start = time.time()
            self.assertEqual(srv.stop(signal.SIGINT), 0)
            self.assertLess(time.time() - start, 60)


if __name__ == "__main__":
    harness.main()
