"""Many byte ranges of one object, into memory, all from one version of it.

The ranges are joined into few GETs (``range_plan``). Unless the caller gave both
size and ETag, the first GET (the lowest span's first piece, a ranged GET: never a
HEAD) brings them, from its ``Content-Range`` and ``ETag``; ranges past the end are
refused then, before any other GET is sent. Every other GET is pinned with
``IfMatch`` to that ETag and fetched as a download's parts are (``parts``: the
budget, retries that resume, ``Content-Range`` checked against the size), into
one buffer per span (:class:`SpanSink`), so a change of the object mid-way is
``ObjectChangedError``, never a mixture of versions.

An answer with no strong ETag (none, or a weak ``W/"..."``, which ``If-Match``
never matches) pins nothing. Then, as a stream does, the first answer is dropped
when more than it is needed, and one unpinned GET from the first span's start to
the last one's end brings every range, its bytes between them read and dropped:
one answer is one version. A server that ignores Range answers the first GET
with the whole object: every range is cut from that body as it passes.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence
from typing import Any

from .adaptive import own_slots
from .context import Context
from .errors import DownloadError, InvalidRequestError, ObjectChangedError, translate
from .parts import Fetch, Part, fetch_part, fetch_ranges
from .progress import Reporter
from .range_plan import (
    DEFAULT_MAX_GAP,
    Span,
    check_ranges,
    check_tuning,
    check_within,
    coalesce,
)
from .ranges import ByteRange
from .request_args import ExtraArgs, check_size_and_etag
from .retry import with_retries
from .s3_source import RangeNotSatisfiable, Response, S3Object
from .transfer import first_failure
from .verify import Verifier


class SpanSink:
    """Where the GETs of some spans write: one buffer per span; bytes that fall in no
    span (a whole-object answer's, between the ranges) are dropped as they pass."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = list(spans)
        self._starts = [span.start for span in self.spans]
        self.buffers = [bytearray(span.end - span.start) for span in self.spans]

    async def write_chunks(self, offset: int, chunks: list[bytes], crc: Any, previous: Any) -> Any:
        for chunk in chunks:
            self.put(offset, chunk)
            offset += len(chunk)
        return previous

    def put(self, offset: int, chunk: bytes) -> None:
        end = offset + len(chunk)
        index = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        view = memoryview(chunk)
        for span, buffer in zip(self.spans[index:], self.buffers[index:], strict=True):
            if span.start >= end:
                break
            low, high = max(span.start, offset), min(span.end, end)
            if low < high:
                buffer[low - span.start : high - span.start] = view[low - offset : high - offset]

    def cut(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``, which one span holds."""
        if start == end:
            return b""
        index = bisect.bisect_right(self._starts, start) - 1
        span = self.spans[index]
        return bytes(self.buffers[index][start - span.start : end - span.start])


async def read_ranges(
    ctx: Context,
    bucket: str,
    key: str,
    ranges: object,
    *,
    extra_args: ExtraArgs | None,
    size: int | None,
    etag: str | None,
    max_gap: int | None,
    max_request: int | None,
    url: str | None = None,
) -> list[bytes]:
    """The bytes of each ``(start, end)`` of ``ranges``, in the caller's order."""
    obj = ctx.object_for(bucket, key, extra_args, url)
    bucket, key = obj.bucket, obj.key
    where = {"bucket": bucket, "key": key}
    asked = check_ranges(ranges, **where)
    gap = DEFAULT_MAX_GAP if max_gap is None else max_gap
    most = ctx.config.chunk_size if max_request is None else max_request
    check_tuning(gap, most, chunk_size=ctx.config.chunk_size, **where)
    size, etag = check_size_and_etag(size, etag, **where)
    if size is not None:
        check_within(asked, size, **where)
    spans = coalesce(asked, max_gap=gap, max_request=most)
    if not spans:
        return [b""] * len(asked)  # only empty ranges: nothing to send
    with own_slots():
        try:
            sink = await fetch_spans(ctx, obj, asked, spans, most, size=size, etag=etag)
        except DownloadError:
            raise
        except Exception as exc:
            raise translate(exc, bucket=bucket, key=key) from exc
    return [sink.cut(start, end) for start, end in asked]


async def fetch_spans(
    ctx: Context,
    obj: S3Object,
    asked: Sequence[tuple[int, int]],
    spans: Sequence[Span],
    max_request: int,
    *,
    size: int | None,
    etag: str | None,
) -> SpanSink:
    """Fetch every span (in pieces of at most ``max_request``) into a :class:`SpanSink`,
    pinned to one version; ``size``/``etag``: what is known before the first GET."""
    first: Response | None = None
    try:
        if size is None or etag is None:
            # Only the first piece is planned before the size is known: a hostile
            # range of 2**62 bytes must not be cut into pieces before it is refused.
            piece = next(spans[0].pieces(max_request))
            first, size, etag = await first_get(ctx, obj, piece, size=size, etag=etag)
            check_within(asked, size, bucket=obj.bucket, key=obj.key)
        pieces = [piece for span in spans for piece in span.pieces(max_request)]
        sink = SpanSink(spans)
        fetch = Fetch(ctx, obj, sink, etag, size, Verifier("off", None), Reporter(None))
        if first is not None:
            opened, first = first, None
            if opened.content_range is None:  # the whole object: every range is in it
                await fetch_part(fetch, Part(0, size), opened)
                return sink
            if etag is None and len(pieces) > 1:
                # Nothing pins the other GETs to the first answer's version: one GET
                # for all of it instead (see the module's docstring).
                opened.close()
                await fetch_part(fetch, Part(spans[0].start, spans[-1].end), None)
                return sink
            rest = [(p.start, p.end) for p in pieces[1:]]
            async with asyncio.TaskGroup() as tasks:
                # The other GETs go out while the first answer's body is read, here in
                # this task, which owns it from the first step (a task not yet started
                # when cancelled would never close it).
                if rest:
                    tasks.create_task(fetch_ranges(fetch, None, 0, 0, rest))
                await fetch_part(fetch, Part(pieces[0].start, answered_end(opened)), opened)
            return sink
        await fetch_ranges(fetch, None, 0, 0, [(p.start, p.end) for p in pieces])
        return sink
    except BaseExceptionGroup as group:
        failure = first_failure(group)
        raise failure from failure.__cause__
    finally:
        if first is not None:
            first.close()


async def first_get(
    ctx: Context, obj: S3Object, piece: ByteRange, *, size: int | None, etag: str | None
) -> tuple[Response | None, int, str | None]:
    """The first GET, retried as a stream's is: its answer, the object's size and the
    ETag the others are pinned to (``etag`` itself when the caller gave one). A 416
    that names the object's size is that size, with no answer: ``piece`` starts at or
    past the end, which the caller's check of its ranges then says."""

    async def attempt() -> Response | RangeNotSatisfiable:
        try:
            return await obj.get(piece, if_match=etag)
        except RangeNotSatisfiable as exc:  # an answer, not a failure to retry
            return exc

    answer = await with_retries(
        ctx.config,
        attempt,
        bucket=obj.bucket,
        key=obj.key,
        what="the first GET",
        counters=ctx.counters,
    )
    if isinstance(answer, RangeNotSatisfiable):
        if answer.actual_size is None:
            raise obj.error(
                f"the server says bytes from {piece.start} are past the end (HTTP 416)",
                InvalidRequestError,
            )
        found, response = answer.actual_size, None
    else:
        response = answer
        found = _size_in(obj, response, piece)
    if size is not None and found != size:
        if response is not None:
            response.close()
        raise obj.error(f"object is {found} bytes, not the {size} given", ObjectChangedError)
    return response, found, etag or (response.etag if response is not None else None)


def answered_end(answer: Response) -> int:
    """Where a ranged answer's body ends (past the piece asked for, when the server sent
    more: the sink drops what no span wants)."""
    assert answer.content_range is not None
    return answer.content_range.end


def _size_in(obj: S3Object, answer: Response, piece: ByteRange) -> int:
    """The object's size, as the first answer says it; an answer from another offset
    than ``piece``, or short of it before the object's end, is closed and an error."""
    content_range = answer.content_range
    if answer.status == 200 and content_range is None:
        return answer.content_length  # the server ignored Range: the whole object
    if (
        answer.status == 206
        and content_range is not None
        and content_range.start == piece.start
        # Short of the piece only where the object ends; longer is read and cut
        # (s3rver answers "bytes=0-0" with the whole object, as streams found).
        and (content_range.end >= piece.end or content_range.end == content_range.total)
    ):
        return content_range.total
    answer.close()
    raise obj.error(
        f"asked for bytes [{piece.start}, {piece.end}), got HTTP {answer.status} "
        f"with Content-Range {content_range}"
    )
