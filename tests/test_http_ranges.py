"""Range and conditional requests, decided without a server (asyncdl.contrib.http_ranges)."""

from __future__ import annotations

import pytest

from asyncdl.contrib.http_ranges import (
    Answer,
    Asked,
    RangeSpec,
    Validators,
    content_disposition,
    content_range,
    parse_range,
    unsatisfied_range,
)

ETAG = '"5d41402abc4b2a76b9719d911017c592"'
OTHER = '"0cc175b9c0f1b6a831c399e269772661"'
MODIFIED = "Tue, 01 Dec 2026 10:00:00 GMT"
OBJ = Validators(size=1000, etag=ETAG, last_modified=MODIFIED)


def get(**headers: str) -> Asked:
    return Asked.from_headers("GET", {k.replace("_", "-"): v for k, v in headers.items()})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes=0-499", (RangeSpec(0, 500),)),
        ("bytes=500-", (RangeSpec(500, None),)),
        ("bytes=-200", (RangeSpec(None, suffix=200),)),
        ("BYTES = 1-1", (RangeSpec(1, 2),)),
        ("bytes=0-0, -1", (RangeSpec(0, 1), RangeSpec(None, suffix=1))),
        ("bytes=0-1,,5-6", (RangeSpec(0, 2), RangeSpec(5, 7))),
        ("bytes=5-4", None),  # reversed
        ("bytes=-", None),
        ("bytes=a-b", None),
        ("bytes=1-2-3", None),
        ("bytes=", None),
        ("items=0-1", None),
        ("0-1", None),
        ("bytes=+1-2", None),
        ("bytes=\u0661-\u0662", None),  # Arabic-Indic digits are not HTTP's
    ],
)
def test_parse_range(value: str, expected: tuple[RangeSpec, ...] | None) -> None:
    assert parse_range(value) == expected


@pytest.mark.parametrize(
    ("spec", "size", "expected"),
    [
        (RangeSpec(0, 500), 1000, (0, 500)),
        (RangeSpec(0, 5000), 1000, (0, 1000)),  # a last byte past the end is clipped
        (RangeSpec(999, None), 1000, (999, 1000)),
        (RangeSpec(1000, None), 1000, None),
        (RangeSpec(1000, 1001), 1000, None),
        (RangeSpec(None, suffix=200), 1000, (800, 1000)),
        (RangeSpec(None, suffix=5000), 1000, (0, 1000)),
        (RangeSpec(None, suffix=0), 1000, None),
        (RangeSpec(0, None), 0, None),  # nothing of an empty object can be sent
        (RangeSpec(None, suffix=1), 0, None),
    ],
)
def test_resolve(spec: RangeSpec, size: int, expected: tuple[int, int] | None) -> None:
    assert spec.resolve(size) == expected


