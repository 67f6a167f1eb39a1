"""asyncdl's errors, and the one place where lower-layer errors become them.

Every failure of a download surfaces as a :class:`DownloadError` (or a subclass)
carrying ``bucket`` and ``key``; botocore and aiohttp exceptions stay behind
``__cause__``. A message built from an exception's text is scrubbed (:func:`scrubbed`):
a peer's words can hold anything it was sent (an echoing server quotes the request
line, a presigned URL's query, or a request header), so URLs lose their query, a
query or a credential field is hidden, and the text is cut to a bounded length.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
from botocore import exceptions as botocore_errors

#: What is shown for a URL that cannot be read as one.
UNREADABLE_URL = "<url>"
#: Anything in a message that may be a URL (up to a quote, a space or a bracket).
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>()\[\]{}]*")
#: A query in a message (of a request line a peer sent back): ``?`` then ``name=``.
_QUERY_IN_TEXT = re.compile(r"\?[^\s'\"<>?=]*=[^\s'\"<>]*")
#: A request header that carries a credential, as a peer may quote it back.
_SECRET_FIELD = re.compile(
    r"(?i)\b(authorization|proxy-authorization|cookie|x-amz-security-token"
    r"|x-amz-server-side-encryption-customer-key)\s*:[^\r\n]*"
)
#: Such a field whose line lost its colon (an echoed request, quoted by aiohttp's
#: pure-Python parser as a malformed header): its name as sent, then a space. Matched
#: by case, so that prose ("the authorization header is malformed") is left whole.
_SECRET_FIELD_NO_COLON = re.compile(
    r"\b(Authorization|Proxy-Authorization|Cookie|X-Amz-Security-Token|x-amz-security-token"
    r"|X-Amz-Server-Side-Encryption-Customer-Key"
    r"|x-amz-server-side-encryption-customer-key)[ \t][^\r\n]*"
)
#: A query parameter or an ``Authorization`` field that carries a credential.
_SECRET_PARAM = re.compile(
    r"(?i)\b(x-amz-signature|x-amz-credential|x-amz-security-token|signature|credential"
    r"|awsaccesskeyid)=[^&\s'\"<>,]*"
)
#: The most of an exception's own text a message shows.
MOST_SHOWN = 300


def shown_url(url: object) -> str:
    """``url`` as it may be shown: scheme, host, port and path only (the query of a
    presigned URL is its credential)."""
    if not isinstance(url, str):
        return UNREADABLE_URL
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return UNREADABLE_URL
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def scrub_urls(text: str) -> str:
    """``text`` with each URL in it as :func:`shown_url` shows it (no query, fragment
    or user info)."""
    return _URL_IN_TEXT.sub(lambda found: shown_url(found.group()), text)


def scrubbed(text: str, most: int = MOST_SHOWN) -> str:
    """``text`` (an exception's, a peer's) as a message may show it: each URL without
    its query, fragment or login; any other query (``?name=...``) as ``?<query>``; the
    value of a credential's header or parameter (``Authorization:``,
    ``X-Amz-Security-Token``, ``Signature=``...) hidden; on one line, and cut to
    ``most`` characters."""
    text = scrub_urls(text)
    text = _QUERY_IN_TEXT.sub("?<query>", text)
    text = _SECRET_FIELD.sub(lambda found: f"{found.group(1)}: <hidden>", text)
    text = _SECRET_FIELD_NO_COLON.sub(lambda found: f"{found.group(1)}: <hidden>", text)
    text = _SECRET_PARAM.sub(lambda found: f"{found.group(1)}=<hidden>", text)
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 3] + "..."


def describe(exc: BaseException) -> str:
    """``exc`` as a message or a log line may show it: its type, and its text
    :func:`scrubbed`."""
    text = scrubbed(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def source_name(bucket: str, key: str) -> str:
    """``s3://bucket/key``, or for a URL download (no bucket) the URL as shown."""
    return f"s3://{bucket}/{key}" if bucket else key


