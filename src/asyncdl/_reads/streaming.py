"""Reading an object as a stream of bytes, in order, with bounded prefetch.

Parts are fetched concurrently, each pinned with ``IfMatch`` to the ETag of the
first answer, through the engine's shared budget; a part's bytes wait in its own
queue until the reader reaches it. At most ``prefetch`` parts (by default
``config.stream_prefetch``, of ``config.chunk_size``) are in flight or waiting, so
memory stays about ``prefetch * chunk_size`` whatever the object's size. Leaving
the iteration early (``aclose()``, a client that disconnects) cancels every part
still in flight.

The first answer is opened before any byte is read (a web handler needs its
headers) and holds a slot of the budget and a pooled connection. The stream owns
it until the first iteration starts the generator that reads it: an async
generator that never started runs no ``finally`` when closed or collected, so
handing it over earlier would leak it from a stream that is opened and never read
(a handler that wants the headers only, a response that is never sent). Until then
``aclose()`` closes it, and so does the stream's collection, on the stream's loop.

A stream of the whole object is checked against S3's checksum as it passes (see
``stream_verify``): a mismatch raises ``ChecksumError`` instead of the normal end.

A first answer that is the whole object and says no length (a chunked body from a
server that ignores Range) is read to its end: ``size`` and ``length`` stay
``None`` until it has ended (RFC 9112 §6.3), never 0.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Mapping
from functools import partial

from .._transfer.context import Context, on_its_loop
from .._transfer.stream_verify import StreamVerifier
from .._wire.checksums import ExpectedChecksum
from .._wire.ranges import ByteRange, ContentRange
from .._wire.request_args import ExtraArgs
from .._wire.retry import after_failure, with_retries
from .._wire.s3_source import UNANNOUNCED_LENGTH, UNKNOWN_LENGTH, RangeNotSatisfiable, Response
from ..config import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, is_int_at_least
from ..errors import DownloadError, InvalidRequestError, translate
from ..progress import ProgressCallback, Reporter
from .stream_parts import prefetch_parts, read_nothing, read_slice

#: What iterates an opened stream: given the first answer (``None`` when there is
#: nothing to read), the generator of its pieces, which owns that answer once started.
_Reader = Callable[[Response | None], AsyncGenerator[bytes]]


def check_parts(chunk_size: int, prefetch: int, *, bucket: str, key: str) -> None:
    """A stream's own ``chunk_size`` and ``prefetch``, within the config's bounds."""
    if not is_int_at_least(chunk_size, MIN_CHUNK_SIZE) or chunk_size > MAX_CHUNK_SIZE:
        raise InvalidRequestError(
            f"chunk_size must be an int between {MIN_CHUNK_SIZE} and {MAX_CHUNK_SIZE}, "
            f"got {chunk_size!r}",
            bucket=bucket,
            key=key,
        )
    if not is_int_at_least(prefetch, 1):
        raise InvalidRequestError(
            f"prefetch must be an int >= 1, got {prefetch!r}", bucket=bucket, key=key
        )


class ObjectStream:
    """The bytes ``[start, end)`` of an object, in order: an async iterator, which
    :meth:`~asyncdl.Engine.stream` and :meth:`~asyncdl.Engine.stream_url` return.

    The first request goes out on :meth:`open` (or the first iteration); after it,
    ``size`` (the object's), ``etag`` and ``length`` (the bytes this stream yields)
    are known, so a web handler can send headers, or a 404, before any body.
    Close it (``aclose()``, ``async with``) to release the first answer and cancel
    the prefetch, whether or not anything was read; a stream collected unclosed
    releases its first answer too.

    Once the iteration has ended, ``checksum``, ``verified`` and
    ``unverified_reason`` say whether the bytes were checked against S3's checksum,
    as a download's result does. ``bucket`` and ``key`` name the object (of a URL:
    ``""`` and the URL without its query string).
    """

    # Class-level, so that __del__ finds them on a stream whose __init__ raised.
    _first: Response | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _verifier: StreamVerifier | None = None

    def __init__(
        self,
        ctx: Context,
        bucket: str,
        key: str,
        *,
        start: int,
        end: int | None,
        extra_args: ExtraArgs | None,
        progress: ProgressCallback | None = None,
        chunk_size: int | None = None,
        prefetch: int | None = None,
        url: str | None = None,
    ) -> None:
        self._obj = ctx.object_for(bucket, key, extra_args, url)
        bucket, key = self._obj.bucket, self._obj.key
        chunk_size = ctx.config.chunk_size if chunk_size is None else chunk_size
        prefetch = ctx.config.stream_prefetch if prefetch is None else prefetch
        check_parts(chunk_size, prefetch, bucket=bucket, key=key)
        if not is_int_at_least(start, 0):
            raise InvalidRequestError(
                f"start must be an int >= 0, got {start!r}", bucket=bucket, key=key
            )
        if end is not None and not is_int_at_least(end, start):
            raise InvalidRequestError(
                f"end must be None or an int >= start ({start}), got {end!r}",
                bucket=bucket,
                key=key,
            )
        #: The object's bucket and key (of a URL: ``""`` and the URL without its query).
        self.bucket, self.key = bucket, key
        self._ctx = ctx
        # A whole body of unknown length is read here to its end, as it comes.
        self._obj.unknown_length_ok = True
        self._start, self._end = start, end
        self._chunk_size, self._prefetch = chunk_size, prefetch
        #: The object's size (``None`` until :meth:`open`).
        self.size: int | None = None
        #: The object's ETag, as the first answer gave it (``None`` until :meth:`open`).
        self.etag: str | None = None
        #: How many bytes this stream yields (``None`` until :meth:`open`).
        self.length: int | None = None
        #: The first answer's HTTP headers, lower-case names (empty when no body was
        #: asked for: an empty object, or a range that starts at its end).
        self.headers: Mapping[str, str] = {}
        self._reader: _Reader | None = None  # set by open()
        self._pieces: AsyncGenerator[bytes] | None = None  # set by the first iteration
        self._opening = asyncio.Lock()
        self._closed = False
        self._progress = Reporter(progress)
        self._verifier = StreamVerifier(ctx, self._obj)

    @property
    def checksum(self) -> str | None:
        """S3's checksum, ``"ALGORITHM:base64"`` (``-N`` for COMPOSITE), if one was seen."""
        return self._checker.outcome.checksum

    @property
    def verified(self) -> bool:
        """Whether every byte yielded was checked against S3's checksum."""
        return self._checker.outcome.verified

    @property
    def unverified_reason(self) -> str | None:
        """Why the bytes were not verified (``None`` when they were)."""
        outcome = self._checker.outcome
        if self._obj.close_delimited and not outcome.verified and outcome.reason is not None:
            return UNANNOUNCED_LENGTH
        return outcome.reason

    @property
    def _checker(self) -> StreamVerifier:
        assert self._verifier is not None
        return self._verifier

    async def open(self) -> ObjectStream:
        """Send the first request; raise (``ObjectNotFoundError``...) if it fails."""
        on_its_loop(self._ctx)
        async with self._opening:  # a second caller waits for the first's answer
            if self._closed:
                raise RuntimeError("the stream is closed")
            if self._reader is None:
                try:
                    reader = await self._first_request()
                except Exception as exc:
                    self._release_first()  # an answer that was refused
                    await self._checker.close()
                    if isinstance(exc, DownloadError):
                        raise
                    raise translate(exc, bucket=self.bucket, key=self.key) from exc
                if self._closed:  # by another task, while the request was out
                    self._release_first()
                    await self._checker.close()
                    raise RuntimeError("the stream was closed while it opened")
                self._reader = reader
        return self

    def __aiter__(self) -> ObjectStream:
        return self

    async def __anext__(self) -> bytes:
        on_its_loop(self._ctx)  # its parts fetched ahead are its engine's loop's tasks
        if self._pieces is None:
            if self._closed and self._reader is not None:
                raise StopAsyncIteration
            await self.open()
            assert self._reader is not None
            first, self._first = self._first, None
            # The generator owns ``first`` from its first step, which is the anext()
            # below: nothing is awaited in between, so it cannot be dropped unstarted.
            self._pieces = self._reader(first)
            self._checker.reading()
        try:
            piece = await anext(self._pieces, None)
        except (DownloadError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise translate(exc, bucket=self.bucket, key=self.key) from exc
        if piece is None:
            await self._checker.finish()  # a mismatch raises instead of the normal end
            raise StopAsyncIteration
        try:
            await self._checker.feed(piece)
        except Exception:
            await self.aclose()  # nothing will check the rest: fetch no more of it
            raise
        self._progress.total = self.length or 0
        await self._progress.add(len(piece))
        return piece

    async def aclose(self) -> None:
        """Release the first answer and cancel whatever is in flight; idempotent."""
        self._closed = True
        self._release_first()
        if self._pieces is not None:
            await self._pieces.aclose()
        await self._checker.close()

    async def __aenter__(self) -> ObjectStream:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # Collected while it still owns the first answer (opened, never read nor
        # closed). A finalizer runs wherever the last reference went: in any thread,
        # in the middle of any callback. Closing the body and releasing the engine's
        # semaphore (neither is thread-safe) must happen on the loop: schedule it there.
        if self._verifier is not None:
            self._verifier.drop()
        first, loop = self._first, self._loop
        if first is not None and loop is not None and not loop.is_closed():
            self._first = None
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(first.close)

    def _release_first(self) -> None:
        first, self._first = self._first, None
        if first is not None:
            first.close()

    async def _first_get(self, byte_range: ByteRange) -> Response:
        """The first GET, retried as a download's first request is (a 503, a reset);
        an answer that says the range is past the end is not a failure to retry."""
        ctx, obj, failures = self._ctx, self._obj, 0
        while True:
            try:
                return await obj.get(byte_range, if_match=None)
            except RangeNotSatisfiable:
                raise
            except Exception as exc:
                failures = await after_failure(
                    ctx.config,
                    exc,
                    failures,
                    bucket=obj.bucket,
                    key=obj.key,
                    what="the stream's first GET",
                    counters=ctx.counters,
                )

    async def _first_request(self) -> _Reader:
        """Send the first GET, set ``size``, ``etag`` and ``length``; what reads on."""
        ctx, obj, start, end = self._ctx, self._obj, self._start, self._end
        if end == start:
            self.length = 0
            self._answered(stop=start, held=True)
            return read_nothing
        chunk = self._chunk_size
        first_end = start + chunk if end is None else min(end, start + chunk)
        self._checker.before_first_get(start)
        try:
            first = await self._first_get(ByteRange(start, first_end))
        except RangeNotSatisfiable as refused:
            exc = await with_retries(
                ctx.config,
                partial(obj.sized, refused),
                bucket=obj.bucket,
                key=obj.key,
                what="the stream's size",
                counters=ctx.counters,
            )
            if exc.actual_size is not None and start >= exc.actual_size:
                self._check_start(exc.actual_size)
                self.size, self.etag, self.length = exc.actual_size, exc.etag, 0
                # An empty object, or a range that starts at its end.
                self._answered(stop=start, held=True)
                return read_nothing
            raise
        # Owned from here (no await in between): aclose() or collection releases it.
        self._first, self._loop = first, asyncio.get_running_loop()
        self.headers = first.headers
        if first.status == 200 and first.content_range is None:
            if first.content_length == UNKNOWN_LENGTH:
                return self._read_to_the_end(first)
            # The server ignored Range: the body is the whole object; keep [start, end).
            self.size, self.etag = first.content_length, first.etag
            self._check_start(self.size)
            stop = self.size if end is None else min(end, self.size)
            self.length = stop - start
            self._answered(stop=stop, held=True, checksum=first.checksum)
            if self.length == 0:
                self._release_first()  # no need to read the whole body for nothing
                return read_nothing
            return partial(
                read_slice,
                start=start,
                end=stop,
                bandwidth=ctx.bandwidth,
                read_timeout=ctx.config.read_timeout,
                counters=ctx.counters,
                error=obj.error,
            )
        content_range = first.content_range
        if content_range is None or content_range.start != start:
            raise obj.error(f"asked for bytes from {start}, got Content-Range {content_range}")
        self.size, self.etag = content_range.total, first.etag
        if self.size == 0:
            # "bytes 0-0/0" (s3rver): the empty object; its body is not read.
            self._release_first()
            self.length = 0
            self._answered(stop=0, held=True)
            return read_nothing
        stop = self.size if end is None else min(end, self.size)
        self.length = stop - start
        if first_end < content_range.end < stop:
            raise obj.error(
                f"asked for bytes [{start}, {first_end}), got Content-Range {content_range}"
            )
        if content_range.end > stop:
            # More than was asked (s3rver answers "bytes=0-0" with the whole object):
            # the answer is cut where the stream stops. (One that ends there is read
            # as a part is, below: a cut resumes from its last byte.)
            self._answered(stop=stop, held=True)
            # The body starts at ``start``.
            return partial(
                read_slice,
                start=0,
                end=stop - start,
                bandwidth=ctx.bandwidth,
                read_timeout=ctx.config.read_timeout,
                counters=ctx.counters,
                error=obj.error,
                base=start,
            )
        self._answered(stop=stop, held=stop <= content_range.end)
        if first.etag is None and stop > content_range.end:
            # No ETag pins later parts to this version: the range comes in one GET (a
            # cut then ends the stream rather than resume into another version).
            self._release_first()
            whole = await obj.get(ByteRange(start, stop), if_match=None)
            self._first = whole
            if whole.content_range != ContentRange(start, stop, self.size):
                raise obj.error(
                    f"asked for bytes [{start}, {stop}), got Content-Range {whole.content_range}"
                )
        return partial(
            prefetch_parts, ctx, obj, stop=stop, chunk_size=chunk, prefetch=self._prefetch
        )

    def _read_to_the_end(self, first: Response) -> _Reader:
        """The server ignored Range and sent the whole object without its length: the
        reader keeps ``[start, end)`` of it, and learns the size at its end."""
        start, end = self._start, self._end
        self.etag = first.etag
        whole = start == 0 and end is None
        # The verifier needs [start, stop) of a size; for the whole object of a size not
        # yet known, one that says "all of it" (it is not shown).
        self._checker.answered(
            start=start,
            stop=UNKNOWN_LENGTH if end is None else end,
            size=UNKNOWN_LENGTH if whole else None,
            etag=self.etag,
            held=True,
            checksum=first.checksum,
        )
        return partial(
            read_slice,
            start=start,
            end=end,
            bandwidth=self._ctx.bandwidth,
            read_timeout=self._ctx.config.read_timeout,
            counters=self._ctx.counters,
            error=self._obj.error,
            ended=self._ended,
        )

    def _ended(self, size: int) -> None:
        """The body of unknown length has ended: the object is ``size`` bytes."""
        self._check_start(size)
        self.size = size
        self.length = (size if self._end is None else min(self._end, size)) - self._start

    def _answered(self, *, stop: int, held: bool, checksum: ExpectedChecksum | None = None) -> None:
        self._checker.answered(
            start=self._start,
            stop=stop,
            size=self.size,
            etag=self.etag,
            held=held,
            checksum=checksum,
        )

    def _check_start(self, size: int) -> None:
        if self._start > size:
            raise self._obj.error(
                f"start {self._start} is past the end of the {size}-byte object",
                InvalidRequestError,
            ) from None
