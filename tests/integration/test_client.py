"""attnd's Python client (deploy/clients/python, module attnd_client),
installed with pip and run against the real build/attnd.

The install: `make venv VENV=<a temporary directory>`, the README's
command (deploy/clients/python/venv.sh: `python3 -m venv
--system-site-packages`, so Debian's numpy stays visible, and `pip install
--no-index --no-build-isolation` of a temporary copy of the package, so the
tree gets no build/ or *.egg-info).  The tests import attnd_client from that venv's site-packages
and run `python -m attnd_client` with the venv's python.  The client needs
numpy, and the install pip, setuptools, wheel and venv: when the python3
running this file lacks any of them (a pyenv python, say), the file runs
again under Debian's /usr/bin/python3, which tests/deps.sh equips.

Checked against the float64 reference (reference.py): /v1 with nested
lists, numpy arrays of every float dtype, numpy scalars, masks, lengths,
heads, additive scoring, dropout, windows, diagnostics and compression; v2
with binary and JSON tensors in FP32, FP64, FP16 and BF16, INT32/INT64
lengths, BOOL masks, every output in its own datatype; the variants (sinks,
softcap, ALiBi, packed sequences, window_align) and the lse, -inf kept
over binary and JSON, through attention() and infer().  The client's
refusals (ragged lists, non-numbers, NaN and infinities, numbers out of
range) are compared with what the server answers for the same tensor
where the server can be asked; errors, health, readiness (False only for
a 503), tokens, keep-alive (one connection per thread, counted by a
forwarding proxy in front of the real server) and the reconnection after
the server closed an idle connection; the FP16/BF16 encoders against an
exact rational rounding.  This file holds the install, /v1, the README and
the encoders, and the setup the other client suites share (as tc): v2, the
variants and the served model name in test_client_v2.py; health,
connections and retries in test_client_connections.py; shared memory in
test_client_shm.py.
"""

import asyncio
import atexit
import importlib.util
import inspect
import json
import math
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import unittest
from fractions import Fraction

import harness
from reference import (attention, diagnostics, flatten, lse, nest, rand_request, rand_tensor,
                       shape_of)

try:
    import numpy as np
except ImportError:  # this file then runs again under Debian's python3
    np = None

PACKAGE = os.path.join(harness.ROOT, "deploy", "clients", "python")
SYSTEM_PYTHON = "/usr/bin/python3"
NEEDED = ("numpy", "pip", "setuptools", "wheel", "venv")
DIAG_TOL = {"entropy": 2e-5, "max_weight": 1e-5, "jacobian_norm": 2e-5}

attnd_client = None  # the installed module (install_client)
AttndClient = AttndError = AttndInputError = AttndConnectionError = None
VENV_PYTHON = None


# ---- the install -------------------------------------------------------------

def missing_modules():
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def run_under_capable_python(path):
    """Runs the test file at path again under Debian's python3 when this
    python3 cannot install and run the client; returns only when it can."""
    missing = missing_modules()
    if not missing:
        return
    if os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON) or \
            not os.path.exists(SYSTEM_PYTHON):
        sys.exit("%s: %s lacks %s: run `sh tests/deps.sh` as root (python3-numpy, "
                 "python3-pip, python3-setuptools, python3-wheel, python3-venv)"
                 % (os.path.basename(path), sys.executable, ", ".join(missing)))
    print("%s: %s lacks %s; running under %s" % (os.path.basename(path), sys.executable,
                                                 ", ".join(missing), SYSTEM_PYTHON), flush=True)
    sys.stdout.flush()
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(path)] + sys.argv[1:])


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(cmd), p.returncode,
                                                      p.stdout, p.stderr))
    return p


