"""One object on S3 as the engine sees it: HEAD and GET requests with the caller's
arguments, each holding a slot of the engine's concurrency budget while it is in
flight, each counted (per download, and in the engine's stats by outcome); a
throttled answer tells the budget to lower its limit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from .adaptive import Budget
from .body_reader import spool
from .checksums import ExpectedChecksum, from_botocore, from_headers
from .errors import DownloadError, ObjectChangedError, client_error_status
from .ranges import ByteRange, ContentRange, parse_content_range
from .request_args import ExtraArgs
from .signed_get import Fallback, GetTemplate, RawResponse, SignedGets, body_length
from .stats import CLIENT_ERROR, OK, THROTTLED, Counters, outcome

_T = TypeVar("_T")


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


def normalize_etag(etag: str) -> str | None:
    """ETags travel quoted; a caller may hand one over bare (as some listings print it).
    A weak one is ``None``, as one in an answer is (see :func:`strong_etag`)."""
    if etag.startswith("W/"):
        return None
    if etag.startswith('"'):
        return etag
    return f'"{etag}"'


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    size: int
    etag: str | None
    checksum: ExpectedChecksum | None = None
    #: The answer's HTTP headers, lower-case names (Content-Type, Last-Modified...).
    headers: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


class RangeNotSatisfiable(Exception):
    """A 416 answer; ``actual_size`` is S3's ``ActualObjectSize`` when it sent one."""

    def __init__(self, actual_size: int | None, etag: str | None) -> None:
        super().__init__(f"416 InvalidRange (ActualObjectSize={actual_size})")
        self.actual_size = actual_size
        self.etag = etag


