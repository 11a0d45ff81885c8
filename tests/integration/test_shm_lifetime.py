"""Triton's system shared memory extension against the real attnd, when the
objects change under it (the regions, tensors and server of test_shm.py):

  * objects truncated, or removed and truncated, after registration
    (attnd maps regions: a caught SIGBUS), also in the middle of an input
    and under an output: a 4xx for the request that touches them, no
    output written, and the server keeps serving;
  * a region unregistered while a queued request holds it (deferred, as
    in Triton), a refused request's regions let go before its answer,
    concurrent requests sharing regions, and a client writing
    NaN into an input while requests read it (the core never sees it);
  * inputs read in place: the object emptied, unregistered and unlinked,
    or written with NaN while the core reads it.

Needs numpy: importing test_shm runs this file again with Debian's
/usr/bin/python3 under a python3 without it.
"""

import json
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import reference  # noqa: E402
from test_shm import (SHM, Packer, ShmCase, encode, nested, np, shm_input,  # noqa: E402
                      shm_output)


class Lifetime(ShmCase):

    def good_request(self):
        """A region and a request that reads it and writes into it."""
        r = self.region(4096)
        name = "good-%d" % len(self.regions)
        r.write(0, struct.pack("<4f", 1, 0, 0, 2) + struct.pack("<6f", 1, 1, 2, 0, 0, 3) +
                struct.pack("<6f", 1, 0, 0, 1, 1, 1))
        self.registered(name, r)
        req = {"inputs": [shm_input("query", "FP32", [1, 2, 2], name, 0, 16),
                          shm_input("key", "FP32", [1, 3, 2], name, 16, 24),
                          shm_input("value", "FP32", [1, 3, 2], name, 40, 24)],
               "outputs": [shm_output("output", name, 1024, 16)]}
        return r, name, req

    def assert_serving(self):
        r, _, req = self.good_request()
        st, _, body = self.infer(req)
        self.assertEqual(st, 200, body)
        out, _ = reference.attention({"query": [[[1, 0], [0, 2]]],
                                      "key": [[[1, 1], [2, 0], [0, 3]]],
                                      "value": [[[1, 0], [0, 1], [1, 1]]]})
        got = struct.unpack("<4f", r.read(1024, 16))
        for g, w in zip(got, reference.flatten(out)):
            self.assertAlmostEqual(g, w, places=5)

    def test_truncated_to_zero(self):
        r, name, req = self.good_request()
        r.truncate(0)
        err = self.refused(400, "shared memory region '%s'" % name, req)
        self.assertIn("truncated", err)
        self.assert_serving()
        self.assertIn(name, [x["name"] for x in self.status()[1]])
        self.assertEqual(self.call("POST", SHM + "/region/%s/unregister" % name)[0], 200)

    def test_unlinked_then_truncated(self):
        r, name, req = self.good_request()
        r.unlink()
        r.truncate(0)
        self.refused(400, "truncated", req)
        self.assert_serving()

    def test_output_beyond_a_shortened_object(self):
        r, name, req = self.good_request()
        r.truncate(512)  # the inputs are still there, the output's place not
        err = self.refused(400, "shared memory region '%s'" % name, req)
        self.assertIn("too short for the output", err)
        self.assert_serving()

    def test_cut_inside_an_input(self):
        """The object ends at a page boundary in the middle of an input:
        the copy faults part-way, in the plain FP32 copy and in the FP16
        one that converts a chunk at a time; the output is not written."""
        r, out = self.region(5 * 4096), self.region(4096)
        q = struct.pack("<4f", 1, 0, 0, 2)
        k = np.tile(np.float32([1, 1, 2, 0]), 2000)[:2000].astype("<f4")
        v = np.tile(np.float16([1, 0, 0, 1]), 1000)[:2000].astype("<f2")
        r.write(0, q)
        r.write(4000, k.tobytes())       # bytes 4000..12000: pages 0 to 2
        r.write(14000, v.tobytes())      # bytes 14000..18000: pages 3 and 4
        out.write(0, b"\xab" * 64)
        self.registered("cut", r)
        self.registered("cut-out", out)
        req = {"inputs": [shm_input("query", "FP32", [1, 2, 2], "cut", 0, 16),
                          shm_input("key", "FP32", [1, 1000, 2], "cut", 4000, 8000),
                          shm_input("value", "FP16", [1, 1000, 2], "cut", 14000, 4000)],
               "outputs": [shm_output("output", "cut-out", 0, 16)]}
        st, _, body = self.infer(req)
        self.assertEqual(st, 200, body)
        out.write(0, b"\xab" * 64)
        for size in (4 * 4096, 2 * 4096):  # into the value, then the key
            r.truncate(size)
            err = self.refused(400, "shared memory region 'cut'", req)
            self.assertIn("truncated", err)
            self.assertIn(r.key, err)
            self.assertEqual(out.read(0, 64), b"\xab" * 64)
        self.assert_serving()

    def test_output_region_emptied_writes_no_output(self):
        """Two outputs in two regions, the second's object emptied: a 4xx
        naming it, the first output not written either, and the server
        keeps serving."""
        r, name, req = self.good_request()
        o1, o2 = self.region(4096), self.region(4096)
        o1.write(0, b"\xab" * 64)
        self.registered("o1", o1)
        self.registered("o2", o2)
        req["outputs"] = [shm_output("output", "o1", 0, 16),
                          shm_output("weights", "o2", 0, 24)]
        o2.truncate(0)
        err = self.refused(400, "shared memory region 'o2'", req)
        self.assertIn("too short for the output", err)
        self.assertEqual(o1.read(0, 64), b"\xab" * 64)
        self.assert_serving()
        self.assertEqual(sorted(x["name"] for x in self.status()[1] if x["name"][0] == "o"),
                         ["o1", "o2"])

    def test_registering_a_shortened_object_is_refused(self):
        r = self.region(8192)
        r.truncate(4096)
        st, body = self.register("short", r, 0, 8192)
        self.assertEqual(st, 400)
        self.assertIn("invalid args", json.loads(body)["error"])


