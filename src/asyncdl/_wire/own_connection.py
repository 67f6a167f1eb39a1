"""One keep-alive connection of the engine's own HTTP client (:mod:`asyncdl._wire.own_http`):
an asyncio protocol whose bytes ``httptools`` (llhttp, in C) parses into the answer
asked for, at most one at a time."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Protocol, cast

from multidict import CIMultiDict

from .own_answer import HeadersTimeout, OwnBodyError, OwnHTTPError, OwnResponse, broken
from .own_direct import BUFFER, Diversion, Into

#: Where a connection goes: scheme, host, port, and the Host header to send.
Origin = tuple[str, str, int, str]


class PoolSide(Protocol):
    """What a connection asks of its pool (:class:`asyncdl._wire.own_http.OwnPool`)."""

    loop: asyncio.AbstractEventLoop
    read_timeout: float | None
    closed: bool

    def put(self, conn: Connection) -> None:
        """Keep ``conn`` for the next request to its origin."""

    def forget(self, conn: Connection) -> None:
        """``conn`` is closed, or closing."""


#: Bytes an answer's status line and headers may take (aiohttp refuses a field over
#: 8190): a server that streams headers without end is refused, not held. Also the
#: bytes of framing a body may have between two of its bytes, or after its last (a
#: chunk's size line and extensions, trailers): a server that streams trailers without
#: end would otherwise be held, each one kept, until the reader's stall watch.
MAX_HEAD = 64 * 1024


class _Unasked(Exception):
    """Bytes past the end of the answer asked for (see ``on_message_begin``)."""


class _Refused(Exception):
    """A head refused while it was parsed (its answer has the error): parsing stops."""


class Connection(asyncio.Protocol):
    """One keep-alive connection; at most one answer on it at a time."""

    def __init__(self, pool: PoolSide, origin: Origin) -> None:
        self._pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        #: The TLS of an https connection: asked how it ended (see :func:`tls_ended_cleanly`).
        self._tls: ssl.SSLObject | None = None
        #: The buffer bodies written straight into a file are received into (see
        #: :meth:`divert`), made for the first of them.
        self._divert_into: bytearray | None = None
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
        #: Body bytes still to come of an answer framed by Content-Length; once its
        #: head is parsed they bypass the parser (see :meth:`_body_received`).
        self._left: int | None = None
        #: Bytes of the header names and values parsed for the answer (its interim
        #: answers' too): a head that came whole in the read that took it past MAX_HEAD
        #: is refused by this count.
        self._names_bytes = 0
        #: Body bytes parsed (all answers'), and bytes received since the last of them
        #: that held none (framing, see MAX_HEAD).
        self._body_bytes = 0
        self._framing_bytes = 0
        #: The answer asked for ended where its framing says: whatever comes after is
        #: nobody's. Not the answer's ``complete``, which a stall verdict unsets
        #: (``OwnResponse.set_exception``) on a body that had come whole.
        self._ended = False

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have its methods.
        self.transport = cast(asyncio.Transport, transport)
        tls = transport.get_extra_info("ssl_object")
        self._tls = tls if isinstance(tls, ssl.SSLObject) else None

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None or response.complete or self._ended:
            # Bytes nobody asked for (after an answer, or on an idle connection): the
            # connection's framing is no longer known.
            self._drop()
            return
        if self._left:
            self._body_received(response, data)
            return
        in_body, body_before = response.head_done, self._body_bytes
        try:
            self._parser.feed_data(data)
        except Exception as exc:  # httptools' HttpParserError, HttpParserUpgrade
            # llhttp's reason names the rule broken, never the bytes (a server that
            # echoes the request would fill a quote with its signed headers).
            response.fail(broken(response, f"bad framing ({_reason(exc)})"))
            self._drop()
            return
        if not response.head_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                response.fail(OwnHTTPError(f"an answer's head over {MAX_HEAD} bytes"))
                self._drop()
        elif in_body and not response.complete:
            # Bytes that carried no body byte were framing: a run of them longer than
            # any head is a server that never ends its body, only its bytes.
            if self._body_bytes != body_before:
                self._framing_bytes = 0
            else:
                self._framing_bytes += len(data)
                if self._framing_bytes > MAX_HEAD:
                    response.fail(OwnBodyError(f"body framing over {MAX_HEAD} bytes"))
                    self._drop()

    def _body_received(self, response: OwnResponse, data: bytes) -> None:
        """Body bytes of an answer framed by Content-Length, its head parsed: handed on
        as the transport read them. The parser would copy each into a ``bytes`` of its
        own (a third copy of every byte of a large object, with the kernel's and the
        file's); the framing it checked says where the body ends."""
        left = self._left
        assert left is not None
        if len(data) > left:
            # Bytes past the answer's end: nobody asked for them (see on_message_begin).
            # The answer is whole; the connection's framing is no longer known.
            self._left = 0
            self._feed(response, data[:left])
            self._end(response)
            self._drop()
            return
        self._left = left - len(data)
        self._feed(response, data)
        if self._left == 0:
            self._left = None
            # The parser stopped mid-body: the next answer on this connection is read by
            # a new one.
            self._parser = type(self._parser)(self)
            self._end(response)

    def connection_lost(self, exc: Exception | None) -> None:
        # Lost already: the engine closed it (its pool closed, a stall): not the server's
        # close, which alone ends a body that only the connection's end delimits.
        closed_here, self.lost = self.lost, True
        self._pool.forget(self)
        self._stop_watch()
        response = self.response
        if response is not None and not response.complete:
            if closed_here or not (response.head_done and response.close_delimited and exc is None):
                response.fail(broken(response, "the connection closed before the answer ended"))
            elif self._tls is not None and not tls_ended_cleanly(self._tls):
                # RFC 9112 §9.8: a TCP end with no close_notify before it is an incomplete
                # close (anyone on the path can make one), not the body's end.
                response.fail(OwnBodyError(TRUNCATED))
            else:
                # RFC 9112 §6.3: the close ends it; a reset (exc) is a cut, not a close.
                response.on_message_complete()

    def pause_writing(self) -> None:  # a GET's request is small: never waits to write
        pass

    def resume_writing(self) -> None:
        pass

    # --- httptools' callbacks ---------------------------------------------------------
    def on_message_begin(self) -> None:
        response = self.response
        if self._interim:
            self._interim = False
        elif response is None or response.complete or self._ended:
            # A second answer in the bytes that ended this one: nobody asked for it (an
            # answer is never read into the one before). Stop parsing; the connection
            # is dropped (see data_received) and the answer already had is kept.
            raise _Unasked

    def on_header(self, name: bytes, value: bytes) -> None:
        response = self.response
        assert response is not None
        if response.head_done:
            return  # a trailer: the engine reads none, and a server may send them forever
        self._names_bytes += len(name) + len(value) + 4  # as sent: with ": " and CRLF
        if self._names_bytes > MAX_HEAD:
            response.fail(OwnHTTPError(f"an answer's head over {MAX_HEAD} bytes"))
            raise _Refused
        # httptools joins a header's pieces (one spanning socket reads) before this.
        self._names.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        response = self.response
        assert response is not None
        status = self._parser.get_status_code()
        names, self._names = self._names, []
        if 100 <= status < 200:
            # An interim answer (103 Early Hints): the answer asked for comes after it.
            if status not in (100, 101, 102, 103) and _frames_a_body(names):
                # RFC 9110 §15.2: a 1xx has no content, yet llhttp reads one for a status
                # it does not know when the head frames one: that body would be read
                # into the answer's. What follows the head is not known: refused.
                response.fail(OwnHTTPError(f"an interim answer ({status}) with a body"))
                raise _Refused
            self._interim = True
            return
        headers = CIMultiDict(names)
        response.head(status, headers, self._parser.should_keep_alive())
        length = headers.get("content-length")
        if length is not None and "transfer-encoding" not in headers and status not in (204, 304):
            # llhttp accepted the head: one Content-Length (or copies of one), digits only.
            self._left = int(length)

    def on_body(self, body: bytes) -> None:
        response = self.response
        assert response is not None
        self._body_bytes += len(body)
        if self._left is not None:
            self._left -= len(body)
        self._feed(response, body)

    def _feed(self, response: OwnResponse, body: bytes) -> None:
        response.feed(body)
        if response.held > response.high_water and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        response = self.response
        assert response is not None
        if not self._interim:
            self._left = None
            self._end(response)

    def _end(self, response: OwnResponse) -> None:
        self._ended = True
        response.on_message_complete()

    # --- a body's rest into its file (asyncdl._wire.own_direct) ----------------------
    def divert(self, response: OwnResponse, into: Into) -> Diversion | None:
        """The rest of ``response``'s body written as ``into`` says as it arrives;
        ``None`` when it cannot be: not a body framed by Content-Length with bytes still
        to come, or bytes of it wait to be read."""
        left = self._left
        if (
            not left
            or response is not self.response
            or response.held
            or response.is_eof()
            or self.lost
            or self.transport is None
        ):
            return None
        if self._divert_into is None:
            self._divert_into = bytearray(BUFFER)  # the first body written this way
        diversion = Diversion(self, left, into, self._divert_into)
        self._left = 0  # the diversion's until it hands them back
        self.transport.set_protocol(diversion)
        if self._paused:
            self._paused = False
            self.transport.resume_reading()
        return diversion

    def diversion_ended(self, overrun: bool) -> None:
        response = self.response
        assert response is not None
        assert self.transport is not None
        self.transport.set_protocol(self)
        self._left = None
        # The parser stopped at the head: the next answer is read by a new one.
        self._parser = type(self._parser)(self)
        self._end(response)
        if overrun:
            self._drop()  # bytes past the answer's end: see _body_received

    def diversion_handed_back(self, left: int, held: bytes) -> None:
        response = self.response
        assert response is not None
        assert self.transport is not None
        self.transport.set_protocol(self)
        self._left = left
        if held:
            self._body_received(response, held)

    def diversion_lost(self, exc: Exception | None) -> None:
        self.connection_lost(exc)

    def drop(self) -> None:
        self._drop()

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
        self._left = None
        self._names_bytes = 0
        self._framing_bytes = 0
        self._ended = False
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

    def read_at_most(self, size: int) -> None:
        """Lower the transport's read size to ``size`` (asyncio's selector transports
        have one, ``max_size``; uvloop's keep their own). Kept for the connection's
        later answers: smaller reads do not harm them, and at the default concurrency
        half a write is above 256 KiB, so nothing changes."""
        current = getattr(self.transport, "max_size", None)
        if isinstance(current, int) and current > size:
            with contextlib.suppress(AttributeError, TypeError):
                self.transport.max_size = size  # type: ignore[union-attr]

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


#: What a body is told whose TLS ended without the server's close_notify.
TRUNCATED = "the connection closed without its TLS close_notify before the answer ended"


def tls_ended_cleanly(tls: ssl.SSLObject) -> bool:
    """Whether the TLS of a connection that has ended was ended by the server's
    close_notify (a clean close), not by its TCP connection's end alone (a truncation).

    The loop's TLS layer tells the protocol of either the same way (``connection_lost``
    with no error; asyncio's calls ``eof_received`` for both, uvloop's for the clean one
    only), so the TLS object itself is asked, once nothing else reads it: once the
    close_notify came, a read says the TLS is closed (``SSLZeroReturnError``, or ``b""``
    before the loop sent its own); without it, the read wants bytes that will never
    come; and bytes it still holds were never handed on."""
    try:
        left = tls.read(1)
    except ssl.SSLZeroReturnError:
        return True
    except Exception:  # wants more bytes, or broken: either way not a clean end
        return False
    return not left


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return text[:80] if text.isprintable() else type(exc).__name__


def _frames_a_body(names: list[tuple[str, str]]) -> bool:
    """Whether a head's fields give it a body: a Transfer-Encoding, or a Content-Length
    other than 0 (llhttp accepts only digits there, and trailing blanks)."""
    for name, value in names:
        lowered = name.lower()
        if lowered == "transfer-encoding":
            return True
        if lowered == "content-length" and value.strip(" \t").lstrip("0"):
            return True
    return False