def install_client():
    """Makes a fresh venv as the README says (`make venv`, with VENV in a
    temporary directory) and imports attnd_client from there (once per
    process)."""
    global attnd_client, AttndClient, AttndError, AttndInputError, AttndConnectionError
    global VENV_PYTHON
    if attnd_client is not None:
        return attnd_client
    tmp = tempfile.mkdtemp(prefix="attnd-client-test-")
    atexit.register(shutil.rmtree, tmp, True)
    venv = os.path.join(tmp, "venv")
    run(["make", "-s", "--no-print-directory", "-C", harness.ROOT, "venv", "VENV=" + venv],
        env=dict(os.environ, PYTHON=sys.executable))
    VENV_PYTHON = os.path.join(venv, "bin", "python")
    site = run([VENV_PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
               ).stdout.strip()
    sys.path.insert(0, site)
    import attnd_client as mod
    if not os.path.realpath(mod.__file__).startswith(os.path.realpath(site) + os.sep):
        raise AssertionError("attnd_client imported from %s, not the venv" % mod.__file__)
    attnd_client = mod
    AttndClient, AttndError = mod.AttndClient, mod.AttndError
    AttndInputError, AttndConnectionError = mod.AttndInputError, mod.AttndConnectionError
    return mod


def setUpModule():
    install_client()


# ---- helpers -------------------------------------------------------------------

def exact_bf16(x):
    """float32(x) rounded to the nearest BF16, ties to even, by comparing
    exact rationals of its two BF16 neighbours: (value, bits)."""
    f = struct.unpack("<f", struct.pack("<f", x))[0]
    bits = struct.unpack("<I", struct.pack("<f", f))[0]
    lo = bits & 0xFFFF0000
    cands = []
    for b in (lo, (lo + 0x10000) & 0xFFFFFFFF):
        if (b >> 23) & 0xFF == 0xFF:
            v = math.copysign(math.inf, f)
        else:
            v = struct.unpack("<f", struct.pack("<I", b))[0]
        cands.append((v, b >> 16))
    finite = [c for c in cands if not math.isinf(c[0])] or cands
    return min(finite, key=lambda c: (abs(Fraction(c[0]) - Fraction(f)), c[1] & 1))


def f16(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def rounded(t, datatype):
    fn = {"FP32": f32, "FP64": lambda x: x, "FP16": f16,
          "BF16": lambda x: exact_bf16(x)[0]}[datatype]
    return nest([fn(x) for x in flatten(t)], shape_of(t))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Proxy:
    """A TCP forwarder in front of a real attnd that counts the connections
    clients open.  drop_next: the next request bytes a client sends are
    not forwarded; both sides are closed instead (the server closing a
    keep-alive connection just as a request goes out); drop_all: so for
    every request.  hold: what clients send is swallowed (attnd busy with
    a request: no answer comes).  sent: every byte clients sent through it.  reject: the
    next that many connections get a 503 with Retry-After: retry_after, as
    a load balancer in front of a full attnd answers, and are closed.
    client_closed: connections whose client closed or reset them."""

    def __init__(self, port):
        self.target = port
        self.accepted = 0
        self.sent = bytearray()
        self.drop_next = False
        self.drop_all = False
        self.reject = 0
        self.hold = False
        self.retry_after = "0.2"
        self.client_closed = 0
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.reject > 0:
                self.reject -= 1
                threading.Thread(target=self._refuse, args=(c,), daemon=True).start()
                continue
            s = socket.create_connection(("127.0.0.1", self.target))
            self.socks += [c, s]
            threading.Thread(target=self._pump, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, False), daemon=True).start()

    def _refuse(self, c):
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                data += c.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            need = int(m.group(1)) if m else 0
            while len(body) < need:
                body += c.recv(65536)
            msg = b'{"error":"queue full: try again later"}'
            c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: %s\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n%s"
                      % (self.retry_after.encode(), len(msg), msg))
        except OSError:
            pass
        c.close()

    def _pump(self, src, dst, upstream):
        try:
            while True:
                try:
                    data = src.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data:
                    if upstream:
                        self.client_closed += 1
                    break
                if upstream and self.hold:
                    continue
                if upstream and (self.drop_next or self.drop_all):
                    self.drop_next = False
                    for x in (src, dst):
                        x.shutdown(socket.SHUT_RDWR)
                    return
                if upstream:
                    self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self.lsock.close()
        for s in self.socks:
            s.close()


