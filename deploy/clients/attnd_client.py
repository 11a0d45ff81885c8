"""A Python client for attnd: the native /v1 API and KServe v2 with binary tensors.

Standard library only; numpy is optional.  When numpy is importable, tensors
may be numpy arrays and results come back as numpy arrays; without it, they
are nested lists of numbers.  Copy this one file next to your code.

    from attnd_client import AttndClient
    c = AttndClient("http://127.0.0.1:8000")
    r = c.attention(q, k, v, valid_lens=[2], causal=True)
    r["output"], r["weights"]

    out = c.infer("attention", {"query": q, "key": k, "value": v},
                  outputs=["output"], parameters={"causal": True})
    out["output"]

attention(query, key, value, **fields) posts to /v1/attention; fields are
the request's other members (valid_lens, mask, bias, causal, window, scale,
scoring, w_q, w_k, w_v, dropout, return_weights, id).  numpy arrays are sent
in the flat {"shape", "data"} form, lists as they are.  It returns the
response as a dict whose "output" and "weights" are numpy float32 arrays
(numpy mode) or nested lists.

infer(model, inputs, outputs=None, binary=True, ...) posts to
/v2/models/{model}/infer.  inputs maps names to tensors; a tensor's datatype
is taken from datatypes={name: "BF16"} when given, else from a numpy
array's dtype (float32/float16/float64/bool/int32/int64), else FP32 (INT32
for valid_lens, BOOL for mask).  binary=True sends every input as binary
data after the JSON header (Triton's binary tensor data extension: header
Inference-Header-Content-Length, parameters.binary_data_size) and asks for
the outputs as binary; binary=False uses JSON throughout.  FP16 is rounded
to nearest, ties to even; BF16 too, from the value rounded to float32
first (as torch does).  It returns {output name: tensor};
the response's JSON part (model_name, model_version, id, outputs) is kept
in client.last_response.

Errors: any non-200 answer raises AttndError with .status, .message (the
server's {"error"} text) and .retry_after (seconds, for 503s).
"""

import gzip
import http.client
import json
import math
import struct
import sys
import urllib.parse
import zlib

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None

__all__ = ["AttndClient", "AttndError", "DATATYPES"]

# datatype -> (struct format, bytes per element); BF16 is handled apart.
DATATYPES = {"FP32": ("f", 4), "FP64": ("d", 8), "FP16": ("e", 2), "BF16": (None, 2),
             "INT32": ("i", 4), "INT64": ("q", 8), "BOOL": ("?", 1)}
_NP_DATATYPES = {"float32": "FP32", "float64": "FP64", "float16": "FP16",
                 "int32": "INT32", "int64": "INT64", "bool": "BOOL"}


class AttndError(Exception):
    """attnd answered with an error status."""

    def __init__(self, status, message, retry_after=None, body=b""):
        super().__init__("HTTP %d: %s" % (status, message))
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.body = body


# ---- tensors without numpy ---------------------------------------------------

def _shape(t):
    s = []
    while isinstance(t, (list, tuple)):
        s.append(len(t))
        if not t:
            break
        t = t[0]
    return s


def _flatten(t, out=None):
    if out is None:
        out = []
    if isinstance(t, (list, tuple)):
        for x in t:
            _flatten(x, out)
    else:
        out.append(t)
    return out


