"""A lean GetObject and HeadObject: botocore prepares one request per bucket, asyncdl
signs the rest.

A plain ``client.get_object`` spends most of its CPU on work that is the same for
every object of a bucket: parameter validation and serialization, a dozen event
hooks, endpoint-ruleset resolution, the User-Agent string, and parsing response
headers (Last-Modified) the engine never reads. For tiny objects that CPU, not the
network, is the ceiling.

So, once per (bucket, operation, arguments), the client builds the request for a
sentinel key through its full pipeline (endpoint rules, addressing style, every
argument's header or query parameter, User-Agent), and a ``before-send`` hook
captures that prepared request instead of sending it. Each real request copies it
with the real key, adds Range and If-Match, is signed as botocore's ``S3SigV4Auth``
signs it (:mod:`asyncdl._wire.sigv4`, with the parts fixed per template prepared once) with
the client's current (refreshing) credentials, and goes out on the aiohttp session
of the client's own HTTP session (same pool, proxies, TLS and timeouts; see
:mod:`asyncdl._wire.lean_send`). A GET's body is the same aiobotocore streaming body
``get_object`` returns.

A client that signs nothing (``signature_version=botocore.UNSIGNED``: a public
bucket's anonymous access) prepares a template without ``Authorization``; its
requests go out as prepared, unsigned, on this same path (a tiny object's GET costs
a third of the CPU ``get_object`` spends on it, as a signed one's does).

A client that validates response checksums itself (``response_checksum_validation=
"when_supported"``, botocore's default) is served here only when the engine verifies
(``validate`` not ``"off"``): asyncdl then checks every byte once, its way (ranges
included, which botocore never checks); with ``validate="off"`` such a client's GETs
stay with ``get_object``, whose check of whole-object bodies is then not lost.

Anything else this cannot reproduce exactly falls back to ``get_object``: a signer
other than SigV4 (SigV4a, S3 Express sessions), a non-aiohttp HTTP backend, and
redirects. botocore follows a region redirect and remembers the bucket's region, so
after one the bucket's templates are captured again, signed for that region; a
bucket whose new template is redirected too sends its GETs with ``get_object`` from
then on.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from http.client import responses
from typing import TYPE_CHECKING, Any
from urllib.parse import quote
from xml.etree import ElementTree

from botocore.exceptions import ClientError

from .body_reader import read_error_body
from .lean_send import Route, route_for
from .lean_send import send as send_on
from .own_http import OwnResponse
from .request_args import ExtraArgs

# aiobotocore and botocore's signer are imported where a client's requests need them:
# a URL download shares this module's answers and errors and never loads them.
if TYPE_CHECKING:
    from aiobotocore.httpsession import AIOHTTPSession
    from aiobotocore.response import AioStreamingBody

    from .sigv4 import Signer

_SENTINEL = "asyncdl-template-7f3a9c"
# Headers the signer sets per request, or that are unique per request.
_PER_REQUEST = frozenset(
    {
        "authorization",
        "x-amz-date",
        "x-amz-security-token",
        "amz-sdk-invocation-id",
        "range",
        "if-match",
    }
)
_SIGV4 = "AWS4-HMAC-SHA256 Credential="
#: The SSE-C key (base64), hidden in reprs. Its MD5 is not: S3 echoes it in every
#: response, and it names the key without revealing it.
_SECRET_HEADERS = frozenset({"x-amz-server-side-encryption-customer-key"})
#: Templates, and buckets remembered for redirects, kept per client: per-object
#: VersionIds (or a service meeting many buckets) would grow them forever.
_MAX_CACHED = 256
#: What is read of an error answer's body (S3's XML error is far smaller).
MAX_ERROR_BODY = 64 * 1024
#: botocore's own read timeout, for a :class:`SignedGets` not given the engine's.
_BOTOCORE_READ_TIMEOUT = 60.0
#: (bucket, operation, the arguments as sorted items): what one template serves.
_CacheKey = tuple[str, str, tuple[tuple[str, str | bytes], ...]]
#: The operations with a lean path, and the HTTP method each sends.
METHODS = {"GetObject": "GET", "HeadObject": "HEAD"}
#: Digits of the largest Content-Length taken (below 2**63, ~9.2 EB): a longer one is
#: an error, not a number to convert (Python's int() refuses over 4300 digits anyway).
_MAX_LENGTH_DIGITS = 18


def body_length(headers: Mapping[str, str]) -> int | None:
    """The answer's Content-Length; ``None`` when it sent none (a chunked body, or one
    that ends when the connection does: its size is unknown, RFC 9112 §6.3).

    Anything but one plain decimal (a list of the same value, as RFC 9110 §8.6
    allows) is ``ValueError``: ``-1``, ``1e3``, ``+5``, two different values."""
    getall = getattr(headers, "getall", None)
    raw = getall("content-length", []) if getall is not None else None
    if raw is None:
        value = headers.get("content-length")
        raw = [] if value is None else [value]
    if not raw:
        return None
    values = {item.strip() for field in raw for item in str(field).split(",")}
    if len(values) != 1:
        raise ValueError(f"conflicting Content-Length values {_short(', '.join(raw))}")
    (value,) = values
    if not (value.isascii() and value.isdigit()) or len(value) > _MAX_LENGTH_DIGITS:
        raise ValueError(f"an invalid Content-Length {_short(value)}")
    return int(value)


def _short(text: str) -> str:
    """``text`` quoted, cut to a length a message can hold."""
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text)} characters)"


class _Captured(Exception):
    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


class Fallback(Exception):
    """This request must go through ``get_object`` instead."""


@dataclass(frozen=True, slots=True, repr=False)
class GetTemplate:
    """A prepared GetObject with the key left out."""

    url_prefix: str
    url_suffix: str
    headers: tuple[tuple[str, str], ...]
    #: Captured after a GET of this bucket was redirected (botocore knew its region).
    after_redirect: bool = False
    #: Signs each request as botocore would; ``None`` for an unsigned (anonymous) client.
    signer: Signer | None = None
    #: ``GetObject`` or ``HeadObject``.
    operation: str = "GetObject"
    #: The aiohttp session and proxy of the client's endpoint; ``None``: aiobotocore's
    #: ``send`` sends it.
    route: Route | None = None

    def __repr__(self) -> str:
        # The headers may carry the SSE-C key: a template must be safe to log.
        headers = tuple(
            (name, "***" if name.lower() in _SECRET_HEADERS else value)
            for name, value in self.headers
        )
        return (
            f"GetTemplate(url_prefix={self.url_prefix!r}, url_suffix={self.url_suffix!r}, "
            f"headers={headers!r}, scope={self.signer.scope if self.signer else None!r}, "
            f"after_redirect={self.after_redirect!r}, "
            f"operation={self.operation!r})"
        )


@dataclass(slots=True)  # not frozen: one per request (see jobs.Job)
class RawResponse:
    status: int
    headers: Mapping[str, str]
    body: Any


class _Request:
    """What aiobotocore's ``AIOHTTPSession.send`` reads of a prepared request: the
    session keeps its proxies, timeouts, pool and error mapping; nothing is built
    that it would not read."""

    __slots__ = ("context", "headers", "method", "url")
    body = None
    stream_output = True

    def __init__(self, method: str, url: str, headers: dict[str, str]) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.context: dict[str, Any] = {}


class SignedGets:
    """Per-client cache of templates, and the sender. ``None`` from :func:`for_client`
    when the client is not one this path can serve exactly."""

    def __init__(
        self, client: Any, *, verifies: bool = True, read_timeout: float = _BOTOCORE_READ_TIMEOUT
    ) -> None:
        self.verifies = verifies
        #: Seconds an error answer's body may go without a byte (the engine's
        #: ``read_timeout``): it is read here, not by a body reader with a stall watch.
        self.read_timeout = read_timeout
        self._client = client
        self._session: AIOHTTPSession = client._endpoint.http_session
        self._credentials: Any = client._request_signer._credentials
        self._templates: dict[_CacheKey, asyncio.Future[GetTemplate | None]] = {}
        #: Buckets whose lean GETs were redirected: their templates are captured again.
        self._moved: set[str] = set()
        #: Buckets whose template was redirected although captured after a redirect:
        #: their GETs go to ``get_object`` (which follows redirects) from then on.
        self._unserved: set[str] = set()

    @classmethod
    def for_client(
        cls, client: Any, *, verifies: bool = True, read_timeout: float = _BOTOCORE_READ_TIMEOUT
    ) -> SignedGets | None:
        try:
            config = client.meta.config
            session = client._endpoint.http_session
            client._request_signer._credentials  # noqa: B018 - the attribute must exist
        except AttributeError:
            return None
        if getattr(config, "response_checksum_validation", None) != "when_required" and (
            not verifies
        ):
            return None  # botocore checks what this client's GETs bring: keep its check
        from aiobotocore.httpsession import AIOHTTPSession  # noqa: PLC0415 - see the imports

        if not isinstance(session, AIOHTTPSession):
            return None
        return cls(client, verifies=verifies, read_timeout=read_timeout)

    async def template(
        self, bucket: str, extra_args: ExtraArgs, operation: str = "GetObject"
    ) -> GetTemplate | None:
        """The template for this bucket, operation and these arguments (built once,
        shared).

        With ``ChecksumMode`` botocore would check the body's checksum as it is read;
        this path skips that, so only an engine that verifies checksums itself may
        send it here (it does whenever its ``validate`` policy is not ``"off"``).
        """
        if bucket in self._unserved or ("ChecksumMode" in extra_args and not self.verifies):
            return None
        cache_key = (bucket, operation, tuple(sorted(extra_args.items())))
        future = self._templates.get(cache_key)
        if future is not None and future.done():
            return future.result()  # the usual case: no shield, no await
        if future is None:
            if len(self._templates) >= _MAX_CACHED:
                self._templates.clear()
            future = asyncio.get_running_loop().create_future()
            self._templates[cache_key] = future
            try:
                future.set_result(await self._capture(bucket, extra_args, operation))
            except BaseException as exc:
                future.set_result(None)
                # Not kept, so a later GET tries again; a clear() or a redirect while
                # this capture ran may have dropped it (or put another in its place).
                if self._templates.get(cache_key) is future:
                    del self._templates[cache_key]
                if not isinstance(exc, Exception):
                    raise
        return await asyncio.shield(future)

    def redirected(self, bucket: str, template: GetTemplate) -> None:
        """A GET sent with ``template`` was redirected, and ``get_object`` has since
        followed the redirect (botocore now knows where the bucket lives).

        The bucket's templates are captured again, once: the new ones are signed for
        the bucket's region. Should one of those be redirected as well, capturing again
        would not help: the bucket's GETs go to ``get_object`` instead, rather than
        costing two round trips (and a capture) each.
        """
        unserved = template.after_redirect
        remembered = self._unserved if unserved else self._moved
        if len(remembered) >= _MAX_CACHED:
            remembered.clear()
        remembered.add(bucket)
        for cache_key, future in list(self._templates.items()):
            # A capture still in flight may be stale too: it is dropped when its own
            # GET is redirected.
            if cache_key[0] == bucket and future.done():
                cached = future.result()
                if cached is not None and (unserved or not cached.after_redirect):
                    del self._templates[cache_key]

    async def _capture(
        self, bucket: str, extra_args: ExtraArgs, operation: str
    ) -> GetTemplate | None:
        def grab(request: Any, **_: Any) -> None:
            # Other requests of this client may be in flight: take only the sentinel's.
            if _SENTINEL in request.url:
                raise _Captured(request)

        after_redirect = bucket in self._moved
        events = self._client.meta.events
        event = f"before-send.s3.{operation}"
        call = self._client.get_object if operation == "GetObject" else self._client.head_object
        # Each capture registers (and removes) its own handler: captures of other
        # buckets may be in flight, and one that lost its handler to another's
        # unregister would send its sentinel request for real.
        template = None  # stays so only if a handler swallowed the capture
        events.register_first(event, grab)
        try:
            await call(Bucket=bucket, Key=_SENTINEL, **extra_args)
        except _Captured as captured:
            template = _template_from(
                captured.request, operation=operation, after_redirect=after_redirect
            )
        finally:
            events.unregister(event, grab)
        if template is None:
            return None
        route = await route_for(self._session, template.url_prefix)
        return dataclasses.replace(template, route=route)

    async def send(
        self,
        template: GetTemplate,
        key: str,
        *,
        range_header: str | None = None,
        if_match: str | None = None,
        part_number: int | None = None,
    ) -> RawResponse:
        """Send the template's request for ``key``; a GET's body is left open (the
        caller reads and closes it), a HEAD's answer is released at once."""
        method = METHODS[template.operation]
        headers = dict(template.headers)
        extra: dict[str, str] = {}
        if range_header is not None:
            extra["Range"] = range_header
        if if_match is not None:
            extra["If-Match"] = if_match
        headers.update(extra)
        encoded_key = quote(key, safe="/~")  # botocore's percent_encode: UTF-8, then quote
        url = template.url_prefix + encoded_key + template.url_suffix
        if part_number is not None:
            url += f"{'&' if '?' in url else '?'}partNumber={part_number}"
        if template.signer is not None:
            credentials = await self._credentials.get_frozen_credentials()
            headers.update(
                template.signer.sign(
                    method, encoded_key, credentials, extra=extra, part_number=part_number
                )
            )
        if template.route is not None:
            headers["Accept-Encoding"] = "identity"  # as aiobotocore sends it
            raw = await send_on(template.route, method, url, headers, own=True)
            response_headers: Mapping[str, str] = raw.headers
        else:
            response = await self._session.send(_Request(method, url, headers))
            raw, response_headers = response.raw, response.headers
        status: int = raw.status
        if status < 300:
            if method == "HEAD":
                raw.release()
                return RawResponse(status, response_headers, None)
            if isinstance(raw, OwnResponse):
                # Its framing ends the body where Content-Length says (a shorter one is
                # a broken body): nothing for aiobotocore's body to check.
                return RawResponse(status, response_headers, raw)
            return RawResponse(status, response_headers, streaming_body(raw, response_headers))
        raw_body = await read_error_body(raw, self.read_timeout, MAX_ERROR_BODY)
        if status < 400 or (status == 400 and b"Region" in raw_body):
            raise Fallback(f"HTTP {status}: let botocore handle redirects")
        lowered = {name.lower(): value for name, value in response_headers.items()}
        raise ClientError(error_response(status, lowered, raw_body), template.operation)