class Case(harness.ServerTestCase):
    """Tests against one attnd, with AttndClient; OnAsyncio runs the same
    tests with AsyncAttndClient."""

    server_args = ("--workers", "2")

    @classmethod
    def client(cls, *args, **kw):
        """A client of the kind the class tests."""
        return AttndClient(*args, **kw)

    @staticmethod
    def client_socket(c):
        """The socket of c's (the calling thread's) open connection."""
        return c._transport._local.conn.sock

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.url = "http://127.0.0.1:%d" % cls.srv.port
        cls.c = cls.client(cls.url)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        super().tearDownClass()

    def assert_array(self, got, dtype, shape):
        self.assertIsInstance(got, np.ndarray)
        self.assertEqual(got.dtype, np.dtype(dtype))
        self.assertEqual(list(got.shape), list(shape))

    def assert_close(self, got, ref, what):
        self.assert_array(got, np.float32, shape_of(ref))
        for n, (a, b) in enumerate(zip(got.reshape(-1).tolist(), flatten(ref))):
            self.assertLessEqual(abs(a - b), 1e-5 + 1e-5 * abs(b),
                                 "%s[%d]: got %r, want %r" % (what, n, a, b))

    def assert_weights(self, got, ref):
        self.assert_array(got, np.float32, shape_of(ref))
        for n, (a, b) in enumerate(zip(got.reshape(-1).tolist(), flatten(ref))):
            if b == 0.0:
                self.assertEqual(a, 0.0, "weights[%d] must be exactly 0" % n)
            else:
                self.assertLessEqual(abs(a - b), 1e-5, "weights[%d]" % n)

    def check(self, res, req, outputs=("output", "weights")):
        ref_out, ref_w = attention(req)
        self.assertEqual(sorted(k for k in res if k in ("output", "weights")), sorted(outputs))
        if "output" in outputs:
            self.assert_close(res["output"], ref_out, "output")
        if "weights" in outputs:
            self.assert_weights(res["weights"], ref_w)

    def check_diagnostics(self, got, req):
        ref = diagnostics(req)
        counts = flatten(ref["allowed_keys"])
        self.assert_array(got["allowed_keys"], np.int32, shape_of(ref["allowed_keys"]))
        self.assertEqual(got["allowed_keys"].reshape(-1).tolist(), counts)
        for name, tol in DIAG_TOL.items():
            self.assert_array(got[name], np.float32, shape_of(ref[name]))
            for n, (x, y) in enumerate(zip(got[name].reshape(-1).tolist(), flatten(ref[name]))):
                if counts[n] == 0:
                    self.assertEqual(x, 0.0, "%s[%d]" % (name, n))
                else:
                    self.assertLessEqual(abs(x - y), tol + tol * abs(y),
                                         "%s[%d]: got %r, want %r" % (name, n, x, y))

    def assert_lse(self, got, req):
        """got is float32 and the reference's lse: -inf exactly where it
        is -inf, else within float32 rounding."""
        ref = lse(req)
        self.assert_array(got, np.float32, shape_of(ref))
        for n, (a, b) in enumerate(zip(got.reshape(-1).tolist(), flatten(ref))):
            if b == -math.inf:
                self.assertEqual(a, -math.inf, "lse[%d]" % n)
            else:
                self.assertLessEqual(abs(a - b), 1e-5 + 1e-5 * abs(b),
                                     "lse[%d]: got %r, want %r" % (n, a, b))

    def refused(self, fn, *args, **kw):
        """The message of the AttndInputError fn raises."""
        with self.assertRaises(AttndInputError) as cm:
            fn(*args, **kw)
        # refused before sending: no HTTP status, no try, no "HTTP 400"
        self.assertEqual((cm.exception.status, cm.exception.tries), (None, 0))
        self.assertNotIn("HTTP", str(cm.exception))
        self.assertIsInstance(cm.exception, ValueError)
        return cm.exception.message

    def server_error(self, path, body, headers=None):
        status, obj = self.srv.post_json(path, body, headers)
        self.assertEqual(status, 400, obj)
        return obj["error"]


GOOD_PROGRAM = """\
from typing import Any, Dict, List, Optional
import numpy as np
from numpy.typing import NDArray
from attnd_client import (AttndClient, AttndError, AttentionResult, ShmTensor,
                          SharedMemoryRegion)

def run(url: str) -> Optional[float]:
    with AttndClient(url, token=None, timeout=5.0) as c:
        q: NDArray[np.float32] = np.zeros((1, 2, 4), np.float32)
        r: AttentionResult = c.attention(q, [[[1.0] * 4]], [[[2.0]]], valid_lens=[1],
                                         causal=True, window=[1, None], diagnostics=True)
        out: NDArray[Any] = r["output"]
        res: Dict[str, Any] = c.infer("attention", {"query": q, "key": q, "value": q},
                                      outputs=["output"], datatypes={"query": "BF16"})
        with SharedMemoryRegion("r", 4096) as region:
            t: ShmTensor = region.put("query", q, 0)
            status: List[Dict[str, Any]] = c.get_system_shared_memory_status()
            c.register_system_shared_memory(region.name, region.key, region.byte_size)
        ok: bool = c.ready() and c.model_ready("attention", version=1)
        try:
            c.wait_ready(timeout=1.0)
        except AttndError as e:
            code: Optional[int] = e.status
            return e.retry_after
        return float(out.sum()) + len(res) + t.byte_size + len(status) + ok
"""

BAD_PROGRAM = """\
from attnd_client import AttndClient

c = AttndClient("127.0.0.1:8000")
n: str = c.ready()
c.attention([[[1.0]]], [[[1.0]]], [[[1.0]]], causal=[1])
m: str = c.infer("attention", {})
c.register_system_shared_memory("r", 5, 64)
"""


# ---- the package -----------------------------------------------------------------

