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
exact rational rounding.  Shared memory: test_client_shm.py.
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
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
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


def direct_bf16(x):
    """x rounded once, straight to the nearest BF16 (ties to even): how
    attnd reads a BF16 JSON number.  round() of a float is exact."""
    if x == 0:
        return x
    unit = max(math.frexp(abs(x))[1] - 1, -126) - 7
    return math.copysign(math.ldexp(round(math.ldexp(abs(x), -unit)), unit), x)


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
    every request.  sent: every byte clients sent through it.  reject: the
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


# ---- health, readiness and connections ------------------------------------------------

class HealthTest(Case):
    def test_health_helpers(self):
        self.assertTrue(self.c.healthy())
        self.assertTrue(self.c.ready())
        self.assertTrue(self.c.server_live())
        self.assertTrue(self.c.server_ready())
        self.assertTrue(self.c.model_ready("attention"))
        self.assertTrue(self.c.model_ready("additive_attention", version=1))
        with self.assertRaises(AttndError) as cm:
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
            with self.assertRaises(AttndConnectionError) as cm:
                call()
            self.assertIsNone(cm.exception.status)
            self.assertIsInstance(cm.exception, AttndError)
            self.assertIsInstance(cm.exception.__cause__, OSError)
        t0 = time.monotonic()
        with self.assertRaises(AttndConnectionError):
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
            with self.assertRaises(AttndConnectionError) as cm:
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


# ---- v2 ------------------------------------------------------------------------------

