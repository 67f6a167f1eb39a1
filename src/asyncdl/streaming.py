"""Reading an object as a stream of bytes, in order, with bounded prefetch.

Parts are fetched concurrently, each pinned with ``IfMatch`` to the ETag of the
first answer, through the engine's shared budget; a part's bytes wait in its own
queue until the reader reaches it. At most ``stream_prefetch`` parts are in
flight or waiting, so memory stays about ``stream_prefetch * chunk_size`` whatever
the object's size. Leaving the iteration early (``aclose()``, a client that
disconnects) cancels every part still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

from .errors import DownloadError, InvalidRequestError, translate
from .ranges import ByteRange, plan_ranges
from .request_args import check_bucket_and_key, check_extra_args
from .s3_source import RangeNotSatisfiable, Response, S3Object

if TYPE_CHECKING:
    from .engine import Engine

_END = object()


class QueueSink:
    """Where one part's bytes wait for the reader (a stand-in for the temp file)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    async def write(self, offset: int, data: bytes) -> None:
        self.queue.put_nowait(data)


async def stream_object(
    engine: Engine,
    bucket: str,
    key: str,
    *,
    start: int,
    end: int | None,
    extra_args: Mapping[str, str] | None,
) -> AsyncGenerator[bytes]:
    """See :meth:`Engine.stream`."""
    check_bucket_and_key(bucket, key)
    args = check_extra_args(extra_args, bucket=bucket, key=key)
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise InvalidRequestError(
            f"start must be an int >= 0, got {start!r}", bucket=bucket, key=key
        )
    if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < start):
        raise InvalidRequestError(
            f"end must be None or an int >= start ({start}), got {end!r}", bucket=bucket, key=key
        )
    if end == start:
        return
    obj = engine.s3_object(bucket, key, args)
    try:
        # Closing this generator must close the inner one at once (its finally cancels
        # the prefetch), not whenever the garbage collector gets to it.
        async with contextlib.aclosing(_stream(engine, obj, start, end)) as pieces:
            async for piece in pieces:
                yield piece
    except (DownloadError, asyncio.CancelledError, GeneratorExit):
        raise
    except Exception as exc:
        raise translate(exc, bucket=bucket, key=key) from exc


async def _stream(
    engine: Engine, obj: S3Object, start: int, end: int | None
) -> AsyncGenerator[bytes]:
    chunk = engine.config.chunk_size
    first_end = start + chunk if end is None else min(end, start + chunk)
    try:
        first: Response | None = await obj.get(ByteRange(start, first_end), if_match=None)
    except RangeNotSatisfiable as exc:
        if exc.actual_size is not None and start >= exc.actual_size:
            if start > exc.actual_size:
                raise obj.error(
                    f"start {start} is past the end of the {exc.actual_size}-byte object",
                    InvalidRequestError,
                ) from None
            return  # an empty object, or a range that starts at its end
        raise
    assert first is not None
    if first.status == 200 and first.content_range is None:
        # The server ignored Range: the body is the whole object; keep [start, end).
        async for piece in _slice(first, start, end):
            yield piece
        return
    content_range = first.content_range
    if content_range is None or content_range.start != start:
        first.close()
        raise obj.error(f"asked for bytes from {start}, got Content-Range {content_range}")
    size, etag = content_range.total, first.etag
    stop = size if end is None else min(end, size)
    window: deque[tuple[QueueSink, asyncio.Task[None]]] = deque()
    ranges = plan_ranges(stop, chunk, content_range.end)
    try:
        opening = _launch(
            engine, obj, etag=etag, size=size, start=start, end=content_range.end, response=first
        )
        window.append(opening)
        first = None  # its task owns it now
        while window:
            while len(window) < engine.config.stream_prefetch:
                byte_range = next(ranges, None)
                if byte_range is None:
                    break
                window.append(
                    _launch(
                        engine,
                        obj,
                        etag=etag,
                        size=size,
                        start=byte_range.start,
                        end=byte_range.end,
                        response=None,
                    )
                )
            sink, task = window[0]
            while (item := await sink.queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
            window.popleft()
            await task
    finally:
        if first is not None:
            first.close()
        for _, task in window:
            task.cancel()
        await asyncio.gather(*(task for _, task in window), return_exceptions=True)


def _launch(
    engine: Engine,
    obj: S3Object,
    *,
    etag: str | None,
    size: int,
    start: int,
    end: int,
    response: Response | None,
) -> tuple[QueueSink, asyncio.Task[None]]:
    sink = QueueSink()

    async def run() -> None:
        try:
            await engine.fetch_into(
                sink, obj, etag=etag, size=size, start=start, end=end, response=response
            )
        except BaseException as exc:
            sink.queue.put_nowait(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            raise
        sink.queue.put_nowait(_END)

    return sink, asyncio.create_task(run())


async def _slice(response: Response, start: int, end: int | None) -> AsyncGenerator[bytes]:
    """Bytes ``[start, end)`` of a whole-object body."""
    position = 0
    try:
        while piece := await response.body.read(1024 * 1024):
            low, high = max(start - position, 0), len(piece)
            if end is not None:
                high = min(high, end - position)
            position += len(piece)
            if low < high:
                yield piece[low:high]
            if end is not None and position >= end:
                break
    finally:
        response.close()
