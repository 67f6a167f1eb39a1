"""Range and conditional requests, decided without a server (asyncdl.contrib.http_ranges)."""

from __future__ import annotations

from datetime import UTC, datetime

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
        (RangeSpec(None, suffix=1), 0, (0, 0)),  # all of it, which is nothing
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
    assert get(range="bytes=-5").answer(empty) == Answer(200, 0, 0)  # not 416
    assert get(range="bytes=-0").answer(empty) == Answer(416)


HUGE = "9" * 5000  # past Python's int-digits limit (4300 digits)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"bytes={HUGE}-", Answer(416)),
        (f"bytes={HUGE}-{HUGE}", Answer(416)),
        (f"bytes=0-{HUGE}", Answer(206, 0, 1000)),
        (f"bytes=-{HUGE}", Answer(206, 0, 1000)),
        (f"bytes=10-0000{HUGE}", Answer(206, 10, 1000)),
        (f"bytes={HUGE}-1", Answer(200, 0, 1000)),  # reversed: ignored
        (f"bytes={HUGE}8-{HUGE}", Answer(200, 0, 1000)),
        (f"bytes=1{'0' * 18}-1{'0' * 18}", Answer(416)),
        ("bytes=00000000000000000000000000005-0000000000000000000000000000009",
         Answer(206, 5, 10)),
        ("bytes=999-" + "0" * 30, Answer(200, 0, 1000)),  # 999 > 0: reversed
    ],
)  # fmt: skip
def test_any_number_of_digits(value: str, expected: Answer) -> None:
    assert get(range=value).answer(OBJ) == expected


@pytest.mark.parametrize(
    ("value", "modified"),
    [
        # RFC 9110 §5.6.7's three forms; the object was modified on 1 Dec 2026 10:00.
        ("Tue, 01 Dec 2026 10:00:00 GMT", True),
        ("Tue, 01 Dec 2026 09:59:59 GMT", False),
        ("Tuesday, 01-Dec-26 10:00:00 GMT", True),
        ("Monday, 30-Nov-26 10:00:00 GMT", False),
        ("Tue Dec  1 10:00:00 2026", True),
        ("Mon Nov 30 10:00:00 2026", False),
        ("Sun Nov  6 08:49:37 2100", True),
        ("Tue Dec 01 10:00:00 2026", True),
    ],
)
def test_the_three_date_forms(value: str, modified: bool) -> None:
    assert get(if_modified_since=value).answer(OBJ) == (
        Answer(304) if modified else Answer(200, 0, 1000)
    )
    assert get(if_unmodified_since=value).answer(OBJ) == (
        Answer(200, 0, 1000) if modified else Answer(412)
    )


def test_a_two_digit_year_is_at_most_50_years_ahead() -> None:
    this_year = datetime.now(UTC).year
    ahead = (this_year + 40) % 100  # in 40 years: that year
    behind = (this_year + 60) % 100  # 60 years ahead is too far: a century earlier
    later = f"Sunday, 01-Jan-{ahead:02d} 00:00:00 GMT"
    earlier = f"Sunday, 01-Jan-{behind:02d} 00:00:00 GMT"
    assert get(if_modified_since=later).answer(OBJ) == Answer(304)
    assert get(if_modified_since=earlier).answer(OBJ) == Answer(200, 0, 1000)


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 99999999999999999999 08:49:37 GMT",  # overflowed
        "Sun, 06 Nov 1994 25:61:99 GMT",
        "Sun, 31 Feb 2030 00:00:00 GMT",
        "Sun, 06 Nov 2100 08:49:37 +0000",  # not GMT
        "sun, 06 nov 2100 08:49:37 gmt",  # HTTP-date is case-sensitive
        "Sun, 6 Nov 2100 08:49:37 GMT",
        "Sun, 06 Nov 2100 08:49:37",
        "2100-11-06T08:49:37Z",
        "Sun, 06 Nov \u0662\u0661\u0660\u0660 08:49:37 GMT",
        "",
        "yesterday",
    ],
)
def test_an_invalid_date_is_ignored(value: str) -> None:
    for name in ("if_modified_since", "if_unmodified_since"):
        assert get(**{name: value}).answer(OBJ) == Answer(200, 0, 1000), name
    assert get(range="bytes=0-9", if_range=value).answer(OBJ) == Answer(200, 0, 1000)


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
