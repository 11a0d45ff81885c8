"""HTTP/1.1 with keep-alive: one connection per thread, kept between calls.

Each thread that uses a client gets its own http.client connection, opened
on its first request and reused after, so a client may be shared by
threads without a lock around requests.  Before a connection is reused it
is polled: one the server has closed while idle (attnd's --conn-timeout-s,
a proxy's idle timeout) is reopened first.  When a reused connection still
turns out closed as the request goes out (the server closed it at that
moment), only a GET or HEAD is sent once more on a new connection: the
request's bytes may have reached the server, and only a read is harmless
twice.  A call interrupted mid-request (KeyboardInterrupt) closes its
connection, whose answer is still due.  Every other failure is an
AttndConnectionError, which says whether it came before any byte of an
answer; the client's retry policy, not the transport, decides whether such
a call is sent again (never shared memory registration), and counts it in
tries.
"""

from __future__ import annotations

import gzip
import http.client
import select
import socket
import ssl
import threading
import weakref
import zlib
from typing import Dict, Iterable, Iterator, Mapping, Optional, Tuple, Union

import numpy as np

from ._errors import AttndConnectionError

# The failures of a reused connection that the server closed: it never read
# the request (no byte of an answer came back).
_CLOSED_UNDER_US = (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError, ConnectionAbortedError)


