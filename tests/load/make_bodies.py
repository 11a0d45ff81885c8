"""Writes the request bodies the load scripts send, into DIR.

    python3 tests/load/make_bodies.py DIR

Standard library only.  Inputs are deterministic pseudo-random numbers in
[-1, 1) printed with 6 significant digits, the way a client serialising
float32 tensors would send them.  Every body uses the flat tensor form
{"shape": [...], "data": [...]} so that attnd and the FastAPI peer read
the same bytes.

    tiny.json      /v1/attention  (B,H,Lq,Lk,D) = (1,1,16,16,32), weights
    small.json     /v1/attention  (1,1,128,128,64), weights
    v2_small.bin   /v2/models/attention/infer, binary FP32 inputs
                   (1,8,128,128,64), only `output` asked for, returned as
                   binary; v2_small.hlen holds its
                   Inference-Header-Content-Length
"""

import json
import os
import random
import struct
import sys


def tensor(rng, shape):
    n = 1
    for s in shape:
        n *= s
    return [float("%.6g" % rng.uniform(-1, 1)) for _ in range(n)]


def v1_body(seed, B, H, Lq, Lk, D, weights=True):
    rng = random.Random(seed)
    q, k = [B, H, Lq, D], [B, H, Lk, D]
    body = {"query": {"shape": q, "data": tensor(rng, q)},
            "key": {"shape": k, "data": tensor(rng, k)},
            "value": {"shape": k, "data": tensor(rng, k)},
            "return_weights": weights}
    return json.dumps(body, separators=(",", ":")).encode()


def v2_binary_body(seed, B, H, Lq, Lk, D):
    """Triton binary tensor extension: JSON header, then raw little-endian
    FP32 tensors in input order.  Returns (body, header length)."""
    rng = random.Random(seed)
    shapes = [("query", [B, H, Lq, D]), ("key", [B, H, Lk, D]),
              ("value", [B, H, Lk, D])]
    inputs, blobs = [], []
    for name, shape in shapes:
        data = tensor(rng, shape)
        blob = struct.pack("<%df" % len(data), *data)
        blobs.append(blob)
        inputs.append({"name": name, "shape": shape, "datatype": "FP32",
                       "parameters": {"binary_data_size": len(blob)}})
    header = json.dumps({"inputs": inputs,
                         "outputs": [{"name": "output",
                                      "parameters": {"binary_data": True}}]},
                        separators=(",", ":")).encode()
    return header + b"".join(blobs), len(header)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tiny.json"), "wb") as f:
        f.write(v1_body(1, 1, 1, 16, 16, 32))
    with open(os.path.join(out, "small.json"), "wb") as f:
        f.write(v1_body(2, 1, 1, 128, 128, 64))
    body, hlen = v2_binary_body(3, 1, 8, 128, 128, 64)
    with open(os.path.join(out, "v2_small.bin"), "wb") as f:
        f.write(body)
    with open(os.path.join(out, "v2_small.hlen"), "w") as f:
        f.write("%d\n" % hlen)


if __name__ == "__main__":
    main()