class V2Test(Case):
    def test_v2_health_metadata_config_and_stats(self):
        meta = self.c.server_metadata()
        self.assertIn("binary_tensor_data", meta["extensions"])
        m = self.c.model_metadata("attention", version="1")
        self.assertEqual([i["name"] for i in m["inputs"]][:3], ["query", "key", "value"])
        with self.assertRaises(AttndError) as cm:
            self.c.model_metadata("bert")
        self.assertEqual(cm.exception.status, 404)
        cfg = self.c.model_config("attention")
        self.assertEqual(cfg["name"], "attention")
        self.c.infer("attention", {"query": [[[1.0]]], "key": [[[1.0]]], "value": [[[1.0]]]})
        st = self.c.model_statistics("attention")
        self.assertGreaterEqual(st["model_stats"][0]["inference_stats"]["success"]["count"], 1)
        self.assertIn("model_stats", self.c.model_statistics())

    def test_every_float_datatype_binary_and_json(self):
        req = rand_request(31, B=1, H=2, Lq=3, Lk=5, D=8, Dv=4)
        names = ("query", "key", "value")
        np_types = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16,
                    "BF16": np.float32}
        for binary in (True, False):
            for dt in ("FP32", "FP64", "FP16", "BF16"):
                for as_lists in (False, True):
                    if as_lists:
                        inputs = {n: req[n] for n in names}
                        dts = {n: dt for n in names}
                    else:
                        inputs = {n: np.asarray(req[n], np_types[dt]) for n in names}
                        dts = {n: "BF16" for n in names} if dt == "BF16" else {}
                    res = self.c.infer("attention", inputs, binary=binary, datatypes=dts,
                                       request_id="t-" + dt)
                    what = "%s %s %s" % (dt, "binary" if binary else "JSON",
                                         "lists" if as_lists else "arrays")
                    self.assertEqual(self.c.last_response["id"], "t-" + dt, what)
                    self.assertEqual(self.c.last_response["outputs"][0]["datatype"], "FP32")
                    want_ct = "application/octet-stream" if binary else "application/json"
                    self.assertEqual(self.c.last_headers["content-type"], want_ct, what)
                    sent = {n: inputs[n].astype(np.float64).tolist() if not as_lists
                            else req[n] for n in names}
                    if dt == "BF16" and not binary:
                        # attnd rounds each JSON number straight to BF16
                        ref = {n: nest([direct_bf16(x) for x in flatten(t)], shape_of(t))
                               for n, t in sent.items()}
                    else:
                        ref = {n: rounded(t, dt) for n, t in sent.items()}
                    with self.subTest(what):
                        self.check(res, {n: rounded(t, "FP32") for n, t in ref.items()})

    def test_lengths_mask_parameters_and_output_order(self):
        req = rand_request(32, B=2, Lq=3, Lk=4, D=4, Dv=3)
        mask = [[[True, False, True, True]]]
        lens = [[1, 2, 3], [0, 4, 4]]
        ref = dict({n: rounded(req[n], "FP32") for n in req}, mask=mask, valid_lens=lens,
                   causal=True)
        for lens_in, lens_dt in ((np.asarray(lens, np.int32), "INT32"),
                                 (np.asarray(lens, np.int64), "INT64"), (lens, "INT32")):
            for binary in (True, False):
                inputs = dict(req, valid_lens=lens_in, mask=np.asarray(mask))
                res = self.c.infer("attention", inputs, outputs=["weights", "output"],
                                   parameters={"causal": np.bool_(True)}, binary=binary)
                self.assertEqual(list(res), ["weights", "output"])
                self.assertEqual([o["name"] for o in self.c.last_response["outputs"]],
                                 ["weights", "output"])
                self.check(res, ref)
        res = self.c.infer("attention", req, outputs=["output"])
        self.check(res, {n: rounded(req[n], "FP32") for n in req}, outputs=("output",))

    def test_default_datatypes_on_the_wire(self):
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url)
            q, k, v = [[[1.0, 2.0]]], [[[1.0, 0.0], [0.0, 1.0]]], [[[1.0], [2.0]]]
            cases = [
                ({"query": q, "key": k, "value": v, "valid_lens": [1], "mask": [[[1, 0]]]},
                 ["FP32", "FP32", "FP32", "INT32", "BOOL"]),
                ({"query": np.asarray(q, np.float16), "key": np.asarray(k, np.float64),
                  "value": np.asarray(v, np.int64), "valid_lens": np.asarray([1], np.int64),
                  "mask": np.asarray([[[True, False]]])},
                 ["FP16", "FP64", "FP32", "INT64", "BOOL"]),
                ({"query": np.float32(1.5) * np.ones((1, 1, 2), np.float32), "key": k,
                  "value": v, "valid_lens": np.asarray([2], np.uint8)},
                 ["FP32", "FP32", "FP32", "INT32"]),
            ]
            for inputs, want in cases:
                for binary in (True, False):
                    del proxy.sent[:]
                    res = c.infer("attention", inputs, binary=binary)
                    head = bytes(proxy.sent).split(b"\r\n\r\n", 1)[1]
                    n = len(head)
                    if binary:
                        n = int(re.search(rb"Inference-Header-Content-Length: (\d+)",
                                          bytes(proxy.sent)).group(1))
                    sent = json.loads(head[:n])
                    self.assertEqual([i["datatype"] for i in sent["inputs"]], want)
                    self.assertEqual(list(res), ["output", "weights"])
            c.close()
        finally:
            proxy.close()

    def test_diagnostics_outputs_keep_their_datatypes(self):
        req = rand_request(36, B=2, H=2, Lq=3, Lk=5, D=4, Dv=2)
        lens = [[5, 0, 2], [1, 3, 5]]
        outs = ["output", "allowed_keys", "entropy", "max_weight", "jacobian_norm"]
        ref_req = dict({n: rounded(req[n], "FP32") for n in req}, valid_lens=lens)
        for binary in (True, False):
            res = self.c.infer("attention", dict(req, valid_lens=lens), outputs=outs,
                               binary=binary)
            self.assertEqual(list(res), outs)
            self.check(res, ref_req, outputs=("output",))
            self.check_diagnostics(res, ref_req)

    def test_additive_model_with_version(self):
        req = rand_request(33, B=2, Lq=2, Lk=4, D=3, Dv=2)
        rng = random.Random(34)
        w = {"w_q": rand_tensor(rng, [5, 3]), "w_k": rand_tensor(rng, [5, 3]),
             "w_v": rand_tensor(rng, [5])}
        inputs = {n: np.asarray(t, np.float32) for n, t in list(req.items()) + list(w.items())}
        res = self.c.infer("additive_attention", inputs, version=1)
        ref = {n: rounded(t, "FP32") for n, t in dict(req, **w).items()}
        self.check(res, dict(ref, scoring="additive"))

    def test_server_errors(self):
        req = rand_request(35)
        with self.assertRaises(AttndError) as cm:
            self.c.infer("bert", req)
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(AttndError) as cm:
            self.c.infer("attention", {"query": req["query"], "key": req["key"]})
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.message, "value: required input is missing")
        with self.assertRaises(AttndError) as cm:
            self.c.infer("attention", req, timeout_us=1)
        self.assertEqual(cm.exception.status, 504)
        with self.assertRaises(AttndError) as cm:
            self.c.infer("attention", req, datatypes={"query": "INT32"})
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("datatype INT32 is not supported", cm.exception.message)

    def test_refusals_match_the_servers_binary_and_json_messages(self):
        k, v = [[[1.0, 1.0]]], [[[1.0]]]

        def server_says(q_entry, raw=b""):
            hdr = json.dumps({"inputs": [dict(q_entry, name="query"),
                                         {"name": "key", "shape": [1, 1, 2],
                                          "datatype": "FP32", "data": [1, 1]},
                                         {"name": "value", "shape": [1, 1, 1],
                                          "datatype": "FP32", "data": [1]}]}).encode()
            h = {"Inference-Header-Content-Length": str(len(hdr))} if raw else {}
            return self.server_error("/v2/models/attention/infer", hdr + raw, h)

        # binary: what attnd's binary reader says of the same bytes
        for dt, np_dt, bad in (("FP32", np.float32, np.nan), ("FP16", np.float16, np.inf),
                               ("FP64", np.float64, -np.inf), ("FP64", np.float64, 1e39)):
            q = np.array([[[1.0, bad]]], dtype=np_dt)
            raw = q.astype("<" + q.dtype.str[1:]).tobytes()
            want = server_says({"shape": [1, 1, 2], "datatype": dt,
                                "parameters": {"binary_data_size": len(raw)}}, raw)
            got = self.refused(self.c.infer, "attention", {"query": q, "key": k, "value": v})
            self.assertEqual(got, want, dt)
        q = np.array([[[np.nan, 1.0]]], np.float32)
        self.assertEqual(self.refused(self.c.infer, "attention",
                                      {"query": q, "key": k, "value": v},
                                      datatypes={"query": "BF16"}),
                         "query[0][0][0]: BF16 value is not finite (infinity or NaN)")
        # numbers beyond the datatype: the client words them as attnd words
        # the same number in JSON, binary or not
        for dt, x in (("FP16", 70000.0), ("FP16", 65520.0), ("BF16", 3.4e38),
                      ("FP32", 1e39), ("FP64", -1e39)):
            want = server_says({"shape": [1, 1, 2], "datatype": dt, "data": [1, x]})
            for binary in (False, True):
                if binary and dt == "FP64":
                    continue  # sent as it is: attnd's binary reader refuses it
                got = self.refused(self.c.infer, "attention",
                                   {"query": [[[1, x]]], "key": k, "value": v},
                                   datatypes={"query": dt}, binary=binary)
                self.assertEqual(got, want, (dt, x, binary))
        self.assertEqual(self.refused(self.c.infer, "attention",
                                      {"query": [[[1, math.nan]]], "key": k, "value": v},
                                      binary=False),
                         "query[0][0][1]: NaN is not a JSON number; attnd needs finite values")
        self.assertEqual(self.refused(self.c.infer, "attention",
                                      {"query": [[[1, 2]]], "key": k, "value": v},
                                      parameters={"scale": math.inf}),
                         "parameters.scale: Infinity is not a JSON number; "
                         "attnd needs finite values")
        # ragged lists: v2 takes the shape from the request and any nesting
        # of data with that many numbers, so the client, which takes the
        # shape from the lists, refuses them as attnd's /v1 does
        want = self.server_error("/v1/attention", {"query": [[[1, 2], [3]]], "key": k,
                                                   "value": v})
        got = self.refused(self.c.infer, "attention",
                           {"query": [[[1, 2], [3]]], "key": k, "value": v})
        self.assertEqual(got, want)


