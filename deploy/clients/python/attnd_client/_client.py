"""AttndClient: one attnd server, its /v1 JSON API and its KServe v2 routes,
over blocking HTTP/1.1 connections (one per thread)."""

from __future__ import annotations

import ssl
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from ._base import DEFAULT_RETRIES, AttentionResult, ClientBase, TensorLike, _Call
from ._errors import AttndConnectionError, AttndError
from ._shm import ShmTensor
from ._transport import Headers, Transport

__all__ = ["AttndClient", "AttentionResult", "TensorLike", "DEFAULT_RETRIES"]

T = TypeVar("T")
_NO_HEADERS = Headers()


class AttndClient(ClientBase[AttentionResult]):
    """A client of one attnd server.

    Args:
        url: "http://host:port" (https:// for an attnd with --tls-cert;
            a path prefix is kept, for attnd behind a proxy).  "host:port"
            means http.
        token: the bearer token of an attnd started with --token or
            --token-file, sent on every request.
        timeout: seconds a call may take, retries and their waits included,
            and at most this long to connect and for each read (None: no
            limit).
        headers: extra headers sent on every request.
        ssl_context: for https, e.g. ssl.create_default_context(cafile=...).
        unix_socket: the path of attnd's --unix-socket, to talk to a server
            on the same host through it (url then gives only the path
            prefix, if any).  Its connections ask for a send buffer that
            holds a whole upload of a few MiB (see _transport.UNIX_SNDBUF).
        retries: how many times a call is sent again (default 2; 0: never)
            after a 503 (full queue, memory in use, draining), a 429 (a
            connection over --max-conns-per-ip) or a
            connection that failed before any byte of the answer came
            (refused during a restart, reset).  Only inference and reads,
            which are pure functions, are retried; shared memory
            registration, read timeouts, 504 and every other status are not.
        backoff: the first wait in seconds; each retry doubles it, with
            jitter (between half and all of it).  A 503's Retry-After is
            waited instead.
        max_backoff: the longest wait, Retry-After included.  A wait that
            would end past the call's timeout is not made: the error is
            raised instead.

    The client keeps one HTTP/1.1 connection per thread and reuses it, so
    it may be shared by threads; a connection attnd closed while idle is
    reopened without the caller noticing.  close() (or a with block)
    closes them.

    Errors: every method raises AttndError for an error status (with
    .status and .message, attnd's text, and .tries), AttndConnectionError
    (a subclass, .status None) when no answer comes, and AttndInputError (a
    subclass, and a ValueError) for a tensor refused before sending.
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", *, token: Optional[str] = None,
                 timeout: Optional[float] = 60.0,
                 headers: Optional[Mapping[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 unix_socket: Optional[str] = None,
                 retries: int = DEFAULT_RETRIES,
                 backoff: float = 0.1,
                 max_backoff: float = 5.0) -> None:
        super().__init__(url, token=token, timeout=timeout, headers=headers,
                         ssl_context=ssl_context, unix_socket=unix_socket, retries=retries,
                         backoff=backoff, max_backoff=max_backoff)
        self._transport = Transport(self._scheme, self._host, self._port, timeout,
                                    ssl_context, unix_socket)
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
        datatypes), as decoded JSON.  attention() sent over v2 leaves the
        v2 answer's JSON part here."""
        return getattr(self._local, "response", None)

    @property
    def last_headers(self) -> Mapping[str, str]:
        """The headers of this thread's last answer, a Mapping whose
        lookups ignore case (last_headers["X-Request-ID"])."""
        return getattr(self._local, "headers", _NO_HEADERS)

    def _run(self, call: "_Call[T]", retries: Optional[int] = None) -> T:
        """Sends call, again after a 503 or a connection that failed before
        the answer (as _retry_wait allows), and returns its result."""
        deadline = self._deadline()
        tries = 0
        while True:
            tries += 1
            try:
                status, hdrs, data = self._transport.request(
                    call.method, self.base + call.path, call.body, call.headers,
                    self._attempt_timeout(deadline))
                data = self._inflated(status, hdrs, data)
                self._local.headers = hdrs
                result, res = self._parsed(call, status, hdrs, data)
                if res is not None:
                    self._local.response = res
                return result
            except AttndError as e:
                wait = self._retry_wait(call, e, tries, retries, deadline)
                if wait is None:
                    raise e._tried(tries)
            time.sleep(wait)

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Mapping[str, str]] = None
                ) -> Tuple[int, Mapping[str, str], bytes]:
        """One HTTP request to path (after the url's prefix), any status, not
        retried.  Returns (status, headers (lookups ignore case), body
        decompressed).  Raises AttndConnectionError when no answer comes."""
        return self._run(self._raw_call(method, path, body, headers))

    # ---- health and metadata -------------------------------------------------

    def healthy(self) -> bool:
        """GET /healthz: True while attnd serves (liveness)."""
        return self._run(self._probe_call("/healthz"))

    def ready(self) -> bool:
        """GET /readyz: True when attnd accepts work, False on 503 (starting
        or draining).  Any other status raises AttndError, and no answer
        AttndConnectionError."""
        return self._run(self._probe_call("/readyz"))

    def server_live(self) -> bool:
        """GET /v2/health/live."""
        return self._run(self._probe_call("/v2/health/live"))

    def server_ready(self) -> bool:
        """GET /v2/health/ready: True, or False on 503."""
        return self._run(self._probe_call("/v2/health/ready"))

    def model_ready(self, model: str = "attention",
                    version: Optional[Union[str, int]] = None) -> bool:
        """GET /v2/models/{model}[/versions/{version}]/ready: True, or False
        on 503.  An unknown model or version raises AttndError (404), a
        missing token too (401)."""
        return self._run(self._probe_call(self._model_path(model, version) + "/ready"))

    def wait_ready(self, timeout: float = 30.0, interval: float = 0.05) -> None:
        """Polls ready() until attnd answers 200: while nothing answers or
        it answers 503.  Raises the last AttndError after timeout seconds,
        and at once for any other error (a 401, say)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._run(self._probe_call("/readyz"), retries=0):
                    return
                last: AttndError = AttndError(503, "not ready after %gs" % timeout)
            except AttndConnectionError as e:
                last = e
            if time.monotonic() >= deadline:
                raise last
            time.sleep(interval)

    def server_metadata(self) -> Dict[str, Any]:
        """GET /v2: {"name", "version", "extensions"}."""
        doc: Dict[str, Any] = self._run(self._get_call("/v2"))
        return doc

    def model_metadata(self, model: str = "attention",
                       version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models/{model}: its inputs and outputs, with datatypes and
        shapes."""
        doc: Dict[str, Any] = self._run(self._get_call(self._model_path(model, version)))
        return doc

    def model_config(self, model: str = "attention",
                     version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models/{model}/config: the model's Triton configuration."""
        doc: Dict[str, Any] = self._run(self._get_call(
            self._model_path(model, version) + "/config"))
        return doc

    def model_statistics(self, model: str = "",
                         version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models[/{model}[/versions/{v}]]/stats: inference counts and
        times ({"model_stats": [...]}); every model's when model is ""."""
        doc: Dict[str, Any] = self._run(self._get_call(self._stats_path(model, version)))
        return doc

    def metrics(self) -> str:
        """GET /metrics: the Prometheus text exposition."""
        text: str = self._run(self._get_call("/metrics", text=True))
        return text

    def openapi(self) -> Dict[str, Any]:
        """GET /openapi.json: the OpenAPI document of every route."""
        doc: Dict[str, Any] = self._run(self._get_call("/openapi.json"))
        return doc

    # ---- inference ----------------------------------------------------------------

    def _attention(self, o: Dict[str, Any]) -> AttentionResult:
        if self._needs_served_name(o):
            self._dot_model = self._run(self._served_models_call())
        return self._run(self._attention_call(o))

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
        return self._run(self._infer_call(
            model, inputs, outputs, binary, datatypes, parameters, version, request_id,
            timeout_us, request_compression, response_compression))

    # ---- system shared memory (Triton's extension) ------------------------------

    def register_system_shared_memory(self, name: str, key: str, byte_size: int,
                                      offset: int = 0) -> None:
        """POST /v2/systemsharedmemory/region/{name}/register: attnd maps
        byte_size bytes at offset (a multiple of the page size) of the POSIX
        shared memory object key ("/name", as shm_open takes it), which must
        exist.  Needs attnd started with --allow-client-shm 1 (else 501).
        Never retried."""
        self._run(self._register_call(name, key, byte_size, offset))

    def unregister_system_shared_memory(self, name: str = "") -> None:
        """POST .../region/{name}/unregister, or /v2/systemsharedmemory/
        unregister for every region when name is "".  An unknown name is
        not an error.  Never retried."""
        self._run(self._unregister_call(name))

    def get_system_shared_memory_status(self, name: str = "") -> List[Dict[str, Any]]:
        """GET /v2/systemsharedmemory[/region/{name}]/status: a list of
        {"name", "key", "offset", "byte_size"}, one per registered region
        (the one named).  An unknown name raises AttndError (404)."""
        status: List[Dict[str, Any]] = self._run(self._get_call(
            self._shm_path(name, "status")))
        return status
