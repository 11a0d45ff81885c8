"""Batch invariance: a request's answer is bit-for-bit the same whatever
it is batched with, against the real build/attnd.

Each target request (five shapes: a small rank-3 one with lengths and a
causal mask; grouped heads with a mask and a bias; one long enough to span
several query tasks and two key blocks, large enough that idle workers
help with it, with per-query lengths and dropout; additive scoring; packed
sequences with grouped heads, sinks, soft-capping, ALiBi and a
lower-right window, answering its lse too) is
sent with and without its weights (the weights path and the online path),
over /v1 JSON, v2 binary and v2 JSON, to four daemons:

  w1-queued     --workers 1 --inline-us 0       every request queued
  w2            --workers 2                     small ones run inline
  w2-batched    --workers 2 --inline-us 0 --max-delay-us 3000 --max-batch 8
                                                batches of several requests
  w1-inline     --workers 1 --inline-us 1000000 every request inline

each time alone, then in rounds with other requests in flight: requests
of the same shape with other values (its batch mates), of the other
shapes, and the long one (which takes the idle workers as helpers).
Every answer's output (and weights) must have the same float32 bits as
the first; a /v1 number is read as the float32 its decimal rounds to,
exactly.  The first answer of each target also matches the float64
reference, so a constant answer could not pass.  The batched daemon must
show batches of more than one request in /metrics.

The no-weights path's output is compared with itself only: it is a
different summation (online softmax), equal to the weights path's within
the reference tolerance, not bit for bit.
"""

import json
import random
import re
import struct
import threading
import unittest
from decimal import Decimal

import harness
from reference import attention, flatten, lse, nest, shape_of

ROUNDS = 1 if harness.VALGRIND else 3

CONFIGS = (
    ("w1-queued", ("--workers", "1", "--inline-us", "0")),
    ("w2", ("--workers", "2")),
    ("w2-batched", ("--workers", "2", "--inline-us", "0", "--max-delay-us", "3000",
                    "--max-batch", "8")),
    ("w1-inline", ("--workers", "1", "--inline-us", "1000000")),
)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def tensor(rng, shape, scale=1.0):
    """Nested lists of float32-exact values."""
    n = 1
    for d in shape:
        n *= d
    return nest([f32(rng.gauss(0.0, scale)) for _ in range(n)], list(shape))


def make_request(kind, seed):
    """A /v1 request dict of one of the four shapes, values from seed."""
    rng = random.Random(seed)
    if kind == "small":
        return {"query": tensor(rng, (2, 3, 4)), "key": tensor(rng, (2, 5, 4)),
                "value": tensor(rng, (2, 5, 3)), "valid_lens": [4, 5], "causal": True}
    if kind == "gqa":
        return {"query": tensor(rng, (1, 4, 7, 8)), "key": tensor(rng, (1, 2, 9, 8)),
                "value": tensor(rng, (1, 2, 9, 5)),
                "mask": [[[rng.random() < 0.8 for _ in range(9)] for _ in range(7)]],
                "bias": tensor(rng, (7, 9), 0.5), "scale": 0.3}
    if kind == "long":
        Lq, Lk = 70, 520
        return {"query": tensor(rng, (1, 2, Lq, 24)), "key": tensor(rng, (1, 2, Lk, 24)),
                "value": tensor(rng, (1, 2, Lk, 16)),
                "valid_lens": [[rng.randrange(400, Lk + 1) for _ in range(Lq)]],
                "causal": "lower_right", "dropout": {"p": 0.1, "seed": 5}}
    if kind == "variants":
        Lq, Lk = 160, 150
        return {"query": tensor(rng, (1, 4, Lq, 16)), "key": tensor(rng, (1, 2, Lk, 16)),
                "value": tensor(rng, (1, 2, Lk, 8)),
                "cu_seqlens_q": [0, 70, 70, 160], "cu_seqlens_k": [0, 60, 80, 150],
                "sinks": [0.5, -1.0, 2.0, 0.25], "softcap": 2.5,
                "alibi_slopes": [0.25, 0.125, 0.0625, 0.03125], "causal": "lower_right",
                "window": [64, 4], "window_align": "lower_right"}
    return {"scoring": "additive", "query": tensor(rng, (2, 4, 3)),
            "key": tensor(rng, (2, 6, 5)), "value": tensor(rng, (2, 6, 2)),
            "w_q": tensor(rng, (7, 3)), "w_k": tensor(rng, (7, 5)), "w_v": tensor(rng, (7,)),
            "valid_lens": [6, 3]}


KINDS = ("small", "gqa", "long", "additive", "variants")
CODECS = ("v1", "v2-binary", "v2-json")
V2_INPUTS = ("query", "key", "value", "valid_lens", "mask", "bias", "sinks", "alibi_slopes",
             "cu_seqlens_q", "cu_seqlens_k", "w_q", "w_k", "w_v")
INT32_INPUTS = ("valid_lens", "cu_seqlens_q", "cu_seqlens_k")


