"""A small KServe v2 HTTP client that speaks like tritonclient.http.

Standard library only (no numpy): tensors are flat Python lists plus a
shape.  The wire format is what tritonclient.http sends and expects:

  * the request is json.dumps of {"id"?, "parameters"?, "inputs", "outputs"?};
    a binary input carries "parameters": {"binary_data_size": n} and no
    "data", and its bytes follow the JSON in input order;
  * when any input is binary, Inference-Header-Content-Length gives the
    JSON length (no Content-Type is set, as tritonclient does);
  * with no outputs listed the request asks "binary_data_output": true;
  * request_compression_algorithm "gzip"/"deflate" compresses the body and
    sets Content-Encoding; response_compression_algorithm sets
    Accept-Encoding and the result is decompressed before it is split;
  * the response's JSON part is Inference-Header-Content-Length bytes long
    when that header is present, and binary outputs follow it in order.

    client = InferenceServerClient("127.0.0.1:8000")
    q = InferInput("query", [1, 2, 4], "FP16"); q.set_data_from_list(values)
    result = client.infer("attention", [q, k, v],
                          outputs=[InferRequestedOutput("output")])
    result.as_list("output"), result.get_output("output")["shape"]
"""

import gzip
import http.client
import json
import math
import struct
import zlib

_FORMATS = {"FP32": "f", "FP64": "d", "FP16": "e", "INT32": "i",
            "INT64": "q", "BOOL": "?", "UINT8": "B", "INT8": "b"}


class InferenceServerException(Exception):
    """A non-200 answer: status and the server's {"error"} message."""

    def __init__(self, status, msg, body=b""):
        super().__init__("%d: %s" % (status, msg))
        self.status = status
        self.msg = msg
        self.body = body


def bf16_round(x):
    """x rounded once, to nearest with ties to even, onto the BF16 grid
    (8 significant bits, float32's exponent range); Python's round() on a
    float is exact and ties to even."""
    if x == 0 or not math.isfinite(x):
        return x
    e = math.frexp(abs(x))[1] - 1          # |x| in [2^e, 2^(e+1))
    unit = max(e, -126) - 7                # the spacing of the grid there
    return math.copysign(math.ldexp(round(math.ldexp(abs(x), -unit)), unit), x)


def bf16_bits(x):
    """The 16 bits of bf16_round(x)."""
    return struct.unpack("<I", struct.pack("<f", bf16_round(x)))[0] >> 16


