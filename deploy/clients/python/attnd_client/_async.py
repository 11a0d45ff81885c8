"""AsyncAttndClient: AttndClient's methods as coroutines, for asyncio
applications (FastAPI, aiohttp), on the standard library alone.

DESIGN: one event loop drives a client at a time.  Its connections are a
pool of idle HTTP/1.1 keep-alive connections (asyncio transports with a
buffered protocol that reads an answer's body straight into one buffer of
its size); a call
takes one (or opens one), sends its request, reads the answer and puts the
connection back, so concurrent calls each have their own.  A semaphore of
the loop's counts the connections in use: beyond max_connections a call
waits for one, within its timeout.  The requests are
built and the answers decoded by the code AttndClient uses (_base.py), on
the loop for small tensors and in the loop's default executor (a thread)
above OFFLOAD_BYTES, so that a large encode or decode does not stall every
other coroutine.  A call cancelled while it talks to attnd aborts its
connection (no answer can come on it any more), so attnd sees its client
leave.  The pool belongs to the loop it was filled on: a client used from
another loop (a second asyncio.run, pytest-asyncio's loop per test) drops
the old loop's connections, closing their sockets itself when that loop is
closed (its transports can no longer be aborted): the client opens every
socket itself and keeps it for that.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import socket
import ssl
import time
from typing import (Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar, Union)

from ._base import (DEFAULT_RETRIES, AttentionResult, ClientBase, TensorLike, _Call,
                    tensor_bytes)
from ._errors import AttndConnectionError, AttndError
from ._shm import ShmTensor
from ._transport import IDEMPOTENT, UNIX_SNDBUF, Body, Headers, answer_buffer

T = TypeVar("T")

#: Tensors (and answers) larger than this many bytes are encoded (decoded)
#: in the executor rather than on the event loop: about a millisecond of
#: work.
OFFLOAD_BYTES = 256 << 10

#: Idle connections a client keeps at most.
POOL_SIZE = 16

#: Connections a client has open at once unless max_connections says
#: otherwise; calls beyond wait for one.  Without a bound, a gather() of
#: thousands of calls opens thousands of sockets: past the process's
#: descriptor limit (1024 by default) they fail with EMFILE, and past
#: attnd's --max-conns or --max-conns-per-ip attnd closes them unanswered.
MAX_CONNECTIONS = 64


class _Closed(Exception):
    """The connection ended before any byte of the answer.  sent: whether
    any byte of the request had been written to it."""

    def __init__(self, message: str, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class _Dechunker:
    """A chunked body decoded as it arrives: each read is looked at once,
    whatever the number of chunks (only a size line or trailer cut by a
    read is searched again, from its start)."""

    _SIZE, _DATA, _TRAILER = range(3)

    def __init__(self) -> None:
        self._buf = bytearray()  # from the first byte not yet decoded
        self._state = self._SIZE
        self._size = 0
        self._out: List[bytes] = []

    def feed(self, data: bytes) -> Optional[bytes]:
        """Takes the next bytes; returns the body once it is complete, else
        None.  ValueError for a chunk size that is not hexadecimal."""
        buf = self._buf
        buf += data
        pos = 0
        while True:
            if self._state == self._DATA:
                if len(buf) < pos + self._size + 2:
                    break
                self._out.append(bytes(buf[pos:pos + self._size]))
                pos += self._size + 2
                self._state = self._SIZE
                continue
            j = buf.find(b"\r\n", pos)
            if j < 0:
                break
            line, pos = bytes(buf[pos:j]), j + 2
            if self._state == self._TRAILER:
                if not line:  # the empty line after the trailers
                    return b"".join(self._out)
            else:
                self._size = int(line.split(b";")[0], 16)
                self._state = self._DATA if self._size else self._TRAILER
        del buf[:pos]
        return None


class _Conn(asyncio.BufferedProtocol):
    """One HTTP/1.1 connection.  The answer's head is read into a small
    buffer; its body, once Content-Length is known, straight from the
    socket into one buffer of that size (no copying in between, as
    http.client's readinto does)."""

    def __init__(self) -> None:
        self.transport: Optional[asyncio.BaseTransport] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.sock: Optional[socket.socket] = None  # the socket under transport
        self.closed = False
        self.stray = False
        self.epoch = 0  # the pool's epoch it was opened in (AsyncTransport.close)
        # bytes a new connection got before its first request: an answer
        # the server sends at once (attnd's 429 over --max-conns-per-ip)
        self._early = bytearray()
        self._scratch = bytearray(256 << 10)
        self._writable = asyncio.Event()
        self._writable.set()
        self._answer: "Optional[asyncio.Future[Tuple[int, Mapping[str, str], bytes, bool]]]" = None
        self._reset(None)

    def _reset(self, method: Optional[str]) -> None:
        self._method = method
        self._head = bytearray()
        self._status = 0
        self._hdrs: Dict[str, str] = {}
        self._keep = True
        self._body: Optional[Union[bytearray, memoryview]] = None
        self._got = 0
        self._raw: Optional[bytearray] = None  # a body up to the close
        self._chunks: Optional[_Dechunker] = None
        self._any = False

    # -- asyncio's callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None and self._got < len(self._body):
            return memoryview(self._body)[self._got:]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None and self._got < len(self._body):
            self._got += nbytes
            if self._got == len(self._body):
                self._done(self._body)
            return
        data = self._scratch[:nbytes]
        if self._answer is None:
            self._early += data
            return
        if self._answer.done():
            self.stray = True  # bytes nobody asked for: out of step
            return
        self._any = True
        if self._chunks is not None:
            self._more_chunks(data)
        elif self._raw is not None:
            self._raw += data
        else:
            self._head += data
            self._parse_head()

    def eof_received(self) -> Optional[bool]:
        return False  # close; connection_lost finishes the answer

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        self._writable.set()
        fut = self._answer
        if fut is None or fut.done():
            return
        if self._raw is not None and exc is None:
            self._done(bytes(self._raw))
        elif not self._any:
            fut.set_exception(_Closed(str(exc) if exc else
                                      "the server closed the connection without an answer",
                                      sent=True))
        else:
            fut.set_exception(ConnectionError("the answer broke off: %s"
                                              % (exc or "the server closed the connection")))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- the answer
    def _fail(self, e: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(e)

    def _done(self, data: bytes) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_result((self._status, Headers(self._hdrs.items()), data,
                                     self._keep))

    def _parse_head(self) -> None:
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > 1 << 20:
                self._fail(ValueError("an answer head over 1 MiB"))
            return
        lines = bytes(self._head[:end]).decode("latin-1").split("\r\n")
        rest = bytes(self._head[end + 4:])
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            self._fail(ValueError("not an HTTP status line: %r" % lines[0][:80]))
            return
        self._status = int(parts[1])
        for line in lines[1:]:
            name, _, v = line.partition(":")
            k = name.strip().lower()
            v = v.strip()
            self._hdrs[k] = self._hdrs[k] + ", " + v if k in self._hdrs else v
        h = self._hdrs
        self._keep = parts[0] != "HTTP/1.0" and "close" not in h.get("connection", "").lower()
        if self._status in (204, 304) or 100 <= self._status < 200 or \
                self._method == "HEAD":
            # no body, whatever Content-Length says (RFC 9110 9.3.2)
            self.stray = bool(rest)
            self._done(b"")
        elif "chunked" in h.get("transfer-encoding", "").lower():
            self._chunks = _Dechunker()
            self._more_chunks(rest)
        elif "content-length" in h:
            n = int(h["content-length"])
            if len(rest) > n:
                self.stray = True
            self._body = answer_buffer(n, h.get("inference-header-content-length"))
            self._got = min(len(rest), n)
            self._body[:self._got] = rest[:self._got]
            if self._got == n:
                self._done(self._body)
        else:
            self._keep = False
            self._raw = bytearray(rest)

    def _more_chunks(self, data: bytes) -> None:
        assert self._chunks is not None
        try:
            body = self._chunks.feed(data)
        except ValueError as e:
            self._fail(e)
            return
        if body is not None:
            self._done(body)

    # -- the request
    def abort(self) -> None:
        """Closes at once, unsent data dropped (the peer sees the
        connection end right away).  An answer still awaited is dropped
        too: its caller has gone."""
        if self.loop is not None and self.loop.is_closed():
            # nothing runs on that loop any more: close the socket directly
            self.closed = True
            if self.sock is not None:
                self.sock.close()
            return
        fut = self._answer
        if fut is not None:
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved, so asyncio does not warn of it
        t = self.transport
        if t is not None and not t.is_closing():
            t.abort()  # type: ignore[attr-defined]

    def reusable(self) -> bool:
        """Idle and in step: the server has neither closed it nor sent
        anything unasked."""
        t = self.transport
        return not (self.closed or self.stray or t is None or t.is_closing())

    async def exchange(self, method: str, head: bytes, body: Union[bytes, Body],
                       timeout: Optional[float]) -> Tuple[int, Mapping[str, str], bytes, bool]:
        loop = asyncio.get_running_loop()
        self._reset(method)
        self._answer = fut = loop.create_future()
        t = self.transport
        assert t is not None
        if self._early:
            # the server answered before the request (and may have closed):
            # that answer is this request's, which is not sent
            self._any = True
            self._head, self._early = self._early, bytearray()
            self._parse_head()
            if self.closed and not fut.done():
                self.connection_lost(None)  # the close came before: finish
            answer_early: Tuple[int, Mapping[str, str], bytes, bool] = \
                await _timed(fut, timeout)
            return answer_early
        if self.closed or t.is_closing():
            # closed between the pool's check and now: nothing was sent
            raise _Closed("the server closed the connection", sent=False)
        # One write of the whole request: what goes out in one system call
        # cannot meet halfway the reset of a server that answered before
        # reading it (a 429 at accept, then its close): a second write
        # would fail on that reset, and asyncio would close the connection
        # with the answer unread.  writelines sends the buffers as they are
        # where the transport can (sendmsg), else joined.
        parts = body.parts if isinstance(body, Body) else [body] if body else []
        t.writelines([head, *parts])  # type: ignore[attr-defined]
        if not self._writable.is_set():
            # the answer may come before the server has read everything
            # (a 413): wait for either
            waiter = asyncio.ensure_future(self._writable.wait())
            try:
                await _timed(asyncio.wait([waiter, fut], return_when=asyncio.FIRST_COMPLETED),
                             timeout)
            finally:
                waiter.cancel()
        answer: Tuple[int, Mapping[str, str], bytes, bool] = await _timed(fut, timeout)
        return answer


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


async def _acquire(sem: asyncio.Semaphore, timeout: Optional[float]) -> bool:
    """sem acquired within timeout seconds (True), or not (False).  Not
    wait_for, which before Python 3.12 can lose an acquisition that comes
    as the timeout fires; a caller cancelled meanwhile holds nothing."""
    if not sem.locked():
        return await sem.acquire()
    task = asyncio.ensure_future(sem.acquire())
    try:
        await asyncio.wait([task], timeout=timeout)
    except BaseException:
        if task.done() and not task.cancelled():
            sem.release()
        task.cancel()
        raise
    if task.done():
        return True
    task.cancel()
    return False


class AsyncTransport:
    """A pool of keep-alive connections to one host and port (or one Unix
    socket), driven by one event loop at a time."""

    def __init__(self, scheme: str, host: str, port: int,
                 ssl_context: Optional[ssl.SSLContext], unix_socket: Optional[str],
                 describe: Callable[[str, str], str],
                 max_connections: Optional[int] = MAX_CONNECTIONS) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.unix_socket = unix_socket
        self.describe = describe
        # an IPv6 literal in brackets (RFC 3986), as http.client writes it
        name = "[%s]" % host if ":" in host else host
        self.host_header = name if port == (443 if scheme == "https" else 80) else \
            "%s:%d" % (name, port)
        self._idle: List[_Conn] = []
        # bumped by close: a connection opened before goes back to no pool
        self._epoch = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self.max_connections = max_connections
        # the connections in use, counted on self._loop
        self._slots: Optional[asyncio.Semaphore] = None

    def _bind(self) -> Optional[asyncio.Semaphore]:
        """The pool on the running loop (another loop's connections
        dropped), and its count of connections in use."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.close()
            self._loop = loop
            self._slots = None if self.max_connections is None else \
                asyncio.Semaphore(self.max_connections)
        return self._slots

    def _take(self) -> Optional[_Conn]:
        while self._idle:
            c = self._idle.pop()
            if c.reusable():
                return c
            c.abort()
        return None

    def _give(self, c: _Conn) -> None:
        if c.epoch == self._epoch and len(self._idle) < POOL_SIZE and c.reusable():
            self._idle.append(c)
        else:
            c.abort()

    async def _open(self) -> _Conn:
        """A new connection, on a socket opened here (_Conn.sock)."""
        loop = asyncio.get_running_loop()
        conn: _Conn
        if self.unix_socket is not None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SNDBUF)
                s.setblocking(False)
                await loop.sock_connect(s, self.unix_socket)
            except BaseException:
                s.close()
                raise
            _, conn = await loop.create_unix_connection(_Conn, sock=s)
        else:
            s = await self._tcp_socket(loop)
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.scheme == "https":
                    ctx = self.ssl_context or ssl.create_default_context()
                    _, conn = await loop.create_connection(_Conn, sock=s, ssl=ctx,
                                                           server_hostname=self.host)
                else:
                    _, conn = await loop.create_connection(_Conn, sock=s)
            except BaseException:
                s.close()
                raise
        conn.sock = s
        conn.epoch = self._epoch
        return conn

    async def _tcp_socket(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """A socket connected to host:port, each of its addresses tried in
        turn."""
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        last: Optional[OSError] = None
        for family, type_, proto, _, addr in infos:
            s = socket.socket(family, type_, proto)
            try:
                s.setblocking(False)
                await loop.sock_connect(s, addr)
                return s
            except OSError as e:
                s.close()
                last = e
            except BaseException:
                s.close()
                raise
        raise last or OSError("%s: no address" % self.host)

    async def request(self, method: str, path: str, body: Union[bytes, Body, None],
                      headers: Mapping[str, str],
                      timeout: Optional[float]) -> Tuple[int, Mapping[str, str], bytes]:
        """As Transport.request: (status, headers, body in its
        Content-Encoding); timeout bounds the wait for a free connection
        (max_connections), the connect and each read."""
        what = self.describe(method, path)
        slots = self._bind()
        if slots is not None and not await _acquire(slots, timeout):
            raise AttndConnectionError("%s: timed out waiting for one of the client's %d "
                                       "connections (max_connections)"
                                       % (what, self.max_connections))
        try:
            return await self._exchange(what, method, path, body, headers, timeout)
        finally:
            if slots is not None:
                slots.release()

    async def _exchange(self, what: str, method: str, path: str,
                        body: Union[bytes, Body, None],
                        headers: Mapping[str, str],
                        timeout: Optional[float]) -> Tuple[int, Mapping[str, str], bytes]:
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
                answer = await conn.exchange(
                    method, _head(method, self.host_header, path, headers, len(body or b"")),
                    body or b"", timeout)
            except BaseException as e:
                # cancelled, timed out or broken: nothing more can be read
                # in step on this connection, and closing it tells attnd
                conn.abort()
                if isinstance(e, _Closed):
                    # again on a new connection only what cannot happen
                    # twice: nothing was written, or a read
                    if reused and attempt == 0 and (not e.sent or method in IDEMPOTENT):
                        continue
                    raise AttndConnectionError("%s: %s" % (what, e),
                                               before_answer=True) from e.__cause__
                if isinstance(e, asyncio.TimeoutError):
                    raise AttndConnectionError("%s: timed out" % what) from e
                if isinstance(e, (OSError, ValueError)):
                    raise AttndConnectionError("%s: %s" % (what, e or type(e).__name__)) from e
                raise
            status, hdrs, data, keep = answer
            if keep:
                self._give(conn)
            else:
                conn.abort()
            return status, hdrs, data
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Aborts every idle connection; those in use are closed when their
        exchange ends, not pooled."""
        self._epoch += 1
        idle, self._idle = self._idle, []
        for c in idle:
            c.abort()


class AsyncAttndClient(ClientBase["Awaitable[AttentionResult]"]):
    """AttndClient for asyncio: the same constructor and methods, as
    coroutines (await c.attention(...)), the same answers and errors, the
    same retries (waiting with asyncio.sleep).

    One pool of keep-alive connections per client; concurrent calls each
    use their own connection, at most max_connections at once (default
    MAX_CONNECTIONS, 64; None: no bound): calls beyond wait for one, within
    their timeout.  Tensors and answers over OFFLOAD_BYTES are
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
                 max_backoff: float = 5.0,
                 max_connections: Optional[int] = MAX_CONNECTIONS) -> None:
        super().__init__(url, token=token, timeout=timeout, headers=headers,
                         ssl_context=ssl_context, unix_socket=unix_socket, retries=retries,
                         backoff=backoff, max_backoff=max_backoff)
        if max_connections is not None and int(max_connections) < 1:
            raise ValueError("max_connections must be 1 or more, or None")
        self._transport = AsyncTransport(
            self._scheme, self._host, self._port, ssl_context, unix_socket, self._describe,
            None if max_connections is None else int(max_connections))
        self._response: "contextvars.ContextVar[Optional[Dict[str, Any]]]" = \
            contextvars.ContextVar("attnd_last_response", default=None)
        self._hdrs: "contextvars.ContextVar[Mapping[str, str]]" = \
            contextvars.ContextVar("attnd_last_headers", default=Headers())

    def _describe(self, method: str, path: str) -> str:
        if self._unix_socket is not None:
            return "%s %s on the Unix socket %s" % (method, path, self._unix_socket)
        return "%s %s://%s:%d%s" % (method, self._scheme, self._host, self._port, path)

    async def aclose(self) -> None:
        """Closes the client's connections: the idle ones now, those in use
        when their calls end (a later call opens new ones)."""
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
    def last_headers(self) -> Mapping[str, str]:
        """The headers of this task's last answer (lookups ignore case)."""
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
                                                   self._parsed, call, status, hdrs, data)
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
                      ) -> Tuple[int, Mapping[str, str], bytes]:
        """AttndClient.request: one request, any status, not retried."""
        status, hdrs, data = await self._run(self._raw_call(method, path, body, headers))
        return status, hdrs, bytes(data)

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

    def _attention(self, o: Dict[str, Any]) -> "Awaitable[AttentionResult]":
        return self._attention_async(o)

    async def _attention_async(self, o: Dict[str, Any]) -> AttentionResult:
        if self._needs_served_name(o):
            name: str = await self._run(self._served_models_call())
            self._dot_model = name
        big = tensor_bytes(o["query"], o["key"], o["value"], o["mask"], o["bias"]) > \
            OFFLOAD_BYTES
        call = await self._off_loop(big, self._attention_call, o)
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
