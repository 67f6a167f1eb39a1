"""What the command line accepts: ``s3://`` and ``http(s)://`` URLs, byte sizes,
endpoint URLs.

Each parser raises ``ValueError`` with a message fit for one line of output;
:func:`converter` wraps them for click, so a bad value is a usage error (exit
status 2), caught before any request is sent or any file is touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import click

from .._wire.client_settings import NOT_HTTP, endpoint_url_fault, shown_endpoint_url

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class S3Url:
    """``s3://bucket/key``; ``key`` is empty for ``s3://bucket`` and ``s3://bucket/``."""

    bucket: str
    key: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@dataclass(frozen=True, slots=True)
class HttpUrl:
    """An ``http(s)://`` URL to download (a presigned S3 URL, say). Shown without its
    query string, which may be a credential."""

    url: str

    def __str__(self) -> str:
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))

    @property
    def name(self) -> str:
        """The file name the URL's path ends with (decoded), or ``""``."""
        return unquote(PurePosixPath(urlsplit(self.url).path).name)


def parse_source(text: str) -> S3Url | HttpUrl:
    """An ``s3://bucket/key`` URL, or an ``http(s)://`` URL."""
    scheme = text.partition("://")[0].lower()
    if scheme in ("http", "https"):
        if not urlsplit(text).hostname:
            raise ValueError(f"{str(HttpUrl(text))!r} names no host")
        return HttpUrl(text)
    if scheme != "s3":
        # Not a text with a query: a mistyped presigned URL's is still a credential.
        shown = f"{text!r} is not" if "?" not in text else "not"
        raise ValueError(f"{shown} an s3://bucket/key URL, nor an http:// or https:// URL")
    return parse_s3_url(text)


def parse_s3_url(text: str) -> S3Url:
    if not text.startswith("s3://"):
        raise ValueError(f"{text!r} is not an s3://bucket/key URL")
    bucket, _, key = text[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"{text!r} names no bucket (expected s3://bucket/key)")
    return S3Url(bucket, key)


def check_s3_url(url: S3Url) -> None:
    """Raise ``ValueError`` if ``url`` breaks the engine's rules for a bucket name or a
    key's length.

    Not part of :func:`parse_s3_url`: the rules live with the engine, whose imports
    (aiohttp, botocore: a third of a second) ``--help`` and a mistyped option should not
    pay for. A command checks once all its arguments are parsed, before it sends anything.
    """
    from .._wire.request_args import check_bucket_and_key  # noqa: PLC0415
    from ..errors import InvalidRequestError  # noqa: PLC0415 - see above

    try:
        # The key is checked per command (a prefix may be empty), so any non-empty
        # stand-in will do here.
        check_bucket_and_key(url.bucket, url.key or "-")
    except InvalidRequestError as exc:
        raise ValueError(exc.message) from None


# SI units are powers of 1000, IEC units powers of 1024, as their names say; a bare
# number is bytes. Whole numbers only: "1.5MiB" is more likely a mistake than a wish
# for 1572864 bytes, and "1536KiB" says the same exactly.
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+)\s*([a-z]*)", re.ASCII | re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"8MiB"`` -> 8388608; units B, KB/MB/GB/TB (1000) and KiB/MiB/GiB/TiB (1024)."""
    match = _SIZE.fullmatch(text.strip())
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{text!r} is not a size: use a whole number of bytes, optionally with a unit "
            "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 8MiB"
        )
    return int(match.group(1)) * _UNITS[unit]


def parse_rate(text: str) -> int:
    """Bytes per second: a size (``"8MiB"``), optionally with ``/s`` (``"8MiB/s"``)."""
    size = parse_size(text.strip().removesuffix("/s"))
    if size <= 0:
        raise ValueError(f"{text!r} must be more than 0 bytes per second (leave it out: no cap)")
    return size


