"""Reading a GET's body as the network delivered it, with one stall watch per body.

aiobotocore's streaming body reads through aiohttp's ``StreamReader.read(n)``, which
joins (copies) the pieces aiohttp holds into one ``bytes``; asyncdl then gathered
those into writes (a second copy), and wrapped each read in ``asyncio.timeout`` (a
timer armed and cancelled per read). Here an aiohttp body is read with
``readchunk()``: each piece as aiohttp parsed it, no copy, and the caller writes the
pieces it gathered with vectored writes, unjoined. A stall is caught by one timer per body
that is pushed forward only when it fires: a read stamps the time, the timer
compares (a body aiohttp already holds whole gets none: no read of it can wait).
When it finds no byte for ``read_timeout``, it fails the aiohttp stream with a
``RetryableError`` (the read in progress raises it), rather than cancelling
the task, which could land in a write the caller has in flight. While the caller
writes, or a read waits for the engine's bandwidth cap, the watch is paused: a slow
disk or a cap is not a stalled server.

Any other body (another HTTP backend, or a body that checks what it reads) is read
with ``read(size)`` under ``asyncio.timeout``, as before.

A whole-object answer that says no length (a chunked body) is read to its end first
when its size must be known before its bytes are placed (a download preallocates
and plans by it): :func:`spool` puts it in an unnamed temp file beside the target,
read through a :class:`BodyReader` (stall watch, bandwidth cap) with progress as it
comes; a :class:`SpooledBody` reads it back (not capped nor reported again).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import IO, Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
from botocore.exceptions import FlexibleChecksumError, ResponseStreamingError

from ..errors import RetryableError, describe
from ..progress import Reporter
from .bandwidth import TokenBucket
from .body_endings import Ending, close_delimited_ending, response_under
from .own_http import OwnBodyError, OwnResponse


def _response_of(body: Any) -> aiohttp.ClientResponse | None:
    """The aiohttp answer a body reads: a URL's body is that answer itself; an S3 GET's
    is under a plain aiobotocore body. ``None`` for any other body: a subclass does work
    on its reads (botocore's checksum check, for a client that validates responses
    itself) that reading past it would skip. aiobotocore's class is looked up, not
    imported: a body of it exists only once it is loaded (a URL command never loads it)."""
    raw = response_under(body)
    if raw is None or raw is body:
        return raw
    # Under an aiobotocore body (response_under found its class loaded): a plain one.
    return raw if type(body) is sys.modules["aiobotocore.response"].AioStreamingBody else None


def _stream_of(body: Any) -> aiohttp.StreamReader | None:
    """The aiohttp stream under a plain body (see :func:`_response_of`), or ``None``."""
    return _content_of(_response_of(body))


def _content_of(raw: aiohttp.ClientResponse | None) -> aiohttp.StreamReader | None:
    content = raw.content if raw is not None else None
    return content if isinstance(content, aiohttp.StreamReader) else None


def held_after_failure(body: Any) -> list[bytes]:
    """What aiohttp received of a failed body but did not hand over: it raises the failure
    ahead of it (a cut that reached it while nobody read: a first answer, a part writing)."""
    stream = _stream_of(body)
    if stream is None or stream.exception() is None or not hasattr(stream, "_buffer_offset"):
        return []
    held = list(stream._buffer)  # aiohttp's own pieces, the first read up to the offset
    return [held[0][stream._buffer_offset :], *held[1:]] if held else []


def _hold_at_most(stream: aiohttp.StreamReader, size: int) -> None:
    """Make aiohttp stop reading the socket once it holds ``size`` bytes of the body.

    It holds up to twice its ``read_bufsize`` (256 KiB) per response, and a socket
    read more: with 64 responses in flight that is more than the bytes the caller
    gathers. ``read_bufsize`` belongs to the session (aiobotocore's) and
    ``set_read_chunk_size`` only raises the limits, so the stream's own are lowered
    here, when it has them (an aiohttp without them keeps its own)."""
    if getattr(stream, "_high_water", 0) > size and hasattr(stream, "_low_water"):
        stream._high_water = size
        stream._low_water = size // 2


def _read_at_most(response: aiohttp.ClientResponse, size: int) -> None:
    """Make each read of the response's socket take ``size`` bytes at most.

    asyncio reads a socket 256 KiB at a time (its transports' ``max_size``), into a
    new buffer per read, whatever aiohttp's own limits: at concurrency 64 that was
    the larger part of the body bytes held at once (peak RSS 105 MiB for a 512 MiB
    object, 94 with reads of half a write). Lowered only, and only where the
    transport has that attribute (asyncio's selector transports; uvloop keeps its
    own). The pooled connection keeps it for its later requests, which smaller
    reads do not harm: at the default concurrency a write's half is above 256 KiB
    and nothing changes."""
    connection = response.connection
    transport: Any = connection.transport if connection is not None else None
    current = getattr(transport, "max_size", None)
    if isinstance(current, int) and current > size:
        with contextlib.suppress(AttributeError, TypeError):
            transport.max_size = size


#: A body that broke: aiohttp's parser found its framing wrong (the pure-Python parser
#: raises that as it is; the C one as a payload error), or its connection was cut.
_BROKEN_BODY = (
    HttpProcessingError,
    aiohttp.ClientPayloadError,
    ResponseStreamingError,
    OwnBodyError,
)

#: Seconds a stall watch's timer may fire after its time and still judge: later, the
#: loop was held up, and it looks again this much later (see ``BodyReader._check``).
_LATE = 0.1


class BodyReader:
    """The pieces of one response body; use as a context manager (it owns a timer)."""

    def __init__(
        self, body: Any, read_timeout: float, size: int, bandwidth: TokenBucket | None = None
    ) -> None:
        self._body = body
        #: The engine's bandwidth cap, taken after each read (see ``asyncdl._wire.bandwidth``).
        self._bandwidth = bandwidth
        self._timeout = read_timeout
        #: Bytes aiohttp may hold ahead of the reader; the bytes asked of a body that
        #: is not aiohttp's (it has no pieces of its own).
        self._size = size
        self._stream: aiohttp.StreamReader | OwnResponse | None
        #: How the body's connection ended, when that ends it, on aiohttp (see
        #: :class:`~asyncdl._wire.body_endings.Ending`); the own client judges its own.
        self._ended_by: Ending | None = None
        #: The same, for a body that checks what it reads (botocore's checksum check): a
        #: cut shows as that check's failure at the body's end (the bytes are short),
        #: which is then the cut, fetched again, not a checksum mismatch. A body that
        #: passed its check is whole, whatever ended its connection.
        self._checked_ended_by: Ending | None = None
        if type(body) is OwnResponse:  # the engine's own client: the answer is its body
            self._stream = body
            #: The whole body is here already (a tiny object's, often): no read can
            #: wait, nor hold more than there is, so it needs no stall watch and no limits.
            self._whole = body.is_eof()
            if not self._whole:
                body.hold_at_most(size // 2)
        else:
            raw = _response_of(body)  # once per body: the stream is the answer's content
            self._stream = _content_of(raw)
            self._whole = self._stream is not None and self._stream.is_eof()
            if raw is not None and self._stream is not None:
                self._ended_by = close_delimited_ending(raw)
            elif (under := response_under(body)) is not None:
                self._checked_ended_by = close_delimited_ending(under)
            if raw is not None and self._stream is not None and not self._whole:
                # Half a write's worth waiting in aiohttp, and socket reads of that much
                # at most: with the write being gathered and the one in flight, a
                # response holds about two writes' worth (see parts.write_target).
                _hold_at_most(self._stream, size // 2)
                _read_at_most(raw, size // 2)
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        #: When the timer was set to fire.
        self._due = 0.0

    def __enter__(self) -> BodyReader:
        if self._stream is not None and not self._whole:
            self._watch(self._last + self._timeout)
        return self

    def _watch(self, due: float) -> None:
        self._due = due
        self._timer = self._loop.call_at(due, self._check)

    def __exit__(self, *exc_info: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def read(self) -> bytes:
        """The next piece; ``b""`` at the end of the body. A body that breaks (its
        framing, or its connection) raises ``RetryableError``, its text scrubbed: the
        parser's own error quotes the bytes it could not parse, which a peer that
        echoes the request fills with the request line and its headers."""
        stream = self._stream
        broken: Exception | None = None
        try:
            if stream is None:
                data = await self._read_other()
            else:
                while True:
                    data, end_of_http_chunk = await stream.readchunk()
                    self._last = self._loop.time()
                    # (b"", True) ends a chunk of a chunked body, (b"", False) the body.
                    if data or not end_of_http_chunk:
                        break
        except _BROKEN_BODY as exc:
            broken = RetryableError(f"the body broke off: {describe(exc)}")
        except FlexibleChecksumError:
            ending = self._checked_ended_by
            if ending is None or not (cut := ending.cut()):
                raise
            broken = RetryableError(f"the body broke off: {cut}")
        else:
            if not data and self._ended_by is not None and (cut := self._ended_by.cut()):
                broken = RetryableError(f"the body broke off: {cut}")
        if broken is not None:
            # Raised out here, so not even as a context: the parser's error holds the
            # bytes it quotes.
            raise broken
        if self._bandwidth is not None and data:
            await self._take(len(data))
        return data

    async def _take(self, size: int) -> None:
        """Sleep until the bandwidth cap lets ``size`` bytes on, the watch paused: the
        reader is the one waiting, not the server."""
        assert self._bandwidth is not None
        self.pause()
        try:
            await self._bandwidth.take(size)
        finally:
            self.resume()

    async def _read_other(self) -> bytes:
        try:
            async with asyncio.timeout(self._timeout):
                chunk: bytes = await self._body.read(self._size)
        except TimeoutError:
            raise RetryableError(f"no bytes for {self._timeout:g}s") from None
        return chunk

    def touch(self) -> None:
        """Bytes came that were not read through :meth:`read` (a body written into its
        file straight from the socket): the server is not stalled."""
        self._last = self._loop.time()

    def pause(self) -> None:
        """The caller is writing: no read is waiting, so nothing can stall."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._last = self._loop.time()

    def _check(self) -> None:
        assert self._stream is not None
        now = self._loop.time()
        if now - self._due > _LATE:
            # The loop itself was held up (a long callback, a slow file call made on it):
            # the reader had no turn to take what arrived meanwhile, and may have it
            # waiting. Look again once it has had one.
            self._watch(now + _LATE)
            return
        due = now + self._timeout if self._paused else self._last + self._timeout
        if due <= now:
            self._timer = None
            self._stream.set_exception(RetryableError(f"no bytes for {self._timeout:g}s"))
            return
        self._watch(due)


async def read_error_body(raw: Any, read_timeout: float, most: int) -> bytes:
    """Up to ``most`` bytes of an error answer's body (an open aiohttp answer), read
    within ``read_timeout`` in all; the answer is released when its body was read to its
    end, else closed (its connection is in an unknown state).

    The status is the answer: a body that stalls, trickles (a byte just inside each read
    timeout would make 64 KiB last days), breaks its framing (a chunk-size line that is
    not one, which aiohttp's C parser never reports to a waiting read) or is cut gives
    what came of it before, ``b""`` at worst, never a hang. A read here waits on nothing
    but the socket, so a timeout may cancel it (no write is in flight)."""
    pieces: list[bytes] = []
    held = 0
    ended = False
    try:
        # One deadline for the whole body, not one per read: see above.
        async with asyncio.timeout(read_timeout):
            while held < most:
                piece: bytes = await raw.content.read(most - held)
                if not piece:
                    ended = True
                    break
                pieces.append(piece)
                held += len(piece)
    except (TimeoutError, aiohttp.ClientError, HttpProcessingError, OSError, OwnBodyError):
        pass  # what came is kept: the status says what the server meant
    finally:
        if ended:
            raw.release()
        else:
            raw.close()
    return b"".join(pieces)


#: Bytes gathered before each write of a spooled body.
_SPOOL_WRITE = 1024 * 1024


@dataclass(slots=True)  # not frozen: one per download (see jobs.Job)
class SpoolTo:
    """Where and how a body of unknown length is spooled: a download's in its
    target's directory (``beside``, the target; the system's temp directory may be a
    small tmpfs, or RAM), other reads' there (``beside`` ``None``); read as other
    bodies are (the engine's read timeout, not a borrowed client's, and its bandwidth
    cap; never through aiobotocore's ``read``, whose timeout error quotes the URL with
    its query), its bytes reported as progress as they arrive (``None``: not the
    download's)."""

    #: The target (its directory worked out only for a body that is spooled: few are).
    beside: str | None
    read_timeout: float
    bandwidth: TokenBucket | None
    progress: Reporter | None


class SpooledBody:
    """A body read to its end into an unnamed temp file, read back in order (the
    ``read``/``close`` of a streaming body)."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file

    async def read(self, size: int = -1) -> bytes:
        return await asyncio.to_thread(self._file.read, size)

    def close(self) -> None:
        self._file.close()


async def spool(body: Any, to: SpoolTo) -> tuple[SpooledBody, int]:
    """Read ``body`` to its end into an unnamed temp file (beside ``to.beside``; gone
    when closed); the body to read it from, and its length. ``body`` is closed either
    way."""
    # Made before the file: a connection that ended while the file was made (a small
    # body's, whole in its first read) would leave the reader nothing to ask how.
    reader = BodyReader(body, to.read_timeout, _SPOOL_WRITE, to.bandwidth)
    try:
        beside = to.beside
        file = await _made_in_thread(None if beside is None else os.path.dirname(beside) or ".")
    except BaseException:
        body.close()
        raise
    progress = to.progress
    size = reported = 0
    try:
        with reader as pieces_of:
            pieces: list[bytes] = []
            held = 0
            while True:
                piece: bytes = await pieces_of.read()
                if piece:
                    pieces.append(piece)
                    held += len(piece)
                    if progress is not None:
                        reported += len(piece)
                        await progress.add(len(piece))
                if held >= _SPOOL_WRITE or (not piece and pieces):
                    pieces_of.pause()
                    try:
                        await asyncio.to_thread(file.writelines, pieces)
                    finally:
                        pieces_of.resume()
                    size += held
                    pieces, held = [], 0
                if not piece:
                    break
        await asyncio.to_thread(file.seek, 0)
    except BaseException as exc:
        file.close()
        if progress is not None and isinstance(exc, Exception):
            await progress.add(-reported)  # a retry reports them again
        raise
    finally:
        body.close()
    return SpooledBody(file), size


async def _made_in_thread(directory: str | None) -> IO[bytes]:
    """:func:`_unnamed_file`, made in a thread; a file that thread makes after its
    caller was cancelled is closed (gone) as soon as it is made, not left open."""
    made = asyncio.get_running_loop().run_in_executor(None, _unnamed_file, directory)
    try:
        return await asyncio.shield(made)
    except asyncio.CancelledError:
        made.add_done_callback(_close_made)
        raise


def _close_made(made: asyncio.Future[IO[bytes]]) -> None:
    if not made.cancelled() and made.exception() is None:
        made.result().close()


def _unnamed_file(directory: str | None) -> IO[bytes]:
    return tempfile.TemporaryFile(dir=directory)