def test_header_forms() -> None:
    assert content_range(0, 500, 1000) == "bytes 0-499/1000"
    assert content_range(999, 1000, 1000) == "bytes 999-999/1000"
    assert unsatisfied_range(1000) == "bytes */1000"


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        (get(), Answer(200, 0, 1000)),
        (get(range="bytes=10-19"), Answer(206, 10, 20)),
        (get(range="bytes=990-"), Answer(206, 990, 1000)),
        (get(range="bytes=-10"), Answer(206, 990, 1000)),
        (get(range="bytes=1000-"), Answer(416)),
        (get(range="bytes=-0"), Answer(416)),
        (get(range="bytes=0-1,5-6"), Answer(200, 0, 1000)),  # several ranges: the whole
        (get(range="bytes=x"), Answer(200, 0, 1000)),  # malformed: ignored
        (Asked.from_headers("HEAD", {"range": "bytes=0-1"}), Answer(200, 0, 1000)),
        # If-Range: a matching ETag gives the range, anything else the whole object.
        (get(range="bytes=10-19", if_range=ETAG), Answer(206, 10, 20)),
        (get(range="bytes=10-19", if_range=OTHER), Answer(200, 0, 1000)),
        (get(range="bytes=10-19", if_range=f"W/{ETAG}"), Answer(200, 0, 1000)),
        (get(range="bytes=10-19", if_range=MODIFIED), Answer(200, 0, 1000)),
        (get(range="bytes=5000-", if_range=OTHER), Answer(200, 0, 1000)),
        # If-None-Match: weak comparison, lists, "*".
        (get(if_none_match=ETAG), Answer(304)),
        (get(if_none_match=f"W/{ETAG}"), Answer(304)),
        (get(if_none_match=f"{OTHER}, {ETAG}"), Answer(304)),
        (get(if_none_match="*"), Answer(304)),
        (get(if_none_match=OTHER), Answer(200, 0, 1000)),
        (get(if_none_match=OTHER, range="bytes=0-9"), Answer(206, 0, 10)),
        (get(if_none_match="garbage"), Answer(200, 0, 1000)),
        # If-Match: strong comparison, lists, "*"; before If-None-Match and Range.
        (get(if_match=ETAG), Answer(200, 0, 1000)),
        (get(if_match=f'{OTHER},{ETAG}'), Answer(200, 0, 1000)),
        (get(if_match="*", range="bytes=0-9"), Answer(206, 0, 10)),
        (get(if_match=OTHER), Answer(412)),
        (get(if_match=f"W/{ETAG}"), Answer(412)),
        (get(if_match=OTHER, if_none_match=ETAG), Answer(412)),
        (get(if_match=OTHER, range="bytes=5000-"), Answer(412)),
        # Dates, when no ETag condition says otherwise.
        (get(if_modified_since=MODIFIED), Answer(304)),
        (get(if_modified_since="Mon, 30 Nov 2026 10:00:00 GMT"), Answer(200, 0, 1000)),
        (get(if_modified_since="not a date"), Answer(200, 0, 1000)),
        (get(if_none_match=OTHER, if_modified_since=MODIFIED), Answer(200, 0, 1000)),
        (get(if_unmodified_since="Mon, 30 Nov 2026 10:00:00 GMT"), Answer(412)),
        (get(if_unmodified_since=MODIFIED), Answer(200, 0, 1000)),
        (get(if_match=ETAG, if_unmodified_since="Mon, 30 Nov 2026 10:00:00 GMT"),
         Answer(200, 0, 1000)),
    ],
)  # fmt: skip
def test_answer(asked: Asked, expected: Answer) -> None:
    assert asked.answer(OBJ) == expected


def test_an_object_without_etag_matches_no_tag() -> None:
    bare = Validators(size=10, etag=None)
    assert get(if_match=ETAG).answer(bare) == Answer(412)
    assert get(if_match="*").answer(bare) == Answer(200, 0, 10)
    assert get(if_none_match=ETAG).answer(bare) == Answer(200, 0, 10)
    assert get(range="bytes=0-1", if_range=ETAG).answer(bare) == Answer(200, 0, 10)


def test_an_empty_object() -> None:
    empty = Validators(size=0, etag=ETAG)
    assert get().answer(empty) == Answer(200, 0, 0)
    assert get(range="bytes=0-").answer(empty) == Answer(416)


def test_without_validators_the_range_is_assumed_and_checked_later() -> None:
    assert get().answer(None) == Answer(200)
    assert get(range="bytes=10-19").answer(None) == Answer(206, 10, 20)
    assert get(range="bytes=10-").answer(None) == Answer(206, 10, None)
    assert get(range="bytes=10-19", if_range=ETAG, if_match=ETAG).answer(None) == Answer(
        206, 10, 20
    )
    for asked in (get(range="bytes=-5"), get(if_none_match=ETAG), get(if_modified_since=MODIFIED)):
        assert asked.needs_validators
        with pytest.raises(ValueError, match="validators"):
            asked.answer(None)
    assert not get(range="bytes=0-1", if_match=ETAG, if_range=ETAG).needs_validators


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report.pdf", 'attachment; filename="report.pdf"'),
        ("naïve café.txt",
         "attachment; filename=\"na_ve caf_.txt\"; filename*=UTF-8''na%C3%AFve%20caf%C3%A9.txt"),
        ('a"b\\c.txt', "attachment; filename=\"a_b_c.txt\"; filename*=UTF-8''a%22b%5Cc.txt"),
        ("x\r\nSet-Cookie: y", "attachment; filename=\"x__Set-Cookie: y\"; "
         "filename*=UTF-8''x%0D%0ASet-Cookie%3A%20y"),
        ("100%.txt", "attachment; filename=\"100_.txt\"; filename*=UTF-8''100%25.txt"),
        ("日本.txt", "attachment; filename=\"__.txt\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC.txt"),
    ],
)  # fmt: skip
def test_content_disposition(name: str, expected: str) -> None:
    assert content_disposition(name) == expected
    assert not {"\r", "\n"} & set(expected)


def test_content_disposition_refuses_bad_input() -> None:
    assert content_disposition("a.txt", "inline") == 'inline; filename="a.txt"'
    for bad in ("", None, b"a.txt"):
        with pytest.raises(ValueError, match="filename"):
            content_disposition(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="disposition"):
        content_disposition("a.txt", "download")
