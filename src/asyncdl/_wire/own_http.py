"""A GET of the lean path on an HTTP/1.1 client of the engine's own: keep-alive
connections per (scheme, host, port) on the loop's transports, TLS through the loop
(the aiohttp session's own TLS context), answers parsed by ``httptools`` (llhttp, in
C). A prototype, off unless :data:`ENABLED` is set (an internal switch, for
measurement: no public setting turns it on).

aiohttp spends, per request, a request object, header multidicts, a response wrapper
and a stream reader. Here a request is one ``bytes`` written to a pooled transport,
and its answer one object that is at once the response (``status``, ``headers``,
``release``/``close``) and its body (``readchunk``, ``read``): the pieces llhttp cuts
out of what the socket delivered, handed on as they are.

It serves only the S3 lean path's GETs with no proxy, to an http or https URL
(:func:`lean_send.send` decides): HEADs, proxies and URL downloads (which follow
redirects) stay on aiohttp. A connection goes back to the pool only when its answer
ended where its framing says (Content-Length reached, or the last chunk), the server
did not ask to close, and nothing came after it; any other is closed. A reused
connection that the server had closed before it answered (an idle keep-alive it
dropped) is retried once on a new one: the request is a GET. An interim (1xx) answer
is passed over; a head over :data:`MAX_HEAD` bytes is refused.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from typing import Any, cast

from multidict import CIMultiDict

#: The switch: GETs of the lean path go through this client when it is set.
ENABLED = False

#: Seconds an idle connection is kept (aiobotocore's own keep-alive for aiohttp).
KEEPALIVE = 12.0
#: Bytes of body held ahead of the reader before the socket is no longer read, until a
#: reader sets its own (see :meth:`OwnResponse.hold_at_most`).
_HIGH_WATER = 256 * 1024
#: Bytes an answer's status line and headers may take (aiohttp refuses a field over
#: 8190): a server that streams headers without end is refused, not held.
MAX_HEAD = 64 * 1024
#: Idle connections kept per origin at most.
_IDLE_PER_ORIGIN = 100


class _Unasked(Exception):
    """Bytes past the end of the answer asked for (see ``on_message_begin``)."""


class OwnHTTPError(Exception):
    """An answer that could not be had: its status line or headers broke, or the
    connection closed before them."""


class OwnBodyError(Exception):
    """A body that broke: its framing, or its connection, before its end."""


class ConnectError(OSError):
    """The connection could not be made."""


class ConnectTimeout(TimeoutError):
    """No connection within the connect timeout."""


class HeadersTimeout(TimeoutError):
    """No answer within the read timeout."""


_Origin = tuple[str, str, int, str]  # scheme, host, port, Host header


def _origin_of(url: str) -> tuple[_Origin, str]:
    """The origin of an absolute http(s) URL and the rest of it (path and query)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError("not an absolute URL")
    scheme = scheme.lower()
    slash = rest.find("/")
    netloc, target = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in netloc or not netloc:
        raise ValueError("a URL with a login, or no host")
    default = 443 if scheme == "https" else 80
    if netloc.startswith("["):  # an IPv6 literal
        end = netloc.find("]")
        host, port_text = netloc[1:end], netloc[end + 2 :] if end + 1 < len(netloc) else ""
    else:
        host, _, port_text = netloc.partition(":")
    port = int(port_text) if port_text else default
    if not 0 < port < 65536:
        raise ValueError("a port out of range")
    # botocore signs Host without the scheme's default port: send it the same.
    host_header = netloc if port_text and port != default else netloc.rsplit(":", 1)[0]
    if netloc.startswith("[") and not (port_text and port != default):
        host_header = netloc[: netloc.find("]") + 1]
    return (scheme, host, port, host_header), target


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one answer on it at a time."""

    def __init__(self, pool: OwnPool, origin: _Origin) -> None:
        self._pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        # Here, not at the top: a process with the switch off never loads it.
        import httptools  # noqa: PLC0415

        self._parser = httptools.HttpResponseParser(self)
        self.response: OwnResponse | None = None
        #: Answers served: a reused connection's first failure may be the server's idle
        #: close, not an answer to this request.
        self.served = 0
        self.lost = False
        #: When the pool took it back (loop time): it is dropped after KEEPALIVE idle.
        self.idle_since = 0.0
        #: The answer's head is due by then (loop time); the watch that checks it is
        #: one timer per connection, moved on only when it fires (not one per request).
        self._head_due = 0.0
        self._head_timer: asyncio.TimerHandle | None = None
        self._paused = False
        # Per answer, while its head is parsed.
        self._names: list[tuple[str, str]] = []
        #: The head parsed was an interim (1xx) one: the next message is the answer.
        self._interim = False
        #: Bytes received of the answer while its head is not yet whole.
        self._head_bytes = 0

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None or response.complete:
            # Bytes nobody asked for (after an answer, or on an idle connection): the
            # connection's framing is no longer known.
            self._drop()
            return
        try:
            self._parser.feed_data(data)
        except Exception as exc:  # httptools' HttpParserError, HttpParserUpgrade
            # llhttp's reason names the rule broken, never the bytes (a server that
            # echoes the request would fill a quote with its signed headers).
            response.fail(_broken(response, f"bad framing ({_reason(exc)})"))
            self._drop()
            return
        if not response.head_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                response.fail(OwnHTTPError(f"an answer's head over {MAX_HEAD} bytes"))
                self._drop()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._pool.forget(self)
        self._stop_watch()
        response = self.response
        if response is not None and not response.complete:
            if response.head_done and response.close_delimited:
                response.on_message_complete()  # RFC 9112 §6.3: the close ends it
            else:
                response.fail(_broken(response, "the connection closed before the answer ended"))

    def pause_writing(self) -> None:  # a GET's request is small: never waits to write
        pass

    def resume_writing(self) -> None:
        pass

    # --- httptools' callbacks ---------------------------------------------------------
    def on_message_begin(self) -> None:
        response = self.response
        if self._interim:
            self._interim = False
        elif response is None or response.complete:
            # A second answer in the bytes that ended this one: nobody asked for it (an
            # answer is never read into the one before). Stop parsing; the connection
            # is dropped (see data_received) and the answer already had is kept.
            raise _Unasked

    def on_header(self, name: bytes, value: bytes) -> None:
        # httptools joins a header's pieces (one spanning socket reads) before this.
        self._names.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        response = self.response
        assert response is not None
        status = self._parser.get_status_code()
        names, self._names = self._names, []
        if 100 <= status < 200:
            # An interim answer (103 Early Hints): the answer asked for comes after it.
            self._interim = True
            return
        response.head(status, CIMultiDict(names), self._parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        response = self.response
        assert response is not None
        response.feed(body)
        if response.held > response.high_water and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        response = self.response
        assert response is not None
        if not self._interim:
            response.on_message_complete()

    # --- the pool's side --------------------------------------------------------------
    def reading_wanted(self) -> None:
        """The reader took bytes: read the socket again if it was paused."""
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def send(self, request: bytes, response: OwnResponse, read_timeout: float | None) -> None:
        assert self.transport is not None
        self.response = response
        self._names = []
        self._interim = False
        self._head_bytes = 0
        if read_timeout:
            self._head_due = self._pool.loop.time() + read_timeout
            if self._head_timer is None:
                self._head_timer = self._pool.loop.call_at(self._head_due, self._check_head)
        self.transport.write(request)

    def _check_head(self) -> None:
        self._head_timer = None
        response = self.response
        if response is None or response.head_done:
            return  # the next request sets it again
        now = self._pool.loop.time()
        if now < self._head_due:
            self._head_timer = self._pool.loop.call_at(self._head_due, self._check_head)
            return
        response.fail(HeadersTimeout(f"no answer within {self._pool.read_timeout:g}s"))
        self._drop()

    def _stop_watch(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def finished(self, response: OwnResponse) -> None:
        """The answer was released or closed: pooled if it ended cleanly, else closed."""
        if self.response is not response:
            return
        self.response = None
        if response.reusable and not self.lost and not self._pool.closed:
            self.served += 1
            # Paused for a reader that left the rest of the body unread (it had all it
            # needed): the next answer must be read.
            self.reading_wanted()
            self._pool.put(self)
        else:
            self._drop()

    def _drop(self) -> None:
        self.lost = True
        self._pool.forget(self)
        self._stop_watch()
        if self.transport is not None:
            self.transport.close()


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return text[:80] if text.isprintable() else type(exc).__name__


def _broken(response: OwnResponse, why: str) -> Exception:
    return OwnBodyError(why) if response.head_done else OwnHTTPError(why)


class OwnResponse:
    """An answer and its body: what the engine reads of an aiohttp answer (``status``,
    ``headers`` with ``getall``, ``release``/``close``, ``content.read``) and of a body
    (:meth:`readchunk`, :meth:`is_eof`, :meth:`set_exception`)."""

    __slots__ = (
        "_conn",
        "_exc",
        "_pieces",
        "_waiter",
        "close_delimited",
        "complete",
        "head_done",
        "headers",
        "held",
        "high_water",
        "keep_alive",
        "status",
    )

    def __init__(self, conn: _Connection) -> None:
        self._conn: _Connection | None = conn
        self.status = 0
        self.headers: CIMultiDict[str] = CIMultiDict()
        self._pieces: collections.deque[bytes] = collections.deque()
        self.held = 0
        self.high_water = _HIGH_WATER
        self._exc: BaseException | None = None
        #: The head's future (until the head came), then a read's.
        self._waiter: asyncio.Future[None] | None = None
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.close_delimited = False

    @property
    def content(self) -> OwnResponse:
        """aiohttp's name for the body: here the answer is its own body."""
        return self

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and self._exc is None

    # --- fed by the connection --------------------------------------------------------
    def head(self, status: int, headers: CIMultiDict[str], keep_alive: bool) -> None:
        self.status, self.headers, self.keep_alive = status, headers, keep_alive
        self.head_done = True
        self.close_delimited = (
            "content-length" not in headers
            and "transfer-encoding" not in headers
            and status >= 200
            and status not in (204, 304)
        )
        if self.close_delimited:
            self.keep_alive = False
        self._wake()

    def feed(self, data: bytes) -> None:
        self._pieces.append(data)
        self.held += len(data)
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    def fail(self, exc: BaseException) -> None:
        if self._exc is None and not self.complete:
            self._exc = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await waiter

    # --- read by the engine -----------------------------------------------------------
    async def wait_head(self) -> None:
        while not self.head_done:
            if self._exc is not None:
                raise self._exc
            await self._wait()

    def hold_at_most(self, size: int) -> None:
        """Stop reading the socket while more than ``size`` bytes wait for the reader."""
        self.high_water = max(size, 1)

    def is_eof(self) -> bool:
        """The whole body is here (or it failed): no read will wait."""
        return self.complete or self._exc is not None

    def exception(self) -> BaseException | None:
        return self._exc

    def set_exception(self, exc: BaseException) -> None:
        """Fail the body (a stall watch's verdict): reads raise it once what came is
        read; its connection is not reused."""
        if self._exc is None:
            self._exc = exc
            self.complete = False
        self._wake()

    async def readchunk(self) -> tuple[bytes, bool]:
        """The next piece as it came (``b""`` at the end): aiohttp's shape, (piece, False)."""
        while True:
            if self._pieces:
                piece = self._pieces.popleft()
                self.held -= len(piece)
                if self.held <= self.high_water // 2 and self._conn is not None:
                    self._conn.reading_wanted()
                return piece, False
            if self._exc is not None:
                raise self._exc
            if self.complete:
                return b"", False
            await self._wait()

    async def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left for -1); ``b""`` at the end."""
        if size < 0:
            pieces = []
            while piece := (await self.readchunk())[0]:
                pieces.append(piece)
            return b"".join(pieces)
        piece, _ = await self.readchunk()
        if len(piece) > size:
            self._pieces.appendleft(piece[size:])
            self.held += len(piece) - size
            piece = piece[:size]
        return piece

    def release(self) -> None:
        """Done with the answer: its connection is pooled if it ended cleanly, else
        closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finished(self)
        self._pieces.clear()
        self.held = 0

    close = release


