"""attnd's security surface, against the real build/attnd.

- The bearer token (--token, --token-file) guards every inference and
  metadata route, including unknown models and wrong methods; 401 carries
  WWW-Authenticate: Bearer realm="attnd" (plus error="invalid_token" when
  a wrong token was sent); health and readiness stay open, /metrics too
  unless --token-protect-metrics 1.
- Optional HTTPS (--tls-cert/--tls-key): curl and Python clients verify a
  certificate this test generates with openssl and get the reference
  numbers; plain HTTP to the TLS port gets no HTTP answer; --probe speaks
  HTTPS; bad TLS files are configuration errors.
- The default bind address is 127.0.0.1; no URL makes attnd read a file
  (the token file is read once, at startup); a request cannot allocate
  past the memory budget or run past its deadline.

Network only on loopback; bounded request counts; generous timeouts.
"""

import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

import harness
import reference

TOKEN = "s3cret-Token_0123456789"
REALM = 'Bearer realm="attnd"'
INVALID = 'Bearer realm="attnd", error="invalid_token"'


def run_attnd(args, env=None, timeout=60, cwd=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run([harness.BINARY] + list(args), capture_output=True,
                       env=full_env, timeout=timeout, cwd=cwd)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def v1_request(seed, **shape):
    req = reference.rand_request(seed, **shape)
    req["return_weights"] = True
    return req


def v2_body(req, params=None):
    """The v2 JSON form of a rank-3 or rank-4 v1 request."""
    def inp(name):
        t = req[name]
        return {"name": name, "datatype": "FP32", "shape": reference.shape_of(t),
                "data": reference.flatten(t)}
    body = {"inputs": [inp("query"), inp("key"), inp("value")]}
    if params:
        body["parameters"] = params
    return json.dumps(body).encode()


class Checks(harness.CloseChecks):
    def assert_v1_answer(self, status, data, req):
        self.assertEqual(status, 200, data[:300])
        obj = json.loads(data)
        out, w = reference.attention(req)
        self.assert_close(obj["output"], out, "output")
        self.assert_close(obj["weights"], w, "weights")

    def assert_401(self, status, hdrs, data, www, what):
        self.assertEqual(status, 401, "%s: %r" % (what, data[:200]))
        self.assertEqual(hdrs.get("www-authenticate"), www, what)
        if data:  # HEAD has no body
            self.assertTrue(json.loads(data)["error"], what)


# Every route that needs the token: (method, path, body or None).
GUARDED = [
    ("POST", "/v1/attention", "v1"),
    ("GET", "/v2", None),
    ("HEAD", "/v2", None),
    ("GET", "/v2/models/attention", None),
    ("GET", "/v2/models/additive_attention", None),
    ("GET", "/v2/models/attention/ready", None),
    ("GET", "/v2/models/attention/versions/1", None),
    ("GET", "/v2/models/attention/versions/1/ready", None),
    ("POST", "/v2/models/attention/infer", "v2"),
    ("POST", "/v2/models/attention/versions/1/infer", "v2"),
    # what does not exist is not revealed either: 401, not 404 or 405
    ("GET", "/v2/models/no_such_model", None),
    ("GET", "/v2/models/attention/versions/7", None),
    ("POST", "/v2/models/no_such_model/infer", "v2"),
    ("DELETE", "/v1/attention", None),
    ("PUT", "/v2/models/attention/infer", None),
]
OPEN = ["/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"]


class TokenTest(Checks, harness.ServerTestCase):
    server_args = ("--workers", "2", "--token", TOKEN, "--max-body-mb", "1")

    def body_for(self, kind):
        req = v1_request(3)
        return req, (json.dumps(req).encode() if kind == "v1" else
                     v2_body(req) if kind == "v2" else None)

    def test_every_guarded_route_is_401_without_the_token(self):
        for method, path, kind in GUARDED:
            _, body = self.body_for(kind)
            status, hdrs, data = self.srv.request(method, path, body)
            self.assert_401(status, hdrs, data, REALM, method + " " + path)

    def test_a_wrong_token_is_401_invalid_token(self):
        wrong = [TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "x" * len(TOKEN), "",
                 TOKEN[:-1] + chr(ord(TOKEN[-1]) ^ 1), " " + TOKEN + "x ",
                 "\t" + TOKEN[:-1] + "\t"]
        for method, path, kind in GUARDED[:4]:
            _, body = self.body_for(kind)
            for tok in wrong:
                status, hdrs, data = self.srv.request(
                    method, path, body, {"Authorization": "Bearer " + tok})
                www = REALM if tok == "" else INVALID
                self.assert_401(status, hdrs, data, www, "%s %s %r" % (method, path, tok))

    def test_whitespace_around_the_token_is_not_part_of_it(self):
        # RFC 9112, 5.1: a field value excludes the whitespace around it
        # (libmicrohttpd 1.0 trims it, 0.9.75 does not; attnd does on both).
        for tok in [" " + TOKEN + " ", TOKEN + "\t", "\t " + TOKEN + "  \t"]:
            for method, path, kind in GUARDED[:4]:
                _, body = self.body_for(kind)
                status, _, data = self.srv.request(
                    method, path, body, {"Authorization": "Bearer " + tok})
                self.assertLess(status, 400, "%s %s %r: %r" % (method, path, tok, data[:200]))

    def test_an_unauthorised_upload_that_never_ends_is_cut_off(self):
        # Without the token the body is dropped until its end, for the 401;
        # a chunked stream that does not end is closed past 64 times the body
        # limit (1 MiB here) rather than read forever.
        self.assertIsNotNone(self.srv.stream_endless_chunks("/v1/attention"),
                             "the server read a whole body without a token")

    def test_other_schemes_are_401_without_an_error_code(self):
        for auth in ("Basic " + TOKEN, TOKEN, "Token " + TOKEN, "Bearer"):
            status, hdrs, data = self.srv.request("GET", "/v2", None,
                                                  {"Authorization": auth})
            self.assert_401(status, hdrs, data, REALM, auth)

    def test_the_token_opens_every_route_with_right_numbers(self):
        auth = {"Authorization": "Bearer " + TOKEN}
        for method, path, kind in GUARDED[:10]:
            req, body = self.body_for(kind)
            status, _, data = self.srv.request(method, path, body, auth)
            self.assertEqual(status, 200, "%s %s: %r" % (method, path, data[:200]))
            if kind == "v1":
                self.assert_v1_answer(status, data, req)
            elif kind == "v2":
                out = {o["name"]: o for o in json.loads(data)["outputs"]}["output"]
                self.assert_close(out["data"], reference.attention(req)[0], "v2 output")
        # The scheme is case-insensitive (RFC 7235).
        req, body = self.body_for("v1")
        status, _, data = self.srv.request("POST", "/v1/attention", body,
                                           {"Authorization": "bearer " + TOKEN})
        self.assert_v1_answer(status, data, req)
        status, _, _ = self.srv.request("GET", "/v2/models/no_such_model", None, auth)
        self.assertEqual(status, 404)

    def test_health_readiness_and_metrics_stay_open(self):
        for path in OPEN + ["/metrics"]:
            for method in ("GET", "HEAD"):
                status, hdrs, _ = self.srv.request(method, path)
                self.assertEqual(status, 200, method + " " + path)
                self.assertNotIn("www-authenticate", hdrs)

    def test_probe_works_with_a_token(self):
        code, _, err = run_attnd(["--probe", "--port", str(self.srv.port)],
                                 env={"ATTND_TOKEN": TOKEN})
        self.assertEqual(code, 0, err)

    def test_a_refused_request_leaves_the_server_serving(self):
        # Unauthorised bodies are read and dropped; the same connection can
        # go on with an authorised request.
        conn = self.srv.connection()
        try:
            req, body = self.body_for("v1")
            conn.request("POST", "/v1/attention", body)
            resp = conn.getresponse()
            resp.read()
            self.assertEqual(resp.status, 401)
            conn.request("POST", "/v1/attention", body, {"Authorization": "Bearer " + TOKEN})
            resp = conn.getresponse()
            self.assert_v1_answer(resp.status, resp.read(), req)
        finally:
            conn.close()


class MetricsTokenTest(Checks, harness.ServerTestCase):
    server_args = ("--workers", "1", "--token", TOKEN, "--token-protect-metrics", "1")

    def test_metrics_need_the_token_health_does_not(self):
        status, hdrs, data = self.srv.request("GET", "/metrics")
        self.assert_401(status, hdrs, data, REALM, "/metrics")
        status, hdrs, data = self.srv.request("GET", "/metrics", None,
                                              {"Authorization": "Bearer nope"})
        self.assert_401(status, hdrs, data, INVALID, "/metrics")
        status, _, data = self.srv.request("GET", "/metrics", None,
                                           {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(status, 200)
        self.assertIn(b"attnd_requests_total", data)
        for path in OPEN:
            self.assertEqual(self.srv.get(path)[0], 200, path)

    def test_protecting_metrics_needs_a_token(self):
        code, _, err = run_attnd(["--token-protect-metrics", "1", "--port", "0"])
        self.assertEqual(code, 2)
        self.assertIn("--token-protect-metrics", err)


class TokenFileTest(Checks, unittest.TestCase):
    def test_token_file_is_read_once_at_startup(self):
        d = tempfile.mkdtemp(prefix="attnd-sec-")
        try:
            path = os.path.join(d, "token")
            with open(path, "w") as f:
                f.write("first-token\n")
            with harness.Attnd(["--workers", "1", "--token-file", path]) as srv:
                with open(path, "w") as f:
                    f.write("second-token\n")
                self.assertEqual(srv.request("GET", "/v2", None, {
                    "Authorization": "Bearer first-token"})[0], 200)
                self.assertEqual(srv.request("GET", "/v2", None, {
                    "Authorization": "Bearer second-token"})[0], 401)
                os.unlink(path)
                self.assertEqual(srv.request("GET", "/v2", None, {
                    "Authorization": "Bearer first-token"})[0], 200)
                self.assertEqual(srv.stop(), 0)
        finally:
            shutil.rmtree(d)


def make_cert(d, cn="localhost"):
    """A self-signed P-256 certificate for localhost and 127.0.0.1."""
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=" + cn, "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class TLSTest(Checks, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("openssl"):
            raise AssertionError("openssl is missing: make deps")
        cls.dir = tempfile.mkdtemp(prefix="attnd-tls-")
        cls.cert, cls.key = make_cert(cls.dir)
        cls.srv = harness.Attnd(["--workers", "2", "--tls-cert", cls.cert,
                                 "--tls-key", cls.key, "--token", TOKEN])
        cls.ctx = ssl.create_default_context(cafile=cls.cert)

    @classmethod
    def tearDownClass(cls):
        code = cls.srv.stop()
        shutil.rmtree(cls.dir)
        if code != 0:
            raise AssertionError("attnd exited %d" % code)

    def https(self, method, path, body=None, headers=None):
        conn = http.client.HTTPSConnection("127.0.0.1", self.srv.port, context=self.ctx,
                                           timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def test_verified_https_gets_the_reference_numbers(self):
        auth = {"Authorization": "Bearer " + TOKEN}
        for seed in range(3):
            req = v1_request(seed, B=2, H=2, Lq=3, Lk=5, D=4, Dv=3)
            status, _, data = self.https("POST", "/v1/attention", json.dumps(req).encode(),
                                         auth)
            self.assert_v1_answer(status, data, req)
        status, hdrs, data = self.https("POST", "/v1/attention", b"{}")
        self.assert_401(status, hdrs, data, REALM, "https without token")
        self.assertEqual(self.https("GET", "/healthz")[0], 200)

    def test_v2_binary_inputs_and_outputs_over_https(self):
        # binary outputs leave from the core's buffers; under TLS too
        import struct
        req = v1_request(4, B=1, H=2, Lq=40, Lk=50, D=16, Dv=8)
        raws = [struct.pack("<%df" % len(reference.flatten(req[n])),
                            *reference.flatten(req[n])) for n in ("query", "key", "value")]
        head = {"inputs": [{"name": n, "datatype": "FP32",
                            "shape": reference.shape_of(req[n]),
                            "parameters": {"binary_data_size": len(r)}}
                           for n, r in zip(("query", "key", "value"), raws)],
                "parameters": {"binary_data_output": True}}
        jh = json.dumps(head).encode()
        status, hdrs, data = self.https(
            "POST", "/v2/models/attention/infer", jh + b"".join(raws),
            {"Authorization": "Bearer " + TOKEN,
             "Inference-Header-Content-Length": str(len(jh))})
        self.assertEqual(status, 200, data[:300])
        hl = int(hdrs["inference-header-content-length"])
        outs = json.loads(data[:hl])["outputs"]
        self.assertEqual([o["name"] for o in outs], ["output", "weights"])
        at = hl
        want = dict(zip(("output", "weights"), reference.attention(req)))
        for o in outs:
            n = o["parameters"]["binary_data_size"]
            got = struct.unpack("<%df" % (n // 4), data[at:at + n])
            self.assert_close(list(got), want[o["name"]], o["name"])
            at += n
        self.assertEqual(at, len(data))

    def test_curl_over_https(self):
        if not shutil.which("curl"):
            raise AssertionError("curl is missing: make deps")
        req = v1_request(9)
        p = subprocess.run(["curl", "-sS", "--max-time", "60", "--cacert", self.cert,
                            "-H", "Authorization: Bearer " + TOKEN,
                            "--data-binary", json.dumps(req),
                            "https://localhost:%d/v1/attention" % self.srv.port],
                           capture_output=True, timeout=90)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assert_v1_answer(200, p.stdout, req)
        # plain http:// to the TLS port: curl gets no HTTP answer
        p = subprocess.run(["curl", "-sS", "--max-time", "20",
                            "http://127.0.0.1:%d/healthz" % self.srv.port],
                           capture_output=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn(b"ok", p.stdout)

    def test_plain_http_to_the_tls_port_gets_no_http_answer(self):
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=20)
            try:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                data = b""
                try:
                    while len(data) < 4096:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                except (ConnectionResetError, socket.timeout):
                    pass
                self.assertFalse(data.startswith(b"HTTP/"), data[:100])
            finally:
                s.close()
        self.assertEqual(self.https("GET", "/readyz")[0], 200)

    def test_an_unverifiable_certificate_is_refused_by_the_client(self):
        ctx = ssl.create_default_context()  # the system roots do not know it
        conn = http.client.HTTPSConnection("127.0.0.1", self.srv.port, context=ctx,
                                           timeout=30)
        with self.assertRaises(ssl.SSLError):
            conn.request("GET", "/healthz")
        conn.close()

    def test_probe_speaks_https(self):
        port = str(self.srv.port)
        code, _, err = run_attnd(["--probe", "--port", port, "--tls-cert", self.cert,
                                  "--tls-key", self.key])
        self.assertEqual(code, 0, err)
        code, _, err = run_attnd(["--probe", "--port", port],
                                 env={"ATTND_TLS_CERT": self.cert, "ATTND_TLS_KEY": self.key})
        self.assertEqual(code, 0, err)
        code, _, err = run_attnd(["--probe", "--port", port])  # plain HTTP: no answer
        self.assertEqual(code, 1)
        self.assertIn("http://", err)

    def test_tls_configuration_errors(self):
        code, _, err = run_attnd(["--tls-cert", self.cert, "--port", "0"])
        self.assertEqual(code, 2)
        self.assertIn("--tls-key", err)
        code, _, err = run_attnd(["--tls-key", self.key, "--port", "0"])
        self.assertEqual(code, 2)
        code, _, err = run_attnd(["--tls-cert", os.path.join(self.dir, "none.pem"),
                                  "--tls-key", self.key, "--port", "0"])
        self.assertEqual(code, 2)
        self.assertIn("--tls-cert", err)
        notpem = os.path.join(self.dir, "notpem.txt")
        with open(notpem, "w") as f:
            f.write("hello\n")
        code, _, err = run_attnd(["--tls-cert", self.cert, "--tls-key", notpem,
                                  "--port", "0"])
        self.assertEqual(code, 2)
        self.assertIn("not a PEM file", err)
        # a key that does not belong to the certificate: refused at start
        other = tempfile.mkdtemp(dir=self.dir)
        _, other_key = make_cert(other)
        code, _, err = run_attnd(["--tls-cert", self.cert, "--tls-key", other_key,
                                  "--port", "0", "--workers", "1"])
        self.assertEqual(code, 1, err)
        self.assertIn("cannot listen", err)


class BindTest(unittest.TestCase):
    def test_default_bind_address_is_loopback(self):
        env = dict(os.environ)
        env.pop("ATTND_HOST", None)
        p = subprocess.Popen([harness.BINARY, "--port", "0", "--workers", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            line = b""
            deadline = time.time() + harness.START_TIMEOUT
            while b"listening on" not in line and time.time() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
            m = re.search(rb"listening on ([0-9.]+):(\d+)", line)
            self.assertTrue(m, line)
            self.assertEqual(m.group(1), b"127.0.0.1")
            port = int(m.group(2))
            # the kernel's view: listening sockets (one per HTTP thread,
            # sharing the port), all on 127.0.0.1
            want = "0100007F:%04X" % port
            with open("/proc/%d/net/tcp" % p.pid) as f:
                rows = [l.split() for l in f.read().splitlines()[1:]]
            listening = [r[1] for r in rows if r[3] == "0A" and r[1].endswith(":%04X" % port)]
            self.assertGreaterEqual(len(listening), 1)
            self.assertEqual(set(listening), {want})
        finally:
            p.terminate()
            p.wait(30)
            p.stderr.close()


class NoFileReadTest(unittest.TestCase):
    """attnd's files are embedded at build time; no URL reaches the disk."""

    def test_no_url_reads_a_file(self):
        d = tempfile.mkdtemp(prefix="attnd-cwd-")
        marker = b"attnd-file-marker-4f1d"
        for name in ("secret.txt", "index.html", "app.js", "openapi.json"):
            with open(os.path.join(d, name), "wb") as f:
                f.write(marker)
        os.mkdir(os.path.join(d, "static"))
        with open(os.path.join(d, "static", "app.js"), "wb") as f:
            f.write(marker)
        paths = ["/secret.txt", "/./secret.txt", "//secret.txt", "/%73ecret.txt",
                 "/static/app.js", "/static/../secret.txt", "/../../../../etc/passwd",
                 "/..%2f..%2f..%2fetc%2fpasswd", "/index.html/../secret.txt",
                 "/app.js/..%2fsecret.txt", "/v2/models/../../secret.txt",
                 "/v2/models/attention/../../../secret.txt", "/%2e%2e/%2e%2e/etc/passwd",
                 "/etc/passwd", "/proc/self/environ", "/healthz/../secret.txt"]
        srv = harness.Attnd(["--workers", "1"])
        try:
            for path in paths:
                for method in ("GET", "POST"):
                    s = socket.create_connection((srv.host, srv.port), timeout=30)
                    try:
                        s.sendall(("%s %s HTTP/1.0\r\nContent-Length: 0\r\n\r\n"
                                   % (method, path)).encode())
                        data = b""
                        while True:
                            chunk = s.recv(65536)
                            if not chunk:
                                break
                            data += chunk
                    finally:
                        s.close()
                    self.assertTrue(data.startswith(b"HTTP/1."), (path, data[:100]))
                    status = int(data.split()[1])
                    self.assertIn(status, (400, 404, 405), (method, path, data[:200]))
                    self.assertNotIn(marker, data, path)
                    self.assertNotIn(b"root:", data, path)
            # the files that are served come from the binary, not the cwd
            status, _, body = srv.get("/app.js")
            self.assertEqual(status, 200)
            self.assertNotIn(marker, body)
            self.assertEqual(srv.stop(), 0)
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
            shutil.rmtree(d)


class LimitsTest(Checks, harness.ServerTestCase):
    """A request cannot allocate past the budget or run past its deadline."""
    server_args = ("--workers", "1", "--max-inflight-mb", "4", "--max-body-mb", "2")

    def rss_kb(self):
        with open("/proc/%d/status" % self.srv.proc.pid) as f:
            return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))

    def test_weights_beyond_the_memory_budget_are_refused(self):
        # Small inputs (~100 KB of JSON) whose weights would be 4096 x 4096
        # floats = 64 MiB, 16 times the budget: refused without computing.
        L = 4096
        body = json.dumps({"query": {"shape": [1, L, 1], "data": [0.5] * L},
                           "key": {"shape": [1, L, 1], "data": [0.25] * L},
                           "value": {"shape": [1, L, 1], "data": [1.0] * L},
                           "return_weights": True}).encode()
        before = self.rss_kb()
        for _ in range(3):
            status, hdrs, data = self.srv.request("POST", "/v1/attention", body)
            self.assertIn(status, (413, 503), data[:200])
            self.assertTrue(json.loads(data)["error"])
        self.assertLess(self.rss_kb() - before, 32 * 1024, "peak RSS grew by the weights")
        # without weights the same request fits (online softmax, O(L) memory)
        body = body.replace(b'"return_weights": true', b'"return_weights": false')
        status, _, data = self.srv.request("POST", "/v1/attention", body)
        self.assertEqual(status, 200, data[:200])
        out = json.loads(data)["output"]["data"]  # flat in, flat out
        self.assertEqual(len(out), L)
        self.assertTrue(all(abs(x - 1.0) < 1e-5 for x in out))

    def test_declared_elements_beyond_the_budget_are_refused(self):
        # A v2 header that claims a 2^31-element tensor: refused before any
        # allocation of that size (peak RSS stays put).
        before = self.rss_kb()
        body = json.dumps({"inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 1, 46341, 46341], "data": [0.0]}
            for n in ("query", "key", "value")]}).encode()
        status, _, data = self.srv.request("POST", "/v2/models/attention/infer", body)
        self.assertIn(status, (400, 413), data[:200])
        self.assertLess(self.rss_kb() - before, 32 * 1024)

    def test_a_request_past_its_own_deadline_is_504_without_compute(self):
        req = v1_request(5)
        status, _, data = self.srv.request("POST", "/v2/models/attention/infer",
                                           v2_body(req, {"timeout": 1}))
        self.assertEqual(status, 504, data[:200])
        self.assertTrue(json.loads(data)["error"])
        status, _, data = self.srv.request("POST", "/v2/models/attention/infer",
                                           v2_body(req, {"timeout": 60000000}))
        self.assertEqual(status, 200, data[:200])


if __name__ == "__main__":
    harness.main()