# ---- encoders ---------------------------------------------------------------------

class UnixSocketTest(harness.UnixSocketServer, Case):
    """AttndClient(unix_socket=...) against attnd's --unix-socket."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.c.close()
        cls.c = cls.client(unix_socket=cls.sock)

    def test_v1_and_v2_binary_answers_match_the_reference(self):
        req = rand_request(41, B=1, H=2, Lq=3, Lk=5, D=4, Dv=4)
        self.check(self.c.attention(req["query"], req["key"], req["value"]), req)
        # an upload (513 KiB) over twice the kernel's default send buffer
        req = rand_request(42, B=1, H=1, Lq=4, Lk=1024, D=64, Dv=64)
        names = ("query", "key", "value")
        res = self.c.infer("attention", {n: np.asarray(req[n], np.float32) for n in names})
        self.check(res, {n: rounded(req[n], "FP32") for n in names})
        self.assertTrue(self.c.ready())
        # counted like requests on the port (attention() goes over v2 too)
        self.assertIn('attnd_requests_total{route="/v2/models/:m/infer",code="200"} 2\n',
                      self.c.metrics())

    def test_connections_ask_for_a_send_buffer_that_holds_an_upload(self):
        self.assertTrue(self.c.healthy())
        sock = self.client_socket(self.c)
        with open("/proc/sys/net/core/wmem_max") as f:
            cap = int(f.read())
        got = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        # the kernel doubles what it grants, and grants at most wmem_max
        self.assertEqual(got, 2 * min(4 << 20, cap))

    def test_no_server_at_the_path_names_the_socket(self):
        missing = os.path.join(self.dir, "nobody.sock")
        dead = self.client(unix_socket=missing, timeout=5)
        with self.assertRaises(AttndConnectionError) as cm:
            dead.healthy()
        self.assertIsNone(cm.exception.status)
        self.assertIn("on the Unix socket " + missing, cm.exception.message)
        self.assertIsInstance(cm.exception.__cause__, OSError)


# ---- attention() over v2, retries --------------------------------------------------

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


class AttentionOverV2Test(Case):
    """attention() sends v2 binary tensors, answers as /v1 does, and words
    errors in /v1's terms."""

    def v1_answer(self, body):
        status, obj = self.srv.post_json("/v1/attention", body)
        self.assertEqual(status, 200, obj)
        return obj

    def test_numpy_and_lists_go_as_binary_tensors_with_v1s_answer(self):
        proxy = Proxy(self.srv.port)
        try:
            c = self.client(proxy.url)
            req = rand_request(61, B=2, H=2, Lq=3, Lk=5, D=4, Dv=3)
            arrays = {n: np.asarray(t, np.float32) for n, t in req.items()}
            lens = [[5, 1, 0], [3, 5, 2]]
            # the first call learns the served name
            c.attention([[[1.0]]], [[[1.0]]], [[[1.0]]])
            self.assertTrue(bytes(proxy.sent).startswith(b"GET /v2/models/stats HTTP/1.1\r\n"))
            for q in (arrays["query"], req["query"]):
                del proxy.sent[:]
                res = c.attention(q, arrays["key"], arrays["value"], valid_lens=lens,
                                  causal=True, id="r-1")
                self.assertTrue(bytes(proxy.sent).startswith(
                    b"POST /v2/models/attention/infer HTTP/1.1\r\n"), bytes(proxy.sent)[:60])
                self.assertIn(b"Content-Type: application/octet-stream", bytes(proxy.sent))
                want = self.v1_answer(dict(req, valid_lens=lens, causal=True, id="r-1"))
                self.assertEqual(res["id"], "r-1")
                for n in ("output", "weights"):
                    self.assertEqual(res[n].tolist(), np.asarray(want[n], np.float32).tolist())
                self.assertEqual(c.last_response["outputs"][0]["name"], "output")
            # extra members go as /v1 JSON, as they are
            del proxy.sent[:]
            c.attention(req["query"], req["key"], req["value"], extra={"id": 5})
            self.assertTrue(bytes(proxy.sent).startswith(b"POST /v1/attention "))
            c.close()
        finally:
            proxy.close()

    def test_every_option_gives_v1s_numbers(self):
        req = rand_request(62, B=1, H=4, Hkv=2, Lq=4, Lk=6, D=4, Dv=2)
        rng = random.Random(63)
        mask = [[[rng.random() < 0.8 for _ in range(6)] for _ in range(4)]]
        bias = rand_tensor(rng, [4, 6], 0.5)
        w = {"w_q": rand_tensor(rng, [3, 4]), "w_k": rand_tensor(rng, [3, 4]),
             "w_v": rand_tensor(rng, [3])}
        cases = [
            {"mask": mask, "bias": bias, "causal": "lower_right", "scale": -0.3},
            {"valid_lens": [[1, 6, 0, 3]], "window": [1, None], "id": 7},
            {"dropout": {"p": 0.25, "seed": 11}, "window": [None, 2.0]},
            {"diagnostics": True, "return_weights": False, "valid_lens": [4]},
            dict(w, scoring="additive", causal=True),
        ]
        for opts, binary in [(o, b) for o in cases for b in (True, False)]:
            got = self.c.attention(np.asarray(req["query"], np.float32),
                                   np.asarray(req["key"], np.float64), req["value"],
                                   binary=binary, **opts)
            self.assertEqual(self.c.last_headers["content-type"],
                             "application/octet-stream" if binary else "application/json")
            want = self.v1_answer(dict(req, **opts))
            with self.subTest(opts=sorted(opts), binary=binary):
                self.assertEqual(sorted(got), sorted(want))
                for n in ("output", "weights"):
                    if n in want:
                        self.assertEqual(got[n].tolist(),
                                         np.asarray(want[n], np.float32).tolist(), n)
                for n, d in want.get("diagnostics", {}).items():
                    self.assertEqual(got["diagnostics"][n].tolist(),
                                     np.asarray(d, got["diagnostics"][n].dtype).tolist(), n)
                if "id" in want:
                    self.assertEqual(got["id"], want["id"])

    def test_option_errors_name_v1s_fields(self):
        q, k, v = [[[1.0, 0.0]]], [[[1.0, 1.0]]], [[[2.0]]]
        for opts in ({"causal": "lower"}, {"scale": 0}, {"window": [-1, 2]},
                     {"window": [1, 2.5]}, {"dropout": {"p": 1.5}},
                     {"dropout": {"p": 0.5, "seed": -1}}, {"valid_lens": [2]},
                     {"mask": [[[1, 1]]]}, {"scoring": "cosine"}, {"dropout": {"q": 1}},
                     {"window": [1]}, {"return_weights": 1}, {"scoring": "additive"},
                     {"w_q": [[1.0, 1.0]]}):
            want = self.server_error("/v1/attention", dict({"query": q, "key": k, "value": v},
                                                           **opts))
            with self.assertRaises(AttndError) as cm:
                self.c.attention(np.asarray(q, np.float32), k, v, binary=False, **opts)
            self.assertEqual(cm.exception.status, 400)
            self.assertEqual(cm.exception.message, want, opts)
            with self.assertRaises(AttndError) as cm:
                self.c.attention(np.asarray(q, np.float32), k, v, **opts)
            self.assertEqual(cm.exception.status, 400)
            # over v2 attnd's own text, naming the option (v2 or /v1 words)
            self.assertEqual(json.loads(cm.exception.body)["error"], cm.exception.message)
            self.assertTrue(cm.exception.message.startswith("parameters.") or
                            any(n in cm.exception.message for n in opts), cm.exception.message)