class Response:
    """An open GET response: its headers, its body, and the slot it holds until closed."""

    __slots__ = (
        "_release",
        "body",
        "checksum",
        "content_length",
        "content_range",
        "etag",
        "headers",
        "part_checksum",
        "parts_count",
        "status",
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
        whole = status == 200 and not content_range
        # One parse of ``headers`` per response: a whole-object answer carries the
        # object's checksum; a partial one (a PartNumber GET, or a range that is
        # exactly one part) its upload part's, read whatever the object's type.
        found = (
            _checksum_or_none(checksums, headers, etag if whole else None) if checksums else None
        )
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
        self.etag = strong_etag(etag)
        self.content_range: ContentRange | None = (
            parse_content_range(content_range) if content_range else None
        )
        if content_length is None and self.content_range is not None:
            content_length = self.content_range.end - self.content_range.start
        #: The body's length: Content-Length, else the span of Content-Range, else
        #: ``UNKNOWN_LENGTH`` (a whole object of unknown size: read it to its end).
        self.content_length = UNKNOWN_LENGTH if content_length is None else content_length

    @classmethod
    def from_botocore(cls, raw: Mapping[str, Any], release: Callable[[], None]) -> Response:
        return cls(
            status=raw["ResponseMetadata"]["HTTPStatusCode"],
            etag=raw.get("ETag"),
            content_length=_length_or_none(raw.get("ContentLength")),
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

    async def read_whole(self) -> None:
        """Make a whole-object answer of unknown length known: its body is read to its
        end into an unnamed temp file, which it is then read from."""
        self.body, self.content_length = await spool(self.body)

    def close(self) -> None:
        """Close the body (an unread body would otherwise leak its pooled connection)
        and hand the slot back. Idempotent."""
        release, self._release = self._release, None
        if release is not None:
            try:
                self.body.close()
            finally:
                release()


class S3Object:
    """The requests of one download: ``bucket``/``key`` plus the caller's arguments."""

    #: Whether a HEAD can bring the object's checksum (not for a URL: ``url_source``).
    checksum_heads = True
    #: What a GET does with a whole-object answer of unknown length (no Content-Length,
    #: a chunked body): ``False`` reads it to its end first (see ``Response.read_whole``)
    #: so that its size is known, as a download needs; a stream, which reads to the end
    #: anyway, sets ``True`` and takes it as it is.
    unknown_length_ok = False

    def __init__(
        self,
        client: Any,
        budget: Budget,
        bucket: str,
        key: str,
        extra_args: ExtraArgs,
        *,
        counts: Counters,
        signed: SignedGets | None = None,
        checksum_mode: bool = False,
    ) -> None:
        self._client = client
        self._budget = budget
        #: The engine's stats, where each request is counted by its outcome.
        self.counts = counts
        self._signed = signed
        self._extra_args = extra_args
        self.bucket = bucket
        self.key = key
        self._params: dict[str, Any] = {"Bucket": bucket, "Key": key, **extra_args}
        # HEADs and whole-object GETs ask for the stored checksum when the engine
        # verifies; ranged GETs do not (S3 sends none for them).
        self._whole_args: ExtraArgs = (
            {**extra_args, "ChecksumMode": "ENABLED"} if checksum_mode else extra_args
        )
        #: Requests sent, retries inside botocore included.
        self.requests = 0

    def error(self, message: str, cls: type[DownloadError] = DownloadError) -> DownloadError:
        return cls(message, bucket=self.bucket, key=self.key)

    def _count(self, metadata: Mapping[str, Any] | None) -> None:
        self.requests += 1 + int((metadata or {}).get("RetryAttempts") or 0)

    async def head(self, *, if_match: str | None = None) -> ObjectMeta:
        template = None
        if self._signed is not None:
            template = await self._signed.template(self.bucket, self._whole_args, "HeadObject")
        epoch = await self._budget.acquire()
        try:
            if template is None or self._signed is None:
                meta = await self._head_object(if_match)
            else:
                meta = await self._lean_head(template, if_match)
        except BaseException as exc:
            self._failed(self.counts.heads, exc, epoch)
            raise
        self.counts.heads[OK] += 1
        self._budget.release_ok()
        return meta

    async def _lean_head(self, template: GetTemplate, if_match: str | None) -> ObjectMeta:
        assert self._signed is not None
        self.requests += 1
        try:
            raw = await self._signed.send(template, self.key, if_match=if_match)
        except Fallback:
            self.counts.heads[CLIENT_ERROR] += 1  # a redirect: botocore sends it again
            return await self._redirected(template, self._head_object(if_match))
        headers = raw.headers
        etag = strong_etag(headers.get("etag"))
        size = _length_or_none(headers.get("content-length"))
        if size is None:
            raise self.error("the HEAD answer has no valid Content-Length")
        return ObjectMeta(
            size=size,
            etag=etag,
            checksum=_checksum_or_none(from_headers, headers, etag),
            headers=headers,
        )

    def _failed(self, counts: list[int], exc: BaseException, epoch: int) -> None:
        """Count a request that got no usable answer, and hand its slot back."""
        where = outcome(exc)
        counts[where] += 1
        if where == THROTTLED:
            self._budget.throttled(epoch)
        self._budget.release()

    async def _head_object(self, if_match: str | None) -> ObjectMeta:
        params = {**self._params, **self._whole_args}
        if if_match is not None:
            params["IfMatch"] = if_match
        raw = await self._call(self._client.head_object, params)
        etag = strong_etag(raw.get("ETag"))
        size = _length_or_none(raw.get("ContentLength"))
        if size is None:
            raise self.error("the HEAD answer has no valid Content-Length")
        return ObjectMeta(
            size=size,
            etag=etag,
            checksum=_checksum_or_none(from_botocore, raw, etag),
            headers=raw["ResponseMetadata"].get("HTTPHeaders", {}),
        )

    async def get(self, byte_range: ByteRange | None, *, if_match: str | None) -> Response:
        """Send a GET; the returned response holds a concurrency slot until closed."""
        template = None
        if self._signed is not None:
            args = self._whole_args if byte_range is None else self._extra_args
            template = await self._signed.template(self.bucket, args)
        epoch = await self._budget.acquire()
        try:
            response = await self._send(template, byte_range, if_match)
        except ClientError as exc:
            self._failed(self.counts.gets, exc, epoch)
            status, _ = client_error_status(exc)
            if status == 416:
                error = exc.response.get("Error", {})
                actual = error.get("ActualObjectSize")
                headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
                raise RangeNotSatisfiable(
                    _length_or_none(actual), strong_etag(headers.get("etag"))
                ) from exc
            raise
        except BaseException as exc:
            self._failed(self.counts.gets, exc, epoch)
            raise
        response = self._pinned(response, if_match)
        if response.content_length == UNKNOWN_LENGTH and not self.unknown_length_ok:
            try:
                await response.read_whole()  # in the slot this request holds
            except BaseException:
                response.close()
                raise
        return response

    async def get_part(self, number: int, *, if_match: str | None) -> Response:
        """GET upload part ``number`` of a multipart object (``PartNumber``), with the
        part's checksum when the engine verifies."""
        template = None
        if self._signed is not None:
            template = await self._signed.template(self.bucket, self._whole_args)
        epoch = await self._budget.acquire()
        try:
            response = await self._send(template, None, if_match, part_number=number)
        except BaseException as exc:
            self._failed(self.counts.gets, exc, epoch)
            raise
        return self._pinned(response, if_match)

    def _pinned(self, response: Response, if_match: str | None) -> Response:
        if if_match is not None and response.etag is not None and response.etag != if_match:
            # A server that ignores If-Match would otherwise mix two versions in one file.
            response.close()
            raise self.error(
                f"ETag changed from {if_match} to {response.etag} during the download",
                ObjectChangedError,
            )
        return response

    async def _send(
        self,
        template: GetTemplate | None,
        byte_range: ByteRange | None,
        if_match: str | None,
        *,
        part_number: int | None = None,
    ) -> Response:
        """One GET (two if the lean path hands it back to botocore), counted."""
        range_header = byte_range.header() if byte_range is not None else None
        if template is not None and self._signed is not None:
            self.requests += 1
            try:
                raw = await self._signed.send(
                    template,
                    self.key,
                    range_header=range_header,
                    if_match=if_match,
                    part_number=part_number,
                )
            except Fallback:
                self.counts.gets[CLIENT_ERROR] += 1  # a redirect: botocore sends it again
                retry = self._get_object(range_header, if_match, part_number)
                return await self._redirected(template, retry)
            return self._wrap(Response.from_raw, raw)
        return await self._get_object(range_header, if_match, part_number)

    async def _redirected(self, template: GetTemplate, retry: Awaitable[_T]) -> _T:
        """A lean request was redirected: ``retry`` sends it through botocore, which
        follows the redirect and learns the bucket's region; only once it has answered
        may the bucket's template be captured again."""
        assert self._signed is not None
        try:
            result = await retry
        except Exception:
            self._signed.redirected(self.bucket, template)
            raise
        self._signed.redirected(self.bucket, template)
        return result

    async def _get_object(
        self, range_header: str | None, if_match: str | None, part_number: int | None
    ) -> Response:
        if range_header is not None:
            params = {**self._params, "Range": range_header}
        else:
            params = {**self._params, **self._whole_args}
        if part_number is not None:
            params["PartNumber"] = part_number
        if if_match is not None:
            params["IfMatch"] = if_match
        raw_dict = await self._call(self._client.get_object, params)
        return self._wrap(Response.from_botocore, raw_dict)

    async def _call(self, operation: Callable[..., Awaitable[Any]], params: Any) -> Any:
        """One botocore call, counted with the retries botocore made inside it."""
        try:
            raw = await operation(**params)
        except ClientError as exc:
            self._count(exc.response.get("ResponseMetadata"))
            raise
        except BaseException:
            self.requests += 1
            raise
        self._count(raw.get("ResponseMetadata"))
        return raw

    def _wrap(self, build: Callable[[Any, Callable[[], None]], Response], raw: Any) -> Response:
        try:
            response = build(raw, self._budget.release_ok)
        except ValueError as exc:  # a malformed Content-Range
            body = raw["Body"] if isinstance(raw, Mapping) else raw.body
            body.close()
            raise self.error(f"server sent {exc}") from exc
        self.counts.gets[OK] += 1
        return response


def _checksum_or_none(
    parse: Callable[[Any, str | None], ExpectedChecksum | None], source: Any, etag: str | None
) -> ExpectedChecksum | None:
    # A malformed checksum header is the server's problem, not a reason to fail the
    # download: it leaves the object unverified (and validate="required" says so).
    try:
        return parse(source, etag)
    except ValueError:
        return None


def _length_or_none(value: Any) -> int | None:
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
