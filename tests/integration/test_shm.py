"""Triton's system shared memory extension against the real attnd.

Regions are POSIX shared memory objects made with Python's
multiprocessing.shared_memory, as tritonclient.utils.shared_memory makes
them; tensors are written and read with numpy.  Covered:

  * register, status and unregister, with every refusal Triton makes
    (unknown key, past the end, a name registered twice, bad bodies) and
    attnd's own (501 without --allow-client-shm, the two limits, the
    bearer token);
  * inference with inputs read from regions in every datatype attnd
    accepts (FP32, FP64, FP16, BF16 tensors, INT32 and INT64 lengths, a
    BOOL mask) and outputs written into regions (all six), checked against
    the float64 reference (reference.py); the answer names such an output
    by name, datatype and shape only;
  * Triton's offset and size rules, an input byte size mismatch, an
    output region too small, a failed request that writes nothing;
  * objects changed under attnd (truncated, unlinked, unregistered while a
    request holds them, written with NaN mid-request): test_shm_lifetime.py.

Needs numpy: under a python3 without it, the file runs itself again with
Debian's /usr/bin/python3 (python3-numpy, tests/deps.sh).
"""

import json
import os
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover - depends on the interpreter
    if os.environ.get("ATTND_SHM_REEXEC") != "1" and os.path.exists("/usr/bin/python3"):
        os.environ["ATTND_SHM_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

import struct
from multiprocessing import shared_memory

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import reference  # noqa: E402

INFER = "/v2/models/attention/infer"
SHM = "/v2/systemsharedmemory"
NP_TYPES = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16,
            "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_}


# ---- regions and tensors ----------------------------------------------------

class Region:
    """A POSIX shared memory object of size bytes (its key is "/" + name).
    After truncate() its mapping in this process is never touched again:
    reading pages past the new end would be a SIGBUS here."""

    def __init__(self, size):
        self.shm = shared_memory.SharedMemory(create=True, size=size)
        self.key = "/" + self.shm.name
        self.size = size
        self.mapped = True

    def write(self, off, data):
        assert self.mapped
        self.shm.buf[off:off + len(data)] = data

    def read(self, off, n):
        assert self.mapped
        return bytes(self.shm.buf[off:off + n])

    def truncate(self, n):
        self.mapped = False
        os.ftruncate(self.shm._fd, n)

    def unlink(self):
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass

    def close(self):
        self.shm.close()
        self.unlink()


def bf16(values):
    """float32 values rounded to nearest even onto BF16: (bits, values)."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    return bits, back


def encode(values, dtype):
    """(little-endian bytes in dtype, the values the server reads back as
    float64) of an array of values."""
    if dtype == "BF16":
        bits, back = bf16(values)
        return bits.astype("<u2").tobytes(), back.astype(np.float64)
    arr = np.asarray(values).astype(np.dtype(NP_TYPES[dtype]).newbyteorder("<"))
    return arr.tobytes(), arr.astype(np.float64)


class Packer:
    """Lays tensors one after another into a region, 64-byte aligned."""

    def __init__(self, region, name, start=0):
        self.region, self.name, self.at = region, name, start

    def put(self, data):
        off = self.at
        self.region.write(off, data)
        self.at = (off + len(data) + 63) // 64 * 64
        return off, len(data)

    def reserve(self, n):
        off = self.at
        self.at = (off + n + 63) // 64 * 64
        return off, n


def shm_params(region, off, size):
    p = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if off:
        p["shared_memory_offset"] = off
    return p


def shm_input(name, dtype, shape, region, off, size):
    return {"name": name, "datatype": dtype, "shape": list(shape),
            "parameters": shm_params(region, off, size)}


def shm_output(name, region, off, size):
    p = shm_params(region, off, size)
    p["binary_data"] = False  # what tritonclient always sends
    return {"name": name, "parameters": p}


def nested(a):
    return np.asarray(a, np.float64).tolist()


# ---- a server per class -------------------------------------------------------

class ShmCase(harness.ServerTestCase, harness.CloseChecks):
    server_args = ("--workers", "2", "--allow-client-shm", "1")
    headers = {}

    def setUp(self):
        self.regions = []

    def tearDown(self):
        self.call("POST", SHM + "/unregister")
        for r in self.regions:
            r.close()

    def region(self, size):
        r = Region(size)
        self.regions.append(r)
        return r

    def call(self, method, path, obj=None, headers=None):
        """(status, headers, body bytes); obj is JSON-encoded, or sent as
        it is when bytes."""
        body = obj if isinstance(obj, (bytes, type(None))) else json.dumps(obj).encode()
        h = dict(self.headers)
        h.update(headers or {})
        if method == "POST" and body is None:
            body = b""
        return self.srv.request(method, path, body, h)

    def register(self, name, region, offset=0, size=None, key=None):
        status, hdrs, body = self.call("POST", "%s/region/%s/register" % (SHM, name), {
            "key": key or region.key, "offset": offset,
            "byte_size": region.size - offset if size is None else size})
        return status, body

    def registered(self, name, region, offset=0, size=None):
        status, body = self.register(name, region, offset, size)
        self.assertEqual((status, body), (200, b""))

    def status(self, name=None):
        path = SHM + ("/region/%s/status" % name if name else "/status")
        st, hdrs, body = self.call("GET", path)
        return st, json.loads(body)

    def infer(self, req, model="attention"):
        st, hdrs, body = self.call("POST", "/v2/models/%s/infer" % model, req)
        return st, hdrs, json.loads(body)

    def refused(self, status, phrase, *args, **kw):
        st, _, body = self.infer(*args, **kw)
        self.assertEqual(st, status, body)
        self.assertIn(phrase, body["error"])
        return body["error"]


def fill(region, byte):
    region.write(0, bytes([byte]) * region.size)


class Registration(ShmCase):

    def test_register_status_unregister(self):
        a, b = self.region(8192), self.region(4096)
        self.registered("zeta", a, 4096, 4096)
        st, hdrs, body = self.call("POST", SHM + "/region/alpha/register",
                                   {"key": b.key, "byte_size": 100})
        self.assertEqual((st, body), (200, b""))
        self.assertEqual(hdrs["content-type"], "application/json")
        # an array sorted by name, the key as registered, compact JSON
        st, hdrs, body = self.call("GET", SHM + "/status")
        self.assertEqual(st, 200)
        self.assertEqual(body.decode(), json.dumps([
            {"name": "alpha", "key": b.key, "offset": 0, "byte_size": 100},
            {"name": "zeta", "key": a.key, "offset": 4096, "byte_size": 4096}],
            separators=(",", ":")))
        self.assertEqual(self.status("zeta"), (200, [
            {"name": "zeta", "key": a.key, "offset": 4096, "byte_size": 4096}]))
        st, hdrs, body = self.call("POST", SHM + "/region/alpha/unregister")
        self.assertEqual((st, body), (200, b""))
        self.assertEqual([r["name"] for r in self.status()[1]], ["zeta"])
        self.assertEqual(self.call("POST", SHM + "/unregister")[0], 200)
        self.assertEqual(self.status(), (200, []))

    def test_register_refusals(self):
        r = self.region(8192)
        missing = "/attnd-no-such-object-%d" % os.getpid()
        self.registered("taken", r)
        cases = [
            ("taken", {"key": r.key, "byte_size": 16},
             "shared memory region 'taken' already in manager"),
            ("x", {"key": missing, "byte_size": 16},
             "Unable to open shared memory region: '%s'" % missing),
            ("x", {"key": r.key, "byte_size": 8193},
             "failed to register shared memory region 'x': invalid args"),
            ("x", {"key": r.key, "offset": 8192, "byte_size": 1}, "invalid args"),
            ("x", {"key": r.key, "offset": 100, "byte_size": 16},
             "unable to process address space"),
            ("x", {"key": r.key, "byte_size": 0}, "unable to process address space"),
            ("x", {"byte_size": 16}, "Shared memory register request has no 'key' field"),
            ("x", {"key": r.key}, "Shared memory register request has no 'byte_size' field"),
            ("x", {"key": 7, "byte_size": 16}, "attempt to access JSON non-string as string"),
            # only what Triton's clients send: key, offset, byte_size
            ("x", {"key": r.key, "byte_size": 16, "foo": 1},
             "Shared memory register request: unknown field 'foo' (fields: key, offset, "
             "byte_size)"),
            ("x", {"key": r.key, "byte_sise": 16},
             "Shared memory register request: unknown field 'byte_sise' (did you mean "
             "'byte_size'? fields: key, offset, byte_size)"),
            ("x", {"key": r.key, "Offset": 0, "byte_size": 16},
             "unknown field 'Offset' (did you mean 'offset'?"),
            ("x", {"key": r.key, "byte_size": -1},
             "attempt to access JSON non-unsigned-integer as unsigned-integer"),
            ("x", {"key": r.key, "byte_size": 1.5}, "non-unsigned-integer"),
            ("x", {"key": r.key, "offset": "0", "byte_size": 16}, "non-unsigned-integer"),
            # whole in the double, not as written
            ("x", b'{"key": "%s", "byte_size": 16.00000000000000001}' % r.key.encode(),
             "non-unsigned-integer"),
            ("x", b'{"key": "%s", "offset": 0.99999999999999999, "byte_size": 16}'
             % r.key.encode(), "non-unsigned-integer"),
            ("x", {"key": "///", "byte_size": 16},
             "cannot register shared memory region 'x' - invalid shm key '///'"),
            ("x", {"key": "/triton_python_backend_shm_region_1", "byte_size": 16},
             "reserved prefix"),
            ("x", b"", "failed to parse the request JSON buffer"),
            ("x", b"{\"key\": ", "failed to parse the request JSON buffer"),
            ("x", b"[1]", "failed to parse the request JSON buffer"),
            # a key cut short at a NUL would name another object
            ("x", {"key": r.key + "\0zzz", "byte_size": 16},
             "failed to parse the request JSON buffer: body at byte %d: \\u0000 in a "
             "string" % (9 + len(r.key))),
            ("x", {"key": r.key + "\udc00", "byte_size": 16},
             "failed to parse the request JSON buffer: key: \\udc00 at byte %d is a lone "
             "UTF-16 surrogate" % (9 + len(r.key))),
        ]
        # bytes after the object are refused alike, NUL bytes too
        good = json.dumps({"key": r.key, "byte_size": 16}).encode()
        for tail, at in ((b"x", 0), (b"\0\0", 0), (b" \0", 1)):
            cases.append(("x", good + tail, "unexpected data after the JSON object at "
                          "byte %d" % (len(good) + at)))
        for name, body, phrase in cases:
            st, hdrs, data = self.call("POST", "%s/region/%s/register" % (SHM, name), body)
            self.assertEqual(st, 400, (body, data))
            self.assertEqual(hdrs["content-type"], "application/json")
            self.assertIn(phrase, json.loads(data)["error"], body)
        st, _, data = self.call("POST", SHM + "/register", {"key": r.key, "byte_size": 16})
        self.assertEqual(st, 400)
        self.assertIn("'region name' is necessary to register system shared memory region",
                      json.loads(data)["error"])
        self.assertEqual([x["name"] for x in self.status()[1]], ["taken"])
        # whole numbers however written
        body = b'{"key": "%s", "offset": 0.0, "byte_size": 1.6e1}' % r.key.encode()
        self.assertEqual(self.call("POST", SHM + "/region/w/register", body)[0], 200)
        self.assertEqual(self.status("w")[1][0]["byte_size"], 16)
        self.call("POST", SHM + "/region/w/unregister")

    def test_unknown_names_methods_and_paths(self):
        st, _, body = self.call("GET", SHM + "/region/nobody/status")
        self.assertEqual(st, 404)
        self.assertEqual(json.loads(body)["error"],
                         "Unable to find system shared memory region: 'nobody'")
        # unregistering what is not there is no error, as in Triton
        self.assertEqual(self.call("POST", SHM + "/region/nobody/unregister")[:3:2],
                         (200, b""))
        st, hdrs, _ = self.call("GET", SHM + "/region/a/register")
        self.assertEqual((st, hdrs.get("allow")), (405, "POST"))
        st, hdrs, _ = self.call("POST", SHM + "/status")
        self.assertEqual((st, hdrs.get("allow")), (405, "GET, HEAD"))
        for path in (SHM, SHM + "/region/a", SHM + "/region//status",
                     SHM + "/region/a/b/status", SHM + "/bogus", SHM + "x/status"):
            self.assertEqual(self.call("GET", path)[0], 404, path)

    def test_metrics_count_each_route_under_its_own_label(self):
        def counts():
            _, _, body = self.call("GET", "/metrics")
            out = {}
            for line in body.decode().splitlines():
                if line.startswith("attnd_requests_total{route=\"/v2/systemsharedmemory"):
                    labels, value = line.rsplit(" ", 1)
                    out[labels] = int(value)
            return out
        label = 'attnd_requests_total{route="/v2/systemsharedmemory%s",code="%s"}'
        before = counts()
        r = self.region(4096)
        self.registered("counted", r)
        self.assertEqual(self.register("counted", r)[0], 400)
        self.assertEqual(self.status("counted")[0], 200)
        self.assertEqual(self.status()[0], 200)
        self.assertEqual(self.call("POST", SHM + "/region/counted/unregister")[0], 200)
        after = counts()
        for path, code, n in (("/region/:r/register", 200, 1), ("/region/:r/register", 400, 1),
                              ("[/region/:r]/status", 200, 2),
                              ("[/region/:r]/unregister", 200, 1)):
            key = label % (path, code)
            self.assertEqual(after.get(key, 0) - before.get(key, 0), n, key)

    def test_server_metadata_lists_the_extension(self):
        st, _, body = self.call("GET", "/v2")
        self.assertIn("system_shared_memory", json.loads(body)["extensions"])


class Disabled(ShmCase):
    """The default: register and unregister are 501, status is served."""
    server_args = ("--workers", "1")

    def test_register_and_unregister_name_the_flag(self):
        r = self.region(4096)
        for path, body in (("/region/a/register", {"key": r.key, "byte_size": 16}),
                           ("/region/a/unregister", None), ("/unregister", None)):
            st, hdrs, data = self.call("POST", SHM + path, body)
            self.assertEqual(st, 501, path)
            self.assertEqual(hdrs["content-type"], "application/json")
            self.assertIn("--allow-client-shm 1", json.loads(data)["error"])
        self.assertEqual(self.status(), (200, []))
        st, _, body = self.call("GET", "/v2")
        self.assertIn("system_shared_memory", json.loads(body)["extensions"])
        # nothing is registered, so a request naming a region finds none
        q = shm_input("query", "FP32", [1, 1, 2], "a", 0, 8)
        self.refused(404, "query: Unable to find shared memory region: 'a'", {"inputs": [q]})


class Limits(ShmCase):
    server_args = ("--workers", "1", "--allow-client-shm", "1",
                   "--shm-max-regions", "2", "--shm-max-mb", "1")

    def test_most_regions_and_total_size(self):
        r = self.region(2 << 20)
        self.registered("a", r, 0, 4096)
        st, body = self.register("big", r, 4096, 1 << 20)
        self.assertEqual(st, 400)
        self.assertIn("--shm-max-mb", json.loads(body)["error"])
        self.registered("b", r, 8192, 4096)
        st, body = self.register("c", r, 0, 4096)
        self.assertEqual(st, 400)
        self.assertIn("2 regions are registered, the server's limit (--shm-max-regions)",
                      json.loads(body)["error"])
        self.assertEqual(self.call("POST", SHM + "/region/a/unregister")[0], 200)
        self.registered("c", r, 0, 4096)


class Budget(ShmCase):
    server_args = ("--workers", "1", "--allow-client-shm", "1",
                   "--max-inflight-mb", "8")

    def lay_out(self, name, shift):
        """A query of 16 rows and key and value of 6 MiB each (more than
        the 8 MiB budget together) in a region of their own; key and
        value shift bytes past a 64-byte boundary.  Returns the tensors
        and the request for a binary output."""
        rng = np.random.default_rng(11)
        q, k, v = (rng.standard_normal((1, L, 64)).astype("<f4")
                   for L in (16, 24576, 24576))
        r = self.region(13 << 20)
        self.registered(name, r)
        pk = Packer(r, name)
        inputs = [shm_input("query", "FP32", q.shape, name, *pk.put(q.tobytes()))]
        for n, a in (("key", k), ("value", v)):
            at = pk.reserve(a.nbytes + shift)[0] + shift
            r.write(at, a.tobytes())
            inputs.append(shm_input(n, "FP32", a.shape, name, at, a.nbytes))
        return (q, k, v), {"inputs": inputs, "outputs": [
            {"name": "output", "parameters": {"binary_data": True}}]}

    def test_inputs_read_in_place_are_left_out_of_the_budget(self):
        """Read where they lie in the region (the client's memory, which
        --shm-max-mb bounds), key and value are left out of the budget,
        which holds the output alone; copied out, as when the answer
        prints numbers, they are held and the request is refused naming
        the flag."""
        (q, k, v), req = self.lay_out("big", 0)
        st, hdrs, body = self.call("POST", INFER, req)
        self.assertEqual(st, 200, body[:300])
        got = np.frombuffer(body[int(hdrs["inference-header-content-length"]):], "<f4")
        s = q[0].astype(np.float64) @ k[0].astype(np.float64).T / np.sqrt(64)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        ref = (w / w.sum(axis=1, keepdims=True)) @ v[0].astype(np.float64)
        self.assert_close(got.tolist(), ref.ravel().tolist(), "output")
        req["outputs"] = [{"name": "output"}]
        self.refused(413, "--max-inflight-mb", req)
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_inflight_bytes") == 0, 30))

    def test_an_input_at_an_offset_not_aligned_for_float_is_a_copy_the_budget_holds(self):
        """Key and value 2 bytes past a float's alignment cannot be read
        where they lie, so they are copied, and the copies are held like
        any other: the request is refused naming the flag before anything
        is allocated for them."""
        (_, k, _), req = self.lay_out("odd", 2)
        hwm = self.srv.status_kb("VmHWM")
        self.refused(413, "--max-inflight-mb", req)
        self.assertLess(self.srv.status_kb("VmHWM") - hwm, k.nbytes // 2048)
        self.assertTrue(harness.wait_for(
            lambda: self.srv.metric("attnd_inflight_bytes") == 0, 30))


class Token(ShmCase):
    server_args = ("--workers", "1", "--allow-client-shm", "1", "--token", "s3cret")
    headers = {"Authorization": "Bearer s3cret"}

    def test_every_route_needs_the_token(self):
        r = self.region(4096)
        for method, path, body in (("GET", SHM + "/status", None),
                                   ("GET", SHM + "/region/a/status", None),
                                   ("POST", SHM + "/region/a/register",
                                    json.dumps({"key": r.key, "byte_size": 16}).encode()),
                                   ("POST", SHM + "/unregister", b"")):
            for auth in ({}, {"Authorization": "Bearer wrong"}):
                st, hdrs, _ = self.srv.request(method, path, body, auth)
                self.assertEqual(st, 401, (path, auth))
                self.assertIn("Bearer", hdrs.get("www-authenticate", ""))
        self.assertEqual(self.status(), (200, []))
        self.registered("a", r)
        self.assertEqual(len(self.status()[1]), 1)


class Inference(ShmCase):

    def run_case(self, dtype, lens_dtype, seed, rank4=True):
        """q, k, v, bias in dtype, lengths and mask, all from one region;
        output and weights into another; checked against the reference."""
        rng = np.random.default_rng(seed)
        B, H, Hkv, Lq, Lk, D, Dv = 2, 4, 2, 5, 7, 4, 3
        pre = (B, H) if rank4 else (B,)
        prek = (B, Hkv) if rank4 else (B,)
        q = rng.standard_normal(pre + (Lq, D))
        k = rng.standard_normal(prek + (Lk, D))
        v = rng.standard_normal(prek + (Lk, Dv))
        bias = rng.standard_normal((Lq, Lk))
        lens = rng.integers(0, Lk + 1, size=(B,))
        mask = rng.random((Lq, Lk)) < 0.8
        inp, out = self.region(64 << 10), self.region(16 << 10)
        name_in, name_out = "in-%s-%d" % (dtype, seed), "out-%s-%d" % (dtype, seed)
        self.registered(name_in, inp)
        self.registered(name_out, out)
        fill(out, 0xEE)
        pk = Packer(inp, name_in, 64)  # a request offset too
        inputs, seen = [], {}
        for name, arr, dt in (("query", q, dtype), ("key", k, dtype), ("value", v, dtype),
                              ("bias", bias, dtype), ("valid_lens", lens, lens_dtype),
                              ("mask", mask, "BOOL")):
            data, back = encode(arr, dt)
            off, size = pk.put(data)
            seen[name] = back.reshape(arr.shape)
            inputs.append(shm_input(name, dt, arr.shape, name_in, off, size))
        n_out = B * H * Lq * Dv if rank4 else B * Lq * Dv
        n_w = B * H * Lq * Lk if rank4 else B * Lq * Lk
        po = Packer(out, name_out)
        o_off, o_size = po.reserve(n_out * 4)
        w_off, w_size = po.reserve(n_w * 4 + 16)  # room to spare is fine
        req = {"id": "shm-%s" % dtype,
               "inputs": inputs,
               "outputs": [shm_output("output", name_out, o_off, o_size),
                           shm_output("weights", name_out, w_off, w_size)]}
        st, hdrs, body = self.infer(req)
        self.assertEqual(st, 200, body)
        self.assertNotIn("inference-header-content-length", hdrs)
        shape_o = list(pre) + [Lq, Dv]
        shape_w = list(pre) + [Lq, Lk]
        self.assertEqual(body["outputs"], [
            {"name": "output", "datatype": "FP32", "shape": shape_o},
            {"name": "weights", "datatype": "FP32", "shape": shape_w}])
        ref_out, ref_w = reference.attention({
            "query": nested(seen["query"]), "key": nested(seen["key"]),
            "value": nested(seen["value"]), "bias": nested(seen["bias"]),
            "valid_lens": [int(x) for x in lens], "mask": mask.tolist()})
        got_o = np.frombuffer(out.read(o_off, o_size), "<f4").reshape(shape_o)
        got_w = np.frombuffer(out.read(w_off, n_w * 4), "<f4").reshape(shape_w)
        self.assert_close(got_o.tolist(), ref_out, "%s output" % dtype)
        self.assert_close(got_w.tolist(), ref_w, "%s weights" % dtype)
        # masked and empty positions are exactly 0; the spare room untouched
        self.assertTrue(all(x == 0.0 for x, r in zip(got_w.ravel(), reference.flatten(ref_w))
                            if r == 0.0))
        self.assertEqual(out.read(w_off + n_w * 4, 16), b"\xee" * 16)

    def test_every_input_datatype_and_outputs_to_a_region(self):
        for i, (dt, lens) in enumerate((("FP32", "INT32"), ("FP64", "INT64"),
                                        ("FP16", "INT32"), ("BF16", "INT64"))):
            with self.subTest(dtype=dt):
                self.run_case(dt, lens, seed=10 + i)
        self.run_case("FP32", "INT64", seed=20, rank4=False)

    def test_sinks_slopes_offsets_from_a_region_and_lse_into_one(self):
        """sinks and alibi_slopes in every float type, cu_seqlens in INT32
        and INT64, from a region; output and lse (-inf as the float) into
        another."""
        rng = np.random.default_rng(5)
        H, Hkv, Lq, Lk, D, Dv = 4, 2, 6, 8, 4, 3
        q = rng.standard_normal((1, H, Lq, D))
        k = rng.standard_normal((1, Hkv, Lk, D))
        v = rng.standard_normal((1, Hkv, Lk, Dv))
        for i, (fdt, ldt, sinks) in enumerate((("FP32", "INT32", True), ("FP64", "INT64", False),
                                               ("FP16", "INT32", True),
                                               ("BF16", "INT64", False))):
            with self.subTest(dtype=fdt):
                inp, out = self.region(16 << 10), self.region(4 << 10)
                name_in, name_out = "vin-%d" % i, "vout-%d" % i
                self.registered(name_in, inp)
                self.registered(name_out, out)
                fill(out, 0xEE)
                pk = Packer(inp, name_in)
                tensors = [("query", q, "FP32"), ("key", k, "FP32"), ("value", v, "FP32"),
                           ("alibi_slopes", np.array([0.5, 0.25, 0.125, 0.0625]), fdt),
                           ("cu_seqlens_q", np.array([0, 2, 2, 6]), ldt),
                           ("cu_seqlens_k", np.array([0, 0, 5, 8]), ldt)]
                if sinks:
                    tensors.append(("sinks", np.array([0.5, -1.25, 2.0, 0.375]), fdt))
                inputs, seen = [], {}
                for name, arr, dt in tensors:
                    data, back = encode(arr, dt)
                    off, size = pk.put(data)
                    seen[name] = back.reshape(arr.shape)
                    inputs.append(shm_input(name, dt, arr.shape, name_in, off, size))
                po = Packer(out, name_out)
                o_off, o_size = po.reserve(H * Lq * Dv * 4)
                l_off, l_size = po.reserve(H * Lq * 4)
                st, _, body = self.infer({
                    "inputs": inputs,
                    "parameters": {"softcap": 2.0, "causal": "lower_right"},
                    "outputs": [shm_output("output", name_out, o_off, o_size),
                                shm_output("lse", name_out, l_off, l_size)]})
                self.assertEqual(st, 200, body)
                self.assertEqual(body["outputs"][1], {"name": "lse", "datatype": "FP32",
                                                      "shape": [1, H, Lq]})
                req = {"query": nested(seen["query"]), "key": nested(seen["key"]),
                       "value": nested(seen["value"]), "softcap": 2.0,
                       "causal": "lower_right",
                       "alibi_slopes": seen["alibi_slopes"].tolist(),
                       "cu_seqlens_q": [0, 2, 2, 6], "cu_seqlens_k": [0, 0, 5, 8]}
                if sinks:
                    req["sinks"] = seen["sinks"].tolist()
                ref_out, _ = reference.attention(req)
                ref_l = reference.flatten(reference.lse(req))
                got_o = np.frombuffer(out.read(o_off, o_size), "<f4").reshape(1, H, Lq, Dv)
                got_l = np.frombuffer(out.read(l_off, l_size), "<f4")
                self.assert_close(got_o.tolist(), ref_out, "%s output" % fdt)
                for n, (g, r) in enumerate(zip(got_l.tolist(), ref_l)):
                    if r == float("-inf"):
                        self.assertEqual(g, r, "%s lse[%d]" % (fdt, n))
                    else:
                        self.assertLessEqual(abs(g - r), 1e-5 + 1e-6 * abs(r),
                                             "%s lse[%d]: %r vs %r" % (fdt, n, g, r))
                # rows of the sequence without keys: the sink, or -inf
                self.assertEqual(got_l[0], 0.5 if sinks else float("-inf"))

    def test_additive_model_reads_its_weights_from_a_region(self):
        rng = np.random.default_rng(3)
        q, k, v = (rng.standard_normal(s) for s in ((1, 3, 4), (1, 5, 4), (1, 5, 2)))
        wq, wk, wv = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), rng.standard_normal(6)
        r = self.region(8192)
        self.registered("add", r)
        pk = Packer(r, "add")
        inputs, seen = [], {}
        for name, arr, dt in (("query", q, "FP16"), ("key", k, "FP32"), ("value", v, "FP64"),
                              ("w_q", wq, "BF16"), ("w_k", wk, "FP32"), ("w_v", wv, "FP16")):
            data, back = encode(arr, dt)
            inputs.append(shm_input(name, dt, arr.shape, "add", *pk.put(data)))
            seen[name] = nested(back.reshape(arr.shape))
        o_off, o_size = pk.reserve(3 * 2 * 4)
        st, _, body = self.infer({"inputs": inputs,
                                  "outputs": [shm_output("output", "add", o_off, o_size)]},
                                 model="additive_attention")
        self.assertEqual(st, 200, body)
        ref_out, _ = reference.attention(dict(seen, scoring="additive"))
        got = np.frombuffer(r.read(o_off, o_size), "<f4").reshape(1, 3, 2)
        self.assert_close(got.tolist(), ref_out, "additive output")

    def test_every_tensor_in_a_region_of_its_own(self):
        # the additive model's inputs that go together and all seven
        # outputs, each in its own region: more regions than any fixed
        # small count, every one of them found and held
        rng = np.random.default_rng(19)
        B, Lq, Lk, D, Dv, Hd = 1, 3, 5, 4, 2, 6
        ref = {"query": rng.standard_normal((B, Lq, D)), "key": rng.standard_normal((B, Lk, D)),
               "value": rng.standard_normal((B, Lk, Dv)), "w_q": rng.standard_normal((Hd, D)),
               "w_k": rng.standard_normal((Hd, D)), "w_v": rng.standard_normal(Hd),
               "bias": rng.standard_normal((B, Lq, Lk)), "sinks": np.array([0.25]),
               "mask": rng.random((B, Lq, Lk)) > 0.3, "valid_lens": np.array([4])}
        types = {"mask": "BOOL", "valid_lens": "INT32"}
        inputs, seen = [], {}
        for i, (name, arr) in enumerate(ref.items()):
            dt = types.get(name, "FP32")
            data, back = encode(arr, dt)
            r = self.region(4096)
            self.registered("in%d" % i, r)
            r.write(0, data)
            inputs.append(shm_input(name, dt, arr.shape, "in%d" % i, 0, len(data)))
            seen[name] = (back.reshape(arr.shape) if dt == "FP32" else arr).tolist()
        outputs, regions = [], {}
        for name in ("output", "weights", "lse") + reference.DIAGNOSTICS:
            regions[name] = r = self.region(4096)
            fill(r, 0xFF)
            self.registered("out_" + name, r)
            outputs.append(shm_output(name, "out_" + name, 0, 4096))
        self.assertGreater(len(inputs) + len(outputs), 16)
        st, _, body = self.infer({"inputs": inputs, "outputs": outputs},
                                 model="additive_attention")
        self.assertEqual(st, 200, body)
        req = dict(seen, scoring="additive", sinks=[0.25])
        ref_out, ref_w = reference.attention(req)
        ref_d = reference.diagnostics(req)
        for o in body["outputs"]:
            fmt = "<i4" if o["name"] == "allowed_keys" else "<f4"
            n = int(np.prod(o["shape"]))
            got = np.frombuffer(regions[o["name"]].read(0, 4 * n), fmt).reshape(o["shape"])
            want = {"output": ref_out, "weights": ref_w,
                    "lse": reference.lse(req)}.get(o["name"]) or ref_d[o["name"]]
            self.assert_close(got.tolist(), want, o["name"])

    def test_all_six_outputs_into_one_region_beside_a_json_one(self):
        req_ref = reference.rand_request(5, B=1, H=2, Lq=4, Lk=6, D=3, Dv=2)
        req_ref["valid_lens"] = [4]
        out = self.region(8192)
        self.registered("diag", out)
        fill(out, 0)
        inputs = [{"name": n, "datatype": "FP32", "shape": reference.shape_of(req_ref[n]),
                   "data": reference.flatten(req_ref[n])} for n in ("query", "key", "value")]
        inputs.append({"name": "valid_lens", "datatype": "INT32", "shape": [1], "data": [4]})
        sizes = {"output": 1 * 2 * 4 * 2, "weights": 1 * 2 * 4 * 6}
        pk = Packer(out, "diag")
        outputs, where = [], {}
        for name in ("output", "weights") + reference.DIAGNOSTICS[:3]:
            where[name] = pk.reserve(4 * sizes.get(name, 8))
            outputs.append(shm_output(name, "diag", *where[name]))
        # the last one travels in the answer, as JSON
        outputs.append({"name": "jacobian_norm", "parameters": {"binary_data": False}})
        st, _, body = self.infer({"inputs": inputs, "outputs": outputs})
        self.assertEqual(st, 200, body)
        ref_out, ref_w = reference.attention(req_ref)
        ref_d = reference.diagnostics(req_ref)
        for o in body["outputs"]:
            if o["name"] == "jacobian_norm":
                self.assertIn("data", o)
                self.assert_close(o["data"], ref_d["jacobian_norm"], "jacobian_norm json")
                continue
            self.assertEqual(set(o), {"name", "datatype", "shape"}, o)
            off, size = where[o["name"]]
            fmt = "<i4" if o["name"] == "allowed_keys" else "<f4"
            self.assertEqual(o["datatype"], "INT32" if fmt == "<i4" else "FP32")
            got = np.frombuffer(out.read(off, size), fmt).reshape(o["shape"]).tolist()
            want = {"output": ref_out, "weights": ref_w}.get(o["name"]) or ref_d[o["name"]]
            self.assert_close(got, want, o["name"])

    def test_regions_mix_with_json_and_binary_tensors(self):
        rng = np.random.default_rng(8)
        q, k, v = rng.standard_normal((1, 3, 4)), rng.standard_normal((1, 5, 4)), \
            rng.standard_normal((1, 5, 2))
        r = self.region(4096)
        self.registered("mix", r)
        pk = Packer(r, "mix")
        qb, qv = encode(q, "FP32")
        vb, vv = encode(v, "FP16")
        o_off, o_size = pk.reserve(3 * 2 * 4)
        header = json.dumps({
            "inputs": [shm_input("query", "FP32", q.shape, "mix", *pk.put(qb)),
                       {"name": "key", "datatype": "FP64", "shape": list(k.shape),
                        "data": k.ravel().tolist()},
                       {"name": "value", "datatype": "FP16", "shape": list(v.shape),
                        "parameters": {"binary_data_size": len(vb)}}],
            "outputs": [shm_output("output", "mix", o_off, o_size),
                        {"name": "weights", "parameters": {"binary_data": True}}]}).encode()
        st, hdrs, body = self.call("POST", INFER, header + vb,
                                   {"Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(st, 200, body[:300])
        hlen = int(hdrs["inference-header-content-length"])
        meta = json.loads(body[:hlen])
        self.assertEqual(meta["outputs"][0], {"name": "output", "datatype": "FP32",
                                              "shape": [1, 3, 2]})
        self.assertEqual(meta["outputs"][1]["parameters"], {"binary_data_size": 3 * 5 * 4})
        self.assertEqual(len(body), hlen + 60)  # only the weights follow
        ref_out, ref_w = reference.attention({
            "query": nested(qv.reshape(q.shape)), "key": nested(k.astype(np.float32)),
            "value": nested(vv.reshape(v.shape))})
        got = np.frombuffer(r.read(o_off, o_size), "<f4").reshape(1, 3, 2)
        self.assert_close(got.tolist(), ref_out, "output")
        self.assert_close(np.frombuffer(body[hlen:], "<f4").reshape(1, 3, 5).tolist(), ref_w,
                          "weights")

    def basic(self, region_name="b", q_extra=None, out=None):
        """A valid request's parts: q, k, v in region region_name at 0, 64,
        128 (shapes (1,2,2), (1,3,2), (1,3,2), FP32)."""
        def inp(name, shape, off):
            n = int(np.prod(shape)) * 4
            return shm_input(name, "FP32", shape, region_name, off, n)
        req = {"inputs": [inp("query", [1, 2, 2], 0), inp("key", [1, 3, 2], 64),
                          inp("value", [1, 3, 2], 128)]}
        if q_extra:
            req["inputs"][0]["parameters"].update(q_extra)
        if out:
            req["outputs"] = out
        return req

    def basic_region(self, name="b", size=4096, offset=0):
        r = self.region(size + offset)
        r.write(offset + 0, struct.pack("<4f", 1, 0, 0, 2))
        r.write(offset + 64, struct.pack("<6f", 1, 1, 2, 0, 0, 3))
        r.write(offset + 128, struct.pack("<6f", 1, 0, 0, 1, 1, 1))
        self.registered(name, r, offset, size)
        return r

    def test_triton_offset_and_size_rules(self):
        self.basic_region("b", size=4096)
        self.refused(404, "query: Unable to find shared memory region: 'nope'",
                     self.basic("b", {"shared_memory_region": "nope"}))
        self.refused(400, "query: Invalid offset for shared memory region: 'b'",
                     self.basic("b", {"shared_memory_offset": 4096, "shared_memory_byte_size": 0}))
        self.refused(400, "Integer overflow detected: byte_size (18446744073709551615) + offset "
                     "(8) exceeds maximum value (18446744073709551615) for region 'b'",
                     self.basic("b", {"shared_memory_offset": 8,
                                      "shared_memory_byte_size": 18446744073709551615}))
        self.refused(400, "query: Invalid offset + byte size for shared memory region: 'b'",
                     self.basic("b", {"shared_memory_offset": 4000,
                                      "shared_memory_byte_size": 200}))
        self.refused(400, "Unable to parse 'shared_memory_offset'",
                     self.basic("b", {"shared_memory_offset": -8}))
        self.refused(400, "Unable to parse 'shared_memory_region'",
                     self.basic("b", {"shared_memory_region": 3}))
        # whole in the double, not as written; 64.0 and 6.4e1 are 64
        exact = json.dumps(self.basic("b", {"shared_memory_offset": 64})).encode()
        self.refused(400, "Unable to parse 'shared_memory_offset'",
                     exact.replace(b'"shared_memory_offset": 64',
                                   b'"shared_memory_offset": 64.00000000000000001', 1))
        st, _, body = self.infer(exact.replace(b'"shared_memory_offset": 64',
                                               b'"shared_memory_offset": 6.4e1', 1))
        self.assertEqual(st, 200, body)
        req = self.basic("b")
        req["inputs"][0]["data"] = [1, 0, 0, 2]
        self.refused(400, "query: Input must set only one of the following fields: 'data', "
                     "'binary_data_size' in 'parameters', 'shared_memory_region' in "
                     "'parameters'. But set 'data' 'shared_memory_region'", req)
        # an output: binary_data true, classification, a missing region
        for params, phrase, status in (
                ({"binary_data": True}, "Output can't set both 'shared_memory_region' and "
                 "'binary_data'", 400),
                ({"classification": 2}, "Output can't set both 'shared_memory_region' and "
                 "'classification'", 400),
                ({"shared_memory_region": "gone"}, "Unable to find shared memory region: "
                 "'gone'", 404)):
            p = dict({"shared_memory_region": "b", "shared_memory_byte_size": 16,
                      "shared_memory_offset": 1024}, **params)
            self.refused(status, phrase, self.basic(
                "b", out=[{"name": "output", "parameters": p}]))
        # and the same request, well formed, works (offsets from the region)
        st, _, body = self.infer(self.basic("b"))
        self.assertEqual(st, 200, body)

    def test_registered_offset_and_request_offset_add_up(self):
        r = self.basic_region("off", size=4096, offset=8192)
        st, _, body = self.infer(self.basic("off", out=[
            shm_output("output", "off", 2048, 16)]))
        self.assertEqual(st, 200, body)
        got = struct.unpack("<4f", r.read(8192 + 2048, 16))
        want = self.basic_answer()
        for g, w in zip(got, want):
            self.assertAlmostEqual(g, w, places=5)

    def basic_answer(self):
        out, _ = reference.attention({"query": [[[1, 0], [0, 2]]],
                                      "key": [[[1, 1], [2, 0], [0, 3]]],
                                      "value": [[[1, 0], [0, 1], [1, 1]]]})
        return reference.flatten(out)

    def test_input_byte_size_must_match_exactly(self):
        self.basic_region("b")
        for size in (8, 32):
            err = self.refused(400, "input byte size mismatch for input 'query' for model "
                               "'attention'. Expected 16, got %d" % size,
                               self.basic("b", {"shared_memory_byte_size": size}))
            self.assertTrue(err.startswith("[request id: <id_unknown>] "), err)
        req = self.basic("b", {"shared_memory_byte_size": 8})
        req["id"] = "r-9"
        self.refused(400, "[request id: r-9] input byte size mismatch", req)
        req = self.basic("b")
        del req["inputs"][0]["parameters"]["shared_memory_byte_size"]
        self.refused(400, "Expected 16, got 0", req)
        # 2^62 FP32 elements are 2^64 bytes: a wrapped count would be 0
        req = self.basic("b", {"shared_memory_byte_size": 0})
        for i, shape in enumerate(([1 << 30, 1 << 30, 4], [1 << 30, 3, 4], [1 << 30, 3, 2])):
            req["inputs"][i]["shape"] = shape
        self.refused(400, "input byte size mismatch for input 'query' for model 'attention'. "
                     "Expected more than 18446744073709551615, got 0", req)

    def test_output_region_too_small_writes_nothing(self):
        r = self.basic_region("b")
        r.write(1024, b"\xab" * 64)
        self.refused(400, "shared memory size specified with the request for output 'output' "
                     "(12 bytes) should be at least 16 bytes to hold the results",
                     self.basic("b", out=[shm_output("output", "b", 1024, 12)]))
        self.assertEqual(r.read(1024, 64), b"\xab" * 64)

    def test_a_failed_request_writes_nothing(self):
        r = self.basic_region("b")
        r.write(1024, b"\xab" * 64)
        out = [shm_output("output", "b", 1024, 16)]
        # a bad value in another input: refused before anything runs
        r.write(64 + 4, struct.pack("<f", float("nan")))
        self.refused(400, "key[0][0][1]: FP32 value is not finite", self.basic("b", out=out))
        r.write(64 + 4, struct.pack("<f", 1.0))
        # the deadline passed before it ran
        req = self.basic("b", out=out)
        req["parameters"] = {"timeout": 1}
        st, _, body = self.infer(req)
        self.assertEqual(st, 504, body)
        self.assertEqual(r.read(1024, 64), b"\xab" * 64)
        st, _, body = self.infer(self.basic("b", out=out))
        self.assertEqual(st, 200, body)
        self.assertNotEqual(r.read(1024, 16), b"\xab" * 16)

    def test_bad_values_in_a_region_are_refused_by_name(self):
        r = self.basic_region("b")
        for dt, data, phrase in (
                ("FP16", struct.pack("<4e", 1, 0, float("inf"), 2), "query[0][1][0]: FP16 value"),
                ("FP64", struct.pack("<4d", 1, 0, 1e300, 2), "query[0][1][0]: FP64 value"),
                ("FP32", struct.pack("<4f", 1, float("nan"), 0, 2), "query[0][0][1]: FP32 value")):
            r.write(2048, data)
            req = self.basic("b")
            req["inputs"][0].update(datatype=dt, parameters=shm_params("b", 2048, len(data)))
            self.refused(400, phrase, req)
        r.write(2048, struct.pack("<q", 9))
        req = self.basic("b")
        req["inputs"].append(shm_input("valid_lens", "INT64", [1], "b", 2048, 8))
        self.refused(400, "valid_lens[0]=9 exceeds key length", req)
        r.write(2048, bytes([1, 2, 1]))
        req = self.basic("b")
        req["inputs"].append(shm_input("mask", "BOOL", [3], "b", 2048, 3))
        self.refused(400, "mask[1]: BOOL byte 2 is neither 0 nor 1", req)


if __name__ == "__main__":
    harness.main()