class VariantsTest(Case):
    """sinks, softcap, alibi_slopes, packed sequences, window_align and the
    lse through attention() (v2 binary and /v1 JSON) and infer()."""

    def request(self, seed, **kw):
        req = rand_request(seed, **kw)
        return {n: rounded(t, "FP32") for n, t in req.items()}

    def attend(self, req, opts, binary):
        """attention() with numpy tensors and the options, checked to have
        gone the way binary says."""
        got = self.c.attention(*(np.asarray(req[n], np.float32)
                                 for n in ("query", "key", "value")),
                               binary=binary, **opts)
        self.assertEqual(self.c.last_headers["content-type"],
                         "application/octet-stream" if binary else "application/json")
        return got

    def test_each_variant_matches_the_reference_binary_and_json(self):
        req = self.request(71, B=2, H=2, Lq=4, Lk=6, D=4, Dv=3)
        sinks, slopes = [0.5, -1.25], [0.5, 0.25]
        cases = [
            {"sinks": sinks},
            {"softcap": 0.75},
            {"alibi_slopes": slopes},
            {"alibi_slopes": [[0.5, 0.25], [0.125, 1.0]]},
            {"window": [1, 0], "window_align": "lower_right"},
            {"window": [0, 1], "window_align": "upper_left", "return_weights": False},
            {"sinks": sinks, "softcap": 2.0, "alibi_slopes": slopes, "causal": "lower_right",
             "window": [2, 0], "window_align": "lower_right", "mask": [[[True] * 5 + [False]]]},
        ]
        for opts, binary in [(o, b) for o in cases for b in (True, False)]:
            sent = dict(opts, return_lse=True)
            for n in ("sinks", "alibi_slopes"):
                if n in sent and binary:
                    sent[n] = np.asarray(sent[n], np.float64 if n == "sinks" else np.float32)
            with self.subTest(opts=sorted(opts), binary=binary):
                got = self.attend(req, sent, binary)
                ref = dict(req, **opts)
                outputs = ("output",) if opts.get("return_weights") is False else \
                    ("output", "weights")
                self.check(got, ref, outputs)
                self.assert_lse(got["lse"], ref)
                if binary:
                    self.assertEqual([o["name"] for o in self.c.last_response["outputs"]],
                                     list(outputs) + ["lse"])
        got = self.c.attention(req["query"], req["key"], req["value"], sinks=sinks)
        self.assertNotIn("lse", got)

    def test_all_masked_row_lse_is_minus_inf_without_a_sink_and_the_sink_with_one(self):
        q, k, v = [[[1.0, 0.5], [0.25, -1.0]]], [[[1.0, 1.0], [0.0, 2.0], [-1.0, 0.5]]], \
            [[[2.0], [1.0], [-3.0]]]
        mask = [[[False, False, False], [True, False, True]]]
        req = {"query": q, "key": k, "value": v, "mask": mask}
        for binary in (True, False):
            for sinks in (None, [0.5]):
                with self.subTest(binary=binary, sinks=sinks):
                    got = self.attend(req, {"mask": np.asarray(mask), "sinks": sinks,
                                            "return_lse": True}, binary)
                    ref = dict(req, sinks=sinks)
                    self.check(got, ref)
                    self.assertEqual(got["output"][0, 0].tolist(), [0.0])
                    self.assertEqual(got["weights"][0, 0].tolist(), [0.0] * 3)
                    self.assert_lse(got["lse"], ref)
                    self.assertEqual(got["lse"][0, 0], -np.inf if sinks is None else 0.5)
                    if not binary and sinks is None:
                        # what attnd writes for -inf in JSON (the answer's
                        # tensors take the query's form: {"shape", "data"})
                        sent = self.c.last_response["lse"]
                        self.assertIsNone(flatten(sent["data"] if isinstance(sent, dict)
                                                  else sent)[0])

    def test_packed_sequences_match_the_reference(self):
        req = self.request(72, B=1, H=2, Lq=5, Lk=7, D=4, Dv=3)
        cu_q, cu_k = [0, 2, 2, 5], [0, 3, 4, 7]   # the middle sequence has no query
        cases = [
            {},
            {"causal": "lower_right", "alibi_slopes": [0.5, 0.125]},
            {"causal": True, "sinks": [0.25, -0.5], "return_weights": False},
            {"window": [1, 0], "window_align": "lower_right", "softcap": 1.5},
        ]
        for opts, binary in [(o, b) for o in cases for b in (True, False)]:
            for ints in (np.int32, np.int64, None):
                packed = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
                sent = dict(opts, return_lse=True, **({n: np.asarray(c, ints)
                                                       for n, c in packed.items()}
                                                      if ints else packed))
                with self.subTest(opts=sorted(opts), binary=binary, ints=ints):
                    got = self.attend(req, sent, binary)
                    ref = dict(req, **opts, **packed)
                    outputs = ("output",) if opts.get("return_weights") is False else \
                        ("output", "weights")
                    self.check(got, ref, outputs)
                    self.assert_lse(got["lse"], ref)
        # a query whose sequence has no key: nothing allowed, lse -inf
        req = {"query": [[[1.0, 0.0], [0.0, 1.0]]], "key": [[[1.0, 1.0], [2.0, 0.5], [0.0, 1.0]]],
               "value": [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]}
        packed = {"cu_seqlens_q": [0, 1, 2], "cu_seqlens_k": [0, 0, 3]}
        for binary in (True, False):
            got = self.attend(req, dict(packed, return_lse=True), binary)
            self.check(got, dict(req, **packed))
            self.assertEqual(got["lse"][0, 0], -np.inf)
            self.assert_lse(got["lse"], dict(req, **packed))

    def test_variant_errors_name_v1s_fields(self):
        q, k, v = [[[1.0, 0.0], [0.0, 1.0]]], [[[1.0, 1.0], [0.5, 0.0]]], [[[2.0], [1.0]]]
        cases = [({"softcap": 0}, "softcap"), ({"softcap": -1.5}, "softcap"),
                 ({"window_align": "middle"}, "window_align"),
                 ({"sinks": [1.0, 2.0]}, "sinks"),
                 ({"alibi_slopes": [[1.0], [2.0]]}, "alibi_slopes"),
                 ({"cu_seqlens_q": [0, 2]}, "cu_seqlens"),
                 ({"cu_seqlens_q": [0, 2, 1, 2], "cu_seqlens_k": [0, 1, 1, 2]}, "cu_seqlens_q"),
                 ({"cu_seqlens_q": [0, 2], "cu_seqlens_k": [0, 1]}, "cu_seqlens_k"),
                 ({"cu_seqlens_q": [0, 2], "cu_seqlens_k": [0, 2], "valid_lens": [1]},
                  "valid_lens"),
                 ({"return_lse": 1}, "return_lse")]
        for opts, field in cases:
            want = self.server_error("/v1/attention", dict({"query": q, "key": k, "value": v},
                                                           **opts))
            for binary in (True, False):
                with self.subTest(opts=opts, binary=binary):
                    with self.assertRaises(AttndError) as cm:
                        self.c.attention(np.asarray(q, np.float32), k, v, binary=binary,
                                         **opts)
                    self.assertEqual(cm.exception.status, 400)
                    if not binary:
                        self.assertEqual(cm.exception.message, want)
                    self.assertEqual(json.loads(cm.exception.body)["error"],
                                     cm.exception.message)
                    self.assertIn(field, cm.exception.message)

    def test_infer_decodes_lse_with_minus_inf_binary_and_json(self):
        req = {"query": [[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]],
               "key": [[[1.0, 1.0], [2.0, 0.5], [0.0, 1.0]]],
               "value": [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]}
        packed = {"cu_seqlens_q": [0, 1, 3], "cu_seqlens_k": [0, 0, 3]}
        for binary in (True, False):
            for sinks in (None, [0.75]):
                inputs = dict(req, cu_seqlens_q=np.asarray(packed["cu_seqlens_q"], np.int32),
                              cu_seqlens_k=np.asarray(packed["cu_seqlens_k"], np.int64))
                if sinks:
                    inputs["sinks"] = np.asarray(sinks, np.float32)
                with self.subTest(binary=binary, sinks=sinks):
                    res = self.c.infer("attention", inputs, outputs=["output", "lse"],
                                       parameters={"softcap": 2.5}, binary=binary)
                    ref = dict(req, softcap=2.5, sinks=sinks, **packed)
                    self.check(res, ref, outputs=("output",))
                    self.assert_lse(res["lse"], ref)
                    self.assertEqual(res["lse"][0, 0], -np.inf if sinks is None else 0.75)


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

    def test_tries_run_out_and_the_error_says_how_many(self):
        self.proxy.reject = 100
        for retries, tries in ((2, 3), (0, 1), (4, 5)):
            c = self.client(self.proxy.url, retries=retries, max_backoff=0.05)
            before = self.proxy.accepted
            with self.assertRaises(AttndError) as cm:
                c.attention(self.req["query"], self.req["key"], self.req["value"])
            e = cm.exception
            self.assertEqual((e.status, e.tries, e.retry_after), (503, tries, 0.2))
            self.assertEqual(e.message, "queue full: try again later")
            if tries > 1:
                self.assertTrue(str(e).endswith("(after %d tries)" % tries), str(e))
            self.assertEqual(self.proxy.accepted - before, tries)
            c.close()
        self.assertEqual(attnd_client.DEFAULT_RETRIES, 2)

    def test_a_wait_past_the_timeout_is_not_made(self):
        self.proxy.reject = 100
        self.proxy.retry_after = "30"
        c = self.client(self.proxy.url, timeout=1.0, retries=5, max_backoff=10)
        t0 = time.monotonic()
        with self.assertRaises(AttndError) as cm:
            c.infer("attention", self.req)
        self.assertEqual((cm.exception.status, cm.exception.tries), (503, 1))
        self.assertLess(time.monotonic() - t0, 1.0)
        # capped by max_backoff, within the timeout: waited, tried again
        c = self.client(self.proxy.url, timeout=5.0, retries=1, max_backoff=0.3)
        t0 = time.monotonic()
        with self.assertRaises(AttndError) as cm:
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
        with self.assertRaises(AttndConnectionError) as cm:
            c.healthy()
        self.assertEqual(cm.exception.tries, 1)

    def test_shared_memory_registration_is_not_retried_inference_is(self):
        self.proxy.drop_all = True
        c = self.client(self.proxy.url, backoff=0.01)
        for call in (lambda: c.register_system_shared_memory("r", "/attnd_none", 4096),
                     lambda: c.unregister_system_shared_memory("r")):
            before = self.proxy.accepted
            with self.assertRaises(AttndConnectionError) as cm:
                call()
            self.assertEqual(cm.exception.tries, 1)
            self.assertEqual(self.proxy.accepted - before, 1)
        before = self.proxy.accepted
        with self.assertRaises(AttndConnectionError) as cm:
            c.infer("attention", self.req)
        self.assertEqual(cm.exception.tries, 3)
        self.assertEqual(self.proxy.accepted - before, 3)
        c.close()

    def test_read_timeouts_and_504_are_not_retried(self):
        silent = SilentServer()
        self.addCleanup(silent.close)
        c = self.client("127.0.0.1:%d" % silent.port, timeout=0.5)
        t0 = time.monotonic()
        with self.assertRaises(AttndConnectionError) as cm:
            c.infer("attention", self.req)
        self.assertEqual(cm.exception.tries, 1)
        self.assertLess(time.monotonic() - t0, 3)
        with self.assertRaises(AttndError) as cm:
            self.c.infer("attention", self.req, timeout_us=1)
        self.assertEqual((cm.exception.status, cm.exception.tries), (504, 1))


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
        ac = attnd_client.AsyncAttndClient("127.0.0.1:%d" % lsock.getsockname()[1])
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


    def test_large_tensors_are_encoded_and_decoded_off_the_loop(self):
        """Over OFFLOAD_BYTES, building the request and reading the answer
        run in the executor's threads; small ones on the loop's."""
        ac = attnd_client.AsyncAttndClient(self.url)
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


