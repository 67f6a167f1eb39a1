"""Planning the GETs of many byte ranges of one object: the caller's ranges checked,
then joined into as few requests as make sense. Pure: no I/O, tested without a server.

Two ranges share one GET when the bytes between them (the gap, read and dropped)
cost less than another request would: ``max_gap``. A GET joins ranges only up to
``max_request`` bytes, so one request never holds a slot for the bytes of many;
overlapping or touching ranges are always joined (their bytes are fetched once),
and a span longer than ``max_request`` is cut into consecutive pieces, as a
download cuts an object into its parts, so a large range is fetched in parallel.

The defaults were measured through the test proxy with 10 ms of latency each way
(``benchmarks`` has the numbers, the guide *Random access* the table): a request
costs about one round trip, 21 ms, and moto's loopback link carries 1 MiB in about
4 ms, so bytes are cheaper to read and drop than another GET up to a few MiB
apart. S3 carries about 90 MB/s per connection with 20-50 ms to the first byte:
1 MiB of gap is the point where the two are even there, and it is obstore's
default too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from .config import KiB, MiB, is_int_at_least
from .errors import InvalidRequestError
from .ranges import ByteRange, plan_ranges

#: Bytes between two ranges that one GET reads and drops rather than send another
#: request for them (see the module's docstring for the measurement).
DEFAULT_MAX_GAP = 1 * MiB
#: The smallest ``max_request`` taken: below it, requests cost more than they save.
MIN_REQUEST = 4 * KiB


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes ``[start, end)`` that one or more GETs fetch for the ranges inside it."""

    start: int
    end: int

    def pieces(self, max_request: int) -> Iterator[ByteRange]:
        """The GETs of this span: consecutive pieces of at most ``max_request`` bytes."""
        return plan_ranges(self.end, max_request, self.start)


def check_ranges(ranges: object, *, bucket: str, key: str) -> list[tuple[int, int]]:
    """The caller's ``(start, end)`` pairs, half-open, as a list; anything else (a
    negative or reversed bound, a bool, a float, a string, a pair of three) raises
    :class:`InvalidRequestError` before anything is sent."""
    if isinstance(ranges, str | bytes | bytearray | memoryview) or not isinstance(ranges, Iterable):
        raise InvalidRequestError(
            f"ranges must be an iterable of (start, end) pairs, got {type(ranges).__name__}",
            bucket=bucket,
            key=key,
        )
    checked: list[tuple[int, int]] = []
    for index, pair in enumerate(ranges):
        if not isinstance(pair, Sequence) or isinstance(pair, str | bytes) or len(pair) != 2:
            raise InvalidRequestError(
                f"ranges[{index}] must be a (start, end) pair, got {pair!r:.80}",
                bucket=bucket,
                key=key,
            )
        start, end = pair
        if not is_int_at_least(start, 0) or not is_int_at_least(end, start):
            raise InvalidRequestError(
                f"ranges[{index}] must be ints with 0 <= start <= end, got {pair!r:.80}",
                bucket=bucket,
                key=key,
            )
        checked.append((start, end))
    return checked


def check_within(ranges: Iterable[tuple[int, int]], size: int, *, bucket: str, key: str) -> None:
    """:class:`InvalidRequestError` for the first range that runs past the end of an
    object of ``size`` bytes (an empty range may sit at the end itself)."""
    for index, (start, end) in enumerate(ranges):
        if end > size:
            raise InvalidRequestError(
                f"ranges[{index}] = ({start}, {end}) runs past the end of the {size}-byte object",
                bucket=bucket,
                key=key,
            )


def check_tuning(max_gap: int, max_request: int, *, chunk_size: int, bucket: str, key: str) -> None:
    """``max_gap`` >= 0; ``max_request`` between ``MIN_REQUEST`` and ``chunk_size`` (a
    larger GET would be cut into ``chunk_size`` parts anyway)."""
    if not is_int_at_least(max_gap, 0):
        raise InvalidRequestError(
            f"max_gap must be an int >= 0, got {max_gap!r}", bucket=bucket, key=key
        )
    if not is_int_at_least(max_request, MIN_REQUEST) or max_request > chunk_size:
        raise InvalidRequestError(
            f"max_request must be an int between {MIN_REQUEST} and the chunk_size "
            f"{chunk_size}, got {max_request!r}",
            bucket=bucket,
            key=key,
        )


def coalesce(ranges: Iterable[tuple[int, int]], *, max_gap: int, max_request: int) -> list[Span]:
    """The spans that cover every non-empty range, sorted and apart: ranges that
    overlap or touch are one span; ranges at most ``max_gap`` apart are one span while
    it stays within ``max_request`` bytes. A span may still be longer than
    ``max_request`` (one long range, or overlapping ones): :meth:`Span.pieces` cuts it."""
    spans: list[Span] = []
    start = end = -1
    for low, high in sorted((s, e) for s, e in ranges if e > s):
        if start >= 0 and (low <= end or (low - end <= max_gap and high - start <= max_request)):
            end = max(end, high)
            continue
        if start >= 0:
            spans.append(Span(start, end))
        start, end = low, high
    if start >= 0:
        spans.append(Span(start, end))
    return spans
