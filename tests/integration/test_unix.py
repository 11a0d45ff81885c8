"""attnd on a Unix domain socket (--unix-socket), besides its TCP port.

Runs the real build/attnd.  The same HTTP API answers on the socket:
inference (checked against the float64 reference), v2, health, metrics,
keep-alive; the socket file gets --unix-socket-mode; a stale socket file
is replaced, while a live one or a path that is not a socket refuses the
start and is left as it was; the file is removed at exit; the drain
turns readiness 503 on the socket and then refuses new clients there.
libmicrohttpd's complaints about TCP options on a Unix socket stay out of
the log.
"""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import unittest

import harness
from reference import attention

VALGRIND = harness.VALGRIND


def run_attnd(args, timeout=60):
    p = subprocess.run([harness.BINARY, "--host", "127.0.0.1", "--port", "0"] + list(args),
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stderr.decode()


def unix_request(path, method, url, body=None, headers=None, conn=None):
    """(status, lower-case headers, body) over the socket at path, on a new
    connection unless conn is given."""
    c = conn or harness.UnixHTTPConnection(path)
    try:
        c.request(method, url, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        if conn is None:
            c.close()


wait_for = harness.wait_for


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="attnd-unix-")
        self.path = os.path.join(self.dir, "attnd.sock")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class UnixApiTest(TempDirCase, harness.CloseChecks):
    def test_the_http_api_answers_on_the_socket(self):
        with harness.Attnd(["--unix-socket", self.path, "--workers", "2"]) as srv:
            self.assertTrue(stat.S_ISSOCK(os.lstat(self.path).st_mode))
            self.assertEqual(os.lstat(self.path).st_mode & 0o777, 0o660)
            q = [[[1, 0], [0, 2]]]
            k = [[[1, 1], [2, 0], [0, 3]]]
            v = [[[1, 0], [0, 1], [1, 1]]]
            req = {"query": q, "key": k, "value": v, "valid_lens": [2]}
            body = json.dumps(req)
            status, hdrs, data = unix_request(self.path, "POST", "/v1/attention", body)
            self.assertEqual(status, 200, data)
            got = json.loads(data)
            ref_out, ref_w = attention(req)
            self.assert_close(got["output"], ref_out, "output")
            self.assert_close(got["weights"], ref_w, "weights")
            self.assertEqual(got["weights"][0][0][2], 0)
            for url, want in (("/healthz", 200), ("/readyz", 200), ("/v2/health/ready", 200),
                              ("/v2/models/attention", 200), ("/no-such-route", 404)):
                self.assertEqual(unix_request(self.path, "GET", url)[0], want, url)
            v2 = {"inputs": [
                {"name": "query", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 0, 0, 2]},
                {"name": "key", "shape": [1, 3, 2], "datatype": "FP32",
                 "data": [1, 1, 2, 0, 0, 3]},
                {"name": "value", "shape": [1, 3, 2], "datatype": "FP32",
                 "data": [1, 0, 0, 1, 1, 1]}]}
            status, _, data = unix_request(self.path, "POST", "/v2/models/attention/infer",
                                           json.dumps(v2))
            self.assertEqual(status, 200, data)
            # keep-alive: several requests on one connection
            conn = harness.UnixHTTPConnection(self.path)
            try:
                for _ in range(5):
                    status, hdrs, _ = unix_request(self.path, "POST", "/v1/attention", body,
                                                   conn=conn)
                    self.assertEqual(status, 200)
                    self.assertNotEqual(hdrs.get("connection"), "close")
            finally:
                conn.close()
            # the socket's requests are counted with the port's
            status, _, data = unix_request(self.path, "GET", "/metrics")
            self.assertEqual(status, 200)
            self.assertIn('attnd_requests_total{route="/v1/attention",code="200"} 6\n',
                          data.decode())
            # and the TCP port still serves
            self.assertEqual(srv.get("/healthz")[0], 200)
            self.assertEqual(srv.stop(), 0)
        self.assertFalse(os.path.lexists(self.path), "the socket file outlived attnd")
        log = "".join(srv.log)
        self.assertIn("listening on unix socket " + self.path, log)
        # libmicrohttpd's TCP_NODELAY / TCP_CORK failures on a Unix socket
        self.assertNotIn("error", log)

    def test_mode_flag_and_variable(self):
        with harness.Attnd(["--unix-socket", self.path, "--unix-socket-mode", "0600"]) as srv:
            self.assertEqual(os.lstat(self.path).st_mode & 0o777, 0o600)
            self.assertEqual(srv.stop(), 0)
        with harness.Attnd([], env={"ATTND_UNIX_SOCKET": self.path,
                                    "ATTND_UNIX_SOCKET_MODE": "666"}) as srv:
            self.assertEqual(os.lstat(self.path).st_mode & 0o777, 0o666)
            self.assertEqual(unix_request(self.path, "GET", "/healthz")[0], 200)
            self.assertEqual(srv.stop(), 0)
        for bad in ("0999", "1777", "rw", "-1", ""):
            code, err = run_attnd(["--unix-socket", self.path, "--unix-socket-mode", bad])
            self.assertEqual(code, 2, bad)
            self.assertIn("--unix-socket-mode", err)
        code, err = run_attnd(["--unix-socket", "/tmp/" + "x" * 120])
        self.assertEqual(code, 2)
        self.assertIn("--unix-socket", err)