class OwnPool:
    """Keep-alive connections of one aiohttp session's settings (its TLS context and
    timeouts), for one loop."""

    def __init__(
        self,
        ssl_setting: Any,
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self._ssl = ssl_setting
        self._connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._live: set[_Connection] = set()
        #: Drops connections idle for KEEPALIVE: one timer for the pool, while any idle.
        self._sweeper: asyncio.TimerHandle | None = None
        self._origins: dict[str, tuple[_Origin, str]] = {}
        self.closed = False
        #: GETs sent, and connections made (what a test or a benchmark checks).
        self.sent = 0
        self.connected = 0

    def _split(self, url: str) -> tuple[_Origin, str]:
        # The origin is the same for every GET of a bucket: parsed once per URL prefix.
        cut = url.find("/", url.find("://") + 3)
        prefix = url if cut < 0 else url[:cut]
        known = self._origins.get(prefix)
        if known is None:
            if len(self._origins) > 64:
                self._origins.clear()
            known = self._origins[prefix] = _origin_of(prefix)
        return known[0], "/" if cut < 0 else url[cut:]

    async def get(self, url: str, headers: dict[str, str]) -> OwnResponse:
        """Send a GET; the answer once its head came (its body is read from it)."""
        if self.closed:
            raise ConnectError("the pool is closed")
        origin, target = self._split(url)
        # A line break in the target or a header would end the request early, and what
        # follows would be read as another request (request smuggling).
        checked = target + "".join(headers) + "".join(headers.values())
        if "\r" in checked or "\n" in checked:
            raise ValueError("a request header or URL holds a line break")
        # botocore's prepared request names its Host (the one it signed): sent as it is.
        # aiohttp adds Accept: the request is the same as it would send, to the byte.
        named = {name.lower() for name in headers}
        lines = [f"GET {target} HTTP/1.1\r\n"]
        if "host" not in named:
            lines.append(f"Host: {origin[3]}\r\n")
        if "accept" not in named:
            lines.append("Accept: */*\r\n")
        lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
        lines.append("\r\n")
        request = "".join(lines).encode("utf-8")
        for attempt in (0, 1):
            conn = self._idle_conn(origin) if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin)
            response = OwnResponse(conn)
            conn.send(request, response, self.read_timeout)
            self.sent += 1
            try:
                await response.wait_head()
            except OwnHTTPError:
                response.close()
                if reused and not response.head_done and conn.lost:
                    continue  # the server had dropped the idle connection: a new one
                raise
            except BaseException:
                response.close()
                raise
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _idle_conn(self, origin: _Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            transport = conn.transport
            if not conn.lost and transport is not None and not transport.is_closing():
                return conn
        return None

    def _sweep(self) -> None:
        """Close the connections idle for KEEPALIVE or longer (a server's own idle
        timeout is often a little longer: a request is not sent on one it is closing)."""
        self._sweeper = None
        stale = self.loop.time() - KEEPALIVE
        for idle in list(self._idle.values()):
            for conn in [conn for conn in idle if conn.idle_since <= stale]:
                conn._drop()
        if any(self._idle.values()):
            self._sweeper = self.loop.call_later(KEEPALIVE / 2, self._sweep)

    async def _connect(self, origin: _Origin) -> _Connection:
        scheme, host, port, _ = origin
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            tls = self._ssl_context()
        conn = _Connection(self, origin)
        try:
            async with asyncio.timeout(self._connect_timeout):
                await self.loop.create_connection(
                    lambda: conn, host, port, ssl=tls, server_hostname=host if tls else None
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {self._connect_timeout:g}s") from None
        if self.closed:  # closed while connecting
            conn._drop()
            raise ConnectError("the pool is closed")
        self._live.add(conn)
        self.connected += 1
        return conn

    def _ssl_context(self) -> ssl.SSLContext:
        if isinstance(self._ssl, ssl.SSLContext):
            return self._ssl
        context = ssl.create_default_context()
        if self._ssl is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._ssl = context
        return context

    def put(self, conn: _Connection) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= _IDLE_PER_ORIGIN:
            conn._drop()
            return
        conn.idle_since = self.loop.time()
        idle.append(conn)
        if self._sweeper is None:
            self._sweeper = self.loop.call_later(KEEPALIVE / 2, self._sweep)

    def forget(self, conn: _Connection) -> None:
        self._live.discard(conn)
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    def close(self) -> None:
        """Close every connection, idle or in use."""
        self.closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self._live):
            conn._drop()
        self._idle.clear()
        self._live.clear()


#: Where an aiobotocore HTTP session keeps its pool (one: only GETs with no proxy come here).
_POOL_ATTRIBUTE = "_asyncdl_own_pool"


def pool_for(http_session: Any, session: Any) -> OwnPool | None:
    """The pool that serves ``session`` (the aiohttp session of aiobotocore's
    ``http_session`` for no proxy): made on first use with its TLS context and
    timeouts, closed when ``http_session`` closes (on its exit stack). ``None`` where
    ``http_session`` has no exit stack to close it on."""
    pool: OwnPool | None = getattr(http_session, _POOL_ATTRIBUTE, None)
    if pool is not None and not pool.closed:
        return pool
    stack = getattr(http_session, "_exit_stack", None)
    if not isinstance(stack, contextlib.AsyncExitStack):
        return None
    timeout = session.timeout
    pool = OwnPool(
        getattr(session.connector, "_ssl", True),
        timeout.sock_connect or timeout.connect,
        timeout.sock_read,
    )
    setattr(http_session, _POOL_ATTRIBUTE, pool)
    stack.callback(pool.close)
    return pool


def served(proxy: str | None, url: str) -> bool:
    """Whether a GET to ``url`` goes through this client: the switch is on, there is no
    proxy, and the URL is http or https."""
    return ENABLED and proxy is None and url.startswith(("http://", "https://"))
