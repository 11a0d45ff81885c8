"""AsyncAttndClient: AttndClient's methods as coroutines, for asyncio
applications (FastAPI, aiohttp), on the standard library alone.

DESIGN: one event loop drives a client at a time.  Its connections are a
pool of idle HTTP/1.1 keep-alive connections (asyncio streams); a call
takes one (or opens one), sends its request, reads the answer and puts the
connection back, so concurrent calls each have their own.  The requests are
built and the answers decoded by the code AttndClient uses (_base.py), on
the loop for small tensors and in the loop's default executor (a thread)
above OFFLOAD_BYTES, so that a large encode or decode does not stall every
other coroutine.  A call cancelled while it talks to attnd aborts its
connection (no answer can come on it any more), so attnd sees its client
leave.  The pool belongs to the loop it was filled on: a client used from
another loop (a second asyncio.run) drops the old loop's connections.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import socket
import ssl
import time
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar,
                    Union)

from ._base import (DEFAULT_RETRIES, AttentionResult, ClientBase, TensorLike, _Call,
                    tensor_bytes)
from ._errors import AttndConnectionError, AttndError
from ._shm import ShmTensor
from ._transport import UNIX_SNDBUF

T = TypeVar("T")

#: Tensors (and answers) larger than this many bytes are encoded (decoded)
#: in the executor rather than on the event loop: about a millisecond of
#: work.
OFFLOAD_BYTES = 256 << 10

#: The stream buffer: asyncio stops reading a socket once twice this is
#: buffered, and its default (64 KiB) makes a large answer arrive in many
#: small pauses and resumptions.
STREAM_LIMIT = 4 << 20

#: Idle connections a client keeps at most.
POOL_SIZE = 16


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def abort(self) -> None:
        """Closes at once, unsent data dropped (the peer sees a reset or
        an end of stream right away)."""
        t = self.writer.transport
        if t is not None and not t.is_closing():
            t.abort()

    def reusable(self) -> bool:
        """An idle connection with nothing to read: the server has neither
        closed it nor sent anything out of step."""
        r = self.reader
        buffered = len(getattr(r, "_buffer", b""))
        return not (self.writer.is_closing() or r.at_eof() or buffered or r.exception())


class _Closed(Exception):
    """The connection ended before any byte of the answer."""


def _head(method: str, host: str, path: str, headers: Mapping[str, str],
          length: int) -> bytes:
    """An HTTP/1.1 request head."""
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: " + host]
    names = {k.lower() for k in headers}
    if "user-agent" not in names:
        lines.append("User-Agent: attnd_client")
    if "accept-encoding" not in names:
        lines.append("Accept-Encoding: identity")
    if length or method in ("POST", "PUT"):
        lines.append("Content-Length: %d" % length)
    lines += ["%s: %s" % kv for kv in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _timed(aw: Any, timeout: Optional[float]) -> Any:
    return await (aw if timeout is None else asyncio.wait_for(aw, timeout))


async def _read_exactly(reader: asyncio.StreamReader, n: int,
                        timeout: Optional[float]) -> bytes:
    """n bytes.  A large body is read piece by piece into one buffer of its
    size: StreamReader.readexactly would grow its own buffer to n bytes,
    reallocating as it goes, then copy it out."""
    if n <= STREAM_LIMIT:
        data: bytes = await _timed(reader.readexactly(n), timeout)
        return data
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        chunk = await _timed(reader.read(n - got), timeout)
        if not chunk:
            raise asyncio.IncompleteReadError(bytes(view[:got]), n)
        view[got:got + len(chunk)] = chunk
        got += len(chunk)
    return buf


class AsyncTransport:
    """A pool of keep-alive connections to one host and port (or one Unix
    socket), driven by one event loop at a time."""

    def __init__(self, scheme: str, host: str, port: int,
                 ssl_context: Optional[ssl.SSLContext], unix_socket: Optional[str],
                 describe: Callable[[str, str], str]) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.unix_socket = unix_socket
        self.describe = describe
        self.host_header = host if port == (443 if scheme == "https" else 80) else \
            "%s:%d" % (host, port)
        self._idle: List[_Conn] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def _take(self) -> Optional[_Conn]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.close()
            self._loop = loop
        while self._idle:
            c = self._idle.pop()
            if c.reusable():
                return c
            c.abort()
        return None

    def _give(self, c: _Conn) -> None:
        if len(self._idle) < POOL_SIZE and c.reusable():
            self._idle.append(c)
        else:
            c.abort()

    async def _open(self) -> _Conn:
        if self.unix_socket is not None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SNDBUF)
                s.setblocking(False)
                await asyncio.get_running_loop().sock_connect(s, self.unix_socket)
            except BaseException:
                s.close()
                raise
            r, w = await asyncio.open_unix_connection(sock=s, limit=STREAM_LIMIT)
        elif self.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            r, w = await asyncio.open_connection(self.host, self.port, ssl=ctx,
                                                 server_hostname=self.host,
                                                 limit=STREAM_LIMIT)
        else:
            r, w = await asyncio.open_connection(self.host, self.port, limit=STREAM_LIMIT)
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(r, w)

    async def request(self, method: str, path: str, body: Optional[bytes],
                      headers: Mapping[str, str],
                      timeout: Optional[float]) -> Tuple[int, Dict[str, str], bytes]:
        """As Transport.request: (status, headers, body in its
        Content-Encoding); timeout bounds the connect and each read."""
        what = self.describe(method, path)
        for attempt in (0, 1):
            conn = self._take()
            reused = conn is not None
            if conn is None:
                try:
                    conn = await _timed(self._open(), timeout)
                except (OSError, asyncio.TimeoutError) as e:
                    raise AttndConnectionError(
                        "%s: %s" % (what, e or type(e).__name__),
                        before_answer=not isinstance(e, ssl.SSLError)) from e
            try:
                answer = await self._exchange(conn, method, path, body, headers, timeout)
            except BaseException as e:
                # cancelled, timed out or broken: nothing more can be read
                # in step on this connection, and closing it tells attnd
                conn.abort()
                if isinstance(e, _Closed):
                    if reused and attempt == 0:
                        continue
                    raise AttndConnectionError("%s: %s" % (what, e),
                                               before_answer=True) from e.__cause__
                if isinstance(e, asyncio.TimeoutError):
                    raise AttndConnectionError("%s: timed out" % what) from e
                if isinstance(e, (OSError, ValueError, asyncio.IncompleteReadError,
                                  asyncio.LimitOverrunError)):
                    raise AttndConnectionError("%s: %s" % (what, e or type(e).__name__)) from e
                raise
            status, hdrs, data, keep = answer
            if keep:
                self._give(conn)
            else:
                conn.abort()
            return status, hdrs, data
        raise AssertionError("unreachable")

    async def _exchange(self, conn: _Conn, method: str, path: str, body: Optional[bytes],
                        headers: Mapping[str, str], timeout: Optional[float]
                        ) -> Tuple[int, Dict[str, str], bytes, bool]:
        body = body or b""
        conn.writer.write(_head(method, self.host_header, path, headers, len(body)))
        if body:
            conn.writer.write(body)
        try:
            await _timed(conn.writer.drain(), timeout)
        except (BrokenPipeError, ConnectionResetError):
            # attnd may have answered before it stopped reading (a 413 for
            # a body over its limit): read that answer
            pass
        try:
            line = await _timed(conn.reader.readline(), timeout)
        except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as e:
            raise _Closed(str(e) or type(e).__name__) from e
        if not line:
            raise _Closed("the server closed the connection without an answer")
        parts = line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError("not an HTTP status line: %r" % line[:80])
        status = int(parts[1])
        hdrs: Dict[str, str] = {}
        while True:
            h = await _timed(conn.reader.readline(), timeout)
            if h in (b"\r\n", b"\n"):
                break
            if not h:
                raise asyncio.IncompleteReadError(b"", None)
            name, _, v = h.decode("latin-1").partition(":")
            k = name.strip().lower()
            v = v.strip()
            hdrs[k] = hdrs[k] + ", " + v if k in hdrs else v
        keep = parts[0] != "HTTP/1.0" and "close" not in hdrs.get("connection", "").lower()
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            chunks = []
            while True:
                size = int((await _timed(conn.reader.readline(), timeout)).split(b";")[0], 16)
                if size == 0:
                    while (await _timed(conn.reader.readline(), timeout)) not in (b"\r\n",
                                                                                  b"\n", b""):
                        pass
                    break
                chunks.append(await _timed(conn.reader.readexactly(size + 2), timeout))
            data = b"".join(c[:-2] for c in chunks)
        elif "content-length" in hdrs:
            data = await _read_exactly(conn.reader, int(hdrs["content-length"]), timeout)
        elif status in (204, 304) or 100 <= status < 200 or method == "HEAD":
            data = b""
        else:
            data = await _timed(conn.reader.read(), timeout)
            keep = False
        return status, hdrs, data, keep

    def close(self) -> None:
        """Aborts every idle connection."""
        idle, self._idle = self._idle, []
        for c in idle:
            c.abort()


class AsyncAttndClient(ClientBase):
    """AttndClient for asyncio: the same constructor and methods, as
    coroutines (await c.attention(...)), the same answers and errors, the
    same retries (waiting with asyncio.sleep).

    One pool of keep-alive connections per client; concurrent calls each
    use their own connection.  Tensors and answers over OFFLOAD_BYTES are
    encoded and decoded in the loop's default executor.  Cancelling a call
    closes its connection.  `await c.aclose()` (or `async with`) closes the
    idle connections.  last_response and last_headers are those of the
    calling task's last call.
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
        self._transport = AsyncTransport(self._scheme, self._host, self._port, ssl_context,
                                         unix_socket, self._describe)
        self._response: "contextvars.ContextVar[Optional[Dict[str, Any]]]" = \
            contextvars.ContextVar("attnd_last_response", default=None)
        self._hdrs: "contextvars.ContextVar[Dict[str, str]]" = \
            contextvars.ContextVar("attnd_last_headers", default={})

    def _describe(self, method: str, path: str) -> str:
        if self._unix_socket is not None:
            return "%s %s on the Unix socket %s" % (method, path, self._unix_socket)
        return "%s %s://%s:%d%s" % (method, self._scheme, self._host, self._port, path)

    async def aclose(self) -> None:
        """Closes the client's idle connections (a later call opens new ones)."""
        self._transport.close()

    async def __aenter__(self) -> "AsyncAttndClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @property
    def last_response(self) -> Optional[Dict[str, Any]]:
        """The JSON part of this task's last inference answer (see
        AttndClient.last_response)."""
        return self._response.get()

    @property
    def last_headers(self) -> Dict[str, str]:
        """The headers (lower-case names) of this task's last answer."""
        return self._hdrs.get()

    @staticmethod
    async def _off_loop(big: bool, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args), in the loop's default executor when big."""
        if not big:
            return fn(*args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(fn, *args))

    async def _run(self, call: "_Call[T]", retries: Optional[int] = None) -> T:
        deadline = self._deadline()
        tries = 0
        while True:
            tries += 1
            try:
                status, hdrs, data = await self._transport.request(
                    call.method, self.base + call.path, call.body, call.headers,
                    self._attempt_timeout(deadline))
                big = len(data) > OFFLOAD_BYTES
                if "content-encoding" in hdrs:
                    data = await self._off_loop(big, self._inflated, status, hdrs, data)
                self._hdrs.set(hdrs)
                result, res = await self._off_loop(big or len(data) > OFFLOAD_BYTES,
                                                   call.parse, status, hdrs, data)
                if res is not None:
                    self._response.set(res)
                return result
            except AttndError as e:
                wait = self._retry_wait(call, e, tries, retries, deadline)
                if wait is None:
                    raise e._tried(tries)
            await asyncio.sleep(wait)

    async def request(self, method: str, path: str, body: Optional[bytes] = None,
                      headers: Optional[Mapping[str, str]] = None
                      ) -> Tuple[int, Dict[str, str], bytes]:
        """AttndClient.request: one request, any status, not retried."""
        return await self._run(self._raw_call(method, path, body, headers))

    # ---- health and metadata -------------------------------------------------

    async def healthy(self) -> bool:
        """GET /healthz: True while attnd serves (liveness)."""
        return await self._run(self._probe_call("/healthz"))

    async def ready(self) -> bool:
        """GET /readyz: True when attnd accepts work, False on 503."""
        return await self._run(self._probe_call("/readyz"))

    async def server_live(self) -> bool:
        """GET /v2/health/live."""
        return await self._run(self._probe_call("/v2/health/live"))

    async def server_ready(self) -> bool:
        """GET /v2/health/ready: True, or False on 503."""
        return await self._run(self._probe_call("/v2/health/ready"))

    async def model_ready(self, model: str = "attention",
                          version: Optional[Union[str, int]] = None) -> bool:
        """GET /v2/models/{model}[/versions/{version}]/ready."""
        return await self._run(self._probe_call(self._model_path(model, version) + "/ready"))

    async def wait_ready(self, timeout: float = 30.0, interval: float = 0.05) -> None:
        """AttndClient.wait_ready, sleeping with asyncio.sleep."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if await self._run(self._probe_call("/readyz"), retries=0):
                    return
                last: AttndError = AttndError(503, "not ready after %gs" % timeout)
            except AttndConnectionError as e:
                last = e
            if time.monotonic() >= deadline:
                raise last
            await asyncio.sleep(interval)

    async def server_metadata(self) -> Dict[str, Any]:
        """GET /v2: {"name", "version", "extensions"}."""
        doc: Dict[str, Any] = await self._run(self._get_call("/v2"))
        return doc

    async def model_metadata(self, model: str = "attention",
                             version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models/{model}."""
        doc: Dict[str, Any] = await self._run(self._get_call(self._model_path(model, version)))
        return doc

    async def model_config(self, model: str = "attention",
                           version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models/{model}/config."""
        doc: Dict[str, Any] = await self._run(self._get_call(
            self._model_path(model, version) + "/config"))
        return doc

    async def model_statistics(self, model: str = "",
                               version: Optional[Union[str, int]] = None) -> Dict[str, Any]:
        """GET /v2/models[/{model}[/versions/{v}]]/stats."""
        doc: Dict[str, Any] = await self._run(self._get_call(self._stats_path(model, version)))
        return doc

    async def metrics(self) -> str:
        """GET /metrics: the Prometheus text exposition."""
        text: str = await self._run(self._get_call("/metrics", text=True))
        return text

    async def openapi(self) -> Dict[str, Any]:
        """GET /openapi.json."""
        doc: Dict[str, Any] = await self._run(self._get_call("/openapi.json"))
        return doc

    # ---- inference ----------------------------------------------------------------

    async def attention(self, query: TensorLike, key: TensorLike, value: TensorLike, *,
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
                        binary: bool = True,
                        request_compression: Optional[str] = None,
                        response_compression: Optional[str] = None) -> AttentionResult:
        """AttndClient.attention as a coroutine: the same arguments, answer
        and errors."""
        big = tensor_bytes(query, key, value, mask, bias) > OFFLOAD_BYTES
        call = await self._off_loop(
            big, self._attention_call, query, key, value, valid_lens, mask, bias, causal,
            window, scale, scoring, w_q, w_k, w_v, dropout, return_weights, diagnostics, id,
            extra, binary, request_compression, response_compression)
        return await self._run(call)

    async def infer(self, model: str, inputs: Mapping[str, Union[TensorLike, ShmTensor]],
                    outputs: Union[Sequence[str], Mapping[str, Optional[ShmTensor]],
                                   None] = None, *,
                    binary: bool = True,
                    datatypes: Optional[Mapping[str, str]] = None,
                    parameters: Optional[Mapping[str, Any]] = None,
                    version: Optional[Union[str, int]] = None,
                    request_id: Optional[str] = None,
                    timeout_us: Optional[int] = None,
                    request_compression: Optional[str] = None,
                    response_compression: Optional[str] = None) -> Dict[str, Any]:
        """AttndClient.infer as a coroutine: the same arguments, answer and
        errors; shared memory inputs and outputs included."""
        big = tensor_bytes(dict(inputs)) > OFFLOAD_BYTES
        call = await self._off_loop(
            big, self._infer_call, model, inputs, outputs, binary, datatypes, parameters,
            version, request_id, timeout_us, request_compression, response_compression)
        return await self._run(call)

    # ---- system shared memory (Triton's extension) ------------------------------

    async def register_system_shared_memory(self, name: str, key: str, byte_size: int,
                                            offset: int = 0) -> None:
        """AttndClient.register_system_shared_memory (never retried)."""
        await self._run(self._register_call(name, key, byte_size, offset))

    async def unregister_system_shared_memory(self, name: str = "") -> None:
        """AttndClient.unregister_system_shared_memory (never retried)."""
        await self._run(self._unregister_call(name))

    async def get_system_shared_memory_status(self, name: str = "") -> List[Dict[str, Any]]:
        """AttndClient.get_system_shared_memory_status."""
        status: List[Dict[str, Any]] = await self._run(self._get_call(
            self._shm_path(name, "status")))
        return status