def streaming_body(raw: Any, headers: Mapping[str, str]) -> AioStreamingBody:
    """aiobotocore's body of an open aiohttp answer; it checks the length at its end
    when one was sent (a malformed one is refused where the answer is parsed)."""
    from aiobotocore.response import AioStreamingBody  # noqa: PLC0415 - see the imports

    try:
        length = body_length(headers)
    except ValueError:
        length = None
    return AioStreamingBody(raw, length)


def _template_from(request: Any, *, operation: str, after_redirect: bool) -> GetTemplate | None:
    url: str = request.url
    if url.count(_SENTINEL) != 1:
        return None
    prefix, suffix = url.split(_SENTINEL)
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
        headers[name] = text
    lowered = {name.lower(): value for name, value in headers.items()}
    if "x-amz-s3session-token" in lowered:
        return None  # S3 Express: session auth, not SigV4 with the client's keys
    authorization = lowered.get("authorization")
    scope: tuple[str, str] | None = None
    if authorization is not None:
        if not authorization.startswith(_SIGV4):
            return None
        # Credential=AKID/DATE/REGION/SERVICE/aws4_request
        parts = authorization[len(_SIGV4) :].split(",", 1)[0].split("/")
        if len(parts) != 5:
            return None
        scope = (parts[2], parts[3])
    kept = tuple((n, v) for n, v in headers.items() if n.lower() not in _PER_REQUEST)
    signer = None
    if scope is not None:
        from .sigv4 import Signer  # noqa: PLC0415 - botocore's signer: see the imports

        payload_hash = lowered.get("x-amz-content-sha256")
        if payload_hash is None:
            return None  # not S3SigV4Auth's request: nothing here would sign it the same
        signer = Signer(
            url_prefix=prefix,
            url_suffix=suffix,
            headers=kept,
            payload_hash=payload_hash,
            scope=scope,
        )
    return GetTemplate(
        url_prefix=prefix,
        url_suffix=suffix,
        headers=kept,
        after_redirect=after_redirect,
        signer=signer,
        operation=operation,
    )


def error_response(status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The response dict botocore would build for an S3 error, for ClientError."""
    # botocore's answer to an error without a body (every HEAD's): the status as the
    # code, its reason phrase as the message.
    error = {"Code": str(status), "Message": "" if body else responses.get(status, "")}
    if body:
        try:
            root = ElementTree.fromstring(body)
        except ElementTree.ParseError:
            pass
        else:
            for child in root:
                if child.text is not None:
                    error[child.tag] = child.text
    return {
        "Error": error,
        "ResponseMetadata": {
            "HTTPStatusCode": status,
            "HTTPHeaders": dict(headers),
            "RequestId": headers.get("x-amz-request-id", ""),
        },
    }
