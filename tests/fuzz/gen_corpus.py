#!/usr/bin/env python3
"""Writes the seed corpora in tests/fuzz/corpus/<harness>/: real requests
of every form the service accepts, in the input layout each harness reads
(see the comment at the top of each tests/fuzz/fuzz_*.c).  Deterministic;
rerun after changing a request form:

    python3 tests/fuzz/gen_corpus.py
"""

import gzip
import hashlib
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def nested(shape, start=0.0, step=0.25):
    """A nested list of the shape with small varied values."""
    count = [start]

    def build(dims):
        if not dims:
            count[0] += step
            return round(((count[0] * 7.0) % 5.0) - 2.5, 3)
        return [build(dims[1:]) for _ in range(dims[0])]
    return build(list(shape))


def flat(shape, start=0.0):
    n = 1
    for d in shape:
        n *= d
    return {"shape": list(shape),
            "data": [round(((i * 1.75 + start) % 5.0) - 2.5, 3) for i in range(n)]}


def v1_requests():
    q3, k3, v3 = nested((2, 2, 3)), nested((2, 4, 3), 1), nested((2, 4, 2), 2)
    reqs = {
        "design_example": {"query": [[[1, 0], [0, 2]]],
                           "key": [[[1, 1], [2, 0], [0, 3]]],
                           "value": [[[1, 0], [0, 1], [1, 1]]],
                           "valid_lens": [2], "causal": False, "scale": 0.7071,
                           "mask": None, "bias": None, "return_weights": True,
                           "id": "optional"},
        "rank3_nested": {"query": q3, "key": k3, "value": v3},
        "rank4_flat_gqa": {"query": flat((1, 4, 3, 2)), "key": flat((1, 2, 5, 2), 1),
                           "value": flat((1, 2, 5, 3), 2), "causal": "lower_right",
                           "id": 42},
        "masks_bias_lens": {"query": q3, "key": k3, "value": v3,
                            "valid_lens": [[1, 3], [4, 0]],
                            "mask": [[True, False, True, True]],
                            "bias": nested((2, 1, 4), 3), "causal": True,
                            "return_weights": False},
        "window_dropout": {"query": q3, "key": k3, "value": v3,
                           "window": [1, None], "dropout": {"p": 0.25, "seed": 7},
                           "scale": -0.5},
        "additive": {"scoring": "additive", "query": q3, "key": k3, "value": v3,
                     "w_q": nested((4, 3)), "w_k": nested((4, 3), 1),
                     "w_v": [0.5, -1, 0.25, 2], "valid_lens": [3, 2]},
        "extreme_numbers": {"query": [[[3.4e38, -1e-45], [1.17549435e-38, -3.4e38]]],
                            "key": [[[3.4e38, 3.4e38], [-1e-40, 0]]],
                            "value": [[[3.4e38, -3.4e38], [1e-45, 1e30]]]},
        "diagnostics_window": {"query": q3, "key": k3, "value": v3,
                               "diagnostics": True, "return_weights": False,
                               "window": [0, 2], "valid_lens": [2, 0]},
        "sinks_softcap_alibi_lse": {"query": flat((1, 4, 3, 2)), "key": flat((1, 2, 5, 2), 1),
                                    "value": flat((1, 2, 5, 3), 2),
                                    "sinks": [0.5, -1, 2, 0.25], "softcap": 1.5,
                                    "alibi_slopes": [[0.5, 0.25, 0.125, 0.0625]],
                                    "causal": True, "return_lse": True, "diagnostics": True},
        "packed_lower_right": {"query": nested((1, 5, 3)), "key": nested((1, 6, 3), 1),
                               "value": nested((1, 6, 2), 2), "cu_seqlens_q": [0, 2, 2, 5],
                               "cu_seqlens_k": [0, 0, 4, 6], "window": [1, 0],
                               "window_align": "lower_right", "causal": "lower_right",
                               "sinks": [0.75], "return_lse": True},
        "bad_packed": {"query": q3, "key": k3, "value": v3, "cu_seqlens_q": [0, 3, 2],
                       "cu_seqlens_k": [0, 4], "valid_lens": [1, 1], "softcap": 0,
                       "sink": [1], "window_align": "lower-right"},
        "bad_ragged": {"query": [[[1, 2], [3]]], "key": [[[1, 2]]], "value": [[[1]]]},
        "bad_lens": {"query": q3, "key": k3, "value": v3, "valid_lens": [9, 1]},
        # names and numbers that get messages of their own
        "bad_misspelt_field": {"querry": q3, "key": k3, "value": v3, "casual": True},
        "bad_nan_literal": {"query": [[[1, float("nan")], [float("-inf"), 2]]],
                            "key": {"shape": [1, 1, 2], "data": [float("inf"), 0]},
                            "value": [[[1]]], "scale": float("nan")},
    }
    out = {k: json.dumps(v, separators=(",", ":")).encode() for k, v in reqs.items()}
    out["bad_nul_body"] = b"\0" * 48
    # no tensor for the fast reader to shorten, longer than its first copy
    out["bad_long_id_only"] = json.dumps({"id": "x" * 4200}).encode()
    return out


