"""An object behind a plain HTTP(S) URL (a presigned S3 GET URL is the main case),
as the engine sees it: the same GETs, ranges, ``If-Match`` pins, budget slots and
counts as an :class:`~asyncdl._wire.s3_source.S3Object`, sent unsigned to the URL as given.

No credentials are added: a presigned URL carries its own in the query string, so
that query is a secret. It is sent, never shown: the URL a download reports (its
``key``, its errors, the log) is the URL without query, fragment or user info, and
a failure of the transport is raised as a new error whose message has every URL in
it (the one given, and any a redirect led to: an endpoint that redirects to a
presigned S3 URL) cut the same way, with no cause or context (aiohttp's errors
hold the URLs they met in their attributes).

What a URL cannot do that a key can: a HEAD (a presigned GET URL is signed for GET
only), so where the engine would HEAD an object, a URL sends a one-byte ranged GET
(size and ETag, no checksum); and ``PartNumber`` GETs (a query parameter added to a
presigned URL breaks its signature). A checksum is verified when an answer carries
one: a whole-object answer from S3 does when the URL was presigned with
``ChecksumMode``; or the caller passes the object's.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    InvalidProxiesConfigError,
    SSLError,
)

from ..errors import UNREADABLE_URL, InvalidRequestError, scrubbed, shown_url
from ..stats import OK, Counters
from .adaptive import Budget
from .body_reader import SpoolTo, read_error_body
from .get_response import opaque_tag
from .lean_send import Route
from .lean_send import send as send_on
from .ranges import ByteRange, LastBytes, parse_content_range
from .s3_source import ObjectMeta, Response, S3Object, strong_etag
from .signed_get import (
    MAX_ERROR_BODY,
    GetTemplate,
    RawResponse,
    body_length,
    error_response,
)

#: A query in a message (of a request target a peer sent back, say).
_QUERY_IN_TEXT = re.compile(r"\?[^\s'\"<>]*")
#: What is kept of a server's own words in a message (a malformed answer's).
_MAX_SHOWN = 200


def check_url(url: object) -> str:
    """The URL as shown, or ``InvalidRequestError`` for anything but an absolute
    http(s) URL with a host; nothing is sent."""
    shown = shown_url(url)
    if not isinstance(url, str) or not url:
        # Not its repr: bytes of a presigned URL would show its credential.
        got = "an empty string" if url == "" else type(url).__name__
        raise InvalidRequestError(
            f"url must be a non-empty string, got {got}", bucket="", key=shown
        )
    if any(ch in url for ch in "\x00\r\n\t "):
        raise InvalidRequestError(
            "url holds whitespace or a control character: pass it percent-encoded",
            bucket="",
            key=shown,
        )
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidRequestError(
            f"url must be http:// or https://, got {parts.scheme or 'no'} scheme",
            bucket="",
            key=shown,
        )
    if shown == UNREADABLE_URL or not urlsplit(shown).hostname:
        raise InvalidRequestError("url has no valid host", bucket="", key=shown)
    return shown


class UrlObject(S3Object):
    """The requests of one download from ``url``; ``key`` is the URL as shown."""

    #: No HEAD can bring a checksum here (see the module's note).
    checksum_heads = False

    def __init__(
        self,
        route: Callable[[str], Awaitable[Route]],
        budget: Budget,
        url: str,
        *,
        counts: Counters,
        spool_to: SpoolTo,
    ) -> None:
        super().__init__(None, budget, "", shown_url(url), {}, counts=counts, spool_to=spool_to)
        #: Finds the route on the first request (the session may be made then).
        self._find_route = route
        self._route: Route | None = None
        self._url = url
        #: The URL and its query, scrubbed from any message raised (the whole URL first).
        self._secrets = ((url, self.key), (urlsplit(url).query, "<query>"))

    async def head(self, *, if_match: str | None = None) -> ObjectMeta:
        """Size and ETag from a GET of the first byte (a presigned GET URL refuses a
        HEAD). An empty object answers any range with 416: size 0, and the ETag if
        that answer carries one (S3's does not)."""
        epoch = await self._budget.acquire()
        try:
            try:
                raw = await self._request(ByteRange(0, 1).header(), if_match)
            except ClientError as refused:
                if not _names_no_size(refused):
                    raise
                raw = await self._empty_or_not(if_match)
            size: int | None = None
            if raw.status == 200 and "content-range" not in raw.headers:
                size = await self._whole_length(raw)
            raw.release()
        except BaseException as exc:
            if isinstance(exc, ClientError) and _empty(exc):  # an answer, and the right one
                self.counts.gets[OK] += 1
                self._budget.release_ok()
                headers = exc.response["ResponseMetadata"]["HTTPHeaders"]
                # An empty version that names another ETag than the pin is not the
                # pinned one (a server that ignores If-Match answers for what it has).
                tag = opaque_tag(headers.get("etag"))
                changed = None if tag is None else self.pin_error(tag, if_match)
                if changed is not None:
                    raise changed from None
                return ObjectMeta(size=0, etag=strong_etag(headers.get("etag")), headers=headers)
            self._failed(self.counts.gets, exc, epoch)
            raise
        self.counts.gets[OK] += 1
        self._budget.release_ok()
        headers = raw.headers
        error = self.pin_error(opaque_tag(headers.get("etag")), if_match)
        if error is not None:
            raise error
        content_range = headers.get("content-range")
        try:
            if raw.status in (200, 206) and content_range is not None:
                size = parse_content_range(content_range).total
            elif size is None:
                raise ValueError(f"HTTP {raw.status}")
        except ValueError as exc:
            raise self.error(f"unexpected answer to a ranged GET: {exc}") from None
        return ObjectMeta(size=size, etag=strong_etag(headers.get("etag")), headers=headers)

    async def _empty_or_not(self, if_match: str | None) -> Any:
        """The answer to a plain GET, sent after a 416 to ``bytes=0-0`` that named no
        size (rclone's, for any range of an empty object): RFC 9110 refuses a range
        from byte 0 only of an empty object, and this answer must say so with a
        Content-Length of 0; any other is an error (its body is not read)."""
        raw = await self._request(None, if_match)
        try:
            length = body_length(raw.headers)
        except ValueError:
            length = None
        if raw.status != 200 or "content-range" in raw.headers or length != 0:
            raw.release()
            raise self.error(
                "the server refused bytes=0-0 (HTTP 416), and does not say the object "
                f"is empty (HTTP {raw.status}, Content-Length {length})"
            )
        return raw

    async def _whole_length(self, raw: Any) -> int:
        """The length of a 200 to a ranged GET (Range ignored: the whole object), from
        its Content-Length, or when it sent none by reading the body to its end."""
        try:
            length = body_length(raw.headers)
        except ValueError as exc:
            raw.release()
            raise self.error(f"server sent {exc}") from None
        if length is not None:
            return length
        try:
            response = Response.from_raw(
                RawResponse(raw.status, raw.headers, raw),
                raw.release,
            )
        except ValueError as exc:  # a Transfer-Encoding it may not use
            raw.release()
            raise self.error(f"server sent {exc}") from None
        # A probe: its bytes are not the download's progress.
        try:
            await response.read_whole(replace(self.spool_to, progress=None))
            return response.content_length
        finally:
            response.close()

    async def _send(
        self,
        template: GetTemplate | None,
        byte_range: ByteRange | LastBytes | None,
        if_match: str | None,
        *,
        part_number: int | None = None,
    ) -> Response:
        if part_number is not None:
            raise self.error("a URL cannot be fetched by upload part (PartNumber)")
        range_header = byte_range.header() if byte_range is not None else None
        raw = await self._request(range_header, if_match)
        return self._wrap(  # the body is aiohttp's answer itself (see body_reader)
            Response.from_raw,
            RawResponse(raw.status, raw.headers, raw),
        )

    async def _request(self, range_header: str | None, if_match: str | None) -> Any:
        """One GET, counted: the open aiohttp response of a 2xx, else ``ClientError``
        as S3's error would raise it (redirects are followed on the way)."""
        headers = {"Accept-Encoding": "identity"}  # the bytes as stored, never re-encoded
        if range_header is not None:
            headers["Range"] = range_header
        if if_match is not None:
            headers["If-Match"] = if_match
        if self._route is None:
            self._route = await self._find_route(self._url)
        self.requests += 1
        try:
            raw = await send_on(self._route, "GET", self._url, headers, shown=self.key)
        except InvalidProxiesConfigError:
            # A setting to fix, not retried; made anew: what it came from may hold the
            # proxy's login.
            failure: Exception | None = InvalidProxiesConfigError(error="malformed proxy URL")
        except BotoCoreError as exc:
            failure = self._scrubbed(exc)
        else:
            failure = None
        if failure is not None:
            # Raised out here, so not even as a context: aiohttp's error (the cause and
            # the context of ``exc``) holds every URL of the redirects it followed.
            raise failure
        if raw.status < 300:
            return raw
        body = await read_error_body(raw, self.spool_to.read_timeout, MAX_ERROR_BODY)
        lowered = {name.lower(): value for name, value in raw.headers.items()}
        raise ClientError(self._kept(error_response(raw.status, lowered, body)), "GetObject")

    def _kept(self, response: dict[str, Any]) -> dict[str, Any]:
        """What is kept of an error answer: its Code and its Message (scrubbed), and
        the size a 416 names. The rest of what S3 writes there (SignatureProvided, a
        CanonicalRequest holding X-Amz-Security-Token) is a credential's echo."""
        error = response["Error"]
        # Each scrubbed: a peer that echoes the request may put its query in either.
        code, message = (self._scrub(str(error.get(name, ""))) for name in ("Code", "Message"))
        kept = {"Code": code, "Message": message}
        if "ActualObjectSize" in error:
            kept["ActualObjectSize"] = str(error["ActualObjectSize"])[:40]
        response["Error"] = kept
        return response

    def _scrub(self, text: str) -> str:
        """``text`` from the server, without this URL's secrets, any query, URL or
        credential's value, and at most ``_MAX_SHOWN`` characters."""
        for secret, shown in self._secrets:
            if secret:
                text = text.replace(secret, shown)
        return scrubbed(text, _MAX_SHOWN)

    def _scrubbed(self, exc: BotoCoreError) -> Exception:
        """A new error for ``exc``, its message with every URL as shown: aiohttp names
        URLs in its errors (of the hop that failed, which a redirect may have led to).
        Retried as ``exc`` would be, unless the answer was not HTTP at all."""
        error = exc.kwargs.get("error")
        if isinstance(error, aiohttp.TooManyRedirects):
            return self.error(
                f"too many redirects: gave up after {len(error.history)} redirects; not retried"
            )
        if isinstance(error, (aiohttp.RedirectClientError, aiohttp.InvalidURL)):
            # A Location that is not an http(s) URL (data:, javascript:, file:) or not
            # a URL at all: not quoted (no part of it can be shown safely), not retried.
            return self.error("the server answered with a redirect to an unsupported URL")
        if type(error) is aiohttp.ClientResponseError:  # not a subclass: a proxy's 407...
            # aiohttp could not parse the answer (a malformed Content-Length, a status
            # line that is not HTTP): the server's, and no retry will change it.
            return self.error(f"the server's answer is not valid HTTP: {_reason(error)}")
        message = str(exc)
        for secret, shown in self._secrets:
            if secret:
                message = message.replace(secret, shown)
        message = scrubbed(message)
        if isinstance(exc, SSLError):
            return _ScrubbedSSL(message=message)
        return _Scrubbed(message=message)


class _Scrubbed(HTTPClientError):  # type: ignore[misc]  # botocore is untyped
    """A transport error (retried as one), its message with the URLs' secrets taken out."""

    fmt = "{message}"


class _ScrubbedSSL(SSLError):  # type: ignore[misc]  # botocore is untyped
    """A TLS failure (not retried), its message with the URLs' secrets taken out."""

    fmt = "{message}"


def _reason(error: aiohttp.ClientResponseError) -> str:
    """What aiohttp found wrong with an answer, without the bytes it quotes after it: a
    peer that echoes the request sends back its target, whose query is a credential.
    aiohttp's pure-Python parser wraps a failure of its own (``int()`` of a 5000-digit
    Content-Length) in errors without text: then the text of the one they wrap."""
    said = str(error.message)
    cause = error.__cause__
    for _ in range(3):  # aiohttp's error, its parser's, and what the parser met
        if said.strip() or cause is None:
            break
        text = str(getattr(cause, "message", cause))
        said = f"{type(cause).__name__}: {text}" if text.strip() else ""
        cause = cause.__cause__
    reason = " ".join(said.split("\n\n", 1)[0].split()).rstrip(":")
    reason = _QUERY_IN_TEXT.sub("?<query>", scrubbed(reason, 10 * _MAX_SHOWN))
    return reason[:_MAX_SHOWN] + "..." if len(reason) > _MAX_SHOWN else reason


def _names_no_size(exc: ClientError) -> bool:
    """A 416 with neither ``ActualObjectSize`` nor a ``Content-Range`` to say the size."""
    response: Mapping[str, Any] = exc.response
    metadata = response.get("ResponseMetadata", {})
    return (
        metadata.get("HTTPStatusCode") == 416
        and "ActualObjectSize" not in response.get("Error", {})
        and "content-range" not in metadata.get("HTTPHeaders", {})
    )


def _empty(exc: ClientError) -> bool:
    """A 416 that says the object is empty (S3's ``ActualObjectSize``, or a
    ``Content-Range: bytes */0``)."""
    response: Mapping[str, Any] = exc.response
    metadata = response.get("ResponseMetadata", {})
    if metadata.get("HTTPStatusCode") != 416:
        return False
    actual = response.get("Error", {}).get("ActualObjectSize")
    content_range = metadata.get("HTTPHeaders", {}).get("content-range")
    return bool(actual == "0" or content_range == "bytes */0")