def f16_round(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def f32_round(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def serialize(values, datatype):
    """Little-endian bytes of a flat list in the given datatype."""
    if datatype == "BF16":
        return b"".join(struct.pack("<H", bf16_bits(x)) for x in values)
    return struct.pack("<%d%s" % (len(values), _FORMATS[datatype]), *values)


def deserialize(data, datatype):
    if datatype == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack("<%dH" % (len(data) // 2), data)]
    size = struct.calcsize(_FORMATS[datatype])
    return list(struct.unpack("<%d%s" % (len(data) // size, _FORMATS[datatype]), data))


class InferInput:
    def __init__(self, name, shape, datatype):
        self._name, self._shape, self._datatype = name, list(shape), datatype
        self._data = None
        self._raw = None
        self._parameters = {}

    def name(self):
        return self._name

    def set_data_from_list(self, values, binary_data=True):
        """values: flat (or nested, sent as given when binary_data is False)."""
        self._parameters.pop("binary_data_size", None)
        if binary_data:
            self._raw = serialize(_flatten(values), self._datatype)
            self._data = None
            self._parameters["binary_data_size"] = len(self._raw)
        else:
            self._data = values
            self._raw = None
        return self

    def set_raw(self, raw, size=None):
        """Binary bytes as they are, with a chosen binary_data_size (tests)."""
        self._raw = raw
        self._data = None
        self._parameters["binary_data_size"] = len(raw) if size is None else size
        return self

    def _get_tensor(self):
        t = {"name": self._name, "shape": self._shape, "datatype": self._datatype}
        if self._parameters:
            t["parameters"] = dict(self._parameters)
        if self._data is not None:
            t["data"] = self._data
        return t


class InferRequestedOutput:
    def __init__(self, name, binary_data=True):
        self._name = name
        self._binary = binary_data

    def _get_tensor(self):
        # tritonclient always states binary_data, true or false
        return {"name": self._name, "parameters": {"binary_data": self._binary}}


def _flatten(t):
    if isinstance(t, (list, tuple)):
        out = []
        for x in t:
            out.extend(_flatten(x))
        return out
    return [t]


def build_request(inputs, outputs=None, request_id="", parameters=None):
    """(body bytes, json length or None) as tritonclient.http builds them."""
    req = {}
    if request_id:
        req["id"] = request_id
    params = dict(parameters or {})
    if outputs is None:
        params["binary_data_output"] = True
    if params:
        req["parameters"] = params
    req["inputs"] = [i._get_tensor() for i in inputs]
    if outputs:
        req["outputs"] = [o._get_tensor() for o in outputs]
    header = json.dumps(req).encode()
    raws = [i._raw for i in inputs if i._raw is not None]
    if not raws:
        return header, None
    return header + b"".join(raws), len(header)


def compress(body, algorithm):
    if algorithm == "gzip":
        return gzip.compress(body)
    if algorithm == "deflate":
        return zlib.compress(body)
    return body


def decompress(body, encoding):
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


class InferResult:
    def __init__(self, body, header_length):
        if header_length is None:
            self._result = json.loads(body)
            self._buffer = b""
        else:
            self._result = json.loads(body[:header_length])
            self._buffer = body[header_length:]
        self._offsets = {}
        off = 0
        for out in self._result.get("outputs", []):
            size = out.get("parameters", {}).get("binary_data_size")
            if size is not None:
                self._offsets[out["name"]] = (off, size)
                off += size
        self.trailing = len(self._buffer) - off

    def get_response(self):
        return self._result

    def get_output(self, name):
        for out in self._result.get("outputs", []):
            if out["name"] == name:
                return out
        return None

    def as_list(self, name):
        """The output's elements, flat, whether JSON or binary."""
        out = self.get_output(name)
        if out is None:
            return None
        if name in self._offsets:
            off, size = self._offsets[name]
            return deserialize(self._buffer[off:off + size], out["datatype"])
        return _flatten(out["data"])


class InferenceServerClient:
    def __init__(self, url, network_timeout=60.0):
        host, _, port = url.rpartition(":")
        self._host, self._port = host, int(port)
        self._timeout = network_timeout
        self.last_headers = {}

    def _request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            self.last_headers = {k.lower(): v for k, v in resp.getheaders()}
            return resp.status, self.last_headers, data
        finally:
            conn.close()

    def _get_json(self, path):
        status, _, data = self._request("GET", path)
        if status != 200:
            raise InferenceServerException(status, _error(data), data)
        return json.loads(data) if data else {}

    def is_server_live(self):
        return self._request("GET", "/v2/health/live")[0] == 200

    def is_server_ready(self):
        return self._request("GET", "/v2/health/ready")[0] == 200

    def is_model_ready(self, model_name, model_version=""):
        return self._request("GET", _model_path(model_name, model_version) + "/ready")[0] == 200

    def get_server_metadata(self):
        return self._get_json("/v2")

    def get_model_metadata(self, model_name, model_version=""):
        return self._get_json(_model_path(model_name, model_version))

    def infer(self, model_name, inputs, model_version="", outputs=None, request_id="",
              parameters=None, headers=None, request_compression_algorithm=None,
              response_compression_algorithm=None, timeout=None):
        params = dict(parameters or {})
        if timeout is not None:
            params["timeout"] = timeout
        body, json_len = build_request(inputs, outputs, request_id, params)
        h = dict(headers or {})
        if json_len is not None:
            h["Inference-Header-Content-Length"] = str(json_len)
        if request_compression_algorithm:
            body = compress(body, request_compression_algorithm)
            h["Content-Encoding"] = request_compression_algorithm
        if response_compression_algorithm:
            h["Accept-Encoding"] = response_compression_algorithm
        path = _model_path(model_name, model_version) + "/infer"
        status, rh, data = self._request("POST", path, body, h)
        data = decompress(data, rh.get("content-encoding"))
        if status != 200:
            raise InferenceServerException(status, _error(data), data)
        hl = rh.get("inference-header-content-length")
        return InferResult(data, int(hl) if hl is not None else None)


def _model_path(name, version):
    path = "/v2/models/" + name
    if version:
        path += "/versions/" + version
    return path


def _error(data):
    try:
        return json.loads(data)["error"]
    except (ValueError, KeyError, TypeError):
        return data[:200].decode("utf-8", "replace")
