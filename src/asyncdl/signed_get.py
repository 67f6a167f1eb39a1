"""A lean GetObject: botocore prepares one request per bucket, asyncdl signs the rest.

A plain ``client.get_object`` spends most of its CPU on work that is the same for
every object of a bucket: parameter validation and serialization, a dozen event
hooks, endpoint-ruleset resolution, the User-Agent string, and parsing response
headers (Last-Modified) the engine never reads. For tiny objects that CPU, not the
network, is the ceiling.

So, once per (bucket, GET arguments), the client builds a GetObject for a sentinel
key through its full pipeline (endpoint rules, addressing style, every argument's
header or query parameter, User-Agent), and a ``before-send`` hook captures that
prepared request instead of sending it. Each real GET copies it with the real key,
adds Range and If-Match, is signed with botocore's own SigV4 signer using the
client's current (refreshing) credentials, and goes out through the client's own
HTTP session (same pool, proxies, TLS and timeouts). Its body is the same
aiobotocore streaming body ``get_object`` returns.

Anything this cannot reproduce exactly falls back to ``get_object``: a client that
validates response checksums, a signer other than SigV4 (SigV4a, S3 Express
sessions), a non-aiohttp HTTP backend, and redirects (botocore follows region
redirects; this path hands the request back to it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree

from aiobotocore.httpsession import AIOHTTPSession
from aiobotocore.response import AioStreamingBody
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import ClientError
from botocore.utils import percent_encode

from .request_args import ExtraArgs

_SENTINEL = "asyncdl-template-7f3a9c"
# Headers the signer sets per request, or that are unique per request.
_PER_REQUEST = frozenset(
    {
        "authorization",
        "x-amz-date",
        "x-amz-content-sha256",
        "x-amz-security-token",
        "amz-sdk-invocation-id",
        "range",
        "if-match",
    }
)
_SIGV4 = "AWS4-HMAC-SHA256 Credential="
_MAX_ERROR_BODY = 64 * 1024
#: (bucket, the GET arguments as sorted items): what one template serves.
_CacheKey = tuple[str, tuple[tuple[str, str | bytes], ...]]


class _Captured(Exception):
    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


class Fallback(Exception):
    """This request must go through ``get_object`` instead."""


@dataclass(frozen=True, slots=True)
class GetTemplate:
    """A prepared GetObject with the key left out."""

    url_prefix: str
    url_suffix: str
    headers: tuple[tuple[str, str], ...]
    #: (region, service) to sign for; ``None`` for an unsigned (anonymous) client.
    scope: tuple[str, str] | None


@dataclass(frozen=True, slots=True)
class RawResponse:
    status: int
    headers: Mapping[str, str]
    body: Any


class SignedGets:
    """Per-client cache of templates, and the sender. ``None`` from :func:`for_client`
    when the client is not one this path can serve exactly."""

    def __init__(self, client: Any, *, verifies: bool = True) -> None:
        self.verifies = verifies
        self._client = client
        self._session: AIOHTTPSession = client._endpoint.http_session
        self._credentials: Any = client._request_signer._credentials
        self._templates: dict[_CacheKey, asyncio.Future[Any]] = {}

    @classmethod
    def for_client(cls, client: Any, *, verifies: bool = True) -> SignedGets | None:
        try:
            config = client.meta.config
            session = client._endpoint.http_session
            client._request_signer._credentials  # noqa: B018 - the attribute must exist
        except AttributeError:
            return None
        if getattr(config, "response_checksum_validation", None) != "when_required":
            return None  # botocore would validate checksums on this path; keep it
        if not isinstance(session, AIOHTTPSession):
            return None
        return cls(client, verifies=verifies)

    async def template(self, bucket: str, extra_args: ExtraArgs) -> GetTemplate | None:
        """The template for this bucket and these arguments (built once, shared).

        With ``ChecksumMode`` botocore would check the body's checksum as it is read;
        this path skips that, so only an engine that verifies checksums itself may
        send it here (it does whenever its ``validate`` policy is not ``"off"``).
        """
        if "ChecksumMode" in extra_args and not self.verifies:
            return None
        cache_key = (bucket, tuple(sorted(extra_args.items())))
        future = self._templates.get(cache_key)
        if future is None:
            if len(self._templates) >= 256:  # per-object VersionIds would grow it forever
                self._templates.clear()
            future = asyncio.get_running_loop().create_future()
            self._templates[cache_key] = future
            try:
                future.set_result(await self._capture(bucket, extra_args))
            except BaseException as exc:
                future.set_result(None)
                del self._templates[cache_key]
                if not isinstance(exc, Exception):
                    raise
        result: GetTemplate | None = await asyncio.shield(future)
        return result

    async def _capture(self, bucket: str, extra_args: ExtraArgs) -> GetTemplate | None:
        def grab(request: Any, **_: Any) -> None:
            # Other GETs of this client may be in flight: take only the sentinel's.
            if _SENTINEL in request.url:
                raise _Captured(request)

        events = self._client.meta.events
        unique_id = f"asyncdl-capture-{id(self)}"
        events.register_first("before-send.s3.GetObject", grab, unique_id=unique_id)
        try:
            await self._client.get_object(Bucket=bucket, Key=_SENTINEL, **extra_args)
        except _Captured as captured:
            return _template_from(captured.request)
        finally:
            events.unregister("before-send.s3.GetObject", unique_id=unique_id)
        return None  # pragma: no cover - a handler swallowed the capture

    async def send(
        self,
        template: GetTemplate,
        key: str,
        *,
        range_header: str | None,
        if_match: str | None,
        part_number: int | None = None,
    ) -> RawResponse:
        headers = dict(template.headers)
        if range_header is not None:
            headers["Range"] = range_header
        if if_match is not None:
            headers["If-Match"] = if_match
        url = template.url_prefix + percent_encode(key, safe="/~") + template.url_suffix
        if part_number is not None:
            url += f"{'&' if '?' in url else '?'}partNumber={part_number}"
        request = AWSRequest(method="GET", url=url, headers=headers)
        request.stream_output = True
        if template.scope is not None:
            credentials = await self._credentials.get_frozen_credentials()
            region, service = template.scope
            S3SigV4Auth(credentials, service, region).add_auth(request)
        response = await self._session.send(request.prepare())
        status: int = response.status_code
        if status < 300:
            length = int(response.headers.get("content-length", 0))
            return RawResponse(status, response.headers, AioStreamingBody(response.raw, length))
        raw_body = await response.raw.content.read(_MAX_ERROR_BODY)
        response.raw.release()
        if status < 400 or (status == 400 and b"Region" in raw_body):
            raise Fallback(f"HTTP {status}: let botocore handle redirects")
        raise ClientError(_error_response(status, response.headers, raw_body), "GetObject")


def _template_from(request: Any) -> GetTemplate | None:
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
    return GetTemplate(url_prefix=prefix, url_suffix=suffix, headers=kept, scope=scope)


def _error_response(status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The response dict botocore would build for an S3 error, for ClientError."""
    error: dict[str, str] = {"Code": str(status), "Message": ""}
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