class DownloadError(Exception):
    """Root of asyncdl's errors: a download of ``bucket``/``key`` failed (of a URL:
    ``bucket`` is ``""`` and ``key`` the URL without its query string).

    ``str(error)`` is ``"s3://bucket/key: message"``. The botocore or aiohttp
    exception behind it, if any, is its ``__cause__``.
    """

    def __init__(self, message: str, *, bucket: str, key: str) -> None:
        super().__init__(message)
        #: What went wrong, without the object's name (``str(error)`` adds it).
        self.message = message
        #: The object's bucket (``""`` for a URL download).
        self.bucket = bucket
        #: The object's key (for a URL download, the URL without its query string).
        self.key = key
        #: S3 requests the failed download made before it gave up.
        self.requests = 0

    def __str__(self) -> str:
        # A URL download has no bucket: its key is the URL as shown (no query).
        return f"{source_name(self.bucket, self.key)}: {self.message}"


class InvalidRequestError(DownloadError, ValueError):
    """The caller asked for something that cannot be done; nothing was sent or written."""


class ObjectNotFoundError(DownloadError):
    """The key, or its bucket, does not exist (HTTP 404)."""


class AccessDeniedError(DownloadError):
    """S3 refused the request (HTTP 403): permissions, credentials or signature."""


class ObjectChangedError(DownloadError):
    """The object changed while it was being downloaded (HTTP 412, or a new ETag)."""


class ChecksumError(DownloadError):
    """The bytes do not match S3's checksum, or ``validate="required"`` could not
    verify them. A download leaves its target untouched; a stream raises it after
    the bytes it checked were yielded (discard what was kept of them)."""

    def __init__(self, message: str, *, bucket: str, key: str, mismatch: bool = True) -> None:
        super().__init__(message, bucket=bucket, key=key)
        #: ``True``: the bytes differed from S3's checksum (worth one fresh attempt);
        #: ``False``: they could not be checked, which no attempt would change.
        self.mismatch = mismatch


class TargetBusyError(DownloadError):
    """Another download (in this process or another) is writing the same target's
    partial file (``resume=True``); nothing of it was touched."""


class RetryableError(Exception):
    """Internal: a failure worth another attempt (never escapes the engine)."""


#: Codes that mean "slow down" (S3's, and those of services that speak its protocol,
#: as botocore's retry handler knows them): retried, and they lower adaptive concurrency.
THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "RequestThrottled",
        "TooManyRequestsException",
        "SlowDown",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
    }
)
_RETRYABLE_CODES = THROTTLE_CODES | {"RequestTimeout", "InternalError", "ServiceUnavailable"}
_RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

# Errors of the transport: the request or its body did not make it through.
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    botocore_errors.HTTPClientError,  # connection closed/reset, read timeout
    botocore_errors.EndpointConnectionError,  # refused, unreachable
    botocore_errors.ConnectTimeoutError,
    botocore_errors.ProxyConnectionError,
    botocore_errors.ResponseStreamingError,
    botocore_errors.IncompleteReadError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientConnectionError,
    # A body whose framing broke mid-way (a chunk-size line that is not one: a peer
    # echoing the request, a cut in the wrong place): retried as a cut connection.
    HttpProcessingError,
    ConnectionError,
    asyncio.TimeoutError,
)


def client_error_status(exc: botocore_errors.ClientError) -> tuple[int, str]:
    """The HTTP status and S3 error code of a botocore ``ClientError``."""
    response: dict[str, Any] = exc.response
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    code = str(response.get("Error", {}).get("Code") or status)
    return status, code


def is_retryable(exc: BaseException) -> bool:
    """Whether another attempt of the same request may succeed."""
    if isinstance(exc, botocore_errors.SSLError):
        return False  # a certificate problem does not heal by itself
    if isinstance(exc, (RetryableError, *_TRANSPORT_ERRORS)):
        return True
    if isinstance(exc, botocore_errors.ClientError):
        status, code = client_error_status(exc)
        return status in _RETRYABLE_STATUS or code in _RETRYABLE_CODES
    return False


