"""Byte ranges: planning, the HTTP ``Range`` header and strict ``Content-Range`` parsing.

In code a range is half-open, ``[start, end)``. HTTP's inclusive form exists only
in :meth:`ByteRange.header` and :func:`parse_content_range`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import scrubbed


# Not frozen, as nothing changes them: a ByteRange and a ContentRange are made per
# request, and a frozen dataclass pays an object.__setattr__ per field on creation.
@dataclass(slots=True)
class ByteRange:
    """A non-empty half-open byte range ``[start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"invalid byte range [{self.start}, {self.end})")

    @property
    def length(self) -> int:
        return self.end - self.start

    def header(self) -> str:
        """The HTTP ``Range`` header value (inclusive end)."""
        return f"bytes={self.start}-{self.end - 1}"


@dataclass(frozen=True, slots=True)
class LastBytes:
    """The last ``length`` bytes of an object whose size is not known yet (HTTP's
    suffix range, ``bytes=-N``): the whole object when it is shorter."""

    length: int

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"invalid suffix length {self.length}")

    def header(self) -> str:
        """The HTTP ``Range`` header value."""
        return f"bytes=-{self.length}"


def plan_ranges(size: int, chunk_size: int, start: int = 0) -> Iterator[ByteRange]:
    """Split ``[start, size)`` into consecutive ranges of at most ``chunk_size`` bytes.

    A generator, so a many-terabyte object costs no memory to plan.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    if not 0 <= start <= size:
        raise ValueError(f"start {start} is outside [0, {size}]")
    for offset in range(start, size, chunk_size):
        yield ByteRange(offset, min(offset + chunk_size, size))


@dataclass(slots=True)  # not frozen: see ByteRange
class ContentRange:
    """A parsed ``Content-Range: bytes first-last/total``, as half-open ``[start, end)``."""

    start: int
    end: int
    total: int


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)", re.ASCII)

#: The most bytes a file can hold (an ``off_t``'s largest value). An object claimed
#: larger is no object this machine could write: its claim is refused by name, not
#: left to fail as an ``OverflowError`` where the size meets the file system. S3's
#: own limit (5 TiB) is not enforced: other stores allow more.
LARGEST_SIZE = 2**63 - 1


def parse_content_range(value: str) -> ContentRange:
    """Parse a ``Content-Range`` header strictly.

    Unknown totals (``*``), unsatisfied-range forms, reversed ranges, ranges that
    run past the total and totals beyond ``LARGEST_SIZE`` are all errors: each
    means the server answered something other than what the engine can safely
    write. The error quotes the value scrubbed and short: a peer that echoes the
    request puts a presigned query there.
    """
    match = _CONTENT_RANGE.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"malformed Content-Range {scrubbed(value, 100)!r}")
    try:
        first, last, total = (int(group) for group in match.groups())
    except ValueError:  # more digits than int() reads: far beyond any size
        total = LARGEST_SIZE + 1
    if total > LARGEST_SIZE:
        raise ValueError(
            f"Content-Range {scrubbed(value, 100)!r}: an object of more than any file "
            f"can hold ({LARGEST_SIZE} bytes)"
        )
    if total == 0 and first == last == 0:
        # "bytes 0-0/0": a server's way of saying the object is empty (RFC 9110 has no
        # form for it); unambiguous, so it is the empty range of an empty object.
        return ContentRange(start=0, end=0, total=0)
    if first > last or last >= total:
        raise ValueError(f"inconsistent Content-Range {scrubbed(value, 100)!r}")
    return ContentRange(start=first, end=last + 1, total=total)


def answers_exactly(asked: ByteRange | LastBytes, got: ContentRange) -> bool:
    """Whether ``got`` names exactly the bytes ``asked`` is for in an object of
    ``got.total`` bytes: from its start to its end, or to the object's end where that
    comes first. A ``200`` that says so is that range (``rclone serve s3`` answers
    ranges with ``200``); anything else from a ``200`` is not."""
    if got.total == 0:
        return False  # "bytes 0-0/0" names no byte: the empty object, said otherwise
    if isinstance(asked, LastBytes):
        return got.end == got.total and got.start == max(0, got.total - asked.length)
    return got.start == asked.start and got.end == min(asked.end, got.total)
