"""AttndClient: one attnd server, its /v1 JSON API and its KServe v2 routes."""

from __future__ import annotations

import json
import math
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np

from . import _tensors
from ._tensors import Array
from ._errors import AttndConnectionError, AttndError, AttndInputError
from ._shm import ShmTensor, filled
from ._transport import Transport, deflate, inflate

#: What a tensor may be: a numpy array or scalar, nested lists or tuples of
#: numbers, or a Python number.
TensorLike = Union[Array, np.generic, Sequence[Any], float, int, bool]

_V1_TENSORS = ("query", "key", "value", "valid_lens", "mask", "bias", "w_q", "w_k", "w_v")


class AttentionResult(TypedDict, total=False):
    """The answer of AttndClient.attention.

    output: float32 (B, [H,] Lq, Dv).  weights: float32 (B, [H,] Lq, Lk),
    absent when return_weights=False.  diagnostics: with diagnostics=True,
    {"allowed_keys": int32, "entropy", "max_weight", "jacobian_norm":
    float32}, each (B, [H,] Lq).  id: the request's id, when it had one.
    """

    output: Array
    weights: Array
    diagnostics: Dict[str, Array]
    id: Union[str, float]


def _plain(path: str, v: Any) -> Any:
    """A JSON value with numpy arrays and scalars turned into lists and
    Python numbers; NaN and infinities refused in attnd's words."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    elif isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        raise AttndInputError(_tensors.nonfinite_json_message(path, v))
    if isinstance(v, Mapping):
        return {str(k): _plain("%s.%s" % (path, k), x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain("%s[%d]" % (path, i), x) for i, x in enumerate(v)]
    return v


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), allow_nan=False)


def _retry_after(v: Optional[str]) -> Optional[float]:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _v1_array(t: Any, dtype: Any) -> Array:
    """A /v1 answer tensor, nested or {"shape", "data"}, as a numpy array."""
    if isinstance(t, dict) and "shape" in t:
        return np.asarray(t["data"], dtype=dtype).reshape(t["shape"])
    return np.asarray(t, dtype=dtype)


class AttndClient:
    """A client of one attnd server.

    Args:
        url: "http://host:port" (https:// for an attnd with --tls-cert;
            a path prefix is kept, for attnd behind a proxy).  "host:port"
            means http.
        token: the bearer token of an attnd started with --token or
            --token-file, sent on every request.
        timeout: seconds to connect and for each read (None: no limit).
        headers: extra headers sent on every request.
        ssl_context: for https, e.g. ssl.create_default_context(cafile=...).
        unix_socket: the path of attnd's --unix-socket, to talk to a server
            on the same host through it (url then gives only the path
            prefix, if any).  Its connections ask for a send buffer that
            holds a whole upload of a few MiB (see _transport.UNIX_SNDBUF).

    The client keeps one HTTP/1.1 connection per thread and reuses it, so
    it may be shared by threads; a connection attnd closed while idle is
    reopened without the caller noticing.  close() (or a with block)
    closes them.

    Errors: every method raises AttndError for an error status (with
    .status and .message, attnd's text), AttndConnectionError (a subclass,
    .status None) when no answer comes, and AttndInputError (a subclass, and
    a ValueError) for a tensor refused before sending.
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", *, token: Optional[str] = None,
                 timeout: Optional[float] = 60.0,
                 headers: Optional[Mapping[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 unix_socket: Optional[str] = None) -> None:
        if "://" not in url:
            url = "http://" + url
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url must be http[s]://host[:port][/prefix], not %r" % url)
        self.url = url
        self.base = u.path.rstrip("/")
        self.headers: Dict[str, str] = dict(headers or {})
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self._transport = Transport(u.scheme, u.hostname,
                                    u.port or (443 if u.scheme == "https" else 80),
                                    timeout, ssl_context, unix_socket)
        self._local = threading.local()

    # ---- connections -------------------------------------------------------

    def close(self) -> None:
        """Closes the client's connections (a later call opens new ones)."""
        self._transport.close()

    def __enter__(self) -> "AttndClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def last_response(self) -> Optional[Dict[str, Any]]:
        """The JSON part of this thread's last /v1 or v2 inference answer
        (model_name, model_version, id, outputs with their shapes and
        datatypes), as decoded JSON."""
        return getattr(self._local, "response", None)

    @property
    def last_headers(self) -> Dict[str, str]:
        """The headers (lower-case names) of this thread's last answer."""
        return getattr(self._local, "headers", {})

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Mapping[str, str]] = None) -> Tuple[int, Dict[str, str], bytes]:
        """One HTTP request to path (after the url's prefix), any status.
        Returns (status, headers with lower-case names, body decompressed).
        Raises AttndConnectionError when no answer comes."""
        h = dict(self.headers)
        h.update(headers or {})
        status, hdrs, data = self._transport.request(method, self.base + path, body, h)
        try:
            data = inflate(data, hdrs.get("content-encoding"))
        except Exception as e:  # OSError, ValueError, zlib.error
            raise AttndError(status, "cannot decompress the answer: %s" % e, body=data) from e
        self._local.headers = hdrs
        return status, hdrs, data

    @staticmethod
    def _error(status: int, hdrs: Mapping[str, str], data: bytes) -> AttndError:
        try:
            msg = json.loads(data)["error"]
            if not isinstance(msg, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            msg = data[:300].decode("utf-8", "replace").strip() or \
                "empty answer with status %d" % status
        return AttndError(status, msg, _retry_after(hdrs.get("retry-after")), data)

    def _call(self, method: str, path: str, body: Optional[bytes] = None,
              headers: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, str], bytes]:
        status, hdrs, data = self.request(method, path, body, headers)
        if status != 200:
            raise self._error(status, hdrs, data)
        return hdrs, data

    def _get_json(self, path: str) -> Any:
        return json.loads(self._call("GET", path)[1])

    def _get_object(self, path: str) -> Dict[str, Any]:
        doc: Dict[str, Any] = self._get_json(path)
        return doc

    @staticmethod
    def _model_path(model: str, version: Optional[Union[str, int]]) -> str:
        path = "/v2/models/" + urllib.parse.quote(model, safe="")
        if version is not None and version != "":
            path += "/versions/" + urllib.parse.quote(str(version), safe="")
        return path

    # ---- health and metadata -------------------------------------------------

    def _probe(self, path: str) -> bool:
        status, hdrs, data = self.request("GET", path)
        if status == 200:
            return True
        if status == 503:
            return False
        raise self._error(status, hdrs, data)

    def healthy(self) -> bool:
        """GET /healthz: True while attnd serves (liveness)."""
        return self._probe("/healthz")

    def ready(self) -> bool:
        """GET /readyz: True when attnd accepts work, False on 503 (starting
        or draining).  Any other status raises AttndError, and no answer
        AttndConnectionError."""
        return self._probe("/readyz")

    def server_live(self) -> bool:
        """GET /v2/health/live."""
        return self._probe("/v2/health/live")

    def server_ready(self) -> bool:
        """GET /v2/health/ready: True, or False on 503."""
        return self._probe("/v2/health/ready")

    def model_ready(self, model: str = "attention",
                    version: Optional[Union[str, int]] = None) -> bool:
        """GET /v2/models/{model}[/versions/{version}]/ready: True, or False
        on 503.  An unknown model or version raises AttndError (404), a
        missing token too (401)."""
        return self._probe(self._model_path(model, version) + "/ready")

    def wait_ready(self, timeout: float = 30.0, interval: float = 0.05) -> None:
        """Polls ready() until attnd answers 200: while nothing answers or
        it answers 503.  Raises the last AttndError after timeout seconds,
        and at once for any other error (a 401, say)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.ready():
                    return
                last: AttndError = AttndError(503, "not ready after %gs" % timeout)
            except AttndConnectionError as e:
                last = e
            if time.monotonic() >= deadline:
                raise last
            time.sleep(interval)

    def server_metadata(self) -> Dict[str, Any]:
        """GET /v2: {"name", "version", "extensions"}."""
        return self._get_object("/v2")

    def model_metadata(self, model: str = "attention",
                       version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models/{model}: its inputs and outputs, with datatypes and
        shapes."""
        return self._get_object(self._model_path(model, version))

    def model_config(self, model: str = "attention",
                     version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models/{model}/config: the model's Triton configuration."""
        return self._get_object(self._model_path(model, version) + "/config")

    def model_statistics(self, model: str = "",
                         version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models[/{model}[/versions/{v}]]/stats: inference counts and
        times ({"model_stats": [...]}); every model's when model is ""."""
        path = self._model_path(model, version) if model else "/v2/models"
        return self._get_object(path + "/stats")

    def metrics(self) -> str:
        """GET /metrics: the Prometheus text exposition."""
        return self._call("GET", "/metrics")[1].decode("utf-8")

    def openapi(self) -> Dict[str, Any]:
        """GET /openapi.json: the OpenAPI document of every route."""
        return self._get_object("/openapi.json")

    # ---- compression ----------------------------------------------------------

    @staticmethod
    def _encoded(body: bytes, headers: Dict[str, str], request_compression: Optional[str],
                 response_compression: Optional[str]) -> bytes:
        if request_compression:
            body = deflate(body, request_compression)
            headers["Content-Encoding"] = request_compression
        if response_compression:
            if response_compression not in ("gzip", "deflate"):
                raise ValueError("response_compression must be 'gzip' or 'deflate'")
            headers["Accept-Encoding"] = response_compression
        return body

    # ---- /v1/attention ----------------------------------------------------------

    def attention(self, query: TensorLike, key: TensorLike, value: TensorLike, *,
                  valid_lens: Optional[TensorLike] = None,
                  mask: Optional[TensorLike] = None,
                  bias: Optional[TensorLike] = None,
                  causal: Union[bool, str, None] = None,
                  window: Optional[Sequence[Optional[int]]] = None,
                  scale: Optional[float] = None,
                  scoring: Optional[str] = None,
                  w_q: Optional[TensorLike] = None,
                  w_k: Optional[TensorLike] = None,
                  w_v: Optional[TensorLike] = None,
                  dropout: Optional[Mapping[str, Any]] = None,
                  return_weights: Optional[bool] = None,
                  diagnostics: Optional[bool] = None,
                  id: Union[str, int, float, None] = None,
                  extra: Optional[Mapping[str, Any]] = None,
                  request_compression: Optional[str] = None,
                  response_compression: Optional[str] = None) -> AttentionResult:
        """POST /v1/attention: masked scaled-dot-product (or additive) attention.

        Args:
            query: (B, Lq, D) or (B, H, Lq, D).
            key: (B, Lk, Dk) or (B, Hkv, Lk, Dk).
            value: (B, Lk, Dv) or (B, Hkv, Lk, Dv).
            valid_lens: integers (B,) or (B, Lq): key j allowed when j < len.
            mask: booleans broadcastable to (B, [H,] Lq, Lk); True may attend.
            bias: floats broadcastable like mask, added to the scores.
            causal: False, True ("upper_left") or "lower_right".
            window: [left, right], each an integer or None (unbounded).
            scale: non-zero; default 1/sqrt(D).
            scoring: "dot" (default) or "additive" (with w_q, w_k, w_v).
            w_q, w_k, w_v: additive weights (Hd, D), (Hd, Dk), (Hd,).
            dropout: {"p": 0.1, "seed": 7}.
            return_weights: False skips the (Lq, Lk) weights.
            diagnostics: True adds per-row diagnostics.
            id: echoed in the answer.
            extra: other members of the request body, sent as they are.
            request_compression: "gzip" or "deflate" compresses the body.
            response_compression: "gzip" or "deflate" asks for a compressed
                answer (Accept-Encoding).

        Tensors are numpy arrays of any float dtype, nested lists or numbers;
        they are checked first (AttndInputError: ragged lists, NaN,
        infinities, numbers out of float32 range) and sent as attnd's flat
        {"shape", "data"} form, float32 values as their shortest digits.

        Returns:
            {"output", "weights", "diagnostics", "id"} as AttentionResult
            describes, numpy arrays in their own dtypes.
        """
        tensors = {"query": query, "key": key, "value": value, "valid_lens": valid_lens,
                   "mask": mask, "bias": bias, "w_q": w_q, "w_k": w_k, "w_v": w_v}
        members: List[str] = []
        for name in _V1_TENSORS:
            t = tensors[name]
            if t is None:
                continue
            a = _tensors.to_array(name, t)
            if _tensors.kind_of(name) == _tensors.FLOAT:
                _tensors.check_floats(name, a, "float32", binary=False)
            text = (_tensors.json_numbers(a, "float32") if a.ndim == 0 else
                    _tensors.json_tensor(a, "float32"))
            members.append('"%s":%s' % (name, text))
        fields: Dict[str, Any] = {"causal": causal, "window": window, "scale": scale, "scoring": scoring,
                  "dropout": dropout, "return_weights": return_weights,
                  "diagnostics": diagnostics, "id": id}
        fields.update(extra or {})
        for name, v in fields.items():
            if v is not None or (name in (extra or {})):
                members.append("%s:%s" % (_dumps(name), _dumps(_plain(name, v))))
        body = ("{" + ",".join(members) + "}").encode()
        headers = {"Content-Type": "application/json"}
        body = self._encoded(body, headers, request_compression, response_compression)
        res = json.loads(self._call("POST", "/v1/attention", body, headers)[1])
        self._local.response = res
        out: Dict[str, Any] = {}
        for k, v in res.items():
            if k in ("output", "weights"):
                out[k] = _v1_array(v, np.float32)
            elif k == "diagnostics":
                out[k] = {n: _v1_array(d, np.int32 if n == "allowed_keys" else np.float32)
                          for n, d in v.items()}
            else:
                out[k] = v
        return out  # type: ignore[return-value]

    # ---- /v2/models/{model}/infer ---------------------------------------------

    def infer(self, model: str, inputs: Mapping[str, Union[TensorLike, ShmTensor]],
              outputs: Union[Sequence[str], Mapping[str, Optional[ShmTensor]], None] = None, *,
              binary: bool = True,
              datatypes: Optional[Mapping[str, str]] = None,
              parameters: Optional[Mapping[str, Any]] = None,
              version: Optional[Union[str, int]] = None,
              request_id: Optional[str] = None,
              timeout_us: Optional[int] = None,
              request_compression: Optional[str] = None,
              response_compression: Optional[str] = None) -> Dict[str, Any]:
        """POST /v2/models/{model}[/versions/{version}]/infer (KServe v2).

        Args:
            model: "attention" or "additive_attention".
            inputs: {input name: tensor or ShmTensor}: query, key, value and
                optionally valid_lens, mask, bias (w_q, w_k, w_v for
                additive_attention).  A ShmTensor (with shape and datatype)
                places the input in a registered shared memory region.
            outputs: the outputs to return, in order: names (default
                ["output", "weights"]; ["output"] alone skips computing the
                weights; "allowed_keys", "entropy", "max_weight",
                "jacobian_norm" are the diagnostics), or {name: None or
                ShmTensor}, where a ShmTensor has attnd write that output
                into a shared memory region.
            binary: send inputs and ask for outputs as binary tensors
                (Triton's binary tensor extension) when True, as JSON when
                False.
            datatypes: {input name: v2 datatype} ("FP32", "FP64", "FP16",
                "BF16", "INT32", "INT64", "BOOL"); by default a numpy array's
                own (float16 -> FP16, float32 -> FP32, float64 -> FP64,
                int64 lengths -> INT64), else FP32, INT32 for valid_lens and
                BOOL for mask.  FP16 and BF16 round to nearest, ties to
                even (BF16 through float32, as torch does).
            parameters: request parameters: causal, scale, dropout_p, seed,
                window_left, window_right, ...
            version: the model version ("1").
            request_id: the request's id, echoed in last_response["id"].
            timeout_us: the request's deadline in microseconds (504 after).
            request_compression, response_compression: "gzip" or "deflate".

        Returns:
            {output name: numpy array} in the answer's order, each in its
            datatype's dtype (FP32 -> float32, INT32 -> int32, BF16 ->
            float32).  An output written to shared memory is read back from
            the region when its ShmTensor came from SharedMemoryRegion;
            otherwise it is a ShmTensor with the shape and datatype attnd
            reported.  The answer's JSON part is in last_response.
        """
        datatypes = dict(datatypes or {})
        entries: List[str] = []
        raws: List[bytes] = []
        for name, t in inputs.items():
            if isinstance(t, ShmTensor):
                if t.shape is None or t.datatype is None:
                    raise ValueError("%s: a ShmTensor input needs shape and datatype" % name)
                entries.append(_dumps({"name": name, "shape": list(t.shape),
                                       "datatype": datatypes.get(name, t.datatype),
                                       "parameters": t.parameters()}))
                continue
            a = _tensors.to_array(name, t)
            dt = datatypes.get(name) or _tensors.default_datatype(name, t)
            if _tensors.kind_of(name) == _tensors.FLOAT and dt in ("FP32", "FP64", "FP16", "BF16"):
                _tensors.check_floats(name, a, dt, binary)
            head = '"name":%s,"shape":[%s],"datatype":%s' % (
                _dumps(name), ",".join(map(str, a.shape)), _dumps(dt))
            if binary:
                raw = _tensors.encode(a, dt)
                raws.append(raw)
                entries.append('{%s,"parameters":{"binary_data_size":%d}}' % (head, len(raw)))
            else:
                entries.append('{%s,"data":[%s]}' % (head, _tensors.json_numbers(a, dt)))

        places: Dict[str, Optional[ShmTensor]]
        if outputs is None:
            places = {"output": None, "weights": None}
        elif isinstance(outputs, Mapping):
            places = dict(outputs)
        else:
            places = {n: None for n in outputs}
        out_entries = []
        for name, place in places.items():
            params: Dict[str, Any] = {"binary_data": bool(binary) and place is None}
            if place is not None:
                params.update(place.parameters())
            out_entries.append({"name": name, "parameters": params})

        members = []
        if request_id is not None:
            members.append('"id":%s' % _dumps(str(request_id)))
        params = _plain("parameters", dict(parameters or {}))
        if timeout_us is not None:
            params["timeout"] = int(timeout_us)
        if params:
            members.append('"parameters":%s' % _dumps(params))
        members.append('"inputs":[%s]' % ",".join(entries))
        members.append('"outputs":%s' % _dumps(out_entries))
        header = ("{" + ",".join(members) + "}").encode()
        headers: Dict[str, str] = {}
        if raws:
            headers["Inference-Header-Content-Length"] = str(len(header))
            headers["Content-Type"] = "application/octet-stream"
        else:
            headers["Content-Type"] = "application/json"
        body = self._encoded(header + b"".join(raws), headers, request_compression,
                             response_compression)
        hdrs, data = self._call("POST", self._model_path(model, version) + "/infer",
                                body, headers)
        return self._v2_outputs(hdrs, data, places)

    def _v2_outputs(self, hdrs: Mapping[str, str], data: bytes,
                    places: Mapping[str, Optional[ShmTensor]]) -> Dict[str, Any]:
        hl = hdrs.get("inference-header-content-length")
        n = int(hl) if hl is not None else len(data)
        try:
            res = json.loads(data[:n])
        except ValueError as e:
            raise AttndError(200, "the answer's JSON part does not parse: %s" % e,
                             body=data) from e
        self._local.response = res
        off = n
        result: Dict[str, Any] = {}
        for out in res.get("outputs", []):
            name, dt, shape = out["name"], out["datatype"], out["shape"]
            size = (out.get("parameters") or {}).get("binary_data_size")
            if size is not None:
                chunk = data[off:off + size]
                if len(chunk) != size:
                    raise AttndError(200, "the answer ends inside binary output %r" % name,
                                     body=data)
                off += size
                result[name] = _tensors.decode(chunk, dt, shape)
            elif "data" in out:
                result[name] = _tensors.from_json(out["data"], dt, shape)
            else:
                place = places.get(name)
                if place is None:
                    raise AttndError(200, "output %r came without data" % name, body=data)
                if place.memory is not None:
                    result[name] = place.memory.read(shape, dt, place.offset)
                else:
                    result[name] = filled(place, shape, dt)
        if off != len(data):
            raise AttndError(200, "%d unexpected bytes after the binary outputs"
                             % (len(data) - off), body=data)
        return result

    # ---- system shared memory (Triton's extension) ------------------------------

    def register_system_shared_memory(self, name: str, key: str, byte_size: int,
                                      offset: int = 0) -> None:
        """POST /v2/systemsharedmemory/region/{name}/register: attnd maps
        byte_size bytes at offset (a multiple of the page size) of the POSIX
        shared memory object key ("/name", as shm_open takes it), which must
        exist.  Needs attnd started with --allow-client-shm 1 (else 501)."""
        body = _dumps({"key": key, "offset": int(offset), "byte_size": int(byte_size)})
        self._call("POST", "/v2/systemsharedmemory/region/%s/register"
                   % urllib.parse.quote(name), body.encode(),
                   {"Content-Type": "application/json"})

    def unregister_system_shared_memory(self, name: str = "") -> None:
        """POST .../region/{name}/unregister, or /v2/systemsharedmemory/
        unregister for every region when name is "".  An unknown name is
        not an error."""
        path = ("/v2/systemsharedmemory/region/%s/unregister" % urllib.parse.quote(name)
                if name else "/v2/systemsharedmemory/unregister")
        self._call("POST", path, b"")

    def get_system_shared_memory_status(self, name: str = "") -> List[Dict[str, Any]]:
        """GET /v2/systemsharedmemory[/region/{name}]/status: a list of
        {"name", "key", "offset", "byte_size"}, one per registered region
        (the one named).  An unknown name raises AttndError (404)."""
        path = ("/v2/systemsharedmemory/region/%s/status" % urllib.parse.quote(name)
                if name else "/v2/systemsharedmemory/status")
        status: List[Dict[str, Any]] = self._get_json(path)
        return status