def v1_body(req, weights):
    """A request with sinks asks for its lse too."""
    return json.dumps(dict(req, return_weights=weights, return_lse="sinks" in req)).encode()


def v2_body(req, weights, binary):
    """(path, body, headers) of the v2 form of a /v1 request dict."""
    inputs, raws = [], b""
    for name in V2_INPUTS:
        if name not in req:
            continue
        t = req[name]
        flat = flatten(t)
        dt = "INT32" if name in INT32_INPUTS else "BOOL" if name == "mask" else "FP32"
        entry = {"name": name, "datatype": dt, "shape": shape_of(t)}
        if binary:
            raw = struct.pack("<%d%s" % (len(flat), {"INT32": "i", "BOOL": "?"}.get(dt, "f")),
                              *flat)
            entry["parameters"] = {"binary_data_size": len(raw)}
            raws += raw
        else:
            entry["data"] = flat
        inputs.append(entry)
    params = {}
    if "causal" in req:
        params["causal"] = req["causal"]
    if "scale" in req:
        params["scale"] = req["scale"]
    if "dropout" in req:
        params["dropout_p"] = req["dropout"]["p"]
        params["seed"] = req["dropout"]["seed"]
    for name in ("softcap", "window_align"):
        if name in req:
            params[name] = req[name]
    if "window" in req:
        params["window_left"], params["window_right"] = req["window"]
    outs = ["output", "weights"] if weights else ["output"]
    if "sinks" in req:
        outs.append("lse")
    body = {"inputs": inputs,
            "outputs": [{"name": o, "parameters": {"binary_data": binary}} for o in outs]}
    if params:
        body["parameters"] = params
    header = json.dumps(body).encode()
    model = "additive_attention" if req.get("scoring") == "additive" else "attention"
    headers = {"Inference-Header-Content-Length": str(len(header))} if binary else {}
    return "/v2/models/%s/infer" % model, header + raws, headers


def text_to_f32_bits(text):
    """The float32 a decimal rounds to (nearest, ties to even), exactly.
    float() rounds it to a double first; rounding that double again to
    float32 can only go wrong when the double is a float32 midpoint
    itself, and then the neighbours are weighed against the decimal."""
    x = float(text)
    if struct.unpack("<Q", struct.pack("<d", x))[0] & 0x1fffffff != 0x10000000:
        return struct.pack("<f", x)
    d = Decimal(text)
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    best = None
    for b in (bits - 1, bits, bits + 1):
        c = struct.unpack("<f", struct.pack("<I", b & 0xffffffff))[0]
        if c != c or c in (float("inf"), float("-inf")):
            continue
        key = (abs(Decimal(c) - d), b & 1)
        if best is None or key < best[0]:
            best = (key, b)
    return struct.pack("<I", best[1] & 0xffffffff)


def as_text(data):
    """A JSON answer with its numbers kept as the text attnd printed."""
    return json.loads(data, parse_float=str, parse_int=str)


def json_bits(values):
    """float32 bits of every number of a JSON tensor (as text)."""
    return b"".join(text_to_f32_bits(t) for t in flatten(values))


def v1_answer(data):
    """{"output": bits[, "weights": bits][, "lse": bits]} of a /v1 answer."""
    obj = as_text(data)
    return {n: json_bits(obj[n]) for n in ("output", "weights", "lse") if n in obj}


