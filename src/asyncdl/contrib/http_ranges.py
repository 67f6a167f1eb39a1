"""HTTP range and conditional requests (RFC 9110 §13, §14) for serving one object:
what a request asks, and which answer it gets once the object's size and validators
are known. Pure: no I/O, so every case is tested without a server.

In code a range is half-open, ``[start, end)``; HTTP's inclusive forms exist only in
:func:`parse_range` and :func:`content_range`.

Choices where RFC 9110 leaves one:

- A request for several ranges gets the whole object (200): a server may ignore
  Range (§14.2). Players and download managers ask for one range at a time; a
  ``multipart/byteranges`` answer would cost one S3 request per part and a framing few
  clients read.
- ``If-Range`` is honoured for an ETag only. A date there (a weak validator for an
  object whose Last-Modified has a one-second resolution) gets the whole object,
  which is always a correct answer to it.
- A malformed ``Range`` is ignored (the whole object); a malformed date in
  ``If-Modified-Since`` or ``If-Unmodified-Since`` is ignored (§13.1.3, §13.1.4). A
  date is one of the three forms of §5.6.7 (IMF-fixdate, RFC 850, asctime), GMT.
- Numbers in a request are the client's: any length is parsed (§14.1.1), and one
  past every object's size is held as :data:`BEYOND`, which means the same thing.
- The last N bytes of an empty object are all of it, nothing: a 200 with the empty
  body (a 206 cannot say zero bytes, and the suffix is satisfiable, §14.1.1).
- ``Range`` applies to GET only (§14.2): a HEAD answers the whole object's headers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

_RANGE_SPEC = re.compile(r"(\d*)-(\d*)", re.ASCII)
#: Past the size of any object (S3's largest is 5 TiB): a range number of more digits
#: means what this does, and is never turned into an int (Python refuses past 4300
#: digits, and a client may send any number of them).
BEYOND = 10**18
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH = "(" + "|".join(_MONTHS) + ")"
_TIME = r"(\d\d):(\d\d):(\d\d)"
#: RFC 9110 §5.6.7: IMF-fixdate, the obsolete RFC 850 form (two-digit year), asctime.
_IMF_FIXDATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d\d) {_MONTH} (\d{{4}}) {_TIME} GMT", re.ASCII
)
_RFC850_DATE = re.compile(
    rf"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), "
    rf"(\d\d)-{_MONTH}-(\d\d) {_TIME} GMT",
    re.ASCII,
)
_ASCTIME_DATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MONTH} ([ \d]\d) {_TIME} (\d{{4}})", re.ASCII
)
_ENTITY_TAG = re.compile(r'[\s,]*((?:W/)?"[^"]*")\s*(?:,|$)', re.ASCII)  # §5.6.1: empty elements


@dataclass(frozen=True, slots=True)
class RangeSpec:
    """One ``bytes=`` range: ``first-last``, ``first-`` (``end`` is ``None``) or the
    last ``suffix`` bytes (``-suffix``: ``start`` is ``None``). Half-open, as every
    range in code: ``bytes=0-99`` is ``RangeSpec(0, 100)``."""

    #: The first byte asked for; ``None`` for a suffix range.
    start: int | None
    #: One past the last byte asked for; ``None`` for "to the end".
    end: int | None = None
    #: For a suffix range (``-suffix``), how many bytes at the end of the object.
    suffix: int = 0

    def resolve(self, size: int) -> tuple[int, int] | None:
        """The bytes ``[start, end)`` of a ``size``-byte object, or ``None`` when the
        range is unsatisfiable (it starts at or past the end; a suffix of 0 bytes). A
        suffix of an empty object is satisfiable, and is nothing: ``(0, 0)``."""
        if self.start is None:
            if self.suffix == 0:
                return None
            return max(size - self.suffix, 0), size
        if self.start >= size:
            return None
        return self.start, size if self.end is None else min(self.end, size)


def parse_range(value: str) -> tuple[RangeSpec, ...] | None:
    """The ranges of a ``Range`` header, or ``None`` when it is to be ignored (another
    unit, a malformed or reversed range)."""
    unit, sep, specs = value.partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    ranges = []
    for element in specs.split(","):
        item = element.strip(" \t")
        if not item:
            continue  # an empty list element (RFC 9110 §5.6.1)
        match = _RANGE_SPEC.fullmatch(item)
        if match is None:
            return None
        first, last = (digits.lstrip("0") or ("0" if digits else "") for digits in match.groups())
        if first:
            if last and (len(last), last) < (len(first), first):
                return None
            ranges.append(RangeSpec(_number(first), _number(last) + 1 if last else None))
        elif last:
            ranges.append(RangeSpec(None, suffix=_number(last)))
        else:
            return None  # "-"
    return tuple(ranges) or None


def _number(digits: str) -> int:
    """A range's number (digits without leading zeros), at most :data:`BEYOND`."""
    return BEYOND if len(digits) > len(str(BEYOND)) else min(int(digits), BEYOND)


