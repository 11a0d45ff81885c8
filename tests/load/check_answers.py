"""Checks, before any load, that the benchmark's targets do the same job.

    python3 check_answers.py BODIES ATTND_URL PEER_URL

attnd and the FastAPI peer must answer tiny.json and small.json with the
same output and weights (within 1e-5 + 1e-5 * |x|); attnd must answer
v2_small.bin with a binary FP32 output of the right size, and that output
must match the one attnd computes for the same inputs sent as v2 JSON.
Standard library only.  Exits 1 on any difference.
"""

import json
import struct
import sys
import urllib.request


def post(url, body, headers=None):
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, dict(r.headers), r.read()


def close(a, b, what):
    assert len(a) == len(b), "%s: %d vs %d values" % (what, len(a), len(b))
    worst = max(abs(x - y) - 1e-5 * abs(y) for x, y in zip(a, b))
    assert worst <= 1e-5, "%s differs by %g" % (what, worst)


def main():
    bodies, attnd, peer = sys.argv[1:4]
    for name in ("tiny.json", "small.json"):
        body = open("%s/%s" % (bodies, name), "rb").read()
        sa, _, a = post(attnd + "/v1/attention", body)
        sp, _, p = post(peer + "/v1/attention", body)
        assert sa == sp == 200, (name, sa, sp)
        a, p = json.loads(a), json.loads(p)
        for k in ("output", "weights"):
            assert a[k]["shape"] == p[k]["shape"], (name, k)
            close(a[k]["data"], p[k]["data"], name + " " + k)
    # v2 binary: the output after the JSON header, against v2 JSON.
    raw = open(bodies + "/v2_small.bin", "rb").read()
    hlen = int(open(bodies + "/v2_small.hlen").read())
    header = json.loads(raw[:hlen])
    s, h, resp = post(attnd + "/v2/models/attention/infer", raw,
                      {"Inference-Header-Content-Length": str(hlen),
                       "Content-Type": "application/octet-stream"})
    assert s == 200, s
    rlen = int(h["Inference-Header-Content-Length"])
    out = json.loads(resp[:rlen])["outputs"]
    assert [o["name"] for o in out] == ["output"], out
    n = 1
    for d in out[0]["shape"]:
        n *= d
    assert out[0]["shape"] == [1, 8, 128, 64], out[0]["shape"]
    assert len(resp) - rlen == 4 * n
    got = struct.unpack("<%df" % n, resp[rlen:])
    off = hlen
    for inp in header["inputs"]:
        size = inp["parameters"].pop("binary_data_size")
        inp["data"] = list(struct.unpack("<%df" % (size // 4), raw[off:off + size]))
        off += size
    header["outputs"] = [{"name": "output"}]
    s, _, js = post(attnd + "/v2/models/attention/infer", json.dumps(header).encode(),
                    {"Content-Type": "application/json"})
    assert s == 200, s
    close(got, json.loads(js)["outputs"][0]["data"], "v2 binary output")
    print("answers agree: attnd and the FastAPI peer (tiny, small); "
          "v2 binary against v2 JSON")


if __name__ == "__main__":
    main()
