"""One object on S3 as the engine sees it: HEAD and GET requests with the caller's
arguments, each holding a slot of the engine's concurrency budget while it is in
flight, each counted (per download, and in the engine's stats by outcome); a
throttled answer tells the budget to lower its limit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from ..errors import DownloadError, ObjectChangedError, RangeNotSatisfiable, client_error_status
from ..stats import CLIENT_ERROR, OK, THROTTLED, Counters, outcome
from .adaptive import Budget
from .body_reader import SpoolTo
from .checksums import ExpectedChecksum, from_botocore, from_headers
from .get_response import (
    UNANNOUNCED_LENGTH,
    UNKNOWN_LENGTH,
    Response,
    checksum_or_none,
    length_or_none,
    opaque_tag,
    strong_etag,
)
from .ranges import ByteRange, LastBytes, answers_exactly
from .request_args import ExtraArgs
from .signed_get import Fallback, GetTemplate, SignedGets

# Where the engine's modules have always found them.
__all__ = [
    "UNANNOUNCED_LENGTH",
    "UNKNOWN_LENGTH",
    "ObjectMeta",
    "RangeNotSatisfiable",
    "Response",
    "S3Object",
    "strong_etag",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    size: int
    etag: str | None
    checksum: ExpectedChecksum | None = None
    #: The answer's HTTP headers, lower-case names (Content-Type, Last-Modified...).
    headers: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


class S3Object:
    """The requests of one download: ``bucket``/``key`` plus the caller's arguments."""

    #: Whether a HEAD can bring the object's checksum (not for a URL: ``url_source``).
    checksum_heads = True
    #: What a GET does with a whole-object answer of unknown length (no Content-Length,
    #: a chunked body): ``False`` reads it to its end first (see ``Response.read_whole``)
    #: so that its size is known, as a download needs; a stream, which reads to the end
    #: anyway, and a range read, which reads only the prefix it needs (or refuses the
    #: answer), set ``True`` and take it as it is.
    unknown_length_ok = False
    #: Whether an answer's body was ended only by its connection's close (see
    #: ``UNANNOUNCED_LENGTH``): nothing said it was whole.
    close_delimited = False

    def __init__(
        self,
        client: Any,
        budget: Budget,
        bucket: str,
        key: str,
        extra_args: ExtraArgs,
        *,
        counts: Counters,
        spool_to: SpoolTo,
        signed: SignedGets | None = None,
        checksum_mode: bool = False,
        answer_within: float | None = None,
    ) -> None:
        self._client = client
        #: Where and how such an answer is spooled (a download's beside its target).
        self.spool_to = spool_to
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
        #: Seconds a botocore call has for its answer: the headers, and an error's whole
        #: body, which botocore reads with only a per-read timeout (one byte at a time
        #: would hold it for ever). ``None``: no bound of the engine's.
        self._answer_within = answer_within

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
        error = self.pin_error(opaque_tag(meta.headers.get("etag")), if_match)
        if error is not None:
            raise error
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
        size = length_or_none(headers.get("content-length"))
        if size is None:
            raise self.error("the HEAD answer has no valid Content-Length")
        return ObjectMeta(
            size=size,
            etag=etag,
            checksum=checksum_or_none(from_headers, headers, etag),
            headers=headers,
        )

    async def sized(
        self, refused: RangeNotSatisfiable, *, if_match: str | None = None
    ) -> RangeNotSatisfiable:
        """A 416 that names the object's size: ``refused`` itself when it does (S3's
        ``ActualObjectSize``), else one HEAD's answer. Some servers name none (rclone,
        for any range of an empty object), and a first GET's 416 is an answer only
        once the size it refers to is known."""
        if refused.actual_size is not None:
            return refused
        meta = await self.head(if_match=if_match)
        return RangeNotSatisfiable(meta.size, meta.etag or refused.etag)

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
        size = length_or_none(raw.get("ContentLength"))
        if size is None:
            raise self.error("the HEAD answer has no valid Content-Length")
        return ObjectMeta(
            size=size,
            etag=etag,
            checksum=checksum_or_none(from_botocore, raw, etag),
            headers=raw["ResponseMetadata"].get("HTTPHeaders", {}),
        )

    async def get(
        self, byte_range: ByteRange | LastBytes | None, *, if_match: str | None
    ) -> Response:
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
                tag = opaque_tag(headers.get("etag"))
                # A server that ignores If-Match refuses the range of the version it has
                # now: a 416 naming another ETag is not the pinned version's size. (S3's
                # 416 names none, and its 412 comes first.)
                changed = None if tag is None else self.pin_error(tag, if_match)
                if changed is not None:
                    raise changed from exc
                raise RangeNotSatisfiable(
                    length_or_none(actual), strong_etag(headers.get("etag"))
                ) from exc
            raise
        except BaseException as exc:
            self._failed(self.counts.gets, exc, epoch)
            raise
        if (
            response.status == 200
            and byte_range is not None
            and response.content_range is not None
            and answers_exactly(byte_range, response.content_range)
        ):
            # The range asked for, said with the status of a whole object (rclone's
            # way); its length was checked against its Content-Range as it was read.
            response.status = 206
        response = self._pinned(response, if_match)
        self.close_delimited = self.close_delimited or response.close_delimited
        if response.content_length == UNKNOWN_LENGTH and not self.unknown_length_ok:
            try:
                await response.read_whole(self.spool_to)  # in the slot this request holds
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
        """A pinned answer must name the pinned version: a server that ignores If-Match
        would otherwise mix two versions in one file. Its tag is compared whether weak
        or strong (``W/"v2"`` is not ``"v1"``), and an answer with no ETag cannot be
        told to be that version (S3 always sends one): both are a changed object."""
        if if_match is None or response.tag == if_match:
            return response  # the common case, without a call
        response.close()
        error = self.pin_error(response.tag, if_match)
        assert error is not None
        raise error

    def pin_error(self, tag: str | None, if_match: str | None) -> DownloadError | None:
        """The ``ObjectChangedError`` to raise when an answer's ``tag`` (its ETag, ``W/``
        removed) does not name the version pinned by ``if_match``, else ``None``: a
        server may ignore ``If-Match`` (rclone does), so the answer itself is compared."""
        if if_match is None or tag == if_match:
            return None
        if tag is None:
            return self.error(
                f"the answer to a request pinned to ETag {if_match} has no ETag: "
                "it cannot be told to be the same version",
                ObjectChangedError,
            )
        return self.error(
            f"ETag changed from {if_match} to {tag} during the download", ObjectChangedError
        )

    async def _send(
        self,
        template: GetTemplate | None,
        byte_range: ByteRange | LastBytes | None,
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
            async with asyncio.timeout(self._answer_within):
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