PACK = {"FP32": "<%df", "FP64": "<%dd", "FP16": "<%de", "INT32": "<%di",
        "INT64": "<%dq", "BOOL": "<%d?"}


def pack(values, dt):
    if dt == "BF16":
        return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", x))[0] >> 16)
                        for x in values)
    return struct.pack(PACK[dt] % len(values), *values)


def values(shape, start=0.0):
    return flat(shape, start)["data"]


def v2_input(name, shape, dt, data, binary):
    d = {"name": name, "datatype": dt, "shape": list(shape)}
    if binary:
        raw = pack(data, dt)
        d["parameters"] = {"binary_data_size": len(raw)}
        return d, raw
    d["data"] = data
    return d, b""


def v2_request(model, inputs, binary, params=None, outputs=None, rid=None):
    """Returns (header value or None, body bytes)."""
    body = {"inputs": []}
    raw = b""
    for name, shape, dt, data in inputs:
        d, r = v2_input(name, shape, dt, data, binary)
        body["inputs"].append(d)
        raw += r
    if rid is not None:
        body["id"] = rid
    if params:
        body["parameters"] = params
    if outputs is not None:
        body["outputs"] = outputs
    js = json.dumps(body, separators=(",", ":")).encode()
    return (str(len(js)) if binary else None), js + raw


def qkv(dt, rank4=False):
    if rank4:
        return [("query", (1, 2, 3, 4), dt, values((1, 2, 3, 4))),
                ("key", (1, 1, 5, 4), dt, values((1, 1, 5, 4), 1)),
                ("value", (1, 1, 5, 2), dt, values((1, 1, 5, 2), 2))]
    return [("query", (2, 3, 4), dt, values((2, 3, 4))),
            ("key", (2, 5, 4), dt, values((2, 5, 4), 1)),
            ("value", (2, 5, 2), dt, values((2, 5, 2), 2))]


def v2_requests(binary):
    """(name, model, header, body) of a spread of v2 requests."""
    out = []
    for dt in ("FP32", "FP16", "BF16", "FP64"):
        out.append(("plain_" + dt, 0) + v2_request(0, qkv(dt), binary, rid="r-" + dt))
    extra = qkv("FP32", rank4=True) + [
        ("valid_lens", (1,), "INT64", [3]),
        ("mask", (3, 5), "BOOL", [bool((i * 3) % 4) for i in range(15)]),
        ("bias", (1, 2, 3, 5), "FP32", values((1, 2, 3, 5), 3))]
    out.append(("rank4_all_inputs", 0) + v2_request(
        0, extra, binary,
        params={"causal": "lower_right", "scale": 0.5, "dropout_p": 0.1,
                "seed": 3, "timeout": 1000000, "binary_data_output": binary},
        outputs=[{"name": "weights"}, {"name": "output",
                                       "parameters": {"binary_data": binary}}]))
    out.append(("only_output", 0) + v2_request(
        0, qkv("FP32") + [("valid_lens", (2, 3), "INT32", [1, 2, 3, 5, 0, 4])],
        binary, params={"causal": True}, outputs=[{"name": "output"}]))
    out.append(("diagnostics_window", 0) + v2_request(
        0, qkv("FP32"), binary,
        params={"window_left": 1, "window_right": None},
        outputs=[{"name": n} for n in ("output", "allowed_keys", "entropy",
                                       "max_weight", "jacobian_norm")]))
    variants = qkv("FP32", rank4=True) + [
        ("sinks", (2,), "FP16", [0.5, -1.0]),
        ("alibi_slopes", (1, 2), "BF16", [0.5, 0.25]),
        ("cu_seqlens_q", (3,), "INT64", [0, 1, 3]),
        ("cu_seqlens_k", (3,), "INT32", [0, 2, 5])]
    out.append(("sinks_alibi_packed_lse", 0) + v2_request(
        0, variants, binary,
        params={"softcap": 2.0, "window_align": "lower_right", "window_left": 2,
                "causal": "lower_right"},
        outputs=[{"name": "lse"}, {"name": "output"}, {"name": "weights"}]))
    out.append(("bad_variants", 0) + v2_request(
        0, qkv("FP32") + [("sink", (1,), "FP32", [1.0]),
                          ("cu_seqlens_q", (2,), "INT32", [0, 3])],
        binary, params={"softcap": -1, "window_align": "middle"},
        outputs=[{"name": "lses"}]))
    add = qkv("FP32") + [("w_q", (3, 4), "FP32", values((3, 4))),
                         ("w_k", (3, 4), "FP32", values((3, 4), 1)),
                         ("w_v", (3,), "FP32", [1.0, -0.5, 2.0])]
    out.append(("additive", 1) + v2_request(1, add, binary))
    # parameters and fields: what Triton's clients send, misspelt names,
    # Triton's parameters attnd does not serve, the shared-memory ones
    out.append(("triton_client_params", 0) + v2_request(
        0, qkv("FP32"), binary, rid="",
        params={"timeout": 60000000, "binary_data_output": True},
        outputs=[{"name": "output", "parameters": {"binary_data": False}},
                 {"name": "weights", "parameters": {"binary_data": binary}}]))
    out.append(("bad_misspelt_params", 0) + v2_request(
        0, qkv("FP32"), binary, params={"causl": True, "windowleft": 1},
        outputs=[{"name": "output", "parameters": {"binary_dat": True}}]))
    out.append(("bad_sequence_priority", 0) + v2_request(
        0, qkv("FP32"), binary,
        params={"sequence_id": 7, "sequence_start": True, "sequence_end": False,
                "priority": 1, "triton_x": 1},
        outputs=[{"name": "output", "parameters": {"classification": 3}}]))
    out.append(("bad_shared_memory", 0) + v2_request(
        0, qkv("FP32"), binary,
        outputs=[{"name": "output", "parameters": {
            "binary_data": False, "shared_memory_region": "out0",
            "shared_memory_byte_size": 96, "shared_memory_offset": 64}}]))
    return out