class PackageTest(unittest.TestCase):
    def test_installed_package_is_typed_and_declares_numpy(self):
        import importlib.metadata as md
        d = md.distribution("attnd-client")
        self.assertEqual(d.version, attnd_client.__version__)
        self.assertTrue(any(r.startswith("numpy") for r in d.requires or []), d.requires)
        pkg = os.path.dirname(attnd_client.__file__)
        self.assertTrue(os.path.exists(os.path.join(pkg, "py.typed")))
        for name in attnd_client.__all__:
            self.assertTrue(hasattr(attnd_client, name), name)
        for meth in ("attention", "infer", "ready", "register_system_shared_memory"):
            fn = getattr(AttndClient, meth)
            self.assertTrue(fn.__doc__, meth)
            self.assertIn("return", fn.__annotations__, meth)

    def test_make_venv_leaves_nothing_in_the_tree(self):
        """install_client ran `make venv`: no build/, *.egg-info or
        __pycache__ in deploy/clients/python."""
        left = [os.path.relpath(os.path.join(d, n), PACKAGE)
                for d, dirs, files in os.walk(PACKAGE) for n in dirs + files
                if n in ("build", "dist", "__pycache__") or n.endswith(".egg-info")]
        self.assertEqual(left, [])

    def test_make_venv_as_a_normal_user(self):
        """As root installs the packages (make deps), so a normal user runs
        `make venv`: here as nobody, into a directory of nobody's."""
        if os.getuid() != 0 or shutil.which("setpriv") is None:
            self.skipTest("needs root and setpriv to run as another user")
        tmp = tempfile.mkdtemp(prefix="attnd-venv-user-")
        self.addCleanup(shutil.rmtree, tmp, True)
        os.chown(tmp, 65534, 65534)
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                     "env", "HOME=" + tmp]
        if subprocess.run(as_nobody + ["test", "-r", os.path.join(PACKAGE, "venv.sh")]
                          ).returncode != 0:
            self.skipTest("nobody cannot read the tree at %s" % harness.ROOT)
        venv = os.path.join(tmp, ".venv")
        run(as_nobody + ["make", "-s", "-C", harness.ROOT, "venv", "VENV=" + venv])
        p = run(as_nobody + [os.path.join(venv, "bin", "python"), "-c",
                             "import attnd_client, numpy, os; print(os.getuid())"])
        self.assertEqual(p.stdout.strip(), "65534")
        self.assertEqual(os.stat(venv).st_uid, 65534)
        self.test_make_venv_leaves_nothing_in_the_tree()

    def test_typed_for_mypy_strict(self):
        """py.typed: mypy --strict reads the installed package's signatures,
        passes a program that uses them right and finds the mistakes."""
        if importlib.util.find_spec("mypy") is None:
            self.fail("mypy is missing: `sh tests/deps.sh` installs it")
        tmp = tempfile.mkdtemp(prefix="attnd-client-mypy-")
        self.addCleanup(shutil.rmtree, tmp, True)
        with open(os.path.join(tmp, "good.py"), "w") as f:
            f.write(GOOD_PROGRAM)
        with open(os.path.join(tmp, "bad.py"), "w") as f:
            f.write(BAD_PROGRAM)
        p = subprocess.run([VENV_PYTHON, "-m", "mypy", "--strict", "--no-incremental",
                            "--cache-dir", os.devnull, "good.py", "bad.py"],
                           cwd=tmp, capture_output=True, text=True, timeout=600)
        errors = [ln for ln in p.stdout.splitlines() if ": error:" in ln]
        self.assertEqual([ln.split(":")[:2] for ln in errors],
                         [["bad.py", str(n)] for n in (4, 5, 6, 7)], p.stdout + p.stderr)

    def test_module_main_runs_against_attnd(self):
        with harness.Attnd(["--workers", "1"]) as srv:
            p = run([VENV_PYTHON, "-m", "attnd_client", "http://127.0.0.1:%d" % srv.port],
                    cwd=tempfile.gettempdir())
            self.assertIn("ready: True", p.stdout)
            self.assertIn("[[[0.33023846", p.stdout)
            self.assertEqual(srv.stop(), 0)

    def test_module_main_refuses_a_bad_url_with_its_usage(self):
        for url, says in (("ftp://127.0.0.1:8000", "url must be"),
                          ("127.0.0.1:eighty", "Port could not be cast"),
                          ("http://[::1", "Invalid IPv6 URL")):
            p = subprocess.run([VENV_PYTHON, "-m", "attnd_client", url], capture_output=True,
                               text=True, timeout=120, cwd=tempfile.gettempdir())
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("usage: python3 -m attnd_client", p.stderr)
            self.assertIn(says, p.stderr)
            self.assertNotIn("Traceback", p.stderr)


# ---- /v1 -------------------------------------------------------------------------