class OtherLoop(RuntimeError):
    """An engine (or a reader, stream or listing it made) used from an event loop
    other than the one that opened it: its connections and waiters are that loop's."""

    def __init__(self) -> None:
        super().__init__(
            "this Engine was opened on another event loop; an Engine is used on the "
            "loop that opened it (open one per loop, or per thread that runs one)"
        )


class EngineClosed(RuntimeError):
    """The engine closed while a download, stream or listing ran on it: its next
    request is not sent. Not retried; ``translate`` names it for the object."""

    def __init__(self) -> None:
        super().__init__("the Engine was closed while this ran")


class RangeNotSatisfiable(Exception):
    """A 416 answer; ``actual_size`` is S3's ``ActualObjectSize`` when it sent one.
    The first GET of a read takes it as an answer (the size); anywhere else the object
    got shorter than the bytes asked of it: ``translate`` says it changed."""

    def __init__(self, actual_size: int | None, etag: str | None) -> None:
        super().__init__(f"416 InvalidRange (ActualObjectSize={actual_size})")
        self.actual_size = actual_size
        self.etag = etag


def translate(exc: BaseException, *, bucket: str, key: str, attempts: int = 1) -> DownloadError:
    """Map any failure of a request to the :class:`DownloadError` a user can act on."""
    if isinstance(exc, DownloadError):
        return exc
    where = {"bucket": bucket, "key": key}
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    if isinstance(exc, botocore_errors.ClientError):
        status, code = client_error_status(exc)
        message = scrubbed(str(exc.response.get("Error", {}).get("Message") or code))
        code = scrubbed(code, 100)
        if status == 404:
            if code == "NoSuchBucket" and bucket:
                return ObjectNotFoundError(f"bucket {bucket!r} does not exist ({code})", **where)
            return ObjectNotFoundError(f"no such object ({code})", **where)
        if status == 403:
            return AccessDeniedError(f"access denied ({code}: {message})", **where)
        if status == 412:
            return ObjectChangedError(
                f"the object changed during the download ({code}); try again", **where
            )
        return DownloadError(f"S3 answered HTTP {status} {code}{tried}: {message}", **where)
    if isinstance(exc, EngineClosed | OtherLoop):
        return DownloadError(str(exc), **where)
    if isinstance(exc, RangeNotSatisfiable):
        now = "" if exc.actual_size is None else f", it is now {exc.actual_size} bytes"
        return ObjectChangedError(f"the server refused bytes it had (HTTP 416){now}", **where)
    if isinstance(
        exc, botocore_errors.NoCredentialsError | botocore_errors.PartialCredentialsError
    ):
        return AccessDeniedError(
            f"no AWS credentials found ({scrubbed(str(exc))}); set "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            "or a profile",
            **where,
        )
    if isinstance(exc, botocore_errors.FlexibleChecksumError):
        return ChecksumError(
            f"botocore's checksum check failed: {scrubbed(str(exc))}",
            bucket=bucket,
            key=key,
            mismatch=True,
        )
    if isinstance(exc, botocore_errors.ParamValidationError):
        return InvalidRequestError(f"invalid request parameters: {scrubbed(str(exc))}", **where)
    if isinstance(exc, (RetryableError, *_TRANSPORT_ERRORS)):
        # aiohttp quotes what it could not parse: any bytes, a request a peer echoed.
        cause = scrubbed(str(exc)) or type(exc).__name__
        return DownloadError(f"transfer failed{tried}: {cause}", **where)
    if isinstance(exc, botocore_errors.SSLError):
        # An OSError too (through requests' exceptions): not the disk's, and not retried.
        return DownloadError(f"TLS failed: {scrubbed(str(exc))}", **where)
    if isinstance(exc, OSError):
        return DownloadError(f"local file error: {scrubbed(str(exc))}", **where)
    return DownloadError(f"unexpected error {describe(exc)}", **where)
