"""Range planning and Content-Range parsing: pure, no server."""

from __future__ import annotations

import pytest

from asyncdl._wire.ranges import (
    ByteRange,
    ContentRange,
    LastBytes,
    answers_exactly,
    parse_content_range,
    plan_ranges,
)


@pytest.mark.parametrize(
    ("size", "chunk", "start", "expected"),
    [
        (0, 10, 0, []),
        (1, 10, 0, [(0, 1)]),
        (10, 10, 0, [(0, 10)]),
        (11, 10, 0, [(0, 10), (10, 11)]),
        (27, 10, 0, [(0, 10), (10, 20), (20, 27)]),
        (27, 10, 10, [(10, 20), (20, 27)]),
        (27, 10, 27, []),
        (27, 10, 5, [(5, 15), (15, 25), (25, 27)]),
    ],
)
def test_plan_ranges(size: int, chunk: int, start: int, expected: list[tuple[int, int]]) -> None:
    assert [(r.start, r.end) for r in plan_ranges(size, chunk, start)] == expected


def test_plan_ranges_covers_every_byte_once() -> None:
    for size in range(0, 300):
        for chunk in (1, 7, 64, 299, 1000):
            ranges = list(plan_ranges(size, chunk))
            covered = [b for r in ranges for b in range(r.start, r.end)]
            assert covered == list(range(size))
            assert all(0 < r.length <= chunk for r in ranges)


def test_plan_ranges_is_lazy() -> None:
    ranges = plan_ranges(5 * 1024**5, 1)  # five PiB in one-byte parts
    assert next(ranges) == ByteRange(0, 1)


@pytest.mark.parametrize(
    ("size", "chunk", "start"), [(10, 0, 0), (10, -1, 0), (10, 5, 11), (10, 5, -1)]
)
def test_plan_ranges_rejects_bad_arguments(size: int, chunk: int, start: int) -> None:
    with pytest.raises(ValueError, match=r"chunk_size|outside"):
        list(plan_ranges(size, chunk, start))


def test_range_header_is_inclusive() -> None:
    assert ByteRange(0, 1).header() == "bytes=0-0"
    assert ByteRange(10, 20).header() == "bytes=10-19"
    assert ByteRange(10, 20).length == 10


@pytest.mark.parametrize(("start", "end"), [(0, 0), (5, 4), (-1, 3)])
def test_empty_or_reversed_ranges_are_refused(start: int, end: int) -> None:
    with pytest.raises(ValueError, match="invalid byte range"):
        ByteRange(start, end)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes 0-0/1", ContentRange(0, 1, 1)),
        ("bytes 0-99/100", ContentRange(0, 100, 100)),
        ("bytes 100-199/1000", ContentRange(100, 200, 1000)),
        (" bytes 5-9/10 ", ContentRange(5, 10, 10)),
    ],
)
def test_parse_content_range(header: str, expected: ContentRange) -> None:
    assert parse_content_range(header) == expected


@pytest.mark.parametrize(
    "header",
    [
        "bytes 0-99/*",
        "bytes */100",
        "bytes 10-5/100",
        "bytes 0-100/100",
        "bytes=0-99/100",
        "items 0-99/100",
        "bytes 0-99",
        "bytes -1-99/100",
        "bytes 0-99/100/5",
        "",
        "bytes ０-9/10",  # noqa: RUF001 - a non-ASCII digit must not parse
    ],
)
def test_parse_content_range_is_strict(header: str) -> None:
    with pytest.raises(ValueError, match="Content-Range"):
        parse_content_range(header)


def test_a_zero_total_is_the_empty_object() -> None:
    # s3rver's answer to a range of an empty object; nothing else with a zero total is.
    assert parse_content_range("bytes 0-0/0") == ContentRange(start=0, end=0, total=0)
    with pytest.raises(ValueError, match="inconsistent"):
        parse_content_range("bytes 0-1/0")


@pytest.mark.parametrize(
    ("asked", "got", "exact"),
    [
        (ByteRange(0, 10), ContentRange(0, 10, 100), True),
        (ByteRange(0, 10), ContentRange(0, 5, 5), True),  # the object ends first
        (ByteRange(0, 10), ContentRange(0, 5, 100), False),  # short, not at the end
        (ByteRange(0, 10), ContentRange(0, 100, 100), False),  # the whole object
        (ByteRange(5, 10), ContentRange(0, 10, 100), False),  # another start
        (ByteRange(0, 1), ContentRange(0, 0, 0), False),  # "bytes 0-0/0": no byte named
        (LastBytes(10), ContentRange(90, 100, 100), True),
        (LastBytes(10), ContentRange(0, 4, 4), True),  # shorter than the suffix
        (LastBytes(10), ContentRange(0, 100, 100), False),
        (LastBytes(10), ContentRange(89, 99, 100), False),
    ],
)
def test_answers_exactly_takes_only_the_range_asked(
    asked: ByteRange | LastBytes, got: ContentRange, exact: bool
) -> None:
    assert answers_exactly(asked, got) is exact
