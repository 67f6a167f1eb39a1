"""Fetching one object's byte ranges into a sink: retries that resume, bodies drained
in bounded writes. Used by a download (the sink is its temp file) and by a stream (one
queue per part); ``part_numbers`` fetches by upload part on top of it.

Every request takes a slot of the engine's budget while it is in flight (see
``s3_source``); a fan-out bounds its own part tasks with a window of the same size,
and never holds a slot while it waits for one, so a download cannot deadlock itself
whatever the concurrency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .._wire.body_reader import BodyReader, SpooledBody, held_after_failure
from .._wire.own_answer import OwnResponse
from .._wire.ranges import ByteRange, plan_ranges
from .._wire.retry import after_failure
from .._wire.s3_source import UNKNOWN_LENGTH, Response, S3Object
from ..config import KiB, MiB, TransferConfig
from ..errors import ObjectChangedError, RetryableError, translate
from ..progress import Reporter
from .body_into_file import write_rest
from .context import Context
from .verify import Verifier

#: Bytes the requests of one engine gather for writing, all together: what the
#: default settings gather (10 requests, 1 MiB ``write_size`` each). With more requests
#: in flight each gathers less (64: 160 KiB), and aiohttp holds as little of each body
#: (see ``body_reader``), so memory does not grow with the concurrency.
BUFFERED = 10 * MiB
#: The smallest gathered write: below it the executor hop per write costs more CPU
#: than the bytes it saves.
MIN_WRITE = 64 * KiB


class Sink(Protocol):
    """Where a fetch's bytes go."""

    async def write_chunks(
        self,
        offset: int,
        chunks: list[bytes],
        crc: Callable[[bytes, Any], Any] | None,
        previous: Any,
    ) -> Any:
        """Write ``chunks`` back to back from ``offset``; return ``crc`` run over them
        from ``previous`` (``previous`` itself when ``crc`` is ``None``)."""


# Not frozen, as nothing changes it: one is made per object, and a frozen dataclass
# pays an object.__setattr__ per field on creation (see jobs.Job).
@dataclass(slots=True)
class Fetch:
    """What every part of one object's fetch shares."""

    ctx: Context
    obj: S3Object
    #: The temp file, or a stream's queue: see :class:`Sink`.
    sink: Sink
    etag: str | None
    size: int
    verifier: Verifier
    progress: Reporter
    #: Whether bytes written can be taken back (a file can be rewritten; a stream's
    #: bytes are gone to the reader): an unpinned part (no ETag) is then started over
    #: after a failure, else the failure ends it.
    rewritable: bool = True
    #: Hand each piece to the sink as it arrives (a stream's reader waits for it), not
    #: a write's worth at a time (vectored writes, unjoined, per ``write_target``).
    each_piece: bool = False


@dataclass(slots=True)
class Part:
    """A byte range still to be written; ``pos`` advances as bytes reach the sink,
    ``crc`` (when the download verifies a CRC) over ``[start, pos)``."""

    start: int
    end: int
    pos: int = -1
    #: The running CRC: an int, or ``every_crc``'s three while the algorithm is unknown.
    crc: Any = 0
    #: The CRC this part feeds, the verifier's when its first byte comes (then fixed:
    #: ``None``, computed later from the file if a CRC checksum turns up).
    crc_fn: Callable[[bytes, Any], Any] | None = None
    #: Only these bytes are wanted of an answer that may go on past ``end`` (one that
    #: ignored Range, or a 206 longer than asked): reading stops at ``end``, and the
    #: rest is never read (the answer is closed). Of a whole answer of unknown length
    #: (``Fetch.size`` is ``UNKNOWN_LENGTH``) that ends first, ``end`` becomes where
    #: it ended: the object's size.
    prefix: bool = False

    def __post_init__(self) -> None:
        if self.pos < 0:
            self.pos = self.start


