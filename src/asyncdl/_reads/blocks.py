"""The random-access reader's blocks: where a read's bytes come from once the reader
is open.

An LRU cache keeps ``most`` blocks of ``block`` bytes. The blocks a read lacks are
fetched together (adjacent ones in one GET, ``range_reads``), pinned to the object's
ETag, and a read that starts where the last one ended fetches as many blocks again
ahead of it (doubling, up to half the cache), so a scan of small reads is few GETs.

A long read (more than ``LONG_READ_BLOCKS`` blocks, none cached but perhaps its first,
which the read before may have kept: pyarrow reads tens of MiB at a time, from
wherever the last read ended) is copied once from what its GETs brought, not cut into
blocks and joined again, and leaves only its last block in the cache. When it starts
where the last read ended, the GETs of as many bytes again after it go out meanwhile
(at most ``PREFETCH_CHUNKS`` chunks, one such fetch at a time), and the next read takes
them if it starts there (a longer read takes them and asks only for the rest): a
scan's next bytes are on their way while the caller works on the last ones. A fetch
ahead that fails is forgotten (the read that wanted its bytes asks again, and meets
the failure itself); one nobody takes is cancelled, and so is one in flight as the
engine closes (``Context.track``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from .._transfer.context import Context
from .._wire.s3_source import S3Object
from .range_plan import coalesce
from .range_reads import SpanSink, fetch_spans

#: A read across more blocks than this, none of them cached but its first, is a long read.
LONG_READ_BLOCKS = 2
#: The most a long sequential read fetches ahead of itself, in chunks (memory: this
#: many chunks per reader, while a scan goes on).
PREFETCH_CHUNKS = 8


@dataclass(slots=True)
class Pending:
    """Bytes ``[start, end)`` fetched ahead of the read that will want them."""

    start: int
    end: int
    task: asyncio.Task[SpanSink]


class Blocks:
    """The cached blocks of one open object, and the reads that fill them."""

    def __init__(self, ctx: Context, obj: S3Object, block: int, most: int) -> None:
        self._ctx, self._obj = ctx, obj
        self._block, self._most = block, most
        #: The object's size and the ETag every GET is pinned to, once it is open.
        self.size: int | None = None
        self.etag: str | None = None
        #: Block index -> its bytes, the most recently used last.
        self.cache: OrderedDict[int, bytes] = OrderedDict()
        #: Blocks a sequential read fetches ahead: doubles while reads stay sequential.
        self._ahead = 1
        #: The bytes after a long sequential read, on their way for the next one.
        self.pending: Pending | None = None

    def cached(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` when the cached blocks hold all of them, else ``None``."""
        block = self._block
        needed = range(start // block, (end - 1) // block + 1)
        if any(i not in self.cache for i in needed):
            return None
        return _cut(self.cache, needed, start, end, block)

    def keep(self, index: int, data: bytes) -> None:
        """Cache block ``index``, evicting the least recently used past ``most``."""
        self.cache[index] = data
        self.cache.move_to_end(index)
        while len(self.cache) > self._most:
            self.cache.popitem(last=False)

    def cancel_ahead(self) -> None:
        """Cancel the fetch of bytes ahead of a read, if any (on the loop)."""
        if self.pending is not None:
            self.pending.task.cancel()
            self.pending = None

    async def read(self, start: int, end: int, *, sequential: bool) -> bytes:
        """Bytes ``[start, end)`` (within the object), from the cache and GETs;
        ``sequential``: the read starts where the last one ended."""
        size, block = self.size, self._block
        assert size is not None
        needed = range(start // block, (end - 1) // block + 1)
        wanted = [i for i in needed if i not in self.cache]
        # The first block may be cached: the one a long read before this one kept,
        # when this one starts where it ended, off a block's start.
        if len(needed) > LONG_READ_BLOCKS and not any(i in self.cache for i in needed[1:]):
            return await self._read_long(start, end, needed, sequential=sequential)
        after = needed[-1] + 1
        if not sequential:
            self._ahead = 1
        elif wanted or (after * block < size and after not in self.cache):
            # Sequential, and about to run out of cached blocks: fetch ahead, twice as
            # far each time (up to half the cache), so a long scan is few GETs.
            last = min(needed[-1] + self._ahead, (size - 1) // block)
            wanted += [i for i in range(after, last + 1) if i not in self.cache]
            self._ahead = min(self._ahead * 2, max(self._most // 2, 1))
        got: dict[int, bytes] = {}
        if wanted:
            asked = [(i * block, min((i + 1) * block, size)) for i in wanted]
            sink = await self._fetch(asked)
            got = {i: sink.cut(s, e) for i, (s, e) in zip(wanted, asked, strict=True)}
        # Taken before any is kept: keeping may evict a block this read still needs.
        blocks = {i: got[i] if i in got else self.cache[i] for i in needed}
        data = _cut(blocks, needed, start, end, block)
        for i, kept in [*blocks.items(), *got.items()]:
            self.keep(i, kept)  # the blocks read ahead last: the most recent
        return data

    async def _fetch(self, asked: list[tuple[int, int]]) -> SpanSink:
        """The ranges ``asked`` (sorted), adjacent ones in one span, pinned."""
        chunk = self._ctx.config.chunk_size
        spans = coalesce(asked, max_gap=0, max_request=chunk)
        return await fetch_spans(
            self._ctx, self._obj, asked, spans, chunk, size=self.size, etag=self.etag
        )

    async def _read_long(self, start: int, end: int, needed: range, *, sequential: bool) -> bytes:
        """A long read: see the module's docstring."""
        size, block = self.size, self._block
        assert size is not None
        last = (needed[-1] * block, min((needed[-1] + 1) * block, size))
        pending, self.pending = self.pending, None
        ahead = pending if pending is not None and pending.start == start else None
        if pending is not None and ahead is None:
            pending.task.cancel()
        # What the bytes fetched ahead lack, asked for at once: to the end of the last
        # block (kept, it serves a short read that follows).
        split = start if ahead is None else min(ahead.end, end)
        rest_task = None
        if split < end:
            rest_task = self._background(self._fetch([(split, max(end, last[1]))]))
        # Sent after this read's own GET, which is wanted first.
        if sequential and end < size:
            most = PREFETCH_CHUNKS * self._ctx.config.chunk_size
            after = min(end + min(end - start, most), size)
            self.pending = Pending(end, after, self._background(self._fetch([(end, after)])))
        head: SpanSink | None = None
        try:
            if ahead is not None:
                await asyncio.wait([ahead.task])
                task = ahead.task
                if not task.cancelled() and task.exception() is None:
                    head = task.result()
                else:  # fetched again: a failure shows here
                    head = await self._fetch([(start, split)])
            rest = None if rest_task is None else await rest_task
        finally:
            # This read cancelled: what it asked for is no one's.
            for asked in (ahead.task if ahead is not None else None, rest_task):
                if asked is not None and not asked.done():
                    asked.cancel()
        if head is None:
            assert rest is not None
            data = rest.cut(start, end)
        elif rest is None:
            data = head.cut(start, end)
        else:
            data = b"".join([*head.views(start, split), *rest.views(split, end)])
        for sink in (rest, head):
            if sink is not None and sink.holds(*last):
                self.keep(needed[-1], sink.cut(*last))
                break
        return data

    def _background(self, fetch: Coroutine[Any, Any, SpanSink]) -> asyncio.Task[SpanSink]:
        """``fetch`` as a task of its own, which the engine's closing cancels; its
        failure is retrieved when no one awaits it."""
        task = asyncio.create_task(fetch)
        task.add_done_callback(_retrieved)
        self._ctx.track(task)
        return task


def _retrieved(task: asyncio.Task[SpanSink]) -> None:
    """Fetched ahead for nobody (the reader moved or closed): its failure is no one's."""
    if not task.cancelled():
        task.exception()


def _cut(blocks: Mapping[int, bytes], needed: range, start: int, end: int, block: int) -> bytes:
    """Bytes ``[start, end)`` of the blocks ``needed``, copied once (a read within one
    block is a slice of it; across blocks, views of them joined)."""
    if len(needed) == 1:
        low = needed[0] * block
        return blocks[needed[0]][start - low : end - low]
    return b"".join(
        memoryview(blocks[i])[max(start - i * block, 0) : end - i * block] for i in needed
    )
