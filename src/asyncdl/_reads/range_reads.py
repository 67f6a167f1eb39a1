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
one answer is one version; when that GET would read and drop more than
``UNPINNED_EXTRA_CHUNKS`` chunks between the ranges, ``DownloadError`` instead. A
server that ignores Range answers the first GET with the whole object: every range
is cut from that body as it passes, and it is read only as far as the last range
ends, then closed (of a body of unknown length too: it is never spooled to learn its
size; one that ends before the ranges do says the size, and the ranges past it are
refused). An answer longer than asked (a 206 past the piece) is read only as far as
the piece.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence
from typing import Any

from .._transfer.context import Context
from .._transfer.parts import Fetch, Part, fetch_part, fetch_ranges
from .._transfer.transfer import first_failure
from .._transfer.verify import Verifier
from .._wire.adaptive import own_slots
from .._wire.ranges import ByteRange, LastBytes
from .._wire.request_args import ExtraArgs, check_size_and_etag
from .._wire.retry import with_retries
from .._wire.s3_source import UNKNOWN_LENGTH, RangeNotSatisfiable, Response, S3Object
from ..errors import DownloadError, InvalidRequestError, ObjectChangedError, translate
from ..progress import Reporter
from .range_plan import (
    DEFAULT_MAX_GAP,
    MAX_OFFSET,
    Span,
    check_ranges,
    check_tuning,
    check_within,
    coalesce,
)

#: Without a strong ETag, the most bytes between the ranges (in chunks) that the one
#: unpinned GET bringing them all may read and drop.
UNPINNED_EXTRA_CHUNKS = 8


class SpanSink:
    """Where the GETs of some spans write: the pieces of each span as they come, each
    range cut from them copied once (no buffer zeroed first, no span joined whole to be
    sliced again); bytes that fall in no span (a whole-object answer's, between the
    ranges) are dropped as they pass."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = list(spans)
        self._starts = [span.start for span in self.spans]
        #: Per span, its pieces ``(offset, bytes)`` in the order they were written.
        self._pieces: list[list[tuple[int, bytes | memoryview]]] = [[] for _ in self.spans]
        #: Per span once cut: its pieces in offset order with their offsets, when they
        #: tile it; else (a GET started again over bytes already written) the span laid
        #: over once, as one piece.
        self._tiled: dict[int, tuple[list[int], list[bytes | memoryview]]] = {}

    async def write_chunks(self, offset: int, chunks: list[bytes], crc: Any, previous: Any) -> Any:
        for chunk in chunks:
            self.put(offset, chunk)
            offset += len(chunk)
        return previous

    def put(self, offset: int, chunk: bytes) -> None:
        end = offset + len(chunk)
        index = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        for span, pieces in zip(self.spans[index:], self._pieces[index:], strict=True):
            if span.start >= end:
                break
            low, high = max(span.start, offset), min(span.end, end)
            if low < high:
                whole = low == offset and high == end
                pieces.append(
                    (low, chunk if whole else memoryview(chunk)[low - offset : high - offset])
                )

    def holds(self, start: int, end: int) -> bool:
        """Whether one span holds all of ``[start, end)``."""
        index = bisect.bisect_right(self._starts, start) - 1
        return index >= 0 and end <= self.spans[index].end

    def cut(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``, which one span holds, copied once from its pieces."""
        if start == end:
            return b""
        views = self.views(start, end)
        if len(views) == 1:  # within one piece: the piece itself, or a slice of it
            piece = views[0].obj
            if isinstance(piece, bytes) and len(piece) == len(views[0]) == end - start:
                return piece
        return b"".join(views)

    def views(self, start: int, end: int) -> list[memoryview]:
        """Views of the pieces that hold ``[start, end)`` (which one span holds), in
        order, nothing copied: for a caller that joins them with other bytes once."""
        if start == end:
            return []
        index = bisect.bisect_right(self._starts, start) - 1
        tiled = self._tiled.get(index)
        if tiled is None:
            tiled = self._tiled[index] = _tile(self.spans[index], self._pieces[index])
            self._pieces[index] = []
        offsets, pieces = tiled
        first = bisect.bisect_right(offsets, start) - 1
        last = bisect.bisect_left(offsets, end, lo=first)
        return [
            memoryview(pieces[i])[max(start - offsets[i], 0) : end - offsets[i]]
            for i in range(first, last)
        ]


