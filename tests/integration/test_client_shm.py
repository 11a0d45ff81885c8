"""attnd_client's system shared memory support (Triton's extension) against
the real build/attnd started with --allow-client-shm 1.

The client is installed with pip into a venv as test_client.py does (its
install_client).  Regions are real POSIX shared memory objects that the
client's SharedMemoryRegion creates; the tests register them, run
inferences whose inputs attnd reads from them and whose outputs it writes
into them, and check the results against the float64 reference
(reference.py): every input in shared memory, a mix of shared memory and
binary inputs in FP32, FP16 and BF16, outputs read back through the
region or returned as ShmTensor, regions registered at a page offset,
status, unregistering one region and all, and the errors: a name
registered twice, an unknown region, a missing object, the extension
disabled (501 without --allow-client-shm).  Every test runs on
AttndClient and on AsyncAttndClient (test_client.OnAsyncio).
"""

import os

import harness
import test_client as tc
from reference import rand_request

try:
    import numpy as np
except ImportError:  # run_under_capable_python reruns this under Debian's python3
    np = None


def setUpModule():
    tc.install_client()


def rounded32(req):
    return {n: tc.rounded(t, "FP32") for n, t in req.items()}


class ShmCase(tc.Case):
    server_args = ("--workers", "2", "--allow-client-shm", "1")

    def setUp(self):
        self.addCleanup(self.c.unregister_system_shared_memory)

    def region(self, name, byte_size):
        r = tc.attnd_client.SharedMemoryRegion(name, byte_size)
        self.addCleanup(r.unlink)
        self.addCleanup(r.close)
        return r

    def registered(self, region):
        self.c.register_system_shared_memory(region.name, region.key, region.byte_size)
        return region