class UnixFileTest(TempDirCase):
    def test_a_stale_socket_file_is_replaced(self):
        s = socket.socket(socket.AF_UNIX)
        s.bind(self.path)
        s.close()  # bound, never listened: connecting is refused
        with harness.Attnd(["--unix-socket", self.path]) as srv:
            self.assertEqual(unix_request(self.path, "GET", "/healthz")[0], 200)
            self.assertEqual(srv.stop(), 0)
        self.assertIn("replaced a stale socket", "".join(srv.log))

    def test_a_live_socket_is_left_to_its_server(self):
        with harness.Attnd(["--unix-socket", self.path]) as srv:
            ino = os.lstat(self.path).st_ino
            code, err = run_attnd(["--unix-socket", self.path])
            self.assertEqual(code, 1)
            self.assertIn("another server answers on it", err)
            self.assertEqual(os.lstat(self.path).st_ino, ino)
            self.assertEqual(unix_request(self.path, "GET", "/healthz")[0], 200)
            self.assertEqual(srv.stop(), 0)

    def test_a_path_that_is_not_a_socket_is_never_removed(self):
        with open(self.path, "w") as f:
            f.write("precious\n")
        code, err = run_attnd(["--unix-socket", self.path])
        self.assertEqual(code, 1)
        self.assertIn("not a socket", err)
        with open(self.path) as f:
            self.assertEqual(f.read(), "precious\n")
        os.unlink(self.path)
        os.symlink("/nonexistent", self.path)
        code, err = run_attnd(["--unix-socket", self.path])
        self.assertEqual(code, 1)
        self.assertTrue(os.path.islink(self.path))

    def test_a_missing_directory_fails_the_start(self):
        code, err = run_attnd(["--unix-socket", os.path.join(self.dir, "no", "attnd.sock")])
        self.assertEqual(code, 1)
        self.assertIn("cannot bind", err)


class UnixDrainTest(TempDirCase):
    def test_drain_on_the_socket(self):
        delay = 15000 if VALGRIND else 2000
        srv = harness.Attnd(["--unix-socket", self.path, "--drain-delay-ms", str(delay)])
        try:
            self.assertEqual(unix_request(self.path, "GET", "/readyz")[0], 200)
            # a keep-alive client with a connection open before the signal
            conn = harness.UnixHTTPConnection(self.path)
            self.assertEqual(unix_request(self.path, "GET", "/healthz", conn=conn)[0], 200)
            t0 = time.time()
            srv.proc.send_signal(signal.SIGTERM)
            self.assertTrue(wait_for(
                lambda: unix_request(self.path, "GET", "/readyz")[0] == 503, 30))
            # still accepting and serving during the drain delay, on new
            # connections and on the open one
            body = json.dumps({"query": [[[1, 0]]], "key": [[[1, 0]]], "value": [[[2, 3]]]})
            status, _, data = unix_request(self.path, "POST", "/v1/attention", body)
            self.assertEqual(status, 200, data)
            self.assertEqual(json.loads(data)["output"], [[[2, 3]]])
            status, _, data = unix_request(self.path, "POST", "/v1/attention", body, conn=conn)
            self.assertEqual(status, 200, data)
            conn.close()
            # then new clients are refused (the file goes with the listener)
            def refused():
                try:
                    unix_request(self.path, "GET", "/healthz")
                    return False
                except (ConnectionRefusedError, FileNotFoundError):
                    return True
            self.assertTrue(wait_for(refused, 60))
            self.assertGreaterEqual(time.time() - t0, delay / 1000.0 * 0.9)
            self.assertEqual(srv.proc.wait(60), 0)
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
        self.assertFalse(os.path.lexists(self.path))


if __name__ == "__main__":
    harness.main()