def v2_misc_bodies():
    """(name, model, body) of v2 JSON bodies v2_request cannot build."""
    hdr, body = v2_request(0, qkv("FP32"), False, params={"causal": True})
    req = json.loads(body)
    misspelt = dict(req, paramters=req.pop("parameters"))
    misspelt["inputs"][2]["dat"] = misspelt["inputs"][2].pop("data")
    nan = json.loads(body)
    key = nan["inputs"][1]
    key["data"][5], key["data"][7] = float("nan"), float("-inf")
    key["name"] = key.pop("name")  # after "data": found all the same
    shm = json.loads(body)
    shm["inputs"][2].pop("data")
    shm["inputs"][2]["parameters"] = {"shared_memory_region": "in2",
                                      "shared_memory_byte_size": 80}
    return [("bad_misspelt_fields", 0, json.dumps(misspelt).encode()),
            ("bad_nan_literal", 0, json.dumps(nan).encode()),
            ("bad_input_shared_memory", 0, json.dumps(shm).encode()),
            ("bad_nul_body", 0, b"\0" * 48),
            ("bad_long_id_only", 0, json.dumps({"id": "x" * 4200}).encode())]


def shm(region, offset, size):
    p = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset:
        p["shared_memory_offset"] = offset
    return p


def shm_in(name, shape, dt, region, offset):
    n = 1
    for d in shape:
        n *= d
    size = n * {"FP32": 4, "FP64": 8, "FP16": 2, "BF16": 2, "INT32": 4,
                "INT64": 8, "BOOL": 1}[dt]
    return {"name": name, "datatype": dt, "shape": list(shape),
            "parameters": shm(region, offset, size)}