async def fetch_into(
    ctx: Context,
    sink: Sink,
    obj: S3Object,
    *,
    etag: str | None,
    size: int,
    start: int,
    end: int,
    response: Response | None,
) -> None:
    """Fetch bytes ``[start, end)`` into ``sink`` (each byte once), with the same
    retries and resumption as a download's parts; without an ETag to pin a resumed
    range to, a failure ends it."""
    fetch = Fetch(
        ctx, obj, sink, etag, size, Verifier("off", None), Reporter(None), False, each_piece=True
    )
    await fetch_part(fetch, Part(start, end), response)


async def fetch_ranges(
    fetch: Fetch,
    first: Response | None,
    first_end: int,
    offset: int,
    gaps: list[tuple[int, int]] | None = None,
) -> None:
    """Fetch a multi-part object: the open first response (bytes ``[0, first_end)``),
    then the rest in parallel (from ``offset``: bytes before it are already written),
    or only ``gaps``, each ``[start, end)`` cut by ``chunk_size`` (what a resumed
    download lacks)."""
    config = fetch.ctx.config
    # Bounds this download's part tasks; the shared budget is taken per request.
    window = asyncio.Semaphore(config.max_concurrency)
    try:
        async with asyncio.TaskGroup() as tasks:
            if first is not None:
                await window.acquire()
                tasks.create_task(_run(fetch, Part(0, first_end), first, window))
                first = None  # the task owns it now
                offset = first_end
            for gap_start, gap_end in [(offset, fetch.size)] if gaps is None else gaps:
                for byte_range in plan_ranges(gap_end, config.chunk_size, gap_start):
                    await window.acquire()
                    part = Part(byte_range.start, byte_range.end)
                    tasks.create_task(_run(fetch, part, None, window))
    finally:
        if first is not None:
            first.close()


async def _run(
    fetch: Fetch, part: Part, response: Response | None, window: asyncio.Semaphore
) -> None:
    try:
        await fetch_part(fetch, part, response)
    finally:
        window.release()


async def fetch_part(fetch: Fetch, part: Part, response: Response | None) -> None:
    """Fetch ``part`` (from ``response`` when one is open for it); a retry resumes from
    the last byte written.

    Attempts count failures in a row: an attempt that moved a fair share of the part
    (``_earns_a_reset``) starts the count again, so a long transfer survives occasional
    cuts, while a link that cuts every few bytes still runs out. Without an ETag
    nothing pins a resumed range to the same version: a retry starts over.
    """
    whole = part.pos == 0 and part.end == fetch.size and response is None
    pinned = fetch.etag is not None
    failures = 0
    mark = part.pos
    while True:
        try:
            if response is None:
                response = await _request_part(fetch, part, whole=whole)
            if part.pos == 0 and part.end == fetch.size:
                # A whole-object answer carries S3's checksum: known before the body.
                fetch.verifier.adopt(response.checksum)
            if part.pos == part.start:
                # Nothing of it written: it feeds the CRC known now, not at the plan (a
                # HEAD that answered since spares it ``every_crc``'s three).
                part.crc_fn, part.crc = fetch.verifier.crc, 0
            await _drain(fetch, response, part)
        except Exception as exc:
            if not pinned and not fetch.rewritable and part.pos > part.start:
                error = translate(exc, bucket=fetch.obj.bucket, key=fetch.obj.key)
                if error is exc:
                    raise  # already ours, with its own cause: never its own cause
                raise error from exc
            if pinned and part.pos - mark >= _earns_a_reset(part):
                failures = 0
            failures = await after_part_failure(fetch, exc, failures, "a part")
            if not pinned and part.pos > part.start:
                await fetch.progress.add(part.start - part.pos)
                part.pos, part.crc = part.start, 0
            mark = part.pos
        finally:
            if response is not None:
                response.close()
                response = None
        if part.pos >= part.end:
            crc = part.crc if part.crc_fn is not None else None
            fetch.verifier.add_part(part.start, part.end, crc)
            return
        # Until a byte is written, a retry asks for the whole object again (an empty
        # object has no valid Range); after that it resumes with a range.
        whole = whole and part.pos == 0