def _tile(
    span: Span, pieces: list[tuple[int, bytes | memoryview]]
) -> tuple[list[int], list[bytes | memoryview]]:
    """A span's pieces in offset order, with their offsets, when they tile it; when a
    GET started again (pieces over one another), the span laid over once in the order
    written (a later write wins, as it would in a file), as one piece."""
    ordered = sorted(pieces, key=lambda piece: piece[0])
    at = span.start
    for offset, piece in ordered:
        if offset != at:
            break
        at += len(piece)
    else:
        if at == span.end:
            return [offset for offset, _ in ordered], [piece for _, piece in ordered]
    buffer = bytearray(span.end - span.start)
    for offset, piece in pieces:
        buffer[offset - span.start : offset - span.start + len(piece)] = piece
    return [span.start], [bytes(buffer)]


async def read_ranges(
    ctx: Context,
    bucket: str,
    key: str,
    ranges: object,
    *,
    extra_args: ExtraArgs | None,
    size: object,
    etag: object,
    max_gap: int | None,
    max_request: int | None,
    url: str | None = None,
) -> list[bytes]:
    """The bytes of each ``(start, end)`` of ``ranges``, in the caller's order."""
    obj = ctx.object_for(bucket, key, extra_args, url)
    # A whole answer of unknown length is read only as far as the ranges go, never
    # spooled to learn its size (see ``fetch_spans``).
    obj.unknown_length_ok = True
    known_size, known_etag = check_size_and_etag(
        size, etag, bucket=obj.bucket, key=obj.key, pins=True
    )
    return await read_object_ranges(
        ctx, obj, ranges, size=known_size, etag=known_etag, max_gap=max_gap, max_request=max_request
    )


async def read_object_ranges(
    ctx: Context,
    obj: S3Object,
    ranges: object,
    *,
    size: int | None,
    etag: str | None,
    max_gap: int | None,
    max_request: int | None,
    cached: Callable[[int, int], bytes | None] | None = None,
) -> list[bytes]:
    """:func:`read_ranges` of an object already checked; ``cached(start, end)``: bytes
    the caller holds already (``None`` for those it has not), which no GET then asks
    for."""
    where = {"bucket": obj.bucket, "key": obj.key}
    asked = check_ranges(ranges, **where)
    gap = DEFAULT_MAX_GAP if max_gap is None else max_gap
    most = ctx.config.chunk_size if max_request is None else max_request
    check_tuning(gap, most, chunk_size=ctx.config.chunk_size, **where)
    if size is not None:
        check_within(asked, size, **where)
    found = [
        b"" if start == end else None if cached is None else cached(start, end)
        for start, end in asked
    ]
    missing = [pair for got, pair in zip(found, asked, strict=True) if got is None]
    spans = coalesce(missing, max_gap=gap, max_request=most)
    if not spans:
        return [got or b"" for got in found]  # nothing to send: every range is known
    with own_slots():
        try:
            sink = await fetch_spans(ctx, obj, missing, spans, most, size=size, etag=etag)
        except DownloadError:
            raise
        except Exception as exc:
            raise translate(exc, bucket=obj.bucket, key=obj.key) from exc
    return [sink.cut(*pair) if got is None else got for got, pair in zip(found, asked, strict=True)]


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
            if size != UNKNOWN_LENGTH:
                check_within(asked, size, bucket=obj.bucket, key=obj.key)
        pieces = [piece for span in spans for piece in span.pieces(max_request)]
        sink = SpanSink(spans)
        fetch = Fetch(ctx, obj, sink, etag, size, Verifier("off", None), Reporter(None))
        if first is not None:
            opened, first = first, None
            if opened.content_range is None:  # the whole object: every range is in it
                # Read only as far as the last range ends; of a body of unknown length
                # that ends first, the part ends where it did: the object's size.
                part = Part(spans[0].start, spans[-1].end, prefix=True)
                await fetch_part(fetch, part, opened)
                if part.end < spans[-1].end:
                    check_within(asked, part.end, bucket=obj.bucket, key=obj.key)
                return sink
            if etag is None and len(pieces) > 1:
                # Nothing pins the other GETs to the first answer's version: one GET
                # for all of it instead (see the module's docstring).
                opened.close()
                _check_unpinned(obj, spans, ctx.config.chunk_size)
                await fetch_part(fetch, Part(spans[0].start, spans[-1].end), None)
                return sink
            rest = [(p.start, p.end) for p in pieces[1:]]
            async with asyncio.TaskGroup() as tasks:
                # The other GETs go out while the first answer's body is read, here in
                # this task, which owns it from the first step (a task not yet started
                # when cancelled would never close it).
                if rest:
                    tasks.create_task(fetch_ranges(fetch, None, 0, 0, rest))
                # Cut where the piece ends: an answer longer than asked is not read on.
                first_part = Part(pieces[0].start, pieces[0].end, prefix=True)
                await fetch_part(fetch, first_part, opened)
            return sink
        await fetch_ranges(fetch, None, 0, 0, [(p.start, p.end) for p in pieces])
        return sink
    except BaseExceptionGroup as group:
        failure = first_failure(group)
        raise failure from failure.__cause__
    finally:
        if first is not None:
            first.close()