class V1Test(Case):
    def test_readme_example_with_nested_lists(self):
        q, k, v = [[[1, 0], [0, 2]]], [[[1, 1], [2, 0], [0, 3]]], [[[1, 0], [0, 1], [1, 1]]]
        res = self.c.attention(q, k, v, valid_lens=[2], id="ex")
        self.assertEqual(res["id"], "ex")
        self.check(res, {"query": q, "key": k, "value": v, "valid_lens": [2]})
        self.assertEqual(res["weights"][0, 0, 2], 0.0)

    def test_every_float_dtype_numpy_scalars_and_numbers(self):
        req = rand_request(11, B=2, H=2, Lq=3, Lk=5, D=4, Dv=3)
        for dt in (np.float16, np.float32, np.float64, np.longdouble):
            arrs = {n: np.asarray(req[n], dtype=dt) for n in ("query", "key", "value")}
            exact = {n: a.astype(np.float64).tolist() for n, a in arrs.items()}
            lens = np.asarray([[3, 5, 1], [0, 2, 5]], dtype=np.int32)
            res = self.c.attention(arrs["query"], arrs["key"], arrs["value"],
                                   valid_lens=lens, scale=np.float32(0.75),
                                   causal=np.bool_(True))
            # float32 is what attnd computes in: the reference gets the
            # values it received (float64 arrays are rounded by attnd)
            ref = {n: rounded(t, "FP32") for n, t in exact.items()}
            self.check(res, dict(ref, valid_lens=lens.tolist(), scale=0.75, causal=True))
        # integer arrays and plain numbers are floats too
        res = self.c.attention(np.array([[[1, 0], [0, 2]]]), [[[1, 1.0], [2, 0], [0, 3]]],
                               (((1, 0), (0, 1), (1, 1)),), scale=1)
        self.check(res, {"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]],
                         "value": [[[1, 0], [0, 1], [1, 1]]], "scale": 1.0})

    def test_heads_lengths_mask_bias_causal(self):
        req = rand_request(21, B=2, H=4, Hkv=2, Lq=3, Lk=6, D=5, Dv=3)
        rng = random.Random(22)
        mask = [[[rng.random() < 0.7 for _ in range(6)] for _ in range(3)]]
        bias = rand_tensor(rng, [3, 6], 0.5)
        lens = [[3, 6, 2], [0, 5, 6]]
        res = self.c.attention(np.asarray(req["query"], np.float32),
                               np.asarray(req["key"], np.float32), req["value"],
                               valid_lens=np.asarray(lens, np.int64),
                               mask=np.asarray(mask), bias=bias,
                               causal="lower_right", scale=-0.4)
        ref = {n: rounded(req[n], "FP32") for n in ("query", "key")}
        self.check(res, dict(req, mask=mask, bias=bias, valid_lens=lens, causal="lower_right",
                             scale=-0.4, **ref))
        # a 0/1 integer mask is a mask too
        res2 = self.c.attention(req["query"], req["key"], req["value"], valid_lens=lens,
                                mask=np.asarray(mask, dtype=np.int8), bias=bias,
                                causal="lower_right", scale=-0.4)
        self.check(res2, dict(req, mask=mask, bias=bias, valid_lens=lens,
                              causal="lower_right", scale=-0.4))

    def test_additive_dropout_window_and_no_weights(self):
        req = rand_request(23, B=1, Lq=4, Lk=5, D=3, Dv=2)
        rng = random.Random(24)
        wq, wk, wv = rand_tensor(rng, [6, 3]), rand_tensor(rng, [6, 3]), rand_tensor(rng, [6])
        res = self.c.attention(req["query"], req["key"], req["value"], scoring="additive",
                               w_q=wq, w_k=wk, w_v=np.asarray(wv), window=[1, 0])
        self.check(res, dict(req, scoring="additive", w_q=wq, w_k=wk, w_v=wv, window=[1, 0]))
        res = self.c.attention(req["query"], req["key"], req["value"],
                               dropout={"p": np.float64(0.4), "seed": np.int64(9)},
                               window=[None, 1], return_weights=False)
        self.check(res, dict(req, dropout={"p": 0.4, "seed": 9}, window=[None, 1]),
                   outputs=("output",))
        self.assertNotIn("weights", res)

    def test_diagnostics_in_their_own_dtypes(self):
        req = rand_request(26, B=2, H=2, Lq=4, Lk=6, D=4, Dv=2)
        lens = [[6, 0, 3, 1], [2, 6, 6, 5]]
        for rw in (True, False):
            res = self.c.attention(req["query"], req["key"], req["value"], valid_lens=lens,
                                   diagnostics=True, return_weights=rw)
            self.assertEqual(sorted(res["diagnostics"]),
                             ["allowed_keys", "entropy", "jacobian_norm", "max_weight"])
            self.check_diagnostics(res["diagnostics"], dict(req, valid_lens=lens))
            self.assertEqual("weights" in res, rw)

    def test_server_errors_raise_attnd_error(self):
        with self.assertRaises(AttndError) as cm:
            self.c.attention([[[1, 0]]], [[[1, 1, 3]]], [[[1, 0]]])
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.message, "key: width 3 does not match query width 2")
        self.assertNotIsInstance(cm.exception, AttndInputError)
        with self.assertRaises(AttndError) as cm:
            self.c.attention([[[1, 0]]], [[[1, 1]]], [[[1, 0]]], extra={"temperature": 2})
        self.assertEqual(cm.exception.status, 400)
        self.assertTrue(cm.exception.message.startswith(
            "unknown field 'temperature' (fields: query, key, value,"), cm.exception.message)
        with self.assertRaises(AttndError) as cm:
            self.c.attention(5, [[[1, 1]]], [[[1, 0]]])
        # the client sends the number as a float, 5.0, and attnd names it
        # as it was written
        self.assertEqual(cm.exception.message, self.server_error(
            "/v1/attention", {"query": 5.0, "key": [[[1, 1]]], "value": [[[1, 0]]]}))
        status, _, body = self.c.request("GET", "/v3")
        self.assertEqual(status, 404)
        self.assertTrue(self.c.ready())

    def test_body_over_the_limit_is_413_not_a_broken_connection(self):
        with harness.Attnd(["--workers", "1", "--max-body-mb", "1"]) as srv:
            c = self.client("127.0.0.1:%d" % srv.port)
            big = np.zeros((1, 1 << 16, 8), np.float32)  # ~1.5 MB of JSON
            with self.assertRaises(AttndError) as cm:
                c.attention(big, big, big[:, :, :1])
            self.assertEqual(cm.exception.status, 413)
            self.assertNotIsInstance(cm.exception, AttndConnectionError)
            self.assertTrue(c.ready())
            c.close()
            self.assertEqual(srv.stop(), 0)

    def test_ragged_and_wrong_elements_refused_as_attnd_words_it(self):
        good = {"query": [[[1, 2], [3, 4]]], "key": [[[1, 1], [2, 2], [3, 3]]],
                "value": [[[1], [2], [3]]]}
        cases = [
            ("query", [[[1, 2], [3]]]),
            ("query", [[[1, 2], 3]]),
            ("query", [[[1, 2], [3, 4, 5]]]),
            ("query", [[[1, 2], [3, [4]]]]),
            ("query", [[[1, True], [3, 4]]]),
            ("query", [[[1, None], [3, 4]]]),
            ("query", [[[1, "2"], [3, 4]]]),
            ("query", [[[1, {}], [3, 4]]]),
            ("query", [[]]),
            ("key", [[[1, 1], [2, 2], [3]]]),
            ("value", [[[1], [2], []]]),
            ("valid_lens", [1.5]),
            ("valid_lens", [True]),
            ("mask", [[[1, 0, 2]]]),
            ("mask", [[[1, 0, "x"]]]),
            ("query", [[[1, 1e39], [3, 4]]]),
            ("bias", [[-3.5e38, 0, 0]]),
        ]
        for field, bad in cases:
            body = dict(good, **{field: bad})
            want = self.server_error("/v1/attention", body)
            args = {k: v for k, v in body.items() if k not in ("query", "key", "value")}
            got = self.refused(self.c.attention, body["query"], body["key"], body["value"],
                               **args)
            self.assertEqual(got, want, "%s: %r" % (field, bad))

    def test_nan_and_infinities_refused_with_attnds_message(self):
        q = [[[1.0, 2.0], [3.0, float("nan")]]]
        k, v = [[[1, 1]]], [[[1]]]
        self.assertEqual(self.refused(self.c.attention, q, k, v),
                         "query[0][1][1]: NaN is not a JSON number; attnd needs finite values")
        for dt in (np.float16, np.float32, np.float64):
            a = np.ones((1, 2, 2), dtype=dt)
            a[0, 1, 0] = np.inf
            self.assertEqual(self.refused(self.c.attention, a, k, v),
                             "query[0][1][0]: Infinity is not a JSON number; "
                             "attnd needs finite values")
            a[0, 0, 1] = -np.inf
            self.assertEqual(self.refused(self.c.attention, [[[1.0, 1.0]]], a, v),
                             "key[0][0][1]: -Infinity is not a JSON number; "
                             "attnd needs finite values")
        self.assertEqual(self.refused(self.c.attention, [[[1, 1]]], k, v, scale=math.nan),
                         "scale: NaN is not a JSON number; attnd needs finite values")
        self.assertEqual(self.refused(self.c.attention, [[[1, 1]]], k, v,
                                      valid_lens=[math.inf]),
                         "valid_lens[0]: Infinity is not a JSON number; "
                         "attnd needs finite values")
        self.assertEqual(self.refused(self.c.attention, [[[1, 1]]], k, v,
                                      dropout={"p": math.nan, "seed": 1}),
                         "dropout.p: NaN is not a JSON number; attnd needs finite values")

    def test_token(self):
        with harness.Attnd(["--workers", "1", "--token", "tok-1"]) as srv:
            url = "http://127.0.0.1:%d" % srv.port
            q, k, v = [[[1.0, 2.0]]], [[[0.5, -1.0]]], [[[3.0]]]
            for c in (self.client(url), self.client(url, token="tok-2")):
                with self.assertRaises(AttndError) as cm:
                    c.attention(q, k, v)
                self.assertEqual(cm.exception.status, 401)
                # a refused token is an error, not "not ready"
                with self.assertRaises(AttndError) as cm:
                    c.model_ready("attention")
                self.assertEqual(cm.exception.status, 401)
                self.assertTrue(c.ready())  # /readyz takes no token
                c.close()
            with self.client(url, token="tok-1") as c:
                self.check(c.attention(q, k, v), {"query": q, "key": k, "value": v})
                self.assertTrue(c.model_ready("attention"))
            self.assertEqual(srv.stop(), 0)

    def test_compressed_requests_and_answers(self):
        req = rand_request(25, B=2, Lq=6, Lk=8)
        for alg in ("gzip", "deflate"):
            res = self.c.attention(req["query"], req["key"], req["value"],
                                   request_compression=alg, response_compression="gzip")
            self.assertEqual(self.c.last_headers.get("content-encoding"), "gzip")
            self.check(res, req)
            res = self.c.infer("attention", req, request_compression=alg,
                               response_compression="gzip")
            self.assertEqual(self.c.last_headers.get("content-encoding"), "gzip")
            self.check(res, {n: rounded(t, "FP32") for n, t in req.items()})
        self.c.attention(req["query"], req["key"], req["value"])
        self.assertNotIn("content-encoding", self.c.last_headers)

    def test_threads_share_one_client(self):
        reqs = [rand_request(300 + i, B=1, Lq=3, Lk=4) for i in range(24)]
        results = [None] * len(reqs)

        def work(i):
            r = reqs[i]
            if i % 2:
                results[i] = self.c.attention(r["query"], r["key"], r["value"])
            else:
                results[i] = self.c.infer("attention", r, binary=i % 4 == 0)

        threads = [threading.Thread(target=lambda j=j: [work(i) for i in range(j, 24, 4)])
                   for j in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for i, r in enumerate(reqs):
            self.check(results[i], r if i % 2 else {n: rounded(t, "FP32") for n, t in r.items()})


# ---- the README ---------------------------------------------------------------------

def readme_python():
    """The README's Python section: (its sh block, its python block, the
    output block after it)."""
    with open(os.path.join(harness.ROOT, "README.md")) as f:
        text = f.read()
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    sh = [b for lang, b in blocks if lang == "sh"][0]
    i = [n for n, (lang, _) in enumerate(blocks) if lang == "python"][0]
    return sh, blocks[i][1], blocks[i + 1][1]


class ReadmeTest(Case):
    def test_readme_python_block_prints_what_the_readme_shows(self):
        sh, code, shown = readme_python()
        self.assertIn("make venv", sh)
        self.assertIn(". .venv/bin/activate", sh)
        self.assertIn('"http://127.0.0.1:8000"', code)
        code = code.replace("http://127.0.0.1:8000", self.url)
        p = run([VENV_PYTHON, "-c", code], cwd=tempfile.gettempdir())
        self.assertEqual(p.stdout, shown)
        # the curl example's problem, and its numbers
        with open(os.path.join(harness.ROOT, "README.md")) as f:
            text = f.read()
        answer = json.loads(re.search(r"## Try it.*?```json\n(.*?)```", text, re.S).group(1))
        nums = [float(x) for x in re.findall(r"[0-9.]+(?:e-?\d+)?", shown)]
        self.assertEqual(nums, flatten(answer["output"]) + flatten(answer["weights"]))


class EncodingTest(unittest.TestCase):
    def test_bf16_and_fp16_encoding_is_exact(self):
        rng = random.Random(41)
        xs = [rng.gauss(0, 1) * 10 ** rng.randint(-30, 30) for _ in range(3000)]
        # ties: float32 values exactly halfway between two BF16 values
        xs += [struct.unpack("<f", struct.pack("<I", b))[0]
               for b in (0x3F808000, 0x3F818000, 0xBF808000, 0x00008000, 0x00018000)]
        xs += [0.0, -0.0, 1.0, 3.0e38, -1e-40, 1.00390625]
        # FP16 from a double, rounded once: ties, a hair past a tie (which
        # a detour through float32 would make a tie), its subnormals (the
        # smallest is 2^-24) and the top of its range
        xs += [1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40),
               2 ** -25, 2 ** -25 + 2 ** -60, 3 * 2 ** -25, 2 ** -24, 2 ** -14 - 2 ** -25,
               2 ** -14 - 2 ** -25 - 2 ** -50, 65519.99, 65504.0]
        enc, dec = attnd_client.encode_tensor, attnd_client.decode_tensor
        want = struct.pack("<%dH" % len(xs), *[exact_bf16(x)[1] for x in xs])
        for src in (xs, np.asarray(xs), np.asarray(xs, np.float32)):
            self.assertEqual(enc(src, "BF16"), want)
        back = dec(want, "BF16", [len(xs)])
        self.assertEqual(back.dtype, np.float32)
        self.assertEqual(back.tolist(), [exact_bf16(x)[0] for x in xs])
        ys = [x for x in xs if abs(x) < 65504]
        want16 = struct.pack("<%de" % len(ys), *ys)  # struct rounds to nearest even
        for src in (ys, np.asarray(ys)):
            self.assertEqual(enc(src, "FP16"), want16)
        self.assertEqual(enc(np.asarray(ys, np.float32), "FP16"),
                         struct.pack("<%de" % len(ys), *[f32(y) for y in ys]))
        self.assertEqual(dec(want16, "FP16", [len(ys)]).tolist(), [f16(y) for y in ys])
        zs = [x for x in xs if abs(x) < 3e38]
        self.assertEqual(enc(zs, "FP32"), struct.pack("<%df" % len(zs), *zs))
        self.assertEqual(enc(zs, "FP64"), struct.pack("<%dd" % len(zs), *zs))
        self.assertEqual(enc([[1, 0], [1, 1]], "BOOL"), b"\x01\x00\x01\x01")
        self.assertEqual(enc([3, 2**31 - 1], "INT32"), struct.pack("<2i", 3, 2**31 - 1))
        self.assertEqual(dec(struct.pack("<2q", -5, 7), "INT64", [2]).dtype, np.int64)


