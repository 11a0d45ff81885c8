"""What AttndClient and AsyncAttndClient share: each method's request built
as a _Call (what to send, whether it may be sent again, how its answer
becomes the method's result), attention() over v2 binary tensors, and the
retry policy.  The two clients differ only in how they send a _Call."""

from __future__ import annotations

import datetime
import email.utils
import json
import math
import numbers
import random
import ssl
import time
import urllib.parse
from typing import (Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, Tuple,
                    TypedDict, TypeVar, Union)

import numpy as np

from . import _tensors
from ._tensors import Array
from ._errors import AttndConnectionError, AttndError, AttndInputError
from ._shm import ShmTensor, filled
from ._transport import Body, deflate, inflate

#: What a tensor may be: a numpy array or scalar, nested lists or tuples of
#: numbers, or a Python number.
TensorLike = Union[Array, np.generic, Sequence[Any], float, int, bool]

_V1_TENSORS = ("query", "key", "value", "valid_lens", "mask", "bias", "w_q", "w_k", "w_v",
               "sinks", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k")
#: attention()'s options that are /v1 fields of the same name
_V1_OPTIONS = ("causal", "window", "window_align", "scale", "scoring", "softcap",
               "return_lse", "dropout", "return_weights", "diagnostics", "precision", "id")
_DIAGNOSTICS = ("allowed_keys", "entropy", "max_weight", "jacobian_norm")

#: Retries of a call after its first try, unless the client says otherwise.
DEFAULT_RETRIES = 2

T = TypeVar("T")
#: What attention() returns: AttentionResult, or an awaitable of it.
R = TypeVar("R")
#: (status, headers, body decompressed) -> (the method's result, the JSON
#: part of the answer to keep as last_response, or None)
Parser = Callable[[int, Mapping[str, str], bytes], Tuple[T, Optional[Dict[str, Any]]]]


class AttentionResult(TypedDict, total=False):
    """The answer of AttndClient.attention.

    output: float32 (B, [H,] Lq, Dv).  weights: float32 (B, [H,] Lq, Lk),
    absent when return_weights=False.  diagnostics: with diagnostics=True,
    {"allowed_keys": int32, "entropy", "max_weight", "jacobian_norm":
    float32}, each (B, [H,] Lq).  lse: with return_lse=True, float32
    (B, [H,] Lq), the rows' log-sum-exp, -inf for a row with nothing
    allowed and no sink.  id: the request's id, when it had one.
    """

    output: Array
    weights: Array
    lse: Array
    diagnostics: Dict[str, Array]
    id: Union[str, float]


class _Call(Generic[T]):
    """One HTTP exchange of a method: the request, whether it may be sent
    again (a pure function of its input: inference and reads), and how its
    answer becomes the result."""

    __slots__ = ("method", "path", "body", "headers", "retry", "parse")

    def __init__(self, method: str, path: str, body: Union[bytes, Body, None],
                 headers: Dict[str, str], retry: bool, parse: Parser[T]) -> None:
        self.method = method
        self.path = path
        self.body = body
        self.headers = headers
        self.retry = retry
        self.parse = parse


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
    """Retry-After's seconds to wait (RFC 9110: delay-seconds, or an
    HTTP-date, counted from now), or None when it is absent or neither
    (a wait of NaN or infinity included): the backoff is used then."""
    if v is None:
        return None
    try:
        secs = float(v)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(v)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        secs = when.timestamp() - time.time()
    return max(secs, 0.0) if math.isfinite(secs) else None


def _v1_array(t: Any, dtype: Any) -> Array:
    """A /v1 answer tensor, nested or {"shape", "data"}, as a numpy array."""
    if isinstance(t, dict) and "shape" in t:
        return np.asarray(t["data"], dtype=dtype).reshape(t["shape"])
    return np.asarray(t, dtype=dtype)


def _lse_array(t: Any) -> Array:
    """/v1's lse, nested or {"shape", "data"}, as float32 with its nulls
    (JSON has no infinity) back to -inf."""
    if isinstance(t, dict) and "shape" in t:
        return np.asarray(_tensors.null_to_ninf(t["data"]), dtype=np.float32).reshape(t["shape"])
    return np.asarray(_tensors.null_to_ninf(t), dtype=np.float32)


def _f32(v: Any) -> float:
    """v rounded to float32 as attnd reads it (inf past its range)."""
    with np.errstate(over="ignore"):
        return float(np.float32(v))


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def error_from(status: int, hdrs: Mapping[str, str], data: bytes) -> AttndError:
    """The AttndError of an error answer: attnd's {"error"} text, or the
    start of a body that is not attnd's."""
    try:
        msg = json.loads(data)["error"]
        if not isinstance(msg, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        msg = bytes(data[:300]).decode("utf-8", "replace").strip() or \
            "empty answer with status %d" % status
    return AttndError(status, msg, _retry_after(hdrs.get("retry-after")), data)


def _v2_outputs(data: bytes, hdrs: Mapping[str, str],
                places: Mapping[str, Optional[ShmTensor]]) -> Tuple[Dict[str, Any],
                                                                    Dict[str, Any]]:
    """A v2 answer -> ({output name: array}, its JSON part).  The largest
    binary output is used where it lies when the transport read the answer
    into a buffer of its own (answer_buffer); the others are copied out of
    it, so that keeping only a small output does not keep the whole answer."""
    hl = hdrs.get("inference-header-content-length")
    n = int(hl) if hl is not None else len(data)
    res = json.loads(bytes(data[:n]))  # a ValueError is ClientBase._parsed's
    off = n
    result: Dict[str, Any] = {}
    view = memoryview(data)
    sizes = [(o.get("parameters") or {}).get("binary_data_size") or 0
             for o in res.get("outputs", [])]
    largest = sizes.index(max(sizes)) if sizes else -1
    for i, out in enumerate(res.get("outputs", [])):
        name, dt, shape = out["name"], out["datatype"], out["shape"]
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            chunk = view[off:off + size]
            if len(chunk) != size:
                raise AttndError(200, "the answer ends inside binary output %r" % name,
                                 body=data)
            off += size
            result[name] = _tensors.decode(chunk, dt, shape, in_place=i == largest)
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
    return result, res


def tensor_bytes(*values: Any) -> int:
    """About how many bytes the tensors take (numpy arrays exactly, nested
    lists from the length of their first row at every depth, 8 bytes a
    number): whether encoding them is worth moving off an event loop."""
    total = 0
    for v in values:
        if isinstance(v, Mapping):
            total += tensor_bytes(*v.values())
        elif isinstance(v, np.ndarray):
            total += v.nbytes
        elif isinstance(v, (list, tuple)):
            n = 8
            while isinstance(v, (list, tuple)) and v:
                n *= len(v)
                v = v[0]
            total += n
    return total


class ClientBase(Generic[R]):
    """The URL, headers, retry policy and request builders of a client, and
    attention()'s one signature: R is what it returns (AttentionResult, or
    an awaitable of it)."""

    def __init__(self, url: str = "http://127.0.0.1:8000", *, token: Optional[str] = None,
                 timeout: Optional[float] = 60.0,
                 headers: Optional[Mapping[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 unix_socket: Optional[str] = None,
                 retries: int = DEFAULT_RETRIES,
                 backoff: float = 0.1,
                 max_backoff: float = 5.0) -> None:
        if "://" not in url:
            url = "http://" + url
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url must be http[s]://host[:port][/prefix], not %r" % url)
        if int(retries) < 0:
            raise ValueError("retries must be 0 or more")
        self.url = url
        self.base = u.path.rstrip("/")
        self.headers: Dict[str, str] = dict(headers or {})
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self.timeout = timeout
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)
        self._ssl_context = ssl_context
        self._unix_socket = unix_socket
        # the served name of the dot-product model, once learned
        self._dot_model: Optional[str] = None

    # ---- retries ---------------------------------------------------------------

    def _deadline(self) -> Optional[float]:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _attempt_timeout(self, deadline: Optional[float]) -> Optional[float]:
        """The socket timeout of the next try: what is left of the call's."""
        if deadline is None:
            return None
        return max(deadline - time.monotonic(), 0.001)

    def _retry_wait(self, call: "_Call[Any]", e: AttndError, tries: int,
                    retries: Optional[int], deadline: Optional[float]) -> Optional[float]:
        """Seconds to wait before trying call again after e, or None when
        it is not tried again: it is not a pure call, tries are used up, e
        is neither a 503, a 429 (a connection over attnd's
        --max-conns-per-ip, refused before its request was read) nor a
        failure before any byte of the answer, or the wait would end past
        the call's deadline."""
        if retries is None:
            retries = self.retries
        if not call.retry or tries > retries:
            return None
        if e.status in (429, 503) and e.retry_after is not None:
            # no sooner than asked, and up to a quarter later: attnd asks
            # every client it turns away for the same second
            wait = max(e.retry_after, 0.0) * (1.0 + 0.25 * random.random())
        elif e.status in (429, 503) or \
                (isinstance(e, AttndConnectionError) and e.before_answer):
            # exponential, with jitter so that many clients spread out
            wait = self.backoff * (2 ** (tries - 1)) * (0.5 + 0.5 * random.random())
        else:
            return None
        wait = min(wait, self.max_backoff)
        if deadline is not None and time.monotonic() + wait >= deadline:
            return None
        return wait

    @staticmethod
    def _parsed(call: "_Call[T]", status: int, hdrs: Mapping[str, str],
                data: bytes) -> Tuple[T, Optional[Dict[str, Any]]]:
        """call.parse of an answer; a body it cannot read (not JSON, or
        JSON without the members attnd's answer has: a web page from
        whatever listens at the URL) raises AttndError with the status."""
        try:
            return call.parse(status, hdrs, data)
        except AttndError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            raise AttndError(status, "the answer is not attnd's (%s): %s" % (
                e, bytes(data[:120]).decode("utf-8", "replace").strip()),
                body=data) from e

    @staticmethod
    def _inflated(status: int, hdrs: Mapping[str, str], data: bytes) -> bytes:
        try:
            return inflate(data, hdrs.get("content-encoding"))
        except Exception as e:  # OSError, ValueError, zlib.error
            raise AttndError(status, "cannot decompress the answer: %s" % e, body=data) from e

    # ---- building calls ------------------------------------------------------------

    def _headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        h = dict(self.headers)
        h.update(extra or {})
        return h

    @staticmethod
    def _model_path(model: str, version: Optional[Union[str, int]]) -> str:
        path = "/v2/models/" + urllib.parse.quote(model, safe="")
        if version is not None and version != "":
            path += "/versions/" + urllib.parse.quote(str(version), safe="")
        return path

    def _raw_call(self, method: str, path: str, body: Optional[bytes],
                  headers: Optional[Mapping[str, str]]
                  ) -> "_Call[Tuple[int, Mapping[str, str], bytes]]":
        def parse(status: int, hdrs: Mapping[str, str],
                  data: bytes) -> Tuple[Tuple[int, Mapping[str, str], bytes], None]:
            return (status, hdrs, bytes(data)), None
        return _Call(method, path, body, self._headers(headers), False, parse)

    def _get_call(self, path: str, text: bool = False) -> "_Call[Any]":
        def parse(status: int, hdrs: Mapping[str, str], data: bytes) -> Tuple[Any, None]:
            if status != 200:
                raise error_from(status, hdrs, data)
            return (data.decode("utf-8") if text else json.loads(data)), None
        return _Call("GET", path, None, self._headers(), True, parse)

    def _probe_call(self, path: str) -> "_Call[bool]":
        def parse(status: int, hdrs: Mapping[str, str], data: bytes) -> Tuple[bool, None]:
            if status == 200:
                return True, None
            if status == 503:
                return False, None
            raise error_from(status, hdrs, data)
        return _Call("GET", path, None, self._headers(), True, parse)

    def _post_call(self, path: str, body: bytes, headers: Mapping[str, str],
                   retry: bool) -> "_Call[None]":
        def parse(status: int, hdrs: Mapping[str, str], data: bytes) -> Tuple[None, None]:
            if status != 200:
                raise error_from(status, hdrs, data)
            return None, None
        return _Call("POST", path, body, self._headers(headers), retry, parse)

    @staticmethod
    def _stats_path(model: str, version: Optional[Union[str, int]]) -> str:
        return (ClientBase._model_path(model, version) if model else "/v2/models") + "/stats"

    @staticmethod
    def _shm_path(name: str, what: str) -> str:
        if name:
            return "/v2/systemsharedmemory/region/%s/%s" % (urllib.parse.quote(name), what)
        return "/v2/systemsharedmemory/" + what

    def _register_call(self, name: str, key: str, byte_size: int,
                       offset: int) -> "_Call[None]":
        body = _dumps({"key": key, "offset": int(offset), "byte_size": int(byte_size)})
        # not a pure function: a second try could find the name taken by
        # the first, so registering is never retried
        return self._post_call(self._shm_path(name, "register"), body.encode(),
                               {"Content-Type": "application/json"}, False)

    def _unregister_call(self, name: str) -> "_Call[None]":
        return self._post_call(self._shm_path(name, "unregister"), b"", {}, False)

    @staticmethod
    def _encoded(body: Union[bytes, Body], headers: Dict[str, str],
                 request_compression: Optional[str],
                 response_compression: Optional[str]) -> Union[bytes, Body]:
        if request_compression:
            body = deflate(body.tobytes() if isinstance(body, Body) else body,
                           request_compression)
            headers["Content-Encoding"] = request_compression
        if response_compression:
            if response_compression not in ("gzip", "deflate"):
                raise ValueError("response_compression must be 'gzip' or 'deflate'")
            headers["Accept-Encoding"] = response_compression
        return body

    # ---- attention ------------------------------------------------------------------

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
                  sinks: Optional[TensorLike] = None,
                  softcap: Optional[float] = None,
                  alibi_slopes: Optional[TensorLike] = None,
                  cu_seqlens_q: Optional[TensorLike] = None,
                  cu_seqlens_k: Optional[TensorLike] = None,
                  return_lse: Optional[bool] = None,
                  window_align: Optional[str] = None,
                  precision: Optional[str] = None,
                  id: Union[str, int, float, None] = None,
                  extra: Optional[Mapping[str, Any]] = None,
                  model: Optional[str] = None,
                  timeout_us: Optional[int] = None,
                  binary: bool = True,
                  request_compression: Optional[str] = None,
                  response_compression: Optional[str] = None) -> R:
        """POST /v1/attention, or the same over KServe v2: masked
        scaled-dot-product (or additive) attention.  AsyncAttndClient's is a
        coroutine (await c.attention(...)), with the same arguments.

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
            sinks: floats (H,): a learned sink logit per query head.
            softcap: > 0: scores become softcap * tanh(s / softcap).
            alibi_slopes: floats (H,) or (B, H): ALiBi slope per query head.
            cu_seqlens_q, cu_seqlens_k: integers (N + 1,), both or neither:
                N sequences packed along the length axis (B = 1).
            return_lse: True adds the rows' log-sum-exp "lse".
            window_align: "upper_left" (default) or "lower_right".
            precision: "fp32" (the server's default) or "bf16": sent as the
                v2 parameter and the /v1 field "precision" when given.
            id: echoed in the answer.
            extra: other members of the request body, sent as they are
                (as /v1 JSON).
            model: the v2 model the request goes to.  By default the
                dot-product model's name is learned from the server once
                (GET /v2/models/stats, which lists attnd's --model-name)
                and kept; additive scoring goes to "additive_attention".
            timeout_us: the request's deadline in microseconds (the v2
                parameter "timeout"; 504 after), as infer() takes it.  /v1
                has no such field: with binary=False (or extra) it is
                refused before sending.
            binary: False sends /v1 JSON, whatever the options.
            request_compression: "gzip" or "deflate" compresses the body.
            response_compression: "gzip" or "deflate" asks for a compressed
                answer (Accept-Encoding).

        Tensors are numpy arrays of any float dtype, nested lists or numbers;
        they are checked first (AttndInputError: ragged lists, NaN,
        infinities, numbers out of float32 range, in /v1's words).  The
        request goes as KServe v2 binary tensors (float16 as FP16, other
        floats rounded to float32 as FP32, lengths INT64, masks BOOL) to
        the model, with the options as v2 parameters: the same answer as
        /v1, without turning numbers into text.  attnd's error text comes
        back verbatim, so an option refused over v2 is named by its v2
        parameter (parameters.window_left, ...).  When an option has no v2
        form (extra, or a value of a type /v1 refuses), or with
        binary=False, the request goes as /v1 JSON, each float rounded to
        float32 (ties to even, as for binary) and sent as its shortest
        digits.

        Returns:
            {"output", "weights", "diagnostics", "lse", "id"} as
            AttentionResult describes, numpy arrays in their own dtypes; the
            lse is -inf for a row with nothing allowed and no sink, over
            binary and JSON alike.
        """
        o = dict(locals())
        del o["self"]
        return self._attention(o)

    def _attention(self, o: Dict[str, Any]) -> R:
        """Sends attention()'s request, o its arguments by name."""
        raise NotImplementedError

    def _needs_served_name(self, o: Mapping[str, Any]) -> bool:
        """Whether attention() would go to the dot-product model over v2
        without a model named: then the served name is learned first."""
        return o["model"] is None and self._dot_model is None and o["binary"] and \
            not o["extra"] and o["scoring"] in (None, "dot")

    def _served_models_call(self) -> "_Call[str]":
        """GET /v2/models/stats -> the dot-product model's served name (the
        first model not named additive_attention); "attention" from a
        server without that route."""
        def parse(status: int, hdrs: Mapping[str, str], data: bytes) -> Tuple[str, None]:
            if status == 404:
                return "attention", None
            if status != 200:
                raise error_from(status, hdrs, data)
            try:
                names = [m["name"] for m in json.loads(data)["model_stats"]]
            except (ValueError, KeyError, TypeError) as e:
                raise AttndError(status, "GET /v2/models/stats: no model names: %s" % e,
                                 body=data) from e
            return next((n for n in names if n != "additive_attention"), "attention"), None
        return _Call("GET", "/v2/models/stats", None, self._headers(), True, parse)

    def _attention_call(self, o: Mapping[str, Any]) -> "_Call[AttentionResult]":
        """attention()'s request, o its arguments by name: KServe v2 with
        binary tensors when every option has a v2 form (v2_form), else /v1
        JSON.  Tensors are checked first, in /v1's words, either way."""
        query, key, value = o["query"], o["key"], o["value"]
        valid_lens, mask, bias = o["valid_lens"], o["mask"], o["bias"]
        w_q, w_k, w_v = o["w_q"], o["w_k"], o["w_v"]
        sinks, alibi_slopes = o["sinks"], o["alibi_slopes"]
        cu_seqlens_q, cu_seqlens_k = o["cu_seqlens_q"], o["cu_seqlens_k"]
        extra, binary = o["extra"], o["binary"]
        request_compression = o["request_compression"]
        response_compression = o["response_compression"]
        tensors = {"query": query, "key": key, "value": value, "valid_lens": valid_lens,
                   "mask": mask, "bias": bias, "w_q": w_q, "w_k": w_k, "w_v": w_v,
                   "sinks": sinks, "alibi_slopes": alibi_slopes, "cu_seqlens_q": cu_seqlens_q,
                   "cu_seqlens_k": cu_seqlens_k}
        arrays: Dict[str, Array] = {}
        for name in _V1_TENSORS:
            t = tensors[name]
            if t is None:
                continue
            a = _tensors.to_array(name, t)
            if _tensors.kind_of(name) == _tensors.FLOAT:
                _tensors.check_floats(name, a, "float32", binary=False)
            arrays[name] = a
        opts = {n: _plain(n, o[n]) for n in _V1_OPTIONS if o[n] is not None}
        form = None if extra or not binary else _v2_form(arrays, opts)
        if form is not None:
            named, params, outputs = form
            model: str = o["model"] or named or self._dot_model or "attention"
            if o["timeout_us"] is not None:
                params["timeout"] = int(o["timeout_us"])
            return self._attention_v2(arrays, opts, (model, params, outputs),
                                      request_compression, response_compression)
        if o["timeout_us"] is not None:
            raise ValueError("timeout_us: /v1 JSON has no deadline field; it goes as the v2 "
                             "parameter \"timeout\" (binary=True, no extra)")
        members: List[str] = []
        for name, a in arrays.items():
            text = (_tensors.json_numbers(a, "float32") if a.ndim == 0 else
                    _tensors.json_tensor(a, "float32"))
            members.append('"%s":%s' % (name, text))
        for name, v in opts.items():
            members.append("%s:%s" % (_dumps(name), _dumps(v)))
        for name, v in (extra or {}).items():
            members.append("%s:%s" % (_dumps(name), _dumps(_plain(name, v))))
        headers = self._headers({"Content-Type": "application/json"})
        body = self._encoded(("{" + ",".join(members) + "}").encode(), headers,
                             request_compression, response_compression)

        def parse(status: int, hdrs: Mapping[str, str],
                  data: bytes) -> Tuple[AttentionResult, Dict[str, Any]]:
            if status != 200:
                raise error_from(status, hdrs, data)
            res = json.loads(data)
            out: Dict[str, Any] = {}
            for k, v in res.items():
                if k in ("output", "weights"):
                    out[k] = _v1_array(v, np.float32)
                elif k == "lse":
                    out[k] = _lse_array(v)
                elif k == "diagnostics":
                    out[k] = {n: _v1_array(d, np.int32 if n == "allowed_keys" else np.float32)
                              for n, d in v.items()}
                else:
                    out[k] = v
            return out, res  # type: ignore[return-value]
        return _Call("POST", "/v1/attention", body, headers, True, parse)

    def _attention_v2(self, arrays: Dict[str, Array], opts: Dict[str, Any],
                      form: Tuple[str, Dict[str, Any], List[str]],
                      request_compression: Optional[str],
                      response_compression: Optional[str]) -> "_Call[AttentionResult]":
        model, params, outputs = form
        entries: List[str] = []
        raws: List[memoryview] = []
        for name, a in arrays.items():
            kind = _tensors.kind_of(name)
            if kind == _tensors.FLOAT:
                # attnd computes in float32; float16 goes as it is (half the
                # bytes), the rest rounded here as /v1 rounds its decimals
                dt = "FP16" if a.dtype == np.float16 else "FP32"
            else:
                dt = "INT64" if kind == _tensors.INT else "BOOL"
            raw = _tensors.wire_bytes(a, dt)
            raws.append(raw)
            entries.append('{"name":"%s","shape":[%s],"datatype":"%s",'
                           '"parameters":{"binary_data_size":%d}}'
                           % (name, ",".join(map(str, a.shape)), dt, raw.nbytes))
        members = []
        rid = opts.get("id")
        if isinstance(rid, str):
            members.append('"id":%s' % _dumps(rid))
        if params:
            members.append('"parameters":%s' % _dumps(params))
        members.append('"inputs":[%s]' % ",".join(entries))
        members.append('"outputs":%s' % _dumps(
            [{"name": n, "parameters": {"binary_data": True}} for n in outputs]))
        header = ("{" + ",".join(members) + "}").encode()
        headers = self._headers({"Inference-Header-Content-Length": str(len(header)),
                                 "Content-Type": "application/octet-stream"})
        body = self._encoded(Body([header] + raws), headers, request_compression,
                             response_compression)

        def parse(status: int, hdrs: Mapping[str, str],
                  data: bytes) -> Tuple[AttentionResult, Dict[str, Any]]:
            if status != 200:
                raise error_from(status, hdrs, data)
            got, res = _v2_outputs(data, hdrs, {})
            out: Dict[str, Any] = {"output": got["output"]}
            if "weights" in got:
                out["weights"] = got["weights"]
            if "lse" in got:
                out["lse"] = got["lse"]
            if opts.get("diagnostics"):
                out["diagnostics"] = {n: got[n] for n in _DIAGNOSTICS}
            if "id" in opts:
                out["id"] = opts["id"]
            return out, res  # type: ignore[return-value]
        return _Call("POST", self._model_path(model, None) + "/infer", body, headers, True,
                     parse)

    # ---- infer -------------------------------------------------------------------------

    def _infer_call(self, model: str, inputs: Mapping[str, Any], outputs: Any, binary: bool,
                    datatypes: Optional[Mapping[str, str]],
                    parameters: Optional[Mapping[str, Any]],
                    version: Optional[Union[str, int]], request_id: Optional[str],
                    timeout_us: Optional[int], request_compression: Optional[str],
                    response_compression: Optional[str]) -> "_Call[Dict[str, Any]]":
        datatypes = dict(datatypes or {})
        entries: List[str] = []
        raws: List[memoryview] = []
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
                raw = _tensors.wire_bytes(a, dt)
                raws.append(raw)
                entries.append('{%s,"parameters":{"binary_data_size":%d}}' % (head, raw.nbytes))
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
        extra: Dict[str, str] = {}
        if raws:
            extra["Inference-Header-Content-Length"] = str(len(header))
            extra["Content-Type"] = "application/octet-stream"
        else:
            extra["Content-Type"] = "application/json"
        headers = self._headers(extra)
        body = self._encoded(Body([header] + raws) if raws else header, headers,
                             request_compression, response_compression)

        def parse(status: int, hdrs: Mapping[str, str],
                  data: bytes) -> Tuple[Dict[str, Any], Dict[str, Any]]:
            if status != 200:
                raise error_from(status, hdrs, data)
            return _v2_outputs(data, hdrs, places)
        return _Call("POST", self._model_path(model, version) + "/infer", body, headers, True,
                     parse)


def _v2_form(arrays: Mapping[str, Array], opts: Mapping[str, Any]
             ) -> Optional[Tuple[Optional[str], Dict[str, Any], List[str]]]:
    """attention()'s request as (model, None for the dot-product one; v2
    parameters; outputs), or None when
    some option has no v2 form or is not of a type attnd takes (sent as
    /v1 JSON then, so that attnd's /v1 answers it in its own words)."""
    if any(a.ndim == 0 for a in arrays.values()):
        return None
    scoring = opts.get("scoring", "dot")
    if scoring not in ("dot", "additive"):
        return None
    additive = scoring == "additive"
    weights = [n in arrays for n in ("w_q", "w_k", "w_v")]
    if (all(weights) if additive else any(weights)) != additive:
        return None
    if additive and "scale" in opts:
        return None
    params: Dict[str, Any] = {}
    causal = opts.get("causal", False)
    if not isinstance(causal, (bool, str)):
        return None
    if causal is not False:
        params["causal"] = causal
    if "scale" in opts:
        if not _is_number(opts["scale"]):
            return None
        params["scale"] = opts["scale"]
    window = opts.get("window")
    if window is not None:
        if not isinstance(window, list) or len(window) != 2 or \
                not all(w is None or _is_number(w) for w in window):
            return None
        for side, w in zip(("window_left", "window_right"), window):
            if w is not None:
                params[side] = w
    align = opts.get("window_align")
    if align is not None:
        if not isinstance(align, str):
            return None
        params["window_align"] = align
    if "softcap" in opts:
        softcap = opts["softcap"]
        # one attnd refuses goes as /v1, whose message quotes the value
        if not _is_number(softcap) or not 0 < _f32(softcap) < math.inf:
            return None
        params["softcap"] = softcap
    dropout = opts.get("dropout")
    if dropout is not None:
        if not isinstance(dropout, dict) or "p" not in dropout or \
                not set(dropout) <= {"p", "seed"} or \
                not all(_is_number(x) for x in dropout.values()):
            return None
        params["dropout_p"] = dropout["p"]
        if "seed" in dropout:
            params["seed"] = dropout["seed"]
    flags = [opts.get("return_weights", True), opts.get("diagnostics", False),
             opts.get("return_lse", False)]
    if not all(isinstance(f, bool) for f in flags):
        return None
    rid = opts.get("id")
    if rid is not None and not isinstance(rid, str) and not _is_number(rid):
        return None
    if "precision" in opts:
        if not isinstance(opts["precision"], str):
            return None
        params["precision"] = opts["precision"]
    outputs = ["output"] + (["weights"] if flags[0] else []) + \
        (list(_DIAGNOSTICS) if flags[1] else []) + (["lse"] if flags[2] else [])
    return ("additive_attention" if additive else None), params, outputs
