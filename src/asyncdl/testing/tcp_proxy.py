"""An HTTP/1.1-aware TCP proxy for tests and benchmarks, on loopback.

It sits between an S3 client and a server and, per request: records it (method,
path, headers), counts requests in flight (and the response body bytes it relays),
adds latency, and can apply a fault (answer with an error status, delay, cut the
body after N bytes, stall, reset), and can cap each connection's bandwidth. It runs
its own event loop in a thread, so synchronous clients (boto3) can use it as well as
asyncio ones.

Upstream connections are opened per request and the client side is kept alive:
moto's server closes every connection, S3 does not, and a benchmark through the
proxy should pay for handshakes as it would against S3.

``bandwidth`` caps the response bodies each client connection receives, in bytes
per second, with a token bucket of its own per connection (kept across its
requests): S3 gives one connection roughly 90 MB/s, so a large download is fast by
its parallel connections, and a benchmark on loopback (gigabytes per second per
connection) would not show it otherwise. Request bodies are not capped.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from .http_wire import (
    CHUNK,
    error_reply,
    parse_head,
    relay_chunked,
    replace_headers,
    rewrite_head,
)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request the proxy received, as a fault rule and ``requests`` see it."""

    #: The HTTP method (``"GET"``, ``"HEAD"``...).
    method: str
    #: The request target: the path and the query string.
    path: str
    #: The request headers, lower-case names.
    headers: dict[str, str]

    @property
    def range(self) -> str | None:
        """The ``Range`` header, if any."""
        return self.headers.get("range")


@dataclass(frozen=True, slots=True)
class Fault:
    """What to do to one request; fields combine. All defaults mean: pass it through."""

    #: Answer with this HTTP status (and an S3 error body) instead of forwarding.
    status: int | None = None
    #: The S3 error code of that answer's body.
    error_code: str = "InternalError"
    #: Seconds to wait before forwarding the request.
    delay: float = 0.0
    #: Forward only this many body bytes of the response, then close the connection.
    cut_after: int | None = None
    #: Seconds to stall (send nothing) after ``cut_after`` bytes, before closing.
    stall: float = 0.0
    #: Close the client connection at once, without answering.
    reset: bool = False
    #: Flip the byte at this body offset.
    corrupt_at: int | None = None
    #: Request headers to replace (lower-case name -> value; ``None`` removes one).
    headers: dict[str, str | None] = field(default_factory=dict)
    #: Called (in the proxy's thread) just before the request is forwarded.
    before: Callable[[], object] | None = None
    #: Response headers to replace in the server's answer (lower-case name -> value;
    #: ``None`` removes one): a server without ETags, say.
    response_headers: dict[str, str | None] = field(default_factory=dict)
    #: Answer with exactly this instead of forwarding: a status, headers as given (no
    #: Content-Length is added), and body bytes; then close the client connection when
    #: ``reply_close``, else keep it open (a declared length never sent stalls a reader).
    reply: tuple[int, dict[str, str], bytes] | None = None
    #: Close the client connection after ``reply``.
    reply_close: bool = False
    #: Send the response body with ``Transfer-Encoding: chunked`` and no Content-Length
    #: (a server that does not know its length up front); other body faults do not apply.
    chunked: bool = False


#: What ``TcpProxy.rule`` holds: called with each request, on the proxy's loop, and
#: returns the fault to apply to it, or ``None`` to pass it through.
FaultRule = Callable[[RequestRecord], Fault | None]


class _TokenBucket:
    """``rate`` bytes per second, as one connection's link would carry them.

    It starts empty and holds at most ``burst`` bytes of credit (what a connection idle
    between requests may send at once), so ``n`` bytes sent from a fresh bucket take at
    least ``n / rate`` seconds. A sender that runs ahead sleeps off its debt: one timer
    per chunk, never a busy loop.
    """

    def __init__(self, rate: float, burst: int = CHUNK) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = 0.0
        self._stamp = time.monotonic()

    async def take(self, count: int) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= count
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self.rate)


@dataclass
class _Stats:
    requests: list[RequestRecord] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    response_bytes: int = 0