async def _request_part(fetch: Fetch, part: Part, *, whole: bool) -> Response:
    obj, etag, size = fetch.obj, fetch.etag, fetch.size
    if whole:
        response = await obj.get(None, if_match=etag)
        if response.status != 200 or response.content_length != size or response.content_range:
            response.close()
            raise obj.error(
                f"expected {size} bytes, got HTTP {response.status} with "
                f"{response.content_length} bytes",
                ObjectChangedError,
            )
        return response
    response = await obj.get(ByteRange(part.pos, part.end), if_match=etag)
    content_range = response.content_range
    if (
        response.status == 200
        and content_range is None
        and ((part.start == 0 and part.end == size) or part.prefix)
        and response.content_length == size
    ):
        # A server that ignores Range answers a resumed whole-object part (or a prefix
        # of the object) with the whole object again: _drain skips the bytes already
        # written, and stops where the part does.
        return response
    if (
        response.status != 206
        or content_range is None
        or content_range.start != part.pos
        or (content_range.end > part.end and not part.prefix)
        or content_range.total != size
    ):
        response.close()
        if content_range is not None and content_range.total != size:
            raise obj.error(
                f"object size changed from {size} to {content_range.total}", ObjectChangedError
            )
        raise obj.error(
            f"asked for bytes [{part.pos}, {part.end}), got HTTP {response.status} "
            f"with Content-Range {content_range}"
            + (
                "; the server ignores Range (GET-first fetches such an object in one request)"
                if response.status == 200
                else ""
            )
        )
    return response


async def _drain(fetch: Fetch, response: Response, part: Part) -> None:
    """Stream ``response``'s body into the sink at ``part.pos``, in bounded writes."""
    obj, config = fetch.obj, fetch.ctx.config
    if response.content_range is not None:
        body_start, limit = response.content_range.start, response.content_range.end
    else:  # a whole-object answer (of unknown length: UNKNOWN_LENGTH)
        body_start, limit = 0, response.content_length
    unknown = limit == UNKNOWN_LENGTH
    # Reading stops at the part's end when the answer goes on past it (a long 206, the
    # whole object): what it holds past the part is never read (the answer is closed).
    cut = part.prefix and (unknown or limit > part.end)
    if cut:
        limit = part.end
    elif limit > part.end:
        raise obj.error(f"server sent bytes up to {limit}, past the expected end {part.end}")
    target = write_target(config)
    flush_at = 1 if fetch.each_piece else target
    # A spooled body came through the cap, and was reported, as it arrived.
    spooled = isinstance(response.body, SpooledBody)
    bandwidth = None if spooled else fetch.ctx.bandwidth
    with BodyReader(response.body, config.read_timeout, target, bandwidth) as reader:
        writes = _Writes(fetch, part, reader, report=not spooled)
        skip = part.pos - body_start  # > 0: the whole object sent again, partly on disk
        # The rest of the body may go straight from the socket into the file once
        # the pieces already here are taken (see _write_rest).
        body = response.body
        divert = type(body) is OwnResponse and not (cut or skip or bandwidth or fetch.each_piece)
        try:
            while (not cut or part.pos + writes.size < limit) and (chunk := await reader.read()):
                if skip > 0:
                    skip, chunk = skip - len(chunk), chunk[skip:]
                if cut:
                    chunk = chunk[: limit - part.pos - writes.size]  # a copy at the end only
                writes.add(chunk, limit)
                if divert and body.held == 0 and not body.complete:
                    divert = False
                    del chunk
                    await _write_rest(fetch, body, part, reader, writes)
                elif writes.size >= flush_at:
                    del chunk  # held by the write only: it is freed when written
                    await writes.flush()
            if skip > 0:
                raise RetryableError("the body ended before the bytes to resume from")
        except Exception:
            # Bytes that came before the break (those aiohttp held too) are good: kept.
            for held in held_after_failure(response.body):
                skip, piece = skip - len(held), held[max(skip, 0) :]
                if cut:
                    piece = piece[: limit - part.pos - writes.size]
                writes.add(piece, limit)
            await writes.flush()
            raise
        await writes.flush()
    if cut and unknown and part.pos < limit:
        # The whole object, of a length it did not say, ended here: it is that long.
        part.end = part.pos
    elif part.pos != limit:
        # aiobotocore checks Content-Length at EOF; this guards a body without one (a
        # close-delimited 206 cut by its close): a cut, resumed from where it ended.
        raise RetryableError(f"body ended at byte {part.pos}, expected {limit}")


