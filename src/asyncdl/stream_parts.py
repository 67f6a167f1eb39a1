"""A stream's parts, fetched ahead of its reader: each part into a queue of its own,
at most ``prefetch`` of them in flight or waiting, yielded in order (``streaming``
opens the stream and hands its first answer here)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

from .context import Context
from .parts import fetch_into
from .ranges import plan_ranges
from .s3_source import Response, S3Object

_END = object()


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