class ShmTest(ShmCase):
    def test_register_status_and_unregister(self):
        a = self.registered(self.region("a", 4096))
        b = self.registered(self.region("b", 8192))
        st = self.c.get_system_shared_memory_status()
        self.assertEqual(st, [{"name": "a", "key": a.key, "offset": 0, "byte_size": 4096},
                              {"name": "b", "key": b.key, "offset": 0, "byte_size": 8192}])
        self.assertEqual(self.c.get_system_shared_memory_status("b"), st[1:])
        with self.assertRaises(tc.AttndError) as cm:
            self.c.register_system_shared_memory("a", b.key, 4096)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("'a'", cm.exception.message)
        self.c.unregister_system_shared_memory("a")
        with self.assertRaises(tc.AttndError) as cm:
            self.c.get_system_shared_memory_status("a")
        self.assertEqual(cm.exception.status, 404)
        self.c.unregister_system_shared_memory("never-registered")  # not an error
        self.c.unregister_system_shared_memory()
        self.assertEqual(self.c.get_system_shared_memory_status(), [])

    def test_every_input_and_output_in_shared_memory(self):
        req = rand_request(51, B=2, H=2, Lq=3, Lk=5, D=4, Dv=3)
        lens = [[5, 1, 0], [3, 5, 2]]
        arrays = {n: np.asarray(t, np.float32) for n, t in req.items()}
        arrays["valid_lens"] = np.asarray(lens, np.int32)
        inp, placed = tc.attnd_client.SharedMemoryRegion.from_arrays("in", arrays)
        self.addCleanup(inp.unlink)
        self.addCleanup(inp.close)
        self.registered(inp)
        self.assertEqual(placed["query"].datatype, "FP32")
        self.assertEqual(placed["valid_lens"].datatype, "INT32")
        self.assertEqual(placed["key"].offset % 64, 0)
        out = self.registered(self.region("out", 4096))
        o = out.output(4 * 2 * 2 * 3 * 3, 0)
        w = out.output(4 * 2 * 2 * 3 * 5, 1024)
        res = self.c.infer("attention", placed, outputs={"output": o, "weights": w},
                           parameters={"causal": True})
        ref = dict(rounded32(req), valid_lens=lens, causal=True)
        self.check(res, ref)
        for entry in self.c.last_response["outputs"]:
            self.assertEqual(sorted(entry), ["datatype", "name", "shape"])
        # the values stay in the region; a ShmTensor without the mapping
        # comes back with the shape and datatype attnd reported
        bare = tc.attnd_client.ShmTensor("out", o.byte_size, 2048)
        res2 = self.c.infer("attention", placed, outputs={"output": bare},
                            parameters={"causal": True})
        got = res2["output"]
        self.assertIsInstance(got, tc.attnd_client.ShmTensor)
        self.assertEqual((got.region, got.offset, got.shape, got.datatype),
                         ("out", 2048, (2, 2, 3, 3), "FP32"))
        self.assert_close(out.read(got.shape, got.datatype, got.offset),
                          tc.attention(ref)[0], "output read from the region")
        self.assertEqual(out.read([2, 2, 3, 3], "FP32", 0).tolist(),
                         res["output"].tolist())

    def test_shared_memory_mixed_with_binary_and_json(self):
        req = rand_request(52, B=1, Lq=4, Lk=6, D=8, Dv=2)
        region = self.registered(self.region("mix", 1 << 16))
        for dt, np_dt in (("FP32", np.float32), ("FP16", np.float16), ("BF16", np.float32)):
            q = region.put("query", np.asarray(req["query"], np_dt), 0,
                           datatype=dt if dt == "BF16" else None)
            self.assertEqual(q.datatype, dt)
            mask = region.put("mask", [[[1, 0, 1, 1, 1, 0]]], q.end_aligned())
            out = region.output(4 * 4 * 2, mask.end_aligned())
            for binary in (True, False):
                res = self.c.infer("attention", {"query": q, "key": req["key"],
                                                 "value": req["value"], "mask": mask},
                                   outputs={"output": out, "weights": None}, binary=binary)
                qv = tc.rounded(np.asarray(req["query"], np_dt).astype(np.float64).tolist(),
                                dt)
                ref = dict(rounded32(dict(req, query=qv)),
                           mask=[[[True, False, True, True, True, False]]])
                with self.subTest(dt=dt, binary=binary):
                    self.check(res, ref)
                    self.assertEqual(list(res), ["output", "weights"])

    def test_region_registered_at_a_page_offset(self):
        page = os.sysconf("SC_PAGE_SIZE")
        req = rand_request(53, B=1, Lq=2, Lk=3, D=2, Dv=2)
        obj = self.region("paged", 2 * page)
        # the tensors start at the registered offset: their own offsets
        # count from there
        q = np.asarray(req["query"], np.float32)
        data = tc.attnd_client.encode_tensor(q, "FP32")
        obj.buf[page:page + len(data)] = data
        self.c.register_system_shared_memory("paged", obj.key, page, offset=page)
        self.assertEqual(self.c.get_system_shared_memory_status("paged")[0]["offset"], page)
        qt = tc.attnd_client.ShmTensor("paged", len(data), 0, q.shape, "FP32")
        res = self.c.infer("attention", {"query": qt, "key": req["key"], "value": req["value"]})
        self.check(res, rounded32(req))

    def test_with_block_removes_the_object_while_a_view_holds_it(self):
        """Leaving a region's with block removes the POSIX object even when
        a numpy view of buf keeps the mapping (close() refuses to unmap
        it, BufferError); attnd's mapping of the registered region stays."""
        req = rand_request(57, B=1, Lq=2, Lk=3)
        with self.assertRaises(BufferError):
            with tc.attnd_client.SharedMemoryRegion("viewed", 4096) as region:
                self.registered(region)
                qt = region.put("query", req["query"])
                view = np.frombuffer(region.buf, np.float32)
        self.assertFalse(os.path.exists("/dev/shm" + region.key))
        self.assertEqual(view[:2].tolist(), tc.rounded(req["query"], "FP32")[0][0][:2])
        self.check(self.c.infer("attention", dict(req, query=qt)), rounded32(req))
        region.unlink()  # again: nothing left to remove
        del view

    def test_errors(self):
        req = rand_request(54, B=1, Lq=2, Lk=3)
        q = tc.attnd_client.ShmTensor("nowhere", 4 * 2 * 4, 0, (1, 2, 4), "FP32")
        with self.assertRaises(tc.AttndError) as cm:
            self.c.infer("attention", dict(req, query=q))
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("nowhere", cm.exception.message)
        with self.assertRaises(tc.AttndError) as cm:
            self.c.register_system_shared_memory("ghost", "/attnd-client-test-no-such", 64)
        self.assertGreaterEqual(cm.exception.status, 400)
        self.assertLess(cm.exception.status, 500)
        region = self.registered(self.region("small", 4096))
        qt = region.put("query", req["query"])
        # a byte size that does not match the shape
        with self.assertRaises(tc.AttndError) as cm:
            self.c.infer("attention", dict(req, query=tc.attnd_client.ShmTensor(
                "small", qt.byte_size + 4, 0, qt.shape, "FP32")))
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(ValueError):
            self.c.infer("attention", dict(req, query=tc.attnd_client.ShmTensor("small", 32)))
        with self.assertRaises(tc.AttndInputError) as cm:
            region.put("query", [[[1.0, float("nan")]]])
        self.assertEqual(cm.exception.message,
                         "query[0][0][1]: FP32 value is not finite (infinity or NaN)")


class ShmDisabledTest(tc.Case):
    server_args = ("--workers", "1")

    def test_register_needs_allow_client_shm(self):
        with tc.attnd_client.SharedMemoryRegion("r", 4096) as r:
            with self.assertRaises(tc.AttndError) as cm:
                self.c.register_system_shared_memory("r", r.key, 4096)
            self.assertEqual(cm.exception.status, 501)
            self.assertIn("allow-client-shm", cm.exception.message)
        self.assertEqual(self.c.get_system_shared_memory_status(), [])


class AsyncShmTest(tc.OnAsyncio, ShmTest):
    """The same, with AsyncAttndClient."""


class AsyncShmDisabledTest(tc.OnAsyncio, ShmDisabledTest):
    """The same, with AsyncAttndClient."""


if __name__ == "__main__":
    tc.run_under_capable_python(__file__)
    harness.main()
