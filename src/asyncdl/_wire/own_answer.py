"""An answer of the engine's own HTTP client (:mod:`asyncdl._wire.own_http`): its head,
and its body as the connection's parser cut it out of what the socket delivered."""

from __future__ import annotations

import asyncio
import collections
from typing import Protocol

from multidict import CIMultiDict

from .own_direct import Diversion, Into

#: Bytes of body held ahead of the reader before the socket is no longer read, until a
#: reader sets its own (see :meth:`OwnResponse.hold_at_most`).
_HIGH_WATER = 256 * 1024


class Carrier(Protocol):
    """What an answer asks of the connection it came on."""

    def reading_wanted(self) -> None:
        """The reader took bytes: read the socket again if it was paused."""

    def finished(self, response: OwnResponse) -> None:
        """The answer was released or closed."""

    def read_at_most(self, size: int) -> None:
        """Read the socket ``size`` bytes at a time at most."""

    def divert(self, response: OwnResponse, into: Into) -> Diversion | None:
        """The rest of the body written as ``into`` says (see ``own_direct``), or
        ``None``."""


class OwnHTTPError(Exception):
    """An answer that could not be had: its status line or headers broke, or the
    connection closed before them."""


class OwnBodyError(Exception):
    """A body that broke: its framing, or its connection, before its end."""


class HeadersTimeout(TimeoutError):
    """No answer within the read timeout."""


def broken(response: OwnResponse, why: str) -> Exception:
    return OwnBodyError(why) if response.head_done else OwnHTTPError(why)


class OwnResponse:
    """An answer and its body: what the engine reads of an aiohttp answer (``status``,
    ``headers`` with ``getall``, ``release``/``close``, ``content.read``) and of a body
    (:meth:`readchunk`, :meth:`is_eof`, :meth:`set_exception`)."""

    __slots__ = (
        "_conn",
        "_diversion",
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

    def __init__(self, conn: Carrier) -> None:
        self._conn: Carrier | None = conn
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
        #: The body's rest being written into a file, if it is (see :meth:`divert`).
        self._diversion: Diversion | None = None

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
        """Stop reading the socket while more than ``size`` bytes wait for the reader,
        and read it ``size`` bytes at a time at most: at high concurrency a write is
        small, and asyncio's 256 KiB reads, one new buffer each, were then most of the
        bytes a response held at once."""
        self.high_water = max(size, 1)
        if self._conn is not None:
            self._conn.read_at_most(self.high_water)

    def is_eof(self) -> bool:
        """The whole body is here (or it failed): no read will wait."""
        return self.complete or self._exc is not None

    def exception(self) -> BaseException | None:
        return self._exc

    def set_exception(self, exc: BaseException) -> None:
        """Fail the body (a stall watch's verdict): reads raise it once what came is
        read, a diversion's wait raises it; its connection is not reused."""
        if self._exc is None:
            self._exc = exc
            self.complete = False
        if self._diversion is not None:
            self._diversion.fail(exc)
        self._wake()

    def divert(self, into: Into) -> Diversion | None:
        """Have the rest of the body written as ``into`` says as it arrives,
        straight from the socket (:mod:`asyncdl._wire.own_direct`); ``None`` when it
        cannot be (a body not framed by Content-Length, or bytes of it wait here to be
        read: they are read first). The caller awaits the diversion's ``done``, and
        abandons it if it leaves before."""
        if self._conn is None or self._exc is not None:
            return None
        diversion = self._conn.divert(self, into)
        self._diversion = diversion
        return diversion

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