def shm_requests():
    """(name, first byte, body) of fuzz_v2 requests naming the harness's
    shared memory regions (see fuzz_v2.c: "r" float32 words, "t" raw
    bytes, "s" 16 bytes); the first byte's bit 1 gives the decoder the
    regions, bit 0 picks the model."""
    def body(inputs, outputs=None, **extra):
        d = dict(extra, inputs=inputs)
        if outputs is not None:
            d["outputs"] = outputs
        return json.dumps(d, separators=(",", ":")).encode()
    qkv32 = [shm_in("query", (1, 2, 4), "FP32", "r", 0),
             shm_in("key", (1, 3, 4), "FP32", "r", 64),
             shm_in("value", (1, 3, 2), "FP32", "r", 128)]
    out = []
    out.append(("shm_fp32_in_out", 2, body(qkv32, [
        {"name": "output", "parameters": dict(shm("r", 3072, 64), binary_data=False)},
        {"name": "weights"}])))
    out.append(("shm_dtypes", 2, body([
        shm_in("query", (1, 2, 4), "FP16", "r", 0),
        shm_in("key", (1, 3, 4), "BF16", "r", 32),
        shm_in("value", (1, 3, 2), "FP64", "r", 256),
        shm_in("valid_lens", (1,), "INT32", "r", 512),
        shm_in("mask", (2, 3), "BOOL", "t", 0)])))
    out.append(("shm_dtypes_ok", 2, body([
        shm_in("query", (1, 2, 4), "FP16", "r", 0),
        shm_in("key", (1, 3, 4), "BF16", "r", 32),
        shm_in("value", (1, 3, 2), "FP64", "r", 256),
        shm_in("mask", (3,), "BOOL", "r", 128)])))
    out.append(("shm_all_outputs", 2, body(qkv32, [
        {"name": n, "parameters": shm("r", 2048 + 256 * i, 256)}
        for i, n in enumerate(("output", "weights", "allowed_keys", "entropy",
                               "max_weight", "jacobian_norm"))], id="shm")))
    out.append(("shm_additive", 3, body(qkv32 + [
        shm_in("w_q", (3, 4), "FP32", "r", 1024),
        shm_in("w_k", (3, 4), "BF16", "r", 1088),
        {"name": "w_v", "datatype": "FP32", "shape": [3], "data": [1, -0.5, 2]}])))
    out.append(("shm_mixed_json", 2, body([
        qkv32[0], {"name": "key", "datatype": "FP32", "shape": [1, 3, 4],
                   "data": values((1, 3, 4))},
        shm_in("value", (1, 3, 2), "FP32", "s", 0)])))
    bad = [dict(qkv32[0], parameters=dict(shm("r", 4096, 0))),
           dict(qkv32[0], parameters=dict(shm("r", 8, 18446744073709551615))),
           dict(qkv32[0], parameters=dict(shm("r", 4090, 32))),
           dict(qkv32[0], parameters=dict(shm("r", 0, 8))),
           dict(qkv32[0], parameters=dict(shm("nope", 0, 32))),
           dict(qkv32[0], data=[1, 2, 3, 4, 5, 6, 7, 8])]
    for i, q in enumerate(bad):
        out.append(("shm_bad_%d" % i, 2, body([q] + qkv32[1:])))
    out.append(("shm_small_output", 2, body(qkv32, [
        {"name": "output", "parameters": shm("s", 0, 12)}])))
    out.append(("shm_without_regions", 0, body(qkv32)))
    return out


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def structured_seeds():
    """fuzz_core form 2: option bytes (see build() in fuzz_core.c), then
    tensor bytes.  The last option byte, c12, picks the attention
    variants (sinks, softcap, ALiBi, packing, the lower-right window, lse)."""
    seeds = {}
    tensor = pack([((i * 1.75) % 5.0) - 2.5 for i in range(64)], "FP32")
    extreme = pack([3.4e38, -3.4e38, 1e-45, -1e-45, 1.1754943e-38, 0.0, -0.0,
                    1e30, -1e-30, 65504.0, 2.0 ** -126, 7.0], "FP32")
    scale = struct.pack("<f", 0.5)
    #           c0    c1    c2    c3    c4     scale  c9   c10  c11 c12
    seeds["dot_fp32"] = bytes([0x00, 0x00, 0x1b, 0x0b, 0x00]) + scale + bytes([0, 0, 0, 0]) + tensor
    seeds["gqa_masks"] = bytes([0x48, 0x0b, 0x23, 0x13, 0x7f]) + scale + bytes([0, 0, 0, 0]) + tensor
    seeds["additive_fp16"] = bytes([0x05, 0x01, 0x1a, 0x6a, 0x15]) + scale + bytes([0, 0, 0, 0]) + tensor
    seeds["dropout_bf16"] = bytes([0x86, 0x00, 0x12, 0x0a, 0x01]) + scale + bytes([200, 9, 0, 0]) + tensor
    seeds["extreme_fp32"] = bytes([0x00, 0x00, 0x3f, 0x1f, 0x50]) + struct.pack("<f", 3e38) + bytes([0, 0, 0, 0]) + extreme
    seeds["diag_window"] = bytes([0x20, 0x00, 0x1b, 0x0b, 0x05]) + scale + bytes([0, 0, 0x2b, 0]) + tensor
    seeds["diag_extreme"] = bytes([0x00, 0x00, 0x3f, 0x1f, 0x10]) + scale + bytes([0, 0, 0xff, 0]) + extreme
    seeds["extreme_fp64"] = bytes([0x02, 0x00, 0x3f, 0x1f, 0x00]) + scale + bytes([0, 0, 0, 0]) + pack(
        [3.4e38, -3.4e38, 1e-300, -4e-45, 1e-38, 0.0, 2.5], "FP64")
    # sinks + softcap + ALiBi (H,), GQA, causal, window, diagnostics, lse
    seeds["sinks_softcap_alibi"] = bytes([0x48, 0x0b, 0x3f, 0x13, 0x00]) + scale + bytes([0, 0, 0x2b, 0x87]) + tensor
    # packed sequences (B = 1), ALiBi (B, H), lower-right window, lse
    seeds["packed_lower_right"] = bytes([0x50, 0x0a, 0x3f, 0x13, 0x04]) + scale + bytes([0, 0, 0x0b, 0xbd]) + tensor
    # packed with offsets as the bytes give them: mostly refused
    seeds["packed_bad_offsets"] = bytes([0x40, 0x0a, 0x3f, 0x13, 0x00]) + scale + bytes([0, 0, 0, 0xd0]) + tensor
    # the same on huge numbers, sinks and softcap included
    seeds["variants_extreme"] = bytes([0x40, 0x00, 0x3f, 0x1f, 0x00]) + scale + bytes([0, 0, 0x01, 0x97]) + extreme
    # BF16 mode (c4 bit 7): masks and GQA, the variants, huge numbers, dropout
    seeds["bf16_mode_masks"] = bytes([0x48, 0x0b, 0x23, 0x13, 0xff]) + scale + bytes([0, 0, 0, 0]) + tensor
    seeds["bf16_mode_variants"] = bytes([0x48, 0x0b, 0x3f, 0x13, 0x80]) + scale + bytes([0, 0, 0x2b, 0x87]) + tensor
    seeds["bf16_mode_extreme"] = bytes([0x40, 0x00, 0x3f, 0x1f, 0x80]) + scale + bytes([0, 0, 0x01, 0x97]) + extreme
    seeds["bf16_mode_dropout"] = bytes([0x86, 0x00, 0x12, 0x0a, 0x81]) + scale + bytes([200, 9, 0, 0]) + tensor
    return seeds