@dataclass(frozen=True, slots=True)
class RangeArg:
    """A ``--range`` as given, HTTP's inclusive form made half-open: ``100-199`` is
    ``start=100, end=200``; ``100-`` is ``end=None`` (to the end); ``-50`` is
    ``last=50`` (the last 50 bytes)."""

    start: int = 0
    end: int | None = None
    last: int | None = None

    def resolve(self, size: int | None) -> tuple[int, int]:
        """``[start, end)`` in an object of ``size`` bytes (needed by open and suffix
        ranges only): a suffix longer than the object is all of it (as HTTP says); an
        open range that starts past the end stays past it (the engine refuses it)."""
        if self.end is not None:
            return self.start, self.end
        if size is None:
            raise ValueError("an open or suffix range needs the object's size")
        if self.last is not None:
            return max(size - self.last, 0), size
        return self.start, max(size, self.start)


_RANGE = re.compile(r"(\d{0,19})-(\d{0,19})", re.ASCII)


#: The largest offset S3 (and asyncdl's range planner) takes: a signed 64-bit length.
MAX_OFFSET = 2**63 - 1


#: Seconds in a unit of a duration (``clean --older-than`` also takes weeks).
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SECONDS = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", re.ASCII)
#: Longer than any download waits (about 31 years): past it, a timer's arithmetic
#: goes astray in the libraries below.
MAX_SECONDS = 1e9


def parse_seconds(text: str) -> float:
    """A timeout: seconds (``"30"``, ``"2.5"``), or with a unit (``"90s"``, ``"5m"``,
    ``"1h"``, ``"1d"``); more than 0."""
    match = _SECONDS.fullmatch(text.strip().lower())
    seconds = float(match[1]) * DURATION_UNITS[match[2] or "s"] if match else 0.0
    shown = text if len(text) <= 40 else f"{text[:40]}..."  # not a megabyte of it back
    if seconds > MAX_SECONDS:
        raise ValueError(f"{shown!r} is too long a timeout: at most {MAX_SECONDS:.0f} seconds")
    if not seconds > 0:
        raise ValueError(
            f"{shown!r} is no timeout: a number of seconds more than 0 (2.5), or with a "
            "unit (90s, 5m, 1h)"
        )
    return seconds


def parse_range(text: str) -> RangeArg:
    """``FIRST-LAST`` (bytes FIRST to LAST, both included, as HTTP's ``Range``),
    ``FIRST-`` (to the end) or ``-COUNT`` (the last COUNT bytes)."""
    match = _RANGE.fullmatch(text.strip())
    if match is None or match.group(1) == match.group(2) == "":
        raise ValueError(
            f"{text[:40]!r} is not a byte range: use FIRST-LAST (both included, e.g. "
            "0-99 for the first 100 bytes), FIRST- or -COUNT"
        )
    first, last = match.groups()
    # What no object can reach is refused here, before anything is sent.
    if any(len(part) > 19 or int(part) >= MAX_OFFSET for part in (first, last) if part):
        raise ValueError(f"{text[:40]!r}: offsets must be below {MAX_OFFSET}")
    if not first:
        if int(last) == 0:
            raise ValueError(f"{text!r}: a suffix range needs at least one byte")
        return RangeArg(last=int(last))
    if not last:
        return RangeArg(start=int(first))
    if int(last) < int(first):
        raise ValueError(f"{text!r}: LAST is before FIRST (both are included: 5-5 is one byte)")
    return RangeArg(start=int(first), end=int(last) + 1)


def parse_endpoint_url(text: str) -> str:
    fault = endpoint_url_fault(text)
    if fault is None:
        return text
    shown = shown_endpoint_url(text)  # never the URL's user info or query
    if fault == NOT_HTTP:
        raise ValueError(f"{shown!r} is not an http:// or https:// URL")
    raise ValueError(f"{shown!r}: the endpoint URL {fault}")


def converter(
    parse: Callable[[str], _T],
) -> Callable[[click.Context, click.Parameter, str | None], _T | None]:
    """A click callback that parses a parameter's text, a bad value being a usage error.

    (A callback rather than a ``click.ParamType``: that class is generic only in
    recent click versions.)
    """

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> _T | None:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None

    return convert