def _nest(flat, shape):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat[:shape[0]])
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _bf16_bits(x):
    """The BF16 bits of float x: to float32 first, then round to nearest even
    on the top 16 bits (what ml_dtypes and torch do for finite numbers)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if math.isnan(x):
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _encode_list(flat, datatype):
    if datatype == "BF16":
        return struct.pack("<%dH" % len(flat), *[_bf16_bits(float(x)) for x in flat])
    fmt = DATATYPES[datatype][0]
    if datatype == "BOOL":
        flat = [bool(x) for x in flat]
    elif datatype.startswith("INT"):
        flat = [int(x) for x in flat]
    else:
        flat = [float(x) for x in flat]
    return struct.pack("<%d%s" % (len(flat), fmt), *flat)


def _decode_list(data, datatype):
    if datatype == "BF16":
        n = len(data) // 2
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack("<%dH" % n, data)]
    fmt, size = DATATYPES[datatype]
    return list(struct.unpack("<%d%s" % (len(data) // size, fmt), data))


# ---- tensors with numpy ------------------------------------------------------

def _is_array(x):
    return _np is not None and isinstance(x, _np.ndarray)


def _np_encode(a, datatype):
    a = _np.ascontiguousarray(a)
    if datatype == "BF16":
        bits = a.astype("<f4").view("<u4").astype(_np.uint64)
        nan = _np.isnan(a.astype("<f4"))
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        rounded = _np.where(nan, (bits >> 16) | 0x40, rounded)
        return rounded.astype("<u2").tobytes()
    np_type = {"FP32": "<f4", "FP64": "<f8", "FP16": "<f2", "INT32": "<i4",
               "INT64": "<i8", "BOOL": "?"}[datatype]
    return a.astype(np_type).tobytes()


def _np_decode(data, datatype, shape):
    if datatype == "BF16":
        h = _np.frombuffer(data, "<u2").astype("<u4") << 16
        return h.view("<f4").reshape(shape)
    np_type = {"FP32": "<f4", "FP64": "<f8", "FP16": "<f2", "INT32": "<i4",
               "INT64": "<i8", "BOOL": "?"}[datatype]
    return _np.frombuffer(data, np_type).reshape(shape).copy()


class AttndClient:
    """One attnd server.  url: "http://host:port" (https works the same way).
    use_numpy: None = when numpy is importable; False = nested lists always.
    token: the bearer token of an attnd started with --token/--token-file.
    headers: sent with every request.
    A new connection is opened per request, so one client may be shared by
    threads."""

    def __init__(self, url="http://127.0.0.1:8000", timeout=60.0, use_numpy=None,
                 token=None, headers=None):
        if "://" not in url:
            url = "http://" + url
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url must be http://host[:port]: %r" % url)
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base = u.path.rstrip("/")
        self.timeout = timeout
        if use_numpy and _np is None:
            raise ImportError("use_numpy=True but numpy is not importable")
        self.numpy = _np is not None if use_numpy is None else bool(use_numpy)
        self.headers = dict(headers or {})
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self.last_response = None
        self.last_headers = {}

    # ---- transport ----

    def request(self, method, path, body=None, headers=None):
        """(status, headers with lower-case names, body bytes); no raising."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else \
            http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        h = dict(self.headers)
        h.update(headers or {})
        try:
            conn.request(method, self.base + path, body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        coding = hdrs.get("content-encoding")
        if coding == "gzip":
            data = gzip.decompress(data)
        elif coding == "deflate":
            data = zlib.decompress(data)
        self.last_headers = hdrs
        return resp.status, hdrs, data

    def _checked(self, method, path, body=None, headers=None):
        status, hdrs, data = self.request(method, path, body, headers)
        if status != 200:
            try:
                msg = json.loads(data)["error"]
            except (ValueError, KeyError, TypeError):
                msg = data[:200].decode("utf-8", "replace")
            ra = hdrs.get("retry-after")
            raise AttndError(status, msg, int(ra) if ra and ra.isdigit() else None, data)
        return hdrs, data

    def _get_json(self, path):
        return json.loads(self._checked("GET", path)[1])

    def _status(self, path):
        try:
            return self.request("GET", path)[0] == 200
        except OSError:
            return False

    # ---- health and metadata ----

    def healthy(self):
        """GET /healthz is 200 (False also when nothing answers)."""
        return self._status("/healthz")

    def ready(self):
        """GET /readyz is 200: attnd accepts work (503 while starting or draining)."""
        return self._status("/readyz")

    def server_live(self):
        return self._status("/v2/health/live")

    def server_ready(self):
        return self._status("/v2/health/ready")

    def model_ready(self, model="attention", version=None):
        return self._status(self._model_path(model, version) + "/ready")

    def server_metadata(self):
        """GET /v2: {"name", "version", "extensions"}."""
        return self._get_json("/v2")

    def model_metadata(self, model="attention", version=None):
        """GET /v2/models/{model}: inputs and outputs with datatypes and shapes."""
        return self._get_json(self._model_path(model, version))

    def metrics(self):
        """GET /metrics: the Prometheus text exposition."""
        return self._checked("GET", "/metrics")[1].decode("utf-8")

    def openapi(self):
        """GET /openapi.json: the OpenAPI document of every route."""
        return self._get_json("/openapi.json")

    @staticmethod
    def _model_path(model, version):
        path = "/v2/models/" + urllib.parse.quote(model, safe="")
        if version:
            path += "/versions/" + urllib.parse.quote(str(version), safe="")
        return path

    # ---- /v1/attention ----

    def _v1_tensor(self, t):
        if _is_array(t):
            return {"shape": list(t.shape), "data": t.reshape(-1).tolist()}
        return t

    def _v1_result(self, t):
        if isinstance(t, dict) and "shape" in t:
            if self.numpy:
                return _np.asarray(t["data"], dtype=_np.float32).reshape(t["shape"])
            return _nest(t["data"], t["shape"])
        if self.numpy:
            return _np.asarray(t, dtype=_np.float32)
        return t

    def attention(self, query, key, value, compress=None, **fields):
        """POST /v1/attention.  Returns the response dict ("output", "weights"
        unless return_weights=False, "id" when given).  compress="gzip" or
        "deflate" compresses the request body."""
        req = {"query": self._v1_tensor(query), "key": self._v1_tensor(key),
               "value": self._v1_tensor(value)}
        for name, val in fields.items():
            req[name] = self._v1_tensor(val)
        body = json.dumps(req, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}
        if compress:
            body = gzip.compress(body) if compress == "gzip" else zlib.compress(body)
            headers["Content-Encoding"] = compress
        res = json.loads(self._checked("POST", "/v1/attention", body, headers)[1])
        for name in ("output", "weights"):
            if name in res:
                res[name] = self._v1_result(res[name])
        self.last_response = res
        return res

    # ---- /v2/models/{model}/infer ----

    @staticmethod
    def _datatype(name, t, datatypes):
        if name in datatypes:
            return datatypes[name]
        if _is_array(t):
            dt = _NP_DATATYPES.get(t.dtype.name)
            if dt is None:
                raise TypeError("%s: numpy dtype %s has no v2 datatype here (use datatypes=)"
                                % (name, t.dtype))
            return dt
        return {"valid_lens": "INT32", "mask": "BOOL"}.get(name, "FP32")

    def _v2_input(self, name, t, datatype, binary):
        if datatype not in DATATYPES:
            raise ValueError("%s: datatype %r not one of %s" % (name, datatype,
                                                               sorted(DATATYPES)))
        shape = list(t.shape) if _is_array(t) else _shape(t)
        entry = {"name": name, "shape": shape, "datatype": datatype}
        if not binary:
            if _is_array(t):
                t = t.reshape(-1).tolist()
            flat = _flatten(t)
            if datatype == "BOOL":
                flat = [bool(x) for x in flat]
            entry["data"] = flat
            return entry, b""
        raw = _np_encode(t, datatype) if _is_array(t) else _encode_list(_flatten(t), datatype)
        entry["parameters"] = {"binary_data_size": len(raw)}
        return entry, raw

    def infer(self, model, inputs, outputs=None, binary=True, parameters=None,
              datatypes=None, version=None, request_id=None, timeout_us=None,
              compress=None):
        """POST /v2/models/{model}[/versions/{version}]/infer.

        inputs: {name: tensor}; outputs: names to return, in order (default
        ["output", "weights"]; ["output"] alone skips computing the weights);
        binary: inputs and outputs as binary tensors (True) or JSON (False);
        parameters: request parameters (causal, scale, dropout_p, seed, ...);
        timeout_us: the request's deadline in microseconds (504 past it).
        Returns {output name: tensor}."""
        datatypes = datatypes or {}
        outputs = list(outputs) if outputs else ["output", "weights"]
        entries, raws = [], []
        for name, t in inputs.items():
            e, raw = self._v2_input(name, t, self._datatype(name, t, datatypes), binary)
            entries.append(e)
            raws.append(raw)
        req = {}
        if request_id is not None:
            req["id"] = str(request_id)
        params = dict(parameters or {})
        if timeout_us is not None:
            params["timeout"] = int(timeout_us)
        if params:
            req["parameters"] = params
        req["inputs"] = entries
        req["outputs"] = [{"name": o, "parameters": {"binary_data": bool(binary)}}
                          for o in outputs]
        header = json.dumps(req, separators=(",", ":")).encode()
        body = header + b"".join(raws)
        headers = {"Accept-Encoding": "gzip"}
        if binary:
            headers["Inference-Header-Content-Length"] = str(len(header))
            headers["Content-Type"] = "application/octet-stream"
        else:
            headers["Content-Type"] = "application/json"
        if compress:
            body = gzip.compress(body) if compress == "gzip" else zlib.compress(body)
            headers["Content-Encoding"] = compress
        hdrs, data = self._checked("POST", self._model_path(model, version) + "/infer",
                                   body, headers)
        return self._v2_outputs(hdrs, data)

    def _v2_outputs(self, hdrs, data):
        hl = hdrs.get("inference-header-content-length")
        n = int(hl) if hl is not None else len(data)
        res = json.loads(data[:n])
        self.last_response = res
        off = n
        result = {}
        for out in res.get("outputs", []):
            shape, dt = out["shape"], out["datatype"]
            size = out.get("parameters", {}).get("binary_data_size")
            if size is not None:
                chunk = data[off:off + size]
                if len(chunk) != size:
                    raise AttndError(200, "response ends inside binary output %r"
                                     % out["name"], body=data)
                off += size
                if self.numpy:
                    result[out["name"]] = _np_decode(chunk, dt, shape)
                else:
                    result[out["name"]] = _nest(_decode_list(chunk, dt), shape)
            else:
                flat = _flatten(out["data"])
                if self.numpy:
                    result[out["name"]] = _np.asarray(flat, dtype=_np.float32).reshape(shape)
                else:
                    result[out["name"]] = _nest(flat, shape)
        if off != len(data):
            raise AttndError(200, "%d unexpected bytes after the binary outputs"
                             % (len(data) - off), body=data)
        return result


def main(argv):
    """python3 attnd_client.py [URL]: readiness, then a small request."""
    c = AttndClient(argv[1] if len(argv) > 1 else "http://127.0.0.1:8000")
    print("healthy:", c.healthy(), "ready:", c.ready())
    r = c.attention([[[1, 0], [0, 2]]], [[[1, 1], [2, 0], [0, 3]]],
                    [[[1, 0], [0, 1], [1, 1]]], valid_lens=[2])
    print("output:", r["output"])
    print("weights:", r["weights"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