class Headers(Mapping[str, str]):
    """An answer's headers: lookups ignore the name's case
    (h["X-Request-ID"] is h["x-request-id"]); iteration gives the names in
    lower case.  A header sent more than once is joined with ", "."""

    __slots__ = ("_d",)

    def __init__(self, items: Iterable[Tuple[str, str]] = ()) -> None:
        d: Dict[str, str] = {}
        for k, v in items:
            k = k.lower()
            d[k] = d[k] + ", " + v if k in d else v
        self._d = d

    def __getitem__(self, name: str) -> str:
        return self._d[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._d

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return "Headers(%r)" % self._d


#: The methods sent again on a new connection when a reused one turns out
#: closed under the request.
IDEMPOTENT = ("GET", "HEAD")


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive connection that has something to read has been
    closed by the server (or is out of step): either way, not reusable."""
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(p.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def inflate(data: bytes, coding: Optional[str]) -> bytes:
    """A body in its Content-Encoding (gzip, deflate or none) -> the bytes."""
    if not coding or coding == "identity":
        return data
    if coding == "gzip":
        return gzip.decompress(data)
    if coding == "deflate":
        try:
            return zlib.decompress(data)
        except zlib.error:  # raw deflate, as some servers send
            return zlib.decompress(data, -zlib.MAX_WBITS)
    raise ValueError("unknown Content-Encoding %r" % coding)


def answer_buffer(n: int, header_length: Optional[str]) -> Union[bytearray, memoryview]:
    """A writable buffer of n bytes for an answer's body: a bytearray, or
    for a v2 answer with binary outputs (header_length: its
    Inference-Header-Content-Length) a memoryview whose bytes after the JSON
    header start 64-byte aligned, so that an output can be used where it
    lies (_tensors.decode)."""
    try:
        h = int(header_length) if header_length is not None else -1
    except ValueError:
        h = -1
    if not 0 <= h <= n:
        return bytearray(n)
    raw = np.empty(n + 64, np.uint8)
    pad = -(raw.ctypes.data + h) % 64
    return memoryview(raw)[pad:pad + n]


def _read_body(resp: http.client.HTTPResponse) -> Union[bytes, memoryview]:
    """The answer's body: a v2 answer with binary outputs, of known length
    and not compressed, into answer_buffer; any other as bytes."""
    n, hl = resp.length, resp.getheader("Inference-Header-Content-Length")
    if n is None or hl is None or resp.getheader("Content-Encoding") not in (None, "identity"):
        return resp.read()
    buf = answer_buffer(n, hl)
    got = 0
    while got < n:
        k = resp.readinto(buf[got:])
        if not k:
            raise http.client.IncompleteRead(bytes(buf[:got]), n - got)
        got += k
    return buf


class Body:
    """A request body as the buffers it is made of (a JSON header, then
    tensors' bytes, often views of the caller's arrays), written one after
    another with Content-Length their sum: the tensors are not joined into
    one copy first."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: Iterable[Union[bytes, memoryview]]) -> None:
        self.parts = [p if isinstance(p, memoryview) else memoryview(p) for p in parts]
        self.size = sum(p.nbytes for p in self.parts)

    def __len__(self) -> int:
        return self.size

    def tobytes(self) -> bytes:
        return b"".join(self.parts)


def deflate(data: bytes, coding: str) -> bytes:
    """data compressed as gzip or deflate (zlib format)."""
    if coding == "gzip":
        return gzip.compress(data, 6)
    if coding == "deflate":
        return zlib.compress(data, 6)
    raise ValueError("compression must be 'gzip' or 'deflate', not %r" % coding)


#: The send buffer a Unix socket connection asks for.  The kernel's default
#: (net.core.wmem_default, 208 KiB on Debian) holds less than one request of
#: a few hundred KiB, so the client would block several times a request and
#: attnd sleep and wake it as often; with room for the whole upload attnd
#: reads it in one go.  The kernel caps it at twice net.core.wmem_max.
UNIX_SNDBUF = 4 << 20


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix stream socket (attnd's --unix-socket)."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_SNDBUF)
            if self.timeout is not None:
                s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Transport:
    """Connections to one host and port (or one Unix socket), one per
    thread."""

    def __init__(self, scheme: str, host: str, port: int, timeout: Optional[float],
                 ssl_context: Optional[ssl.SSLContext],
                 unix_socket: Optional[str] = None) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.unix_socket = unix_socket
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()

    def _new(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.unix_socket is not None:
            conn = UnixHTTPConnection(self.unix_socket, self.timeout)
        elif self.scheme == "https":
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        with self._lock:
            self._all.add(conn)
        return conn

    def _connection(self) -> Tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it is an open one being
        reused (False: it connects on the request)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._new()
            return conn, False
        if conn.sock is None:
            return conn, False
        if _dropped(conn.sock):
            conn.close()
            return conn, False
        return conn, True

    def describe(self, method: str, path: str) -> str:
        """How error messages name a request: "GET http://h:p/path"."""
        if self.unix_socket is not None:
            return "%s %s on the Unix socket %s" % (method, path, self.unix_socket)
        return "%s %s://%s:%d%s" % (method, self.scheme, self.host, self.port, path)

    def request(self, method: str, path: str, body: Union[bytes, Body, None],
                headers: Mapping[str, str],
                timeout: Optional[float] = None) -> Tuple[int, Mapping[str, str], bytes]:
        """(status, headers (lookups ignore case), body as sent); the body is
        still in its Content-Encoding.  timeout: seconds to connect and per
        read for this request (default: the transport's).

        AttndConnectionError.before_answer is True when the connection
        could not be made, or broke before any byte of an answer came,
        other than by a read timeout."""
        what = self.describe(method, path)
        if timeout is None:
            timeout = self.timeout
        payload: Union[bytes, Iterable[memoryview], None] = body
        if isinstance(body, Body):
            # http.client writes an iterable's items one by one, and with
            # Content-Length given, as they are (no chunked coding)
            headers = dict(headers, **{"Content-Length": str(len(body))})
            payload = body.parts
        for attempt in (0, 1):
            conn, reused = self._connection()
            conn.timeout = timeout
            try:
                if conn.sock is None:
                    conn.connect()
                else:
                    conn.sock.settimeout(timeout)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                # a TLS failure (a certificate refused) would fail again
                raise AttndConnectionError("%s: %s" % (what, e or type(e).__name__),
                                           before_answer=not isinstance(e, ssl.SSLError)) from e
            try:
                try:
                    conn.request(method, path, body=payload, headers=dict(headers))
                except (BrokenPipeError, ConnectionResetError):
                    # The server may have answered before it stopped reading
                    # (a 413 for a body over its limit): read that answer.
                    resp = conn.getresponse()
                else:
                    resp = conn.getresponse()
            except _CLOSED_UNDER_US as e:
                conn.close()
                if reused and attempt == 0 and method in IDEMPOTENT:
                    continue
                raise AttndConnectionError("%s: %s" % (what, e or type(e).__name__),
                                           before_answer=True) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise AttndConnectionError("%s: %s" % (what, e or type(e).__name__)) from e
            except BaseException:
                # interrupted (KeyboardInterrupt, a signal handler's
                # exception) with the answer still due: the connection is
                # out of step, and closing it tells attnd the client left
                conn.close()
                raise
            try:
                data = _read_body(resp)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise AttndConnectionError("%s: the answer broke off: %s" % (what, e)) from e
            except BaseException:
                conn.close()
                raise
            hdrs = Headers(resp.getheaders())
            return resp.status, hdrs, data
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Closes every connection of every thread (they reopen on use)."""
        with self._lock:
            conns = list(self._all)
        for c in conns:
            c.close()
