"""Starts the real build/attnd on an ephemeral port and talks HTTP to it.

Every integration suite imports this module.  Standard library only, so the
tests run on a fresh Debian 12 machine with nothing but python3.

    srv = Attnd(["--workers", "2"])      # starts build/attnd --port 0
    status, headers, body = srv.request("POST", "/v1/attention", b"{...}")
    status, obj = srv.post_json("/v1/attention", {...})
    code = srv.stop()                     # SIGTERM, returns the exit code

attnd prints "attnd: listening on HOST:PORT" on stderr once it accepts
connections; that is how the harness learns the port.  With
ATTND_VALGRIND=1 the daemon runs under valgrind and a valgrind error makes
stop() return 99.
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "build", "attnd")
# The test build's attnd, with failure injection (ATTND_FAIL_ALLOC_AT).
TEST_BINARY = os.path.join(ROOT, "build", "attnd-test")
VALGRIND = os.environ.get("ATTND_VALGRIND") == "1"
START_TIMEOUT = 120 if VALGRIND else 20

# The Open Inference Protocol's own OpenAPI document (KServe's
# open_inference_rest.yaml), which v2 answers are also checked against.
# It is not part of this tree: ATTND_OIP_SPEC names a copy, else a
# "shared/specs" folder beside the checkout or under /work is used.
OIP_SPEC_PLACES = (os.environ.get("ATTND_OIP_SPEC", ""),
                   os.path.join(ROOT, "..", "shared", "specs", "open_inference_rest.yaml"),
                   "/work/shared/specs/open_inference_rest.yaml")
LISTEN_RE = re.compile(r"listening on ([0-9.]+|\[[0-9a-f:]+\]):(\d+)")


class Attnd:
    """One running attnd process; the caller stops it (or uses `with`)."""

    def __init__(self, args=(), env=None, wrap=(), binary=BINARY):
        """wrap: a command that runs attnd (setpriv, say), before it;
        binary: TEST_BINARY for the test hooks."""
        cmd = [binary, "--host", "127.0.0.1", "--port", "0"] + list(args)
        if VALGRIND:
            # --fair-sched=yes: valgrind runs one thread at a time, and its
            # default lock lets a busy thread (a worker computing) take it
            # back again and again while the HTTP threads wait; tests that
            # need an HTTP thread to answer while a worker computes would
            # then measure valgrind's scheduler.  The ticket lock takes turns.
            cmd = ["valgrind", "-q", "--fair-sched=yes", "--error-exitcode=99",
                   "--leak-check=full",
                   "--show-leak-kinds=definite,indirect",
                   "--errors-for-leak-kinds=definite,indirect"] + cmd
        cmd = list(wrap) + cmd
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=full_env)
        self.log = []
        self.port = None
        self._ready = threading.Event()
        self._threads = [threading.Thread(target=self._pump, args=(s,), daemon=True)
                         for s in (self.proc.stderr, self.proc.stdout)]
        for t in self._threads:
            t.start()
        if not self._ready.wait(START_TIMEOUT) or self.port is None:
            self.proc.kill()
            raise RuntimeError("attnd did not start:\n" + "".join(self.log))
        self.host = "127.0.0.1"

    def _pump(self, stream):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            m = LISTEN_RE.search(line)
            if m and self.port is None:
                self.port = int(m.group(2))
                self._ready.set()
        self._ready.set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()

    def connection(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """exchange() over a fresh connection."""
        conn = self.connection(timeout)
        try:
            return exchange(conn, method, path, body, headers)
        finally:
            conn.close()

    def post_json(self, path, obj, headers=None):
        """POSTs obj (or raw bytes/str) and returns (status, decoded JSON)."""
        if isinstance(obj, (bytes, bytearray)):
            body = bytes(obj)
        elif isinstance(obj, str):
            body = obj.encode()
        else:
            body = json.dumps(obj).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        status, _, data = self.request("POST", path, body, h)
        try:
            return status, json.loads(data)
        except ValueError:
            raise AssertionError("response is not JSON (%d): %r" % (status, data[:200]))

    def get(self, path):
        status, hdrs, data = self.request("GET", path)
        return status, hdrs, data

    def metric(self, line):
        """The value of the /metrics line that starts with `line ` (a
        name, with its labels when it has any)."""
        status, _, body = self.get("/metrics")
        assert status == 200
        m = re.search(r"^%s (\S+)$" % re.escape(line), body.decode(), re.M)
        assert m, "no %s in /metrics" % line
        return float(m.group(1))

    def status_kb(self, field):
        """A kB field of attnd's /proc/PID/status ("VmHWM", "VmRSS")."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            return int(re.search(r"^%s:\s+(\d+)" % field, f.read(), re.M).group(1))

    def stream_endless_chunks(self, path, limit=256 << 20):
        """POSTs a chunked body of blanks that would never end (up to limit
        bytes); returns the bytes sent before the server cut the
        connection, or None when it read them all."""
        s = socket.create_connection((self.host, self.port), timeout=60)
        sent = 0
        try:
            s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" % path.encode())
            chunk = b"10000\r\n" + b" " * 65536 + b"\r\n"
            while sent < limit:
                s.sendall(chunk)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            return sent
        finally:
            s.close()
        return None

    def stop(self, sig=signal.SIGTERM, timeout=None):
        """Sends sig and waits; returns the exit code."""
        if timeout is None:
            timeout = 120 if VALGRIND else 30
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("attnd did not exit within %ss" % timeout)
        for t, stream in zip(self._threads, (self.proc.stderr, self.proc.stdout)):
            t.join(5)
            if not t.is_alive():
                stream.close()
        if code != 0:
            sys.stderr.write("".join(self.log[-50:]))
        return code