async def _write_rest(
    fetch: Fetch, body: OwnResponse, part: Part, reader: BodyReader, writes: _Writes
) -> None:
    """The rest of the body straight from the socket into the file, after the pieces
    gathered, if the sink is a file open and written plainly (see ``body_into_file``);
    else nothing, and nothing is written early: the pieces go on gathering (a small
    file not open yet may still be written whole in one go, see ``writer.TempFile``)."""
    plain_writes = getattr(fetch.sink, "plain_writes", None)
    if plain_writes is None:
        return
    counters = fetch.ctx.counters

    def advance(size: int, crc: Any) -> None:
        part.pos += size
        part.crc = crc
        counters.bytes += size

    with plain_writes() as fd:
        if fd is None:
            return
        await writes.flush()
        report = fetch.progress.add if fetch.progress.callback is not None else None
        await write_rest(
            body,
            fd,
            part.pos,
            reader,
            crc=part.crc_fn,
            crc_value=part.crc,
            advance=advance,
            report=report,
        )


def write_target(config: TransferConfig) -> int:
    """Bytes a part gathers before it writes (it writes once it has that much, so one
    piece more at most): ``write_size``, less when so many requests may run at once
    that together they would gather more than ``BUFFERED``. A part holds bytes only
    while its request holds a slot of the engine's budget."""
    return min(config.write_size, max(MIN_WRITE, BUFFERED // config.max_concurrency))


class _Writes:
    """One body's pieces waiting to be written, and their write: the pieces as they
    came (no join), the running CRC over them in the same executor hop."""

    __slots__ = ("_counters", "_fetch", "_part", "_reader", "_report", "pieces", "size")

    def __init__(self, fetch: Fetch, part: Part, reader: BodyReader, *, report: bool) -> None:
        self._fetch, self._part, self._reader = fetch, part, reader
        self._counters = fetch.ctx.counters
        reporting = report and fetch.progress.callback is not None
        self._report = fetch.progress.add if reporting else None
        self.pieces: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes, limit: int) -> None:
        if self._part.pos + self.size + len(chunk) > limit:
            raise self._fetch.obj.error("server sent more bytes than it announced")
        if chunk:  # a piece skipped whole (bytes already on disk) is empty
            self.pieces.append(chunk)
        self.size += len(chunk)

    async def flush(self) -> None:
        if not self.pieces:
            return
        part, size = self._part, self.size
        self._reader.pause()
        try:
            part.crc = await self._fetch.sink.write_chunks(
                part.pos, self.pieces, part.crc_fn, part.crc
            )
        finally:
            self._reader.resume()
        self._counters.bytes += size
        if self._report is not None:
            await self._report(size)
        part.pos += size
        self.pieces = []
        self.size = 0


async def after_part_failure(fetch: Fetch, exc: Exception, failures: int, what: str) -> int:
    obj, ctx = fetch.obj, fetch.ctx
    return await after_failure(
        ctx.config, exc, failures, bucket=obj.bucket, key=obj.key, what=what, counters=ctx.counters
    )


def _earns_a_reset(part: Part) -> int:
    """Bytes an attempt must move for the part's failure count to start again: a
    quarter of the part, at most 1 MiB, so every reset is paid for with real progress
    and a part can be reset only a bounded number of times."""
    return max(1, min(1024 * 1024, (part.end - part.start) // 4))