class Deferred(ShmCase):
    """A queued request holds its regions: a batch of this shape waits
    1.5 s to fill, so an unregister arrives while the request is held."""
    server_args = ("--workers", "1", "--allow-client-shm", "1",
                   "--max-delay-us", "1500000", "--max-batch", "8")

    def test_unregister_waits_for_the_request(self):
        r = self.region(4096)
        r.write(0, struct.pack("<4f", 1, 0, 0, 2) + struct.pack("<6f", 1, 1, 2, 0, 0, 3) +
                struct.pack("<6f", 1, 0, 0, 1, 1, 1))
        fill_out = b"\xab" * 16
        r.write(1024, fill_out)
        self.registered("held", r)
        req = {"inputs": [shm_input("query", "FP32", [1, 2, 2], "held", 0, 16),
                          shm_input("key", "FP32", [1, 3, 2], "held", 16, 24),
                          shm_input("value", "FP32", [1, 3, 2], "held", 40, 24)],
               "outputs": [shm_output("output", "held", 1024, 16)]}
        answer = {}
        t = threading.Thread(target=lambda: answer.update(r=self.infer(req)))
        t0 = time.monotonic()
        t.start()
        deadline = time.time() + 30
        while not self.queued() and time.time() < deadline:
            time.sleep(0.01)
        self.assertTrue(self.queued(), "the request never queued")
        self.assertEqual(self.call("POST", SHM + "/region/held/unregister")[0], 200)
        # as in Triton: listed, the name taken, until the request is done
        self.assertEqual([x["name"] for x in self.status()[1]], ["held"])
        st, body = self.register("held", r)
        self.assertEqual(st, 400)
        self.assertIn("already in manager", json.loads(body)["error"])
        t.join(60)
        st, _, body = answer["r"]
        self.assertEqual(st, 200, body)
        self.assertGreater(time.monotonic() - t0, 1.0)  # it did wait
        self.assertNotEqual(r.read(1024, 16), fill_out)  # and wrote
        self.assertEqual(self.status(), (200, []))
        self.registered("held", r)

    def queued(self):
        _, _, body = self.call("GET", "/metrics")
        for line in body.decode().splitlines():
            if line.startswith("attnd_queue_depth "):
                return float(line.split()[1]) >= 1
        return False


class LetGoBeforeTheAnswer(harness.UnixSocketServer, ShmCase):
    """A request lets its regions go before its client hears the answer,
    a refusal too, not at its end after the answer is written: attnd-test
    holds every request's end 3 s (ATTND_TEST_END_DELAY_MS), and eight
    HTTP threads give each of the test's connections, over the Unix
    socket (the least loaded thread), a thread of its own."""
    server_args = ("--workers", "1", "--allow-client-shm", "1", "--http-threads", "8")
    server_env = {"ATTND_TEST_END_DELAY_MS": "3000"}
    server_binary = harness.TEST_BINARY

    def call(self, method, path, obj=None, headers=None):
        body = obj if isinstance(obj, (bytes, type(None))) else json.dumps(obj).encode()
        if method == "POST" and body is None:
            body = b""
        conn = harness.UnixHTTPConnection(self.sock, timeout=60)
        try:
            return harness.exchange(conn, method, path, body, headers or {})
        finally:
            conn.close()

    def test_a_refused_request_lets_its_region_go_before_its_answer(self):
        r, name, req = Lifetime.good_request(self)
        req["outputs"] = [shm_output("output", name, 1024, 12)]  # too small
        t0 = time.monotonic()
        st, _, body = self.infer(req)
        self.assertEqual(st, 400, body)
        self.assertEqual(self.call("POST", SHM + "/region/%s/unregister" % name)[0], 200)
        self.assertEqual(self.status(), (200, []))
        self.registered(name, r)
        if time.monotonic() - t0 >= 3.0:
            self.skipTest("the machine took 3 s, past the refused request's end")
        req["outputs"] = [shm_output("output", name, 1024, 16)]
        st, _, body = self.infer(req)
        self.assertEqual(st, 200, body)
        self.assertEqual(self.call("POST", SHM + "/region/%s/unregister" % name)[0], 200)
        self.registered(name, r)


