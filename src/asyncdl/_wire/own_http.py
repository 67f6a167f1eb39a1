"""A GET of the lean path on an HTTP/1.1 client of the engine's own: keep-alive
connections per (scheme, host, port) on the loop's transports, TLS through the loop
(the aiohttp session's own TLS context), answers parsed by ``httptools`` (llhttp, in
C). On unless the environment says ``ASYNCDL_OWN_HTTP=0`` when asyncdl is imported
(:data:`ENABLED`): then every request goes through aiohttp, as before this client was.

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
is passed over (one whose head frames a body is refused); a head over
:data:`~asyncdl._wire.own_connection.MAX_HEAD` bytes is refused, and so is a body
whose framing (chunk extensions, trailers) runs that long with no body byte. A body
with neither a length nor chunked framing ends where the connection closes cleanly: a
reset is a cut, not its end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import ssl
from typing import Any

from .own_answer import HeadersTimeout, OwnBodyError, OwnHTTPError, OwnResponse
from .own_connection import Connection, Origin

__all__ = [
    "ENABLED",
    "ConnectError",
    "ConnectTimeout",
    "HeadersTimeout",
    "OwnBodyError",
    "OwnHTTPError",
    "OwnPool",
    "OwnResponse",
    "pool_for",
    "served",
]

#: The switch: GETs of the lean path go through this client when it is set. An escape
#: hatch, read once: ``ASYNCDL_OWN_HTTP=0`` sends them through aiohttp instead.
ENABLED = os.environ.get("ASYNCDL_OWN_HTTP", "1").strip() != "0"

#: Seconds an idle connection is kept (aiobotocore's own keep-alive for aiohttp).
KEEPALIVE = 12.0
#: Idle connections kept per origin at most.
_IDLE_PER_ORIGIN = 100


class ConnectError(OSError):
    """The connection could not be made."""


class ConnectTimeout(TimeoutError):
    """No connection within the connect timeout."""


def _origin_of(url: str) -> tuple[Origin, str]:
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


class OwnPool:
    """Keep-alive connections of one aiohttp session's settings (its TLS context and
    timeouts), for one loop."""

    def __init__(
        self,
        ssl_setting: Any,
        connect_timeout: float | None,
        read_timeout: float | None,
        *,
        limit: int | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self._ssl = ssl_setting
        self._connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: dict[Origin, list[Connection]] = {}
        self._live: set[Connection] = set()
        #: Drops connections idle for KEEPALIVE: one timer for the pool, while any idle.
        self._sweeper: asyncio.TimerHandle | None = None
        self._origins: dict[str, tuple[Origin, str]] = {}
        self.closed = False
        #: GETs sent, and connections made (what a test or a benchmark checks).
        self.sent = 0
        self.connected = 0
        #: Connections open at once at most, idle ones too (aiohttp's connector limit,
        #: aiobotocore's ``max_pool_connections``); ``None``: no limit.
        self._limit = limit
        self._connecting = 0
        #: GETs waiting for room under the limit, woken one at a time.
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def _split(self, url: str) -> tuple[Origin, str]:
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
            conn, reused = await self._acquire(origin, reuse=attempt == 0)
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

    def _idle_conn(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            transport = conn.transport
            if not conn.lost and transport is not None and not transport.is_closing():
                return conn
        return None

    async def _acquire(self, origin: Origin, *, reuse: bool) -> tuple[Connection, bool]:
        """An idle connection to ``origin`` (when ``reuse``), else a new one once the
        limit leaves room; and whether it was reused."""
        while True:
            if self.closed:
                raise ConnectError("the pool is closed")
            if reuse and (conn := self._idle_conn(origin)) is not None:
                return conn, True
            if self._room():
                return await self._connect(origin), False
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                # Cancelled, its future with it (left in the queue, passed over); or
                # woken, then cancelled before it ran: the room it was given is another's.
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()
                raise

    def _room(self) -> bool:
        """Whether a connection may be made: under the limit, or made so by closing
        the connection idle longest (of another origin: this one's had none)."""
        if self._limit is None or len(self._live) + self._connecting < self._limit:
            return True
        oldest = min(
            (conn for idle in self._idle.values() for conn in idle),
            key=lambda conn: conn.idle_since,
            default=None,
        )
        if oldest is None:
            return False
        oldest._drop()
        return True

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

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

    async def _connect(self, origin: Origin) -> Connection:
        scheme, host, port, _ = origin
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            tls = self._ssl_context()
        conn = Connection(self, origin)
        self._connecting += 1
        try:
            async with asyncio.timeout(self._connect_timeout):
                await self.loop.create_connection(
                    lambda: conn, host, port, ssl=tls, server_hostname=host if tls else None
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {self._connect_timeout:g}s") from None
        finally:
            self._connecting -= 1
            if self._waiters:
                self._wake_one()  # a failed connection leaves its room to a waiter
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

    def put(self, conn: Connection) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= _IDLE_PER_ORIGIN:
            conn._drop()
            return
        conn.idle_since = self.loop.time()
        idle.append(conn)
        if self._sweeper is None:
            self._sweeper = self.loop.call_later(KEEPALIVE / 2, self._sweep)
        if self._waiters:
            self._wake_one()  # to take it, or to close it for another origin

    def forget(self, conn: Connection) -> None:
        if conn in self._live:
            self._live.discard(conn)
            if self._waiters:
                self._wake_one()
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
        while self._waiters:  # each then finds the pool closed
            self._wake_one()


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
        limit=getattr(session.connector, "limit", 0) or None,
    )
    setattr(http_session, _POOL_ATTRIBUTE, pool)
    stack.callback(pool.close)
    return pool


def served(proxy: str | None, url: str) -> bool:
    """Whether a GET to ``url`` goes through this client: the switch is on, there is no
    proxy, and the URL is http or https."""
    return ENABLED and proxy is None and url.startswith(("http://", "https://"))