class TcpProxy:
    """Use as a context manager; ``url`` is the endpoint to give clients.

    ``rtt_ms`` is latency added before each request is forwarded; ``bandwidth`` caps
    each client connection (see the module's docstring).
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        rtt_ms: float = 0.0,
        bandwidth: float | None = None,
    ) -> None:
        if bandwidth is not None and not bandwidth > 0:
            raise ValueError(f"bandwidth must be a positive number of bytes/s, not {bandwidth!r}")
        #: The server's host and port.
        self.upstream = (upstream_host, upstream_port)
        #: Seconds added before each request is forwarded (``rtt_ms`` / 1000).
        self.rtt = rtt_ms / 1000.0
        #: Response body bytes per second per client connection (None: uncapped).
        self.bandwidth = bandwidth
        #: The fault rule applied to every request (``None``: pass everything through).
        self.rule: FaultRule | None = None
        self._stats = _Stats()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: Every socket the proxy opened, client side and upstream, until collected.
        self._transports: weakref.WeakSet[asyncio.WriteTransport] = weakref.WeakSet()
        self._thread = threading.Thread(target=self._run, daemon=True)
        #: The loopback port the proxy listens on (0 until it is entered).
        self.port = 0

    @classmethod
    def for_url(cls, url: str, *, rtt_ms: float = 0.0, bandwidth: float | None = None) -> TcpProxy:
        """A proxy in front of ``http://host:port`` (moto's endpoint URL, say)."""
        host_port = url.split("://", 1)[1].rstrip("/")
        host, port = host_port.rsplit(":", 1)
        return cls(host, int(port), rtt_ms=rtt_ms, bandwidth=bandwidth)

    @property
    def url(self) -> str:
        """The endpoint URL to give clients: ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    # -- what the proxy saw ---------------------------------------------------------
    @property
    def requests(self) -> list[RequestRecord]:
        """Every request received since the start (or ``reset_stats()``), in order."""
        with self._lock:
            return list(self._stats.requests)

    @property
    def in_flight(self) -> int:
        """Requests whose answer is not fully relayed yet: a body nobody reads or
        closes stays here."""
        with self._lock:
            return self._stats.in_flight

    @property
    def max_in_flight(self) -> int:
        """The most requests that were in flight at once."""
        with self._lock:
            return self._stats.max_in_flight

    @property
    def response_bytes(self) -> int:
        """Response body bytes relayed to clients so far (counted as they are sent)."""
        with self._lock:
            return self._stats.response_bytes

    def _sent(self, count: int) -> None:
        with self._lock:
            self._stats.response_bytes += count

    def reset_stats(self) -> None:
        """Forget the requests, the in-flight peak and the bytes counted so far."""
        with self._lock:
            self._stats = _Stats()

    # -- life cycle -----------------------------------------------------------------
    def __enter__(self) -> TcpProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        self.port = future.result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        self._loop.run_forever()
        # A connection accepted between _stop and the loop stopping still has a task:
        # finish it here, as asyncio.run does, so nothing is destroyed while pending.
        self._loop.run_until_complete(self._cancel_all())
        self._loop.close()

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _stop(self) -> None:
        server = self._server
        if server is not None:
            # Stop accepting, and let the connections already accepted get their
            # transports while the server is still open: asyncio (3.11) leaves the
            # socket of one whose transport is made after the server closed unclosed.
            loop = asyncio.get_running_loop()
            for sock in server.sockets:
                loop.remove_reader(sock.fileno())
            for _ in range(100):  # each such task takes one or two loop turns
                others = asyncio.all_tasks() - self._connections - {asyncio.current_task()}
                if not others:
                    break
                await asyncio.sleep(0)
        await self._cancel_all()
        if server is not None:
            server.close()

    async def _cancel_all(self) -> None:
        # Connections accepted while others were being cancelled start new tasks:
        # repeat until none is left, then let the closed transports finish closing.
        # Only the proxy's own connection tasks are cancelled: asyncio's task that
        # wraps a just-accepted socket in a transport, cancelled before its first
        # step, would never run and leave that socket open; it ends by itself.
        while tasks := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            for task in tasks:
                if task in self._connections:
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        # A transport closed with bytes still buffered for a peer that stopped reading
        # (a client that went away mid-body) waits for them forever: drop them, or its
        # socket would outlive the loop and warn when collected.
        for transport in list(self._transports):
            try:
                transport.abort()
            except AttributeError:
                # Already closed by asyncio, which had let go of its loop: seen once
                # under load, `_force_close` then calls `None.call_soon`. Nothing is
                # left to abort.
                continue
        for _ in range(3):
            await asyncio.sleep(0)

    # -- the relay ------------------------------------------------------------------
    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Known from the moment it is accepted: a connection whose task is cancelled by
        # the shutdown before its first step never runs _serve's cleanup.
        self._transports.add(writer.transport)
        # asyncio holds connection tasks weakly; a strong reference keeps one whose
        # peer vanished from being collected mid-wait (and warning) before shutdown.
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # One bucket per client connection, kept across its requests, as a TCP
        # connection's share of a real network would be.
        down = None if self.bandwidth is None else _TokenBucket(self.bandwidth)
        try:
            while await self._one_exchange(reader, writer, down):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # Only the proxy's own shutdown cancels a connection; end it quietly.
            pass
        finally:
            writer.close()

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._transports.add(up_writer.transport)
        return up_reader, up_writer

    async def _one_exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        down: _TokenBucket | None = None,
    ) -> bool:
        """Relay one request and its response; return whether the client stays open."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        request_line, headers = parse_head(head)
        method, path, _ = request_line.split(" ", 2)
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        record = RequestRecord(method, path, headers)
        with self._lock:
            stats = self._stats
            stats.requests.append(record)
            stats.in_flight += 1
            stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            # Counted first: a rule may wake a test on another thread, which then
            # counts the requests, this one among them.
            fault = self.rule(record) if self.rule is not None else None
            return await self._relay(head, body, method, fault, writer, down=down)
        finally:
            with self._lock:
                stats.in_flight -= 1

    async def _relay(
        self,
        head: bytes,
        body: bytes,
        method: str,
        fault: Fault | None,
        writer: asyncio.StreamWriter,
        *,
        down: _TokenBucket | None = None,
    ) -> bool:
        fault = fault or Fault()
        if fault.reset:
            transport = writer.transport
            transport.abort()
            return False
        delay = self.rtt + fault.delay
        if delay:
            await asyncio.sleep(delay)
        if fault.reply is not None:
            return await _canned(fault, writer)
        if fault.status is not None:
            await error_reply(fault.status, fault.error_code, method, writer)
            return True
        if fault.headers:
            head = replace_headers(head, fault.headers)
        if fault.before is not None:
            fault.before()
        up_reader, up_writer = await self._connect_upstream()
        try:
            up_writer.write(head + body)
            await up_writer.drain()
            response_head = await up_reader.readuntil(b"\r\n\r\n")
            status_line, response_headers = parse_head(response_head)
            length = response_headers.get("content-length")
            if method == "HEAD" or status_line.split(" ")[1] in ("204", "304"):
                length = "0"
            # Keep the client side alive when the body has a known length.
            keep_alive = length is not None
            if fault.response_headers:
                response_head = replace_headers(response_head, fault.response_headers)
            if fault.chunked and length not in (None, "0"):
                assert length is not None
                changes = {"content-length": None, "transfer-encoding": "chunked"}
                writer.write(rewrite_head(replace_headers(response_head, changes), True))
                return await relay_chunked(up_reader, writer, int(length), self._sent)
            writer.write(rewrite_head(response_head, keep_alive))
            remaining = int(length) if length is not None else -1
            whole = await _relay_body(
                up_reader, writer, remaining, fault, down, sent_to_client=self._sent
            )
            return keep_alive and whole
        finally:
            up_writer.close()


