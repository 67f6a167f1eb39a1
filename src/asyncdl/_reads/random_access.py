"""An object as a file to read at any offset: the async reader ``Engine.open_reader`` gives,
and its synchronous face for a worker thread.

Opening sends one GET, of the first block or (``first_block="end"``, a suffix
range) of the last, no HEAD: it brings the size and the ETag that every later GET
is pinned to, so whatever is read comes from one version of the object, or fails
with ``ObjectChangedError``. Given both (from a listing), opening sends nothing.
Reads go through a cache of ``block_size`` blocks (``blocks``): the blocks a read
lacks are fetched together, a sequential scan reads ahead, and a long read (pyarrow's
tens of MiB) is copied once and has the bytes after it fetched meanwhile.
``read_ranges`` reads many ranges at once, as ``Engine.read_ranges`` does, from the
cache where it holds a range whole; what it fetches is not kept (its ranges are not
blocks). Each GET takes a slot of the engine's budget only while it is in flight:
between reads the reader holds cached bytes and, after a long sequential read, the
GETs of the bytes after it until they end, so a reader dropped unclosed leaks no
slot, no connection (closing it cancels those GETs).

A server that sends no strong ETag (none, or a weak one) cannot have later reads
pinned: opening such an object larger than one block fails rather than risk a
mixture. A server that ignores Range cannot serve blocks: opening fails too, before
any of its body is read. An answer longer than the block asked is read only as far as
the block.

:meth:`RandomAccessReader.sync` gives the reader as a blocking file for a worker
thread (``sync_reader``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any, Literal, Self, SupportsIndex, get_args

from .._transfer.context import Context, on_its_loop
from .._transfer.parts import Fetch, Part, fetch_part
from .._transfer.verify import Verifier
from .._wire.adaptive import own_slots
from .._wire.get_response import UNKNOWN_LENGTH, Response
from .._wire.ranges import ByteRange, LastBytes
from .._wire.request_args import ExtraArgs, check_size_and_etag
from ..config import KiB, MiB, is_int_at_least
from ..errors import InvalidRequestError
from ..progress import Reporter
from .blocks import Blocks
from .range_plan import Span, as_offset
from .range_reads import SpanSink, first_get, read_object_ranges
from .sync_reader import SyncReader

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

#: Bytes per block: at S3's ~90 MB/s per connection a MiB costs about as long as a
#: request's own latency, so smaller blocks would be paid mostly in round trips.
DEFAULT_BLOCK_SIZE = 1 * MiB
#: The smallest block: a read costs some Python objects per block it spans, and a
#: block smaller than a page is paid in those, not in bytes.
MIN_BLOCK_SIZE = 4 * KiB
#: Blocks the cache keeps (memory: about ``block_size * cache_blocks`` per reader).
DEFAULT_CACHE_BLOCKS = 16
#: Which block the opening GET brings: the first, or the last (a suffix range).
FirstBlock = Literal["start", "end"]


def _bounds(answer: Response) -> tuple[int, int]:
    """Where a ranged answer's bytes start and end."""
    assert answer.content_range is not None
    return answer.content_range.start, answer.content_range.end