def _check_unpinned(obj: S3Object, spans: Sequence[Span], chunk_size: int) -> None:
    """``DownloadError`` rather than one unpinned GET that would read and drop more
    than ``UNPINNED_EXTRA_CHUNKS`` chunks between the ranges."""
    across = spans[-1].end - spans[0].start
    extra = across - sum(span.end - span.start for span in spans)
    most = UNPINNED_EXTRA_CHUNKS * chunk_size
    if extra > most:
        raise obj.error(
            f"the server sends no strong ETag: these ranges could come from one version "
            f"only in one GET of {across} bytes, reading and dropping {extra} between "
            f"them, more than {UNPINNED_EXTRA_CHUNKS} chunks ({most}); ask for nearer "
            f"ranges, or download the object"
        )


async def first_get(
    ctx: Context,
    obj: S3Object,
    piece: ByteRange | LastBytes,
    *,
    size: int | None,
    etag: str | None,
) -> tuple[Response | None, int, str | None]:
    """The first GET, retried as a stream's is: its answer, the object's size and the
    ETag the others are pinned to (``etag`` itself when the caller gave one); the size
    is ``UNKNOWN_LENGTH`` for a whole answer that says none (a chunked 200). A 416
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
        refused = answer
        answer = await with_retries(
            ctx.config,
            lambda: obj.sized(refused, if_match=etag),
            bucket=obj.bucket,
            key=obj.key,
            what="the object's size",
            counters=ctx.counters,
        )
        found, response = answer.actual_size, None
        start = piece.start if isinstance(piece, ByteRange) else 0
        if found is None:
            where = f"bytes from {start}" if isinstance(piece, ByteRange) else "any byte"
            raise obj.error(
                f"the server says {where} are past the end (HTTP 416)", InvalidRequestError
            )
        if isinstance(piece, LastBytes) and 0 < found < piece.length:
            # A suffix longer than the object is the whole object (RFC 9110 §14.1.3);
            # rclone refuses it: those bytes are asked again by their offsets, pinned
            # to the version whose size was just learnt.
            whole, pin = ByteRange(0, found), etag or answer.etag
            response = await with_retries(
                ctx.config,
                lambda: obj.get(whole, if_match=pin),
                bucket=obj.bucket,
                key=obj.key,
                what="the first GET",
                counters=ctx.counters,
            )
            found = _size_in(obj, response, whole)
        elif found > start:  # a 416 for bytes it says it has: nothing it says can be trusted
            raise obj.error(
                f"the server refused {piece.header()} (HTTP 416) of an object it says is "
                f"{found} bytes"
            )
    else:
        response = answer
        found = _size_in(obj, response, piece)
    if found > MAX_OFFSET:
        if response is not None:
            response.close()
        raise obj.error(f"the server says the object is {found} bytes, more than any can be")
    if size is not None and found not in (size, UNKNOWN_LENGTH):
        if response is not None:
            response.close()
        raise obj.error(f"object is {found} bytes, not the {size} given", ObjectChangedError)
    return response, found, etag or (response.etag if response is not None else None)


def _size_in(obj: S3Object, answer: Response, piece: ByteRange | LastBytes) -> int:
    """The object's size, as the first answer says it; an answer from another offset
    than ``piece``, or short of it before the object's end, is closed and an error."""
    content_range = answer.content_range
    if answer.status == 200 and content_range is None:
        return answer.content_length  # the server ignored Range: the whole object
    if isinstance(piece, LastBytes):
        if answer.status == 206 and content_range is not None:
            # Its size, whatever bytes it sent: a server may misread a suffix range
            # (s3rver sends bytes 0 to N); the caller checks which bytes came.
            return content_range.total
        answer.close()
        raise obj.error(
            f"asked for the last {piece.length} bytes, got HTTP {answer.status} "
            f"with Content-Range {content_range}"
        )
    if (
        answer.status == 206
        and content_range is not None
        and content_range.start == piece.start
        # Short of the piece only where the object ends; longer is cut where the piece
        # ends, unread (s3rver answers "bytes=0-0" with the whole object, as streams
        # found).
        and (content_range.end >= piece.end or content_range.end == content_range.total)
    ):
        return content_range.total
    answer.close()
    raise obj.error(
        f"asked for bytes [{piece.start}, {piece.end}), got HTTP {answer.status} "
        f"with Content-Range {content_range}"
    )