class AsyncV2Test(OnAsyncio, V2Test):
    pass


class AsyncUnixSocketTest(OnAsyncio, UnixSocketTest):
    pass


class AsyncAttentionOverV2Test(OnAsyncio, AttentionOverV2Test):
    pass


class AsyncRetryTest(OnAsyncio, RetryTest):
    pass


class AsyncVariantsTest(OnAsyncio, VariantsTest):
    pass


# ---- the served model name, deadlines, precision ----------------------------------

class RenamedModelTest(Case):
    """attnd --model-name sdpa: attention() learns the dot-product model's
    name once and sends there, binary and JSON alike."""

    server_args = ("--workers", "1", "--model-name", "sdpa")

    def test_attention_follows_the_served_name(self):
        req = rand_request(451, B=1, Lq=3, Lk=4)
        for binary in (True, False):
            c = self.client(self.url)
            self.check(c.attention(req["query"], req["key"], req["value"], binary=binary),
                       req)
            if binary:
                self.assertEqual(c.last_response["model_name"], "sdpa")
                self.check(c.attention(req["query"], req["key"], req["value"]), req)
            c.close()
        with self.assertRaises(AttndError) as cm:
            self.c.attention(req["query"], req["key"], req["value"], model="attention")
        self.assertEqual(cm.exception.status, 404)
        self.check(self.c.attention(req["query"], req["key"], req["value"], model="sdpa"), req)

    def test_timeout_us_is_the_v2_deadline(self):
        req = rand_request(452, B=1, Lq=3, Lk=4)
        self.check(self.c.attention(req["query"], req["key"], req["value"],
                                    timeout_us=60 * 10**6), req)
        with self.assertRaises(AttndError) as cm:
            self.c.attention(req["query"], req["key"], req["value"], timeout_us=1)
        self.assertEqual(cm.exception.status, 504)
        with self.assertRaises(ValueError) as cm:
            self.c.attention(req["query"], req["key"], req["value"], timeout_us=1,
                             binary=False)
        self.assertIn("timeout_us", str(cm.exception))

    def test_precision_reaches_the_server(self):
        req = rand_request(453, B=1, Lq=3, Lk=4)
        for binary in (True, False):
            try:
                r = self.c.attention(req["query"], req["key"], req["value"],
                                     precision="bf16", binary=binary)
            except AttndError as e:
                if e.status == 400 and "precision" in e.message:
                    self.skipTest("server has no precision parameter")
                raise
            same = self.c.attention(req["query"], req["key"], req["value"], binary=binary)
            r32 = self.c.attention(req["query"], req["key"], req["value"], precision="fp32",
                                   binary=binary)
            self.assertEqual(r32["output"].tolist(), same["output"].tolist())
            want = attention(req)
            for n, (a, b) in enumerate(zip(r["output"].reshape(-1).tolist(),
                                           flatten(want[0]))):
                self.assertLessEqual(abs(a - b), 3e-2 + 3e-2 * abs(b), "output[%d]" % n)

    def test_headers_case_insensitive(self):
        self.c.attention([[[1.0]]], [[[1.0]]], [[[2.0]]])
        h = self.c.last_headers
        self.assertEqual(h["Content-Type"], h["content-type"])
        self.assertEqual(h.get("CONTENT-TYPE"), h["content-type"])
        self.assertIn("Content-Type", h)
        self.assertIsNone(h.get("X-Not-There"))


