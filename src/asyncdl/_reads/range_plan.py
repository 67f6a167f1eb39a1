"""Planning the GETs of many byte ranges of one object: the caller's ranges checked,
then joined into as few requests as make sense. Pure: no I/O, tested without a server.

Two ranges share one GET when the bytes between them (the gap, read and dropped)
cost less than another request would: ``max_gap``. A GET joins ranges only up to
``max_request`` bytes, so one request never holds a slot for the bytes of many;
overlapping or touching ranges are always joined (their bytes are fetched once),
and a span longer than ``max_request`` is cut into consecutive pieces, as a
download cuts an object into its parts, so a large range is fetched in parallel.

``max_gap``'s default was measured here, through the test proxy with 20 ms added
per request (10 ms each way) and each connection capped at 90 MB/s, about what one
S3 connection carries (moto, a 32 MiB object, medians of 5, of 3 for the fifty
ranges, two runs): two 64 KiB ranges
1 MiB apart took 58 ms in one GET and 89 ms in two (the second waits for the
first's ETag), 2 MiB apart 75 ms against 89, 4 MiB apart 99 ms against 88; fifty
random 64 KiB ranges took 1017 ms in 42 GETs with no joining, 553 ms (22 GETs)
at 256 KiB, 344-475 ms (10 GETs) at 1 MiB, 306-378 ms (4 GETs) at 2-4 MiB. Past
about 2 MiB a join costs more than the request it saves; 1 MiB keeps the bytes
read and dropped to half of that (obstore's default is 1 MiB too).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._wire.ranges import ByteRange, plan_ranges
from ..config import KiB, MiB, is_int_at_least
from ..errors import InvalidRequestError

#: Bytes between two ranges that one GET reads and drops rather than send another
#: request for them (see the module's docstring for the measurement).
DEFAULT_MAX_GAP = 1 * MiB
#: Offsets beyond this are refused: no store holds such an object (S3's largest is
#: 5 TiB), and a bigger number is not even a valid ``Range`` header for most servers.
MAX_OFFSET = 2**63 - 1
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
    """The caller's ``(start, end)`` pairs, half-open, as a list of ints (numpy's ints
    too: offsets often come in arrays); anything else (a negative or reversed bound, a
    bool, a float, a string, a pair of three, a ``range``, whose two items are not its
    bounds) raises :class:`InvalidRequestError` before anything is sent."""
    if isinstance(ranges, str | bytes | bytearray | memoryview) or not isinstance(ranges, Iterable):
        raise InvalidRequestError(
            f"ranges must be an iterable of (start, end) pairs, got {type(ranges).__name__}",
            bucket=bucket,
            key=key,
        )
    checked: list[tuple[int, int]] = []
    for index, pair in enumerate(ranges):
        if (
            not isinstance(pair, Sequence)
            or isinstance(pair, str | bytes | range)
            or len(pair) != 2
        ):
            raise InvalidRequestError(
                f"ranges[{index}] must be a (start, end) pair, got {_shown(pair)}",
                bucket=bucket,
                key=key,
            )
        start, end = (as_offset(bound) for bound in pair)
        if not is_int_at_least(start, 0) or not is_int_at_least(end, start) or end > MAX_OFFSET:
            raise InvalidRequestError(
                f"ranges[{index}] must be ints with 0 <= start <= end <= 2**63 - 1, "
                f"got {_shown(pair)}",
                bucket=bucket,
                key=key,
            )
        checked.append((start, end))
    return checked


def as_offset(value: Any) -> Any:
    """An int-like bound (``numpy.int64``) as an int; anything else as it is, for the
    caller's check to refuse (a bool stays a bool: ``True`` is a bug, not 1)."""
    if isinstance(value, int):
        return value
    try:
        return operator.index(value)
    except TypeError:
        return value


def _shown(value: object) -> str:
    """A caller's value for a message, cut short; an int of thousands of digits has no
    repr (Python refuses to convert it) and is not worth printing anyway."""
    try:
        text = repr(value)
    except ValueError:
        return "a number too large to show"
    return text if len(text) <= 80 else text[:77] + "..."


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
