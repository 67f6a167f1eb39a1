"""What reads an opened stream (``streaming`` opens it and hands its first answer
here): its parts, fetched ahead of its reader, each into a queue of its own, at
most ``prefetch`` of them in flight or waiting, yielded in order; or a slice of one
answer's body (a server that ignored Range, or sent more than was asked)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Any

from .._transfer.context import Context
from .._transfer.parts import fetch_into
from .._wire.bandwidth import TokenBucket
from .._wire.body_reader import BodyReader
from .._wire.ranges import plan_ranges
from .._wire.s3_source import Response, S3Object
from ..errors import DownloadError
from ..stats import Counters

_END = object()
#: Bytes aiohttp may hold ahead of a slice's reader.
_SLICE_READ = 1024 * 1024


class QueueSink:
    """Where one part's bytes wait for the reader (a stand-in for the temp file)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    async def write_chunks(self, offset: int, chunks: list[bytes], crc: Any, previous: Any) -> Any:
        # Each piece as the network delivered it: joining them would copy every byte.
        for chunk in chunks:
            self.queue.put_nowait(chunk)
        return previous


async def prefetch_parts(
    ctx: Context,
    obj: S3Object,
    first: Response | None,
    *,
    stop: int,
    chunk_size: int,
    prefetch: int,
) -> AsyncGenerator[bytes]:
    """Yield the parts in order while up to ``prefetch`` of them are fetched."""
    assert first is not None
    opened: Response | None = first
    window: deque[tuple[QueueSink, asyncio.Task[None]]] = deque()
    try:
        assert first.content_range is not None
        size, etag = first.content_range.total, first.etag
        ranges = plan_ranges(stop, chunk_size, first.content_range.end)
        opening = _launch(
            ctx,
            obj,
            etag=etag,
            size=size,
            start=first.content_range.start,
            end=first.content_range.end,
            response=first,
        )
        window.append(opening)
        opened = None  # its task owns it now
        while True:
            # Refilled at the top of every turn: a window of one is empty after each
            # part, with more to come (``while window`` would end the stream there).
            while len(window) < prefetch:
                byte_range = next(ranges, None)
                if byte_range is None:
                    break
                window.append(
                    _launch(
                        ctx,
                        obj,
                        etag=etag,
                        size=size,
                        start=byte_range.start,
                        end=byte_range.end,
                        response=None,
                    )
                )
            if not window:
                break
            sink, task = window[0]
            while (item := await sink.queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
            window.popleft()
            await task
    finally:
        if opened is not None:
            opened.close()
        for _, task in window:
            task.cancel()
        await asyncio.gather(*(task for _, task in window), return_exceptions=True)


def _launch(
    ctx: Context,
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
            await fetch_into(
                ctx, sink, obj, etag=etag, size=size, start=start, end=end, response=response
            )
        except BaseException as exc:
            sink.queue.put_nowait(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            raise
        sink.queue.put_nowait(_END)

    return sink, asyncio.create_task(run())


async def read_nothing(first: Response | None) -> AsyncGenerator[bytes]:
    return
    yield  # pragma: no cover - makes this an async generator


async def read_slice(
    first: Response | None,
    *,
    start: int,
    end: int | None,
    bandwidth: TokenBucket | None,
    read_timeout: float,
    counters: Counters,
    error: Callable[[str], DownloadError],
    ended: Callable[[int], None] | None = None,
    base: int = 0,
) -> AsyncGenerator[bytes]:
    """Bytes ``[start, end)`` of a body, counted from its first byte (the object's
    first, when the server ignored Range), read within the engine's ``bandwidth`` and
    ``read_timeout`` (whatever the HTTP session's own);
    what is yielded is counted in the engine's stats as the parts' bytes are.
    ``base``: the object's offset of the body's first byte, for messages.
    ``end=None``: to the end of the body, whose length ``ended`` is told.

    Unless ``ended`` is given (a body of unknown length, which may end before ``end``),
    a body that ends before ``end`` is short of what its answer announced (a
    Content-Length or Content-Range that lied, a close that cut a body without a
    length): a failure, never the normal end of a stream."""
    assert first is not None
    position = 0
    try:
        with BodyReader(first.body, read_timeout, _SLICE_READ, bandwidth) as reader:
            while piece := await reader.read():
                low = max(start - position, 0)
                high = len(piece) if end is None else min(len(piece), end - position)
                position += len(piece)
                if low < high:
                    counters.bytes += high - low
                    reader.pause()  # the reader of the stream is slow, not the server
                    yield piece[low:high]
                    reader.resume()
                if end is not None and position >= end:
                    break
            else:
                if ended is not None:
                    ended(position)
                elif end is not None:
                    raise error(f"body ended at byte {base + position}, expected {base + end}")
    finally:
        first.close()