class Concurrency(ShmCase):

    def test_concurrent_requests_share_regions(self):
        rng = np.random.default_rng(11)
        q, k, v = (rng.standard_normal(s) for s in ((1, 2, 16, 8), (1, 2, 24, 8), (1, 2, 24, 8)))
        inp, out = self.region(64 << 10), self.region(256 << 10)
        self.registered("cin", inp)
        self.registered("cout", out)
        pk = Packer(inp, "cin")
        inputs, seen = [], {}
        for name, arr in (("query", q), ("key", k), ("value", v)):
            data, back = encode(arr, "FP32")
            inputs.append(shm_input(name, "FP32", arr.shape, "cin", *pk.put(data)))
            seen[name] = nested(back.reshape(arr.shape))
        ref_out, _ = reference.attention(seen)
        n_out = 2 * 16 * 8 * 4
        errors = []

        def client(c):
            for i in range(10):
                off = (c * 10 + i) * n_out
                st, _, body = self.infer({"inputs": inputs, "outputs": [
                    shm_output("output", "cout", off, n_out)]})
                if st != 200:
                    errors.append((c, i, st, body))
        threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        for slot in range(80):
            got = np.frombuffer(out.read(slot * n_out, n_out), "<f4").reshape(1, 2, 16, 8)
            self.assert_close(got.tolist(), ref_out, "slot %d" % slot)

    def test_a_client_writing_nan_mid_request_never_reaches_the_core(self):
        """One key element flips between 0.5 and NaN as fast as Python can
        write it while requests read the key: each answer is either a 400
        naming the NaN, or a 200 whose output is the reference's for 0.5:
        what attnd checked is what it computed with."""
        def send(inputs):
            return self.infer({"inputs": inputs, "outputs": [
                {"name": "output", "parameters": {"binary_data": False}}]})[::2]

        def check(st, body, ref):
            if st == 200:
                got = np.asarray(body["outputs"][0]["data"], np.float64)
                self.assertTrue(np.all(np.isfinite(got)))
                self.assertTrue(np.all(np.abs(got - ref.ravel()) <=
                                       1e-5 + 1e-5 * np.abs(ref.ravel())))
        nan_race(self, "race", send, check)


def nan_race(case, name, send, check):
    """Requests for 4 s, each send(inputs) -> (status, body) over q, k, v
    of (1,4,8,16), (1,4,512,16), (1,4,512,16) in region name, while one key
    element, [0][3][511][15], flips between 0.5 and NaN as fast as Python
    can write it: every answer a 200 or a 400 naming that element, each
    then judged by check(status, body, the float64 reference's output for
    0.5), and more than 10 of them."""
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal(s) for s in ((1, 4, 8, 16), (1, 4, 512, 16),
                                                  (1, 4, 512, 16)))
    k[0, 3, 511, 15] = 0.5
    r = case.region(1 << 20)
    case.registered(name, r)
    pk = Packer(r, name)
    inputs, seen = [], {}
    for tensor, arr in (("query", q), ("key", k), ("value", v)):
        data, back = encode(arr, "FP32")
        off, size = pk.put(data)
        if tensor == "key":
            flip = off + size - 4
        inputs.append(shm_input(tensor, "FP32", arr.shape, name, off, size))
        seen[tensor] = nested(back.reshape(arr.shape))
    ref_out, _ = reference.attention(seen)
    ref = np.asarray(ref_out, np.float64)
    stop = threading.Event()
    good, nan = struct.pack("<f", 0.5), struct.pack("<f", float("nan"))

    def writer():
        while not stop.is_set():
            r.write(flip, nan)
            r.write(flip, good)
    t = threading.Thread(target=writer)
    t.start()
    counts = {200: 0, 400: 0}
    try:
        deadline = time.time() + 4
        while time.time() < deadline:
            st, body = send(inputs)
            case.assertIn(st, (200, 400), body)
            counts[st] += 1
            if st == 400:
                case.assertIn("key[0][3][511][15]: FP32 value is not finite",
                              body["error"])
            check(st, body, ref)
    finally:
        stop.set()
        t.join()
    case.assertGreater(counts[200] + counts[400], 10, counts)