def v2_answer(data, hlen):
    header = as_text(data[:hlen] if hlen is not None else data)
    out, off = {}, hlen or 0
    for o in header["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is not None:
            size = int(size)
            out[o["name"]] = data[off:off + size]
            off += size
        else:
            out[o["name"]] = json_bits(o["data"])
    return out


def encode(kind_req, weights, codec):
    """(path, body, headers) of a request in a codec."""
    if codec == "v1":
        return "/v1/attention", v1_body(kind_req, weights), {}
    return v2_body(kind_req, weights, codec == "v2-binary")


def send(srv, kind_req, weights, codec, encoded=None):
    """Sends one request; returns (headers, body) of its 200 answer."""
    path, body, headers = encoded or encode(kind_req, weights, codec)
    status, hdrs, data = srv.request("POST", path, body, headers, timeout=600)
    if status != 200:
        raise AssertionError("%s %d: %r" % (codec, status, data[:300]))
    return hdrs, data


def ask(srv, kind_req, weights, codec):
    """Sends one request; returns its answer as float32 bits by output."""
    hdrs, data = send(srv, kind_req, weights, codec)
    if codec == "v1":
        return v1_answer(data)
    hl = hdrs.get("inference-header-content-length")
    return v2_answer(data, int(hl) if hl is not None else None)


class Distractors:
    """Other requests to have in flight beside a target: batch mates of its
    shape with other values, the other shapes, and the long one; each in
    a codec and with or without weights, built once."""

    SEEDS = 3

    def __init__(self):
        self.cache = {}

    def encoded(self, kind, seed):
        key = (kind, seed)
        if key not in self.cache:
            s = 7919 * (KINDS.index(kind) + 1) + seed
            self.cache[key] = encode(make_request(kind, s), s % 2 == 0, CODECS[s % 3])
        return self.cache[key]

    def beside(self, rng, kind):
        picks = [(kind, rng.randrange(self.SEEDS)) for _ in range(3)]
        picks += [(k, rng.randrange(self.SEEDS)) for k in KINDS if k != kind]
        picks.append(("long", rng.randrange(self.SEEDS)))
        return [self.encoded(k, seed) for k, seed in picks]


class InvarianceTest(harness.CloseChecks, unittest.TestCase):
    def setUp(self):
        self.first = {}       # (kind, weights, codec) -> answer, first seen
        self.where = {}       # the same key -> where it was seen
        self.targets = {k: make_request(k, 1000 + i) for i, k in enumerate(KINDS)}
        self.others = Distractors()

    def record(self, key, answer, where):
        if key not in self.first:
            self.first[key] = answer
            self.where[key] = where
            return
        want = self.first[key]
        self.assertEqual(sorted(answer), sorted(want), "%s %s: outputs" % (key, where))
        for name in want:
            a, b = answer[name], want[name]
            self.assertEqual(len(a), len(b), "%s %s: %s size" % (key, where, name))
            if a != b:
                n = next(i for i in range(0, len(a), 4) if a[i:i + 4] != b[i:i + 4]) // 4
                got = struct.unpack("<f", a[4 * n:4 * n + 4])[0]
                ref = struct.unpack("<f", b[4 * n:4 * n + 4])[0]
                self.fail("%s %s[%d]: %r in %s, %r in %s" % (key, name, n, got, where, ref,
                                                             self.where[key]))

    def run_config(self, name, args):
        rng = random.Random(name)
        with harness.Attnd(args) as srv:
            for kind, req in self.targets.items():
                for weights in (True, False):
                    for codec in ("v1", "v2-binary", "v2-json"):
                        key = (kind, weights, codec)
                        self.record(key, ask(srv, req, weights, codec), name + " alone")
                        for r in range(ROUNDS):
                            self.round(srv, key, req, rng, "%s round %d" % (name, r))
            if name == "w2-batched":
                self.assert_batches_formed(srv)
            self.assertEqual(srv.stop(), 0)

    def round(self, srv, key, req, rng, where):
        """The target among other requests, all sent at once."""
        kind, weights, codec = key
        others = self.others.beside(rng, kind)
        errors, got = [], {}

        def one(other):
            try:
                if other is None:
                    got["target"] = ask(srv, req, weights, codec)
                else:
                    send(srv, None, None, None, other)
            except Exception as e:  # reported below, in the test's thread
                errors.append(e)
        order = others[:len(others) // 2] + [None] + others[len(others) // 2:]
        threads = [threading.Thread(target=one, args=(o,)) for o in order]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        self.record(key, got["target"], where)

    def assert_batches_formed(self, srv):
        status, _, text = srv.get("/metrics")
        self.assertEqual(status, 200)
        m = re.search(rb'attnd_batch_size_bucket\{le="1"\} (\d+)', text)
        total = re.search(rb"attnd_batch_size_count (\d+)", text)
        self.assertTrue(m and total, "attnd_batch_size in /metrics")
        self.assertGreater(int(total.group(1)), int(m.group(1)),
                           "no batch of more than one request formed")

    def check_reference(self):
        refs = {}
        for (kind, weights, codec), ans in self.first.items():
            if codec != "v1":
                continue
            req = self.targets[kind]
            if kind not in refs:
                refs[kind] = attention(req) + (lse(req) if "sinks" in req else None,)
            out, w, ref_lse = refs[kind]
            self.assert_close(list(struct.unpack("<%df" % (len(ans["output"]) // 4),
                                                 ans["output"])), out,
                              "%s %s output" % (kind, weights))
            if weights:
                self.assert_close(list(struct.unpack("<%df" % (len(ans["weights"]) // 4),
                                                     ans["weights"])), w,
                                  "%s weights" % kind)
            if "lse" in ans:
                self.assert_close(list(struct.unpack("<%df" % (len(ans["lse"]) // 4),
                                                     ans["lse"])), ref_lse,
                                  "%s %s lse" % (kind, weights))

    def test_answers_are_the_same_bits_whatever_runs_beside_them(self):
        for name, args in CONFIGS:
            with self.subTest(config=name):
                self.run_config(name, args)
        # every (target, path, codec) was answered, and the same across
        # codecs: /v1 JSON, v2 binary and v2 JSON give one answer
        self.assertEqual(len(self.first), len(KINDS) * 2 * 3)
        for kind in KINDS:
            for weights in (True, False):
                for codec in ("v2-binary", "v2-json"):
                    self.record((kind, weights, "v1"), self.first[(kind, weights, codec)],
                                self.where[(kind, weights, codec)])
        self.check_reference()


if __name__ == "__main__":
    harness.main()