# ---- the same tests on AsyncAttndClient ------------------------------------------------

class Synced:
    """An AsyncAttndClient whose coroutines are run to completion on one
    event loop, so that the tests written for AttndClient run unchanged on
    it.  last_response and last_headers are those the coroutine's task
    saw at its end."""

    def __init__(self, ac, loop):
        self.ac = ac
        self.loop = loop
        self.last_response = None
        self.last_headers = {}

    def __getattr__(self, name):
        attr = getattr(self.ac, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args, **kw):
            async def run():
                try:
                    r = attr(*args, **kw)  # attention() returns an awaitable
                    return await r if inspect.isawaitable(r) else r
                finally:
                    self.last_response = self.ac.last_response
                    self.last_headers = self.ac.last_headers
            return self.loop.run_until_complete(run())
        return call

    def close(self):
        self.loop.run_until_complete(self.ac.aclose())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class OnAsyncio:
    """Mixin, listed first: the class's tests run on AsyncAttndClient, on an
    event loop of the class's own."""

    @classmethod
    def setUpClass(cls):
        cls.loop = asyncio.new_event_loop()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.loop.close()

    @classmethod
    def client(cls, *args, **kw):
        return Synced(attnd_client.AsyncAttndClient(*args, **kw), cls.loop)

    @staticmethod
    def client_socket(c):
        return c.ac._transport._idle[-1].transport.get_extra_info("socket")


class AsyncV1Test(OnAsyncio, V1Test):
    def test_threads_share_one_client(self):
        """Concurrent coroutines share one client, each on a connection."""
        reqs = [rand_request(300 + i, B=1, Lq=3, Lk=4) for i in range(24)]
        ac = self.c.ac

        async def work(i):
            r = reqs[i]
            if i % 2:
                return await ac.attention(r["query"], r["key"], r["value"])
            return await ac.infer("attention", r, binary=i % 4 == 0)

        async def main():
            return await asyncio.gather(*[work(i) for i in range(len(reqs))])
        results = self.loop.run_until_complete(main())
        for i, r in enumerate(reqs):
            self.check(results[i], r if i % 2 else {n: rounded(t, "FP32") for n, t in r.items()})


if __name__ == "__main__":
    run_under_capable_python(__file__)
    harness.main()