class InPlace(ShmCase):
    """FP32 inputs read where they lie in their region, when the answer
    prints no number: the core reads the client's mapping, inside a SIGBUS
    guard on every thread that computes."""
    server_args = ShmCase.server_args + ("--max-request-gflop", "1000")

    # (1, 1, L, L, 1): seconds of the core's work on two workers, with
    # inputs of 4 L bytes each.  Value all 0.75, so every output is 0.75
    # (a weighted mean of equal values, up to rounding) whatever the
    # weights.
    L = 60000

    def long_request(self):
        n = self.L * 4
        r, out = self.region(3 * n), self.region(n)
        rng = np.random.default_rng(21)
        r.write(0, rng.standard_normal(2 * self.L).astype("<f4").tobytes())
        r.write(2 * n, np.full(self.L, 0.75, "<f4").tobytes())
        out.write(0, b"\xab" * n)
        self.registered("long", r)
        self.registered("long-out", out)
        shape = [1, 1, self.L, 1]
        req = {"inputs": [shm_input("query", "FP32", shape, "long", 0, n),
                          shm_input("key", "FP32", shape, "long", n, n),
                          shm_input("value", "FP32", shape, "long", 2 * n, n)],
               "outputs": [shm_output("output", "long-out", 0, n)]}
        return r, out, req

    def start(self, req):
        """Sends req on a thread; (answer dict, thread); answer gets the
        reply and the time it came."""
        answer = {}

        def run():
            answer["r"] = self.infer(req)
            answer["t"] = time.monotonic()
        t = threading.Thread(target=run)
        t.start()
        return answer, t

    def test_truncated_while_the_core_reads_it(self):
        """The object emptied while the core computes with its inputs:
        the request gets a 400, the output is not written, the server
        keeps serving (a read in place that faulted outside the guard
        would have killed it)."""
        r, out, req = self.long_request()
        answer, t = self.start(req)
        time.sleep(0.5)
        if "r" in answer:
            t.join()
            self.skipTest("the request was computed in under 0.5 s")
        cut = time.monotonic()
        r.truncate(0)
        t.join(120)
        st, _, body = answer["r"]
        if st == 200 and answer["t"] - cut < 0.05:
            self.skipTest("the core finished as the object was emptied")
        self.assertEqual(st, 400, body)
        self.assertIn("lost pages while the request was computed", body["error"])
        self.assertEqual(out.read(0, 64), b"\xab" * 64)
        self.assert_serving()

    def test_unregistered_and_unlinked_while_the_core_reads_it(self):
        """The region unregistered and its object unlinked mid-compute:
        the request's hold keeps the mapping, and its answer is whole."""
        r, out, req = self.long_request()
        answer, t = self.start(req)
        time.sleep(0.5)
        self.assertEqual(self.call("POST", SHM + "/region/long/unregister")[0], 200)
        r.unlink()
        t.join(120)
        st, _, body = answer["r"]
        self.assertEqual(st, 200, body)
        got = np.frombuffer(out.read(0, self.L * 4), "<f4")
        self.assertLess(np.max(np.abs(got - 0.75)), 1e-4, got[:8])
        self.assertNotIn("long", [x["name"] for x in self.status()[1]])

    def test_a_client_writing_nan_mid_request_changes_only_its_answer(self):
        """nan_race with the output into a region, so that the key is read
        in place: each answer a 400 naming the NaN (seen by the check),
        the output untouched, or a 200 that wrote the whole output, the
        heads that do not read the element exactly the reference's; and
        the server keeps serving."""
        out = self.region(4096)
        self.registered("race2-out", out)
        n_out = 4 * 8 * 16 * 4

        def send(inputs):
            out.write(0, b"\xab" * n_out)
            return self.infer({"inputs": inputs, "outputs": [
                shm_output("output", "race2-out", 0, n_out)]})[::2]

        def check(st, body, ref):
            got = out.read(0, n_out)
            if st == 400:
                self.assertEqual(got, b"\xab" * n_out)
                return
            self.assertNotIn(b"\xab\xab\xab\xab", got)
            got = np.frombuffer(got, "<f4").reshape(4, 8 * 16)
            want = ref.reshape(4, 8 * 16)[:3]
            self.assertTrue(np.all(np.abs(got[:3] - want) <= 1e-5 + 1e-5 * np.abs(want)))
        nan_race(self, "race2", send, check)
        self.assert_serving()

    def assert_serving(self):
        Lifetime.assert_serving(self)

    def good_request(self):
        return Lifetime.good_request(self)


if __name__ == "__main__":
    harness.main()