async def _relay_body(
    up_reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    remaining: int,
    fault: Fault,
    down: _TokenBucket | None,
    *,
    sent_to_client: Callable[[int], None],
) -> bool:
    """Relay ``remaining`` body bytes (-1: until EOF) with the fault's edits, telling
    ``sent_to_client`` each piece's size; return whether the body went out whole (False
    when cut, or its length was not known)."""
    sent = 0
    while remaining != 0:
        chunk = await up_reader.read(min(CHUNK, remaining) if remaining > 0 else CHUNK)
        if not chunk:
            break
        if down is not None:
            await down.take(len(chunk))
        if fault.corrupt_at is not None and sent <= fault.corrupt_at < sent + len(chunk):
            index = fault.corrupt_at - sent
            chunk = chunk[:index] + bytes([chunk[index] ^ 0xFF]) + chunk[index + 1 :]
        if fault.cut_after is not None and sent + len(chunk) >= fault.cut_after:
            # Counted before it is written: a client that has read the bytes must find
            # them counted (drain() may let it run first).
            sent_to_client(fault.cut_after - sent)
            writer.write(chunk[: fault.cut_after - sent])
            await writer.drain()
            if fault.stall:
                await asyncio.sleep(fault.stall)
            # A graceful close delivers what was sent, then EOF: a short body.
            # (abort() would drop bytes still buffered, headers included.)
            writer.close()
            return False
        sent_to_client(len(chunk))
        writer.write(chunk)
        await writer.drain()
        sent += len(chunk)
        if remaining > 0:
            remaining -= len(chunk)
    return remaining == 0


async def _canned(fault: Fault, writer: asyncio.StreamWriter) -> bool:
    """Send ``fault.reply`` as it is; return whether the client connection stays open."""
    assert fault.reply is not None
    status, headers, body = fault.reply
    lines = [f"HTTP/1.1 {status} Canned", *(f"{name}: {value}" for name, value in headers.items())]
    writer.write("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body)
    await writer.drain()
    if fault.reply_close:
        writer.close()
        return False
    return True