class AsyncRenamedModelTest(OnAsyncio, RenamedModelTest):
    pass


class RequestTest(unittest.TestCase):
    """The request attention() builds, without a server."""

    def built(self, cls, **kw):
        class Client(cls):
            def _attention(self, o):
                return self._attention_call(o)
        call = Client("127.0.0.1:9").attention([[[1.0, 0.0]]], [[[1.0, 1.0]]], [[[2.0]]],
                                               model="m", **kw)
        if call.path.endswith("/infer"):
            n = int(call.headers["Inference-Header-Content-Length"])
            return call.path, json.loads(call.body[:n])
        return call.path, json.loads(call.body)

    def test_precision_and_timeout_on_the_wire(self):
        for cls in (AttndClient, attnd_client.AsyncAttndClient):
            path, head = self.built(cls, precision="bf16", timeout_us=5000)
            self.assertEqual(path, "/v2/models/m/infer")
            self.assertEqual(head["parameters"], {"precision": "bf16", "timeout": 5000})
            path, body = self.built(cls, precision="fp32", binary=False)
            self.assertEqual(path, "/v1/attention")
            self.assertEqual(body["precision"], "fp32")
            path, head = self.built(cls)
            self.assertNotIn("parameters", head)

    def test_one_signature_and_docstring(self):
        a, s = AttndClient.attention, attnd_client.AsyncAttndClient.attention
        self.assertIs(a, s)
        params = inspect.signature(a).parameters
        for n in ("model", "timeout_us", "precision", "window_align"):
            self.assertEqual(params[n].kind, inspect.Parameter.KEYWORD_ONLY)
        with self.assertRaises(TypeError):
            AttndClient("127.0.0.1:9").attention([[[1.0]]], [[[1.0]]], [[[1.0]]], None)

    def test_module_help(self):
        p = run([VENV_PYTHON, "-m", "attnd_client", "--help"], cwd=tempfile.gettempdir())
        self.assertIn("usage: python3 -m attnd_client", p.stdout)
        self.assertIn("url", p.stdout)