def exchange(conn, method, path, body=None, headers=None):
    """One request over conn, which stays open (keep-alive): (status,
    headers as a dict with lower-case names, body bytes)."""
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket (attnd --unix-socket PATH)."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


class CloseChecks:
    """Mixin for unittest cases: compares answers with the float64
    reference at design.md's tolerance, 1e-5 + 1e-5*|ref| per element."""

    def assert_close(self, got, ref, what):
        from reference import flatten
        g, r = flatten(got), flatten(ref)
        self.assertEqual(len(g), len(r), what + " size")
        for n, (x, y) in enumerate(zip(g, r)):
            self.assertLessEqual(abs(x - y), 1e-5 + 1e-5 * abs(y),
                                 "%s[%d]: got %r, want %r" % (what, n, x, y))


class ServerTestCase(unittest.TestCase):
    """A test class sharing one attnd for all its tests; the server must
    exit 0 (and, under valgrind, cleanly) when the class is done."""

    server_args = ()
    server_env = None       # extra environment for attnd
    server_binary = BINARY  # TEST_BINARY for the test hooks

    @classmethod
    def setUpClass(cls):
        cls.srv = Attnd(cls.server_args, env=cls.server_env,
                        binary=cls.server_binary)

    @classmethod
    def tearDownClass(cls):
        code = cls.srv.stop()
        if code != 0:
            raise AssertionError("attnd exited %d" % code)


class UnixSocketServer:
    """Mixin for a ServerTestCase (listed before it): the shared attnd also
    listens on a Unix socket, cls.sock, in a directory of its own that is
    removed after the server stops."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="attnd-unix-")
        cls.sock = os.path.join(cls.dir, "attnd.sock")
        cls.server_args = tuple(cls.server_args) + ("--unix-socket", cls.sock)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.dir, ignore_errors=True)


def oip_spec():
    """The path of the Open Inference Protocol's OpenAPI document, or None
    when this machine has no copy (OIP_SPEC_PLACES)."""
    for path in OIP_SPEC_PLACES:
        if path and os.path.isfile(path):
            return path
    return None


OIP_SPEC_MISSING = ("no copy of the Open Inference Protocol's open_inference_rest.yaml "
                    "(github.com/kserve/open-inference-protocol, specification/protocol/); "
                    "set ATTND_OIP_SPEC to its path to check against it")


def library_versions():
    """The versions `attnd --version` reports, as {"libmicrohttpd": (0, 9,
    75), ...}: where a library's releases differ (docs/decisions.md), a
    test asks which one attnd runs with."""
    out = subprocess.run([BINARY, "--version"], capture_output=True, text=True,
                         check=True).stdout
    return {name: tuple(int(x) for x in ver.split("."))
            for name, ver in re.findall(r"(libmicrohttpd|libuv|cJSON|OpenBLAS) (\d+(?:\.\d+)*)",
                                        out)}


def wait_for(pred, timeout, interval=0.02):
    """Polls pred until it holds; False if it never did within timeout."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(interval)
    return False


SLOW_TEST_S = 30


class TimedResult(unittest.TextTestResult):
    """Notes each test that took longer than SLOW_TEST_S, so that a run on
    a slow or loaded machine says where its time went."""

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        took = time.monotonic() - self._started
        if took > SLOW_TEST_S:
            self.stream.write("\nslow: %s took %.0f s\n" % (test.id(), took))
        super().stopTest(test)


def main():
    """Runs the calling module's tests and prints "N passed, N failed"
    (and ", N skipped" with each reason when a test skipped)."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules["__main__"])
    result = unittest.TextTestRunner(verbosity=1 if not os.environ.get("V") else 2,
                                     resultclass=TimedResult).run(suite)
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - len(result.skipped)
    name = os.path.basename(sys.argv[0]).split(".")[0]
    skipped = ", %d skipped" % len(result.skipped) if result.skipped else ""
    for test, reason in result.skipped:
        print("%s: skipped %s: %s" % (name, test.id().split(".")[-1], reason))
    print("%s: %d passed, %d failed%s" % (name, passed, failed, skipped))
    sys.exit(0 if failed == 0 and result.testsRun > 0 else 1)