def content_range(start: int, end: int, size: int) -> str:
    """``Content-Range`` of the bytes ``[start, end)`` of a ``size``-byte object."""
    return f"bytes {start}-{end - 1}/{size}"


def unsatisfied_range(size: int) -> str:
    """``Content-Range`` of a 416 answer."""
    return f"bytes */{size}"


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """``Content-Disposition`` naming ``filename`` (RFC 6266): an ASCII ``filename``
    for every client, and ``filename*`` (UTF-8, percent-encoded, RFC 8187) when the
    name needs more; no character of the name can end the header or add to it."""
    if not isinstance(filename, str) or not filename:
        raise ValueError(f"filename must be a non-empty str, got {filename!r}")
    if disposition not in ("attachment", "inline"):
        raise ValueError(f"disposition must be 'attachment' or 'inline', got {disposition!r}")
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\%' else "_" for c in filename)
    if fallback == filename:
        return f'{disposition}; filename="{filename}"'
    encoded = quote(filename, safe="!#$&+-.^_`|~", encoding="utf-8")
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


@dataclass(frozen=True, slots=True)
class Validators:
    """What the answer depends on: the object's size, ETag and Last-Modified."""

    #: The object's size in bytes.
    size: int
    #: The object's ETag, quoted (``None`` when it has none).
    etag: str | None
    #: The object's ``Last-Modified``, as the HTTP header has it.
    last_modified: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The status, and for 200 and 206 the bytes ``[start, end)`` to send (``end``
    ``None``: to the end of an object whose size is not known yet)."""

    #: 200, 206, 304, 412 or 416.
    status: int
    #: The first byte to send.
    start: int = 0
    #: One past the last byte to send (``None``: to the end of the object).
    end: int | None = None


@dataclass(frozen=True, slots=True)
class Asked:
    """What a GET or HEAD request asks: a range, and the conditions on it.
    ``Asked.from_headers(method, headers).answer(validators)`` is the whole decision."""

    #: ``"GET"`` or ``"HEAD"``.
    method: str
    #: The ranges of the ``Range`` header (``None``: none, or one to ignore).
    ranges: tuple[RangeSpec, ...] | None = None
    #: The ``If-Range`` header, as sent.
    if_range: str | None = None
    #: The ``If-Match`` header, as sent.
    if_match: str | None = None
    #: The ``If-None-Match`` header, as sent.
    if_none_match: str | None = None
    #: The ``If-Modified-Since`` date (``None`` when absent or malformed).
    if_modified_since: datetime | None = None
    #: The ``If-Unmodified-Since`` date (``None`` when absent or malformed).
    if_unmodified_since: datetime | None = None

    @classmethod
    def from_headers(cls, method: str, headers: Mapping[str, str]) -> Asked:
        """From a request's headers (lower-case names, as Starlette's)."""
        value = headers.get("range")
        return cls(
            method=method,
            ranges=parse_range(value) if value is not None and method == "GET" else None,
            if_range=headers.get("if-range"),
            if_match=headers.get("if-match"),
            if_none_match=headers.get("if-none-match"),
            if_modified_since=_http_date(headers.get("if-modified-since")),
            if_unmodified_since=_http_date(headers.get("if-unmodified-since")),
        )

    @property
    def range(self) -> RangeSpec | None:
        """The one range asked for (several: none, the whole object is sent)."""
        if self.ranges is not None and len(self.ranges) == 1:
            return self.ranges[0]
        return None

    @property
    def needs_validators(self) -> bool:
        """Whether the answer must wait for the object's size and validators (a HEAD
        before any GET): the last N bytes start where the size says, and a cache's
        revalidation is answered 304 without sending a GET whose body is not wanted."""
        suffix = self.range is not None and self.range.start is None
        revalidates = self.if_none_match is not None or self.if_modified_since is not None
        return suffix or revalidates

    def answer(self, obj: Validators | None) -> Answer:
        """The answer, given the object's validators (RFC 9110 §13.2.2's order).

        Without them (``None``, the object not asked about yet) every precondition is
        taken to hold and ``If-Range`` to match: what the object's first answer then
        says is checked by calling this again with its validators."""
        if obj is None:
            if self.needs_validators:
                raise ValueError("this request needs the object's validators")
            byte_range = self.range
            if byte_range is None or byte_range.start is None:
                return Answer(200)
            return Answer(206, byte_range.start, byte_range.end)
        etag = obj.etag
        if self.if_match is not None:
            if not _matches(self.if_match, etag, weak=False):
                return Answer(412)
        elif self.if_unmodified_since is not None:
            modified = _http_date(obj.last_modified)
            if modified is not None and modified > self.if_unmodified_since:
                return Answer(412)
        if self.if_none_match is not None:
            if _matches(self.if_none_match, etag, weak=True):
                return Answer(304)
        elif self.if_modified_since is not None:
            modified = _http_date(obj.last_modified)
            if modified is not None and modified <= self.if_modified_since:
                return Answer(304)
        byte_range = self.range
        if byte_range is None or not self._range_applies(etag):
            return Answer(200, 0, obj.size)
        resolved = byte_range.resolve(obj.size)
        if resolved is None:
            return Answer(416)
        if resolved[0] == resolved[1]:
            return Answer(200, 0, obj.size)  # no Content-Range says "no bytes"
        return Answer(206, *resolved)

    def _range_applies(self, etag: str | None) -> bool:
        if self.if_range is None:
            return True
        value = self.if_range.strip()
        # An ETag, compared strongly (a weak one never matches); a date: whole object.
        return value.startswith('"') and etag is not None and _strong_equal(value, etag)


def _matches(header: str, etag: str | None, *, weak: bool) -> bool:
    """Whether ``If-Match`` / ``If-None-Match`` (``weak``) ``header`` matches ``etag``."""
    if header.strip() == "*":
        return True  # the object exists
    if etag is None:
        return False
    for tag in _entity_tags(header):
        if _weak_equal(tag, etag) if weak else _strong_equal(tag, etag):
            return True
    return False


def _entity_tags(header: str) -> list[str]:
    tags, position = [], 0
    while position < len(header):
        match = _ENTITY_TAG.match(header, position)
        if match is None:
            break  # the rest is malformed: it matches nothing
        tags.append(match.group(1))
        position = match.end()
    return tags


def _strong_equal(a: str, b: str) -> bool:
    return not a.startswith("W/") and not b.startswith("W/") and a == b


def _weak_equal(a: str, b: str) -> bool:
    return a.removeprefix("W/") == b.removeprefix("W/")


def _http_date(value: str | None) -> datetime | None:
    """An HTTP-date (RFC 9110 §5.6.7, any of its three forms), or ``None`` when
    ``value`` is none of them or names no real moment."""
    if value is None:
        return None
    value = value.strip(" \t")
    if match := _IMF_FIXDATE.fullmatch(value):
        day, month, year, hour, minute, second = match.groups()
    elif match := _ASCTIME_DATE.fullmatch(value):
        month, day, hour, minute, second, year = match.groups()
    elif match := _RFC850_DATE.fullmatch(value):
        day, month, year, hour, minute, second = match.groups()
        year = str(_full_year(int(year)))
    else:
        return None
    try:
        return datetime(
            int(year), _MONTHS.index(month) + 1, int(day), int(hour), int(minute), int(second),
            tzinfo=UTC,
        )  # fmt: skip
    except ValueError:  # 31 Feb, 25:61:99
        return None


def _full_year(two_digits: int) -> int:
    """§5.6.7: a two-digit year more than 50 years ahead is the last such year past."""
    this_year = datetime.now(UTC).year
    year = this_year - this_year % 100 + two_digits
    return year - 100 if year > this_year + 50 else year
