"""An open GET answer as the engine reads it: status, validators (the ETag as a pin
and as sent), the body's length from Content-Length or Content-Range (which must
agree), the checksums S3 sent, and the concurrency slot it holds until closed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .body_reader import SpoolTo, spool
from .checksums import ExpectedChecksum, from_botocore, from_headers
from .ranges import ContentRange, parse_content_range
from .signed_get import RawResponse, body_length

#: ``Response.content_length`` of an answer that said neither Content-Length nor
#: Content-Range: its size is known only once its body has ended.
UNKNOWN_LENGTH = -1


def strong_etag(etag: object) -> str | None:
    """An answer's ETag as a pin for later requests, or ``None``: a weak one (``W/"x"``)
    never matches by the strong comparison ``If-Match`` uses (RFC 9110 §13.1.1), and
    names a version only roughly: it pins nothing, as if none was sent."""
    if not isinstance(etag, str) or not etag or etag.startswith("W/"):
        return None
    return etag


#: Why a body that only the connection's close ended is not called verified.
UNANNOUNCED_LENGTH = (
    "its length was not announced (no Content-Length, no chunked framing): the body "
    "ended where the connection closed, which a cut connection looks the same as"
)


def transfer_codings(headers: Mapping[str, str]) -> list[str]:
    """``ValueError`` for a Transfer-Encoding other than plain ``chunked`` (or the
    obsolete ``identity``, no coding at all): asyncdl sends no TE, so no other coding
    may be applied (RFC 9112 §6.1), and one that is (``gzip, chunked``; ``chunked``
    twice) would leave coded bytes in the file. The codings, lower-case."""
    getall = getattr(headers, "getall", None)
    values = getall("transfer-encoding", []) if getall is not None else None
    if values is None:
        value = headers.get("transfer-encoding")
        values = [] if value is None else [value]
    codings = [coding.strip().lower() for value in values for coding in value.split(",")]
    if codings not in ([], ["chunked"], ["identity"]):
        shown = ", ".join(codings)[:100]
        raise ValueError(f"Transfer-Encoding {shown!r}: only chunked is valid in an answer")
    return codings


def opaque_tag(etag: object) -> str | None:
    """An answer's ETag with any weak prefix removed, to compare with a pin: an answer
    that names another version (weak or not) than the one pinned is another version."""
    if not isinstance(etag, str) or not etag:
        return None
    return etag.removeprefix("W/")


class Response:
    """An open GET response: its headers, its body, and the slot it holds until closed."""

    __slots__ = (
        "_release",
        "body",
        "checksum",
        "close_delimited",
        "content_length",
        "content_range",
        "etag",
        "headers",
        "part_checksum",
        "parts_count",
        "status",
        "tag",
    )

    def __init__(
        self,
        *,
        status: int,
        etag: str | None,
        content_length: int | None,
        content_range: str | None,
        body: Any,
        release: Callable[[], None],
        checksums: Callable[[Any, str | None], ExpectedChecksum | None] | None = None,
        headers: Any = None,
        parts_count: int | None = None,
        http_headers: Mapping[str, str] | None = None,
    ) -> None:
        self._release: Callable[[], None] | None = release
        codings = transfer_codings(http_headers or {})
        parsed = parse_content_range(content_range) if content_range else None
        if parsed is not None:
            span = parsed.end - parsed.start
            if content_length is None:
                content_length = span
            elif content_length != span and parsed.total != 0:
                # Which one is right cannot be told; a body read by either is suspect.
                # (s3rver's "bytes 0-0/0" of an empty object says a length of 1 that
                # it never sends: that body is not read.)
                raise ValueError(
                    f"Content-Length {content_length} for the {span} bytes of its "
                    f"Content-Range {content_range!r}"
                )
            if status == 200 and parsed.start == 0 and parsed.end == parsed.total:
                # A 200 that names every byte of the object is the whole object, said
                # twice (rclone's answer to a range that covers it all).
                parsed = None
        whole = status == 200 and parsed is None
        # One parse of ``headers`` per response: a whole-object answer carries the
        # object's checksum; a partial one (a PartNumber GET, or a range that is
        # exactly one part) its upload part's, read whatever the object's type.
        found = checksum_or_none(checksums, headers, etag if whole else None) if checksums else None
        #: S3's full-object checksum, from a whole-object answer only.
        self.checksum = found if whole else None
        #: The upload part's checksum (a ``-N`` value would be the object's: not kept).
        self.part_checksum = (
            found if not whole and found is not None and not found.composite else None
        )
        #: ``x-amz-mp-parts-count``: the object's upload parts, on a PartNumber GET.
        self.parts_count = parts_count
        #: The HTTP headers, lower-case names (Content-Type, Last-Modified...).
        self.headers: Mapping[str, str] = http_headers or {}
        self.body = body
        self.status = status
        #: The ETag as a pin for later requests (a weak one pins nothing).
        self.etag = strong_etag(etag)
        #: The ETag as sent, weak or not (``W/`` removed): what a pin is compared with.
        self.tag = opaque_tag(etag)
        self.content_range: ContentRange | None = parsed
        #: The body's length: Content-Length, else the span of Content-Range, else
        #: ``UNKNOWN_LENGTH`` (a whole object of unknown size: read it to its end).
        self.content_length = UNKNOWN_LENGTH if content_length is None else content_length
        #: Neither a length nor chunked framing: only the connection's close ends the
        #: body, and a cut cannot be told from its end (RFC 9112 §6.3 rule 8).
        self.close_delimited = content_length is None and codings != ["chunked"]

    @classmethod
    def from_botocore(cls, raw: Mapping[str, Any], release: Callable[[], None]) -> Response:
        return cls(
            status=raw["ResponseMetadata"]["HTTPStatusCode"],
            etag=raw.get("ETag"),
            content_length=length_or_none(raw.get("ContentLength")),
            content_range=raw.get("ContentRange"),
            body=raw["Body"],
            release=release,
            checksums=from_botocore,
            headers=raw,
            parts_count=_int_or_none(raw.get("PartsCount")),
            http_headers=raw["ResponseMetadata"].get("HTTPHeaders"),
        )

    @classmethod
    def from_raw(cls, raw: RawResponse, release: Callable[[], None]) -> Response:
        headers = raw.headers
        return cls(
            status=raw.status,
            etag=headers.get("etag"),
            content_length=body_length(headers),
            content_range=headers.get("content-range"),
            body=raw.body,
            release=release,
            checksums=from_headers,
            headers=headers,
            parts_count=_int_or_none(headers.get("x-amz-mp-parts-count")),
            http_headers=headers,
        )

    async def read_whole(self, to: SpoolTo) -> None:
        """Make a whole-object answer of unknown length known: its body is read to its
        end into an unnamed temp file (see :class:`SpoolTo`), which it is then read from."""
        self.body, self.content_length = await spool(self.body, to)

    def close(self) -> None:
        """Close the body (an unread body would otherwise leak its pooled connection)
        and hand the slot back. Idempotent."""
        release, self._release = self._release, None
        if release is not None:
            try:
                self.body.close()
            finally:
                release()


def checksum_or_none(
    parse: Callable[[Any, str | None], ExpectedChecksum | None], source: Any, etag: str | None
) -> ExpectedChecksum | None:
    # A malformed checksum header is the server's problem, not a reason to fail the
    # download: it leaves the object unverified (and validate="required" says so).
    try:
        return parse(source, etag)
    except ValueError:
        return None


def length_or_none(value: Any) -> int | None:
    """A length (an int from botocore, or text): ``None`` when absent or not a plain
    non-negative decimal."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    try:
        return body_length({"content-length": value}) if isinstance(value, str) else None
    except ValueError:
        return None


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