# ---- a server that closes a kept-alive connection ---------------------------------

class CloseAfterFirst:
    """HTTP/1.1 on a local socket: on each connection it answers the first
    request with `answer` (keep-alive), reads the next one whole and closes
    the connection without answering, as a server closing an idle
    connection just as a request arrives.  got: (method, path) of every
    request read."""

    def __init__(self, answer):
        self.answer = answer
        self.got = []
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.url = "http://127.0.0.1:%d" % self.lsock.getsockname()[1]
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

    kind = staticmethod(lambda *a, **kw: AttndClient(*a, **kw))
    META = {"name": "attnd", "version": "0", "extensions": []}

    def test_closed_under_a_request(self):
        srv = CloseAfterFirst(json_answer(self.META))
        self.addCleanup(srv.close)
        c = self.kind(srv.url, retries=0)
        self.assertEqual(c.server_metadata(), self.META)
        with self.assertRaises(AttndConnectionError) as cm:
            c.register_system_shared_memory("r", "/attnd-test", 4096)
        self.assertEqual(cm.exception.tries, 1)
        self.assertEqual([m for m, _ in srv.got], ["GET", "POST"])
        del srv.got[:]
        self.assertEqual(c.server_metadata(), self.META)  # a new connection
        self.assertEqual(c.server_metadata(), self.META)  # closed under it, sent again
        self.assertEqual(srv.got, [("GET", "/v2")] * 3)
        del srv.got[:]
        with self.assertRaises(AttndConnectionError):
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


class AsyncResendTest(ResendTest):
    def setUp(self):
        self.loop = asyncio.new_event_loop()
        self.addCleanup(self.loop.close)
        self.kind = lambda *a, **kw: Synced(attnd_client.AsyncAttndClient(*a, **kw), self.loop)


class EventLoopsTest(Case):
    server_args = ("--workers", "1")

    def test_one_client_across_two_asyncio_runs(self):
        req = rand_request(454, B=1, Lq=3, Lk=4)
        ac = attnd_client.AsyncAttndClient(self.url)

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
    run_under_capable_python(__file__)
    harness.main()
