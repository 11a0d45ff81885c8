"""The FastAPI + numpy peer of the HTTP benchmark (tests/load/bench_http.sh).

The same job as attnd's POST /v1/attention, written the way a Python
service usually is: FastAPI on uvicorn, the body parsed with json, masked
scaled-dot-product attention in numpy float32, the answer serialised with
json.  It accepts the request forms the benchmark sends (flat
{"shape", "data"} tensors or nested lists; optional valid_lens (B,),
causal, scale, return_weights, id) and answers in the same form.

Run with Debian's packages (python3-fastapi, python3-uvicorn,
python3-numpy), two workers:

    /usr/bin/python3 -m uvicorn --app-dir tests/load peer_fastapi:app \\
        --host 127.0.0.1 --port 8001 --workers 2 --no-access-log
"""

import json
import socket

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from uvicorn.protocols.http import h11_impl

app = FastAPI()


def _nodelay(protocol):
    """uvicorn with --workers > 1 (Debian's, on h11) serves connections
    without TCP_NODELAY: its separate header and body writes then wait for
    the client's delayed ACK, about 40 ms per keep-alive request.  A tuned
    deployment turns Nagle off, and so does the peer, to be measured at
    its best."""
    made = protocol.connection_made

    def connection_made(self, transport):
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        made(self, transport)
    protocol.connection_made = connection_made


_nodelay(h11_impl.H11Protocol)


def tensor(t):
    """(array float32, flat?) from a flat or nested JSON tensor."""
    if isinstance(t, dict):
        return np.asarray(t["data"], dtype=np.float32).reshape(t["shape"]), True
    return np.asarray(t, dtype=np.float32), False


def as_json(a, flat):
    if flat:
        return {"shape": list(a.shape), "data": a.ravel().tolist()}
    return a.tolist()


def attention(q, k, v, valid_lens=None, causal=False, scale=None):
    """q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv) -> (output, weights)."""
    lq, lk = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
    allowed = np.ones(scores.shape, dtype=bool)
    if valid_lens is not None:
        vl = np.asarray(valid_lens).reshape((-1,) + (1,) * (scores.ndim - 1))
        allowed &= np.arange(lk) < vl
    if causal:
        allowed &= np.tril(np.ones((lq, lk), dtype=bool))
    scores = np.where(allowed, scores, np.finfo(np.float32).min)
    scores -= scores.max(axis=-1, keepdims=True)
    e = np.exp(scores) * allowed
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return np.matmul(weights, v), weights


@app.post("/v1/attention")
async def v1_attention(request: Request):
    try:
        req = json.loads(await request.body())
        q, flat = tensor(req["query"])
        k, _ = tensor(req["key"])
        v, _ = tensor(req["value"])
        out, weights = attention(q, k, v, req.get("valid_lens"),
                                 bool(req.get("causal")), req.get("scale"))
    except (ValueError, KeyError, TypeError) as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    resp = {"output": as_json(out, flat)}
    if "id" in req:
        resp["id"] = req["id"]
    if req.get("return_weights", True):
        resp["weights"] = as_json(weights, flat)
    return Response(json.dumps(resp), media_type="application/json")


@app.get("/healthz")
async def healthz():
    return {"status": "ok"}