class RandomAccessReader:
    """An object opened for reading at any offset (:meth:`~asyncdl.Engine.open_reader`):
    ``await read(n)``, ``await readinto(buffer)``, ``seek``, ``tell``, as a binary file.

    ```python
    import asyncdl

    async with asyncdl.Engine() as engine:
        async with engine.open_reader("my-bucket", "archives/logs.zip") as f:
            f.seek(-22, 2)  # the ZIP's end of central directory record
            record = await f.read(22)
    assert record.startswith(b"PK")
    ```

    ``await engine.open_reader(...)`` opens it too (one GET, of the first block); ``size``
    and ``etag`` are known once it is open. Every GET is pinned to ``etag``: an
    object replaced meanwhile raises :class:`~asyncdl.ObjectChangedError`. Between
    reads it holds no slot of the engine's budget but those of bytes fetched ahead of
    a long sequential read; :meth:`aclose` cancels those and drops the cache.
    """

    def __init__(
        self,
        ctx: Context,
        bucket: str,
        key: str,
        *,
        block_size: int | None,
        cache_blocks: int | None,
        extra_args: ExtraArgs | None,
        size: int | None = None,
        etag: str | None = None,
        first_block: FirstBlock = "start",
        url: str | None = None,
    ) -> None:
        self._obj = ctx.object_for(bucket, key, extra_args, url)
        # An answer of unknown length is refused as it comes (it ignored Range), not
        # spooled to learn a size first.
        self._obj.unknown_length_ok = True
        bucket, key = self._obj.bucket, self._obj.key
        self._given = check_size_and_etag(size, etag, bucket=bucket, key=key, pins=True)
        chosen: object = first_block  # a caller's: a str subclass may claim to equal both
        if type(chosen) is not str or chosen not in get_args(FirstBlock):
            raise InvalidRequestError(
                f"first_block must be 'start' or 'end', got {first_block!r}",
                bucket=bucket,
                key=key,
            )
        self._from_end = first_block == "end"
        chunk = ctx.config.chunk_size
        block_size = min(DEFAULT_BLOCK_SIZE, chunk) if block_size is None else block_size
        cache_blocks = DEFAULT_CACHE_BLOCKS if cache_blocks is None else cache_blocks
        if not is_int_at_least(block_size, MIN_BLOCK_SIZE) or block_size > chunk:
            raise InvalidRequestError(
                f"block_size must be an int between {MIN_BLOCK_SIZE} and the chunk_size "
                f"{chunk}, got {block_size!r}",
                bucket=bucket,
                key=key,
            )
        if not is_int_at_least(cache_blocks, 1) or cache_blocks > 10_000:
            raise InvalidRequestError(
                f"cache_blocks must be an int between 1 and 10000, got {cache_blocks!r}",
                bucket=bucket,
                key=key,
            )
        #: The object's bucket and key (of a URL: ``""`` and the URL without its query).
        self.bucket, self.key = bucket, key
        self._ctx = ctx
        self._block = block_size
        #: The object's size (``None`` until opened).
        self.size: int | None = None
        #: The ETag every GET is pinned to (``None`` until opened, and for an object
        #: that fit in the first block of a server that sent none).
        self.etag: str | None = None
        self._blocks = Blocks(ctx, self._obj, block_size, cache_blocks)
        #: The opening answer's bytes and where they start: kept whole beside the
        #: blocks, since a suffix answer need not start at a block's start.
        self._first: tuple[int, bytes] = (0, b"")
        self._pos = 0
        self._last_end = -1
        self._lock = asyncio.Lock()
        self._opened = self._closed = False

    def __await__(self) -> Generator[Any, None, Self]:
        return self.open().__await__()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open(self) -> Self:
        """Send the first GET (of the first block, or of the last), which sets ``size``
        and ``etag``; none when both were given."""
        async with self._lock:
            self._check_open(opening=True)
            if not self._opened:
                size, etag = self._given
                if size is not None and etag is not None:
                    self.size, self.etag = size, etag
                else:
                    with own_slots():
                        await self._first_block()
                self._blocks.size, self._blocks.etag = self.size, self.etag
                self._opened = True
        return self

    async def aclose(self) -> None:
        """Drop the cache; later reads raise ``ValueError``. Idempotent. A read in
        flight ends first (it would fill the cache again)."""
        self._closed = True
        self.cancel_ahead()
        async with self._lock:
            self._blocks.cache.clear()
            self._first = (0, b"")

    def cancel_ahead(self) -> None:
        """Cancel the GET of bytes fetched ahead of a read, if any (on the loop); the
        cache stays. For a caller that drops the reader without closing it."""
        self._blocks.cancel_ahead()

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    def tell(self) -> int:
        """The offset the next read starts at."""
        return self._pos

    def seek(self, offset: SupportsIndex, whence: int = 0) -> int:
        """Move the offset from which the next read starts. Past the end is allowed
        (reads there give ``b""``), before the start is not.

        Args:
            offset: Bytes from where ``whence`` says; negative with 1 or 2.
            whence: From the start (0), the current offset (1) or the end (2, which
                needs the reader open).

        Returns:
            The new offset.
        """
        to = as_offset(offset)  # numpy's ints too, as ``read_ranges`` takes them
        if not isinstance(to, int) or isinstance(to, bool):
            raise InvalidRequestError(f"offset must be an int, got {offset!r}", **self._where)
        if type(whence) is not int:  # True is 1 to Python, not to a file's seek
            raise InvalidRequestError(f"whence must be 0, 1 or 2, got {whence!r}", **self._where)
        if whence == 0:
            base = 0
        elif whence == 1:
            base = self._pos
        elif whence == 2:
            self._check_open()
            assert self.size is not None
            base = self.size
        else:
            raise InvalidRequestError(f"whence must be 0, 1 or 2, got {whence!r}", **self._where)
        if base + to < 0:
            raise InvalidRequestError(f"seek to {base + to}, before the start", **self._where)
        self._pos = base + to
        return self._pos

    async def read(self, n: SupportsIndex = -1) -> bytes:
        """Up to ``n`` bytes from the current offset, which moves past them; ``b""`` at
        the end. Reads from several tasks at once each take the offset where the one
        before left it.

        Args:
            n: The most bytes to read; all that is left when negative.
        """
        return await self._read(None, n)

    async def readinto(self, buffer: WriteableBuffer) -> int:
        """Read from the current offset into ``buffer``, as :meth:`read` does.

        Args:
            buffer: A writable bytes-like object; as many bytes as it holds are asked
                for.

        Returns:
            How many bytes were read (0 at the end).
        """
        view = memoryview(buffer).cast("B")
        if view.readonly:  # before the read: its bytes would be lost, the offset moved
            raise TypeError("readinto() needs a writable buffer")
        data = await self.read(len(view))
        view[: len(data)] = data
        return len(data)

    async def read_at(self, offset: SupportsIndex, n: SupportsIndex = -1) -> bytes:
        """Up to ``n`` bytes from ``offset``, leaving the current offset alone (as
        ``os.pread``); what :class:`SyncReader` reads with.

        Args:
            offset: Where to start, from the start of the object.
            n: The most bytes to read; all from ``offset`` to the end when negative.
        """
        return await self._read(offset, n)

    async def _read(self, offset: SupportsIndex | None, n: SupportsIndex) -> bytes:
        """Read from ``offset``, or from the current offset (``None``), which it then
        moves past what it read: taken and moved under the lock."""
        on_its_loop(self._ctx)  # before the lock and the blocks: both are its loop's
        at = None if offset is None else as_offset(offset)  # numpy's ints too
        count = as_offset(n)
        if (at is not None and not is_int_at_least(at, 0)) or type(count) is not int:
            raise InvalidRequestError(
                f"offset must be an int >= 0 and n an int, got {offset!r}, {n!r}", **self._where
            )
        await self.open()
        async with self._lock:
            self._check_open()
            start: int = self._pos if at is None else at
            size = self.size
            assert size is not None
            end = size if count < 0 else min(size, start + count)
            if start >= end:
                return b""
            # The opening answer first: a suffix answer's bytes before its last block
            # are in no block.
            data = self._in_first(start, end)
            if data is None:
                with own_slots():
                    data = await self._blocks.read(start, end, sequential=start == self._last_end)
            self._last_end = end
            if at is None:
                self._pos = end
            return data

    async def read_ranges(
        self,
        ranges: Iterable[tuple[int, int]],
        *,
        max_gap: int | None = None,
        max_request: int | None = None,
    ) -> list[bytes]:
        """The bytes of each range, as :meth:`~asyncdl.Engine.read_ranges` reads them,
        pinned to ``etag``: a range the cache holds whole is taken from it, the others
        are joined into few GETs sent together. The current offset is left alone.

        Args:
            ranges: ``(start, end)`` pairs, half-open, in any order.
            max_gap: As for :meth:`~asyncdl.Engine.read_ranges`.
            max_request: As for :meth:`~asyncdl.Engine.read_ranges`.

        Returns:
            The bytes of each range, in the order of ``ranges``.
        """
        on_its_loop(self._ctx)
        await self.open()
        async with self._lock:
            self._check_open()
            return await read_object_ranges(
                self._ctx,
                self._obj,
                ranges,
                size=self.size,
                etag=self.etag,
                max_gap=max_gap,
                max_request=max_request,
                cached=self._cached,
            )

    def sync(self) -> SyncReader:
        """This reader as a blocking binary file (``io.RawIOBase``) for a worker thread,
        while this loop runs: call it on the loop, hand the result to the thread."""
        return SyncReader(self, asyncio.get_running_loop())

    @property
    def _where(self) -> dict[str, str]:
        return {"bucket": self.bucket, "key": self.key}

    def _check_open(self, *, opening: bool = False) -> None:
        if self._closed:
            raise ValueError(f"{self.bucket}/{self.key}: the reader is closed")
        if self._ctx.closed:
            raise RuntimeError(f"{self.bucket}/{self.key}: the reader's Engine is closed")
        if not opening and not self._opened:
            raise ValueError(f"{self.bucket}/{self.key}: the reader is not open yet")

    async def _first_block(self) -> None:
        ctx, obj, block = self._ctx, self._obj, self._block
        piece = LastBytes(block) if self._from_end else ByteRange(0, block)
        given_size, given_etag = self._given
        first, size, etag = await first_get(ctx, obj, piece, size=given_size, etag=given_etag)
        if first is None or size == 0:  # an empty object: nothing to read, nothing to pin
            if first is not None:
                first.close()
            self.size, self.etag = size, etag
            return
        whole = first.content_range is None  # the server ignored Range
        if size == UNKNOWN_LENGTH or (whole and size > block):
            first.close()
            raise obj.error("the server ignores Range: it cannot serve a file's blocks")
        if etag is None and size > block:
            first.close()
            raise obj.error(
                "the server sent no strong ETag: later reads could not be pinned to this "
                "version (read_ranges fetches such an object in one GET)"
            )
        start = max(size - block, 0) if self._from_end else 0
        if self._from_end and not whole and _bounds(first) != (start, size):
            # A server that misreads a suffix range (s3rver answers "bytes=-N" with
            # bytes 0 to N) still said the size: the last block by its offsets, pinned.
            first.close()
            first, _, _ = await first_get(ctx, obj, ByteRange(start, size), size=size, etag=etag)
            if first is None:
                raise obj.error(f"the server refused bytes {start}-{size - 1} (HTTP 416)")
        self.size, self.etag = size, etag
        end = min(start + block, size)
        sink = SpanSink([Span(start, end)])
        fetch = Fetch(ctx, obj, sink, etag, size, Verifier("off", None), Reporter(None))
        # The block only: an answer longer than asked is not read on.
        await fetch_part(fetch, Part(start, end, prefix=True), first)
        self._first = (start, sink.cut(start, end))
        index = (size - 1) // block if self._from_end else 0
        self._blocks.keep(index, sink.cut(index * block, min((index + 1) * block, size)))

    def _in_first(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` when the opening answer holds all of them."""
        first_start, first = self._first
        if first_start <= start and end <= first_start + len(first):
            return first[start - first_start : end - first_start]
        return None

    def _cached(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` when the opening answer or the cached blocks hold all
        of them, else ``None``."""
        data = self._in_first(start, end)
        return data if data is not None else self._blocks.cached(start, end)