def main():
    v1 = v1_requests()
    for name, body in v1.items():
        write("fuzz_v1", name, body)
        write("fuzz_core", "v1_" + name, b"\x00" + body)
    for name, model, hdr, body in v2_requests(False):
        write("fuzz_v2", name, bytes([model]) + body)
    for name, model, body in v2_misc_bodies():
        write("fuzz_v2", name, bytes([model]) + body)
    for name, first, body in shm_requests():
        write("fuzz_v2", name, bytes([first]) + body)
    for name, model, hdr, body in v2_requests(True):
        seed = bytes([model]) + hdr.encode() + b"\n" + body
        write("fuzz_v2_binary", name, seed)
        write("fuzz_core", "v2_" + name, b"\x01" + seed)
    # A JSON body without the header, and a header that is not a number.
    name, model, hdr, body = v2_requests(False)[0]
    write("fuzz_v2_binary", "no_header", bytes([model]) + body)
    write("fuzz_v2_binary", "bad_header", bytes([model]) + b" 12x\n" + body)
    for name, seed in structured_seeds().items():
        write("fuzz_core", "built_" + name, b"\x02" + seed)
    # Compressed bodies: coding byte (0 gzip, 2 deflate, 3 identity), cap
    # byte (2^16), body.
    bodies = [v1["rank3_nested"], v1["additive"], v2_requests(True)[0][3]]
    for i, b in enumerate(bodies):
        write("fuzz_inflate", "gzip_%d" % i, b"\x00\x10" + gzip.compress(b, mtime=0))
        write("fuzz_inflate", "zlib_%d" % i, b"\x02\x10" + zlib.compress(b))
        raw = zlib.compressobj(6, zlib.DEFLATED, -15)
        write("fuzz_inflate", "raw_%d" % i, b"\x02\x10" + raw.compress(b) + raw.flush())
    write("fuzz_inflate", "identity", b"\x03\x10" + v1["design_example"])
    write("fuzz_inflate", "bomb", b"\x00\x0a" + gzip.compress(b"\x00" * 100000, mtime=0))
    write("fuzz_inflate", "truncated", b"\x00\x10" + gzip.compress(v1["additive"], mtime=0)[:40])
    write("fuzz_inflate", "trailing", b"\x02\x10" + zlib.compress(b"{}") + b"junk")


if __name__ == "__main__":
    main()
