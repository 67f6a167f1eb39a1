"""asyncdl's errors, and the one place where lower-layer errors become them.

Every failure of a download surfaces as a :class:`DownloadError` (or a subclass)
carrying ``bucket`` and ``key``; botocore and aiohttp exceptions stay behind
``__cause__``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from botocore import exceptions as botocore_errors


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


class RangeNotSatisfiable(Exception):
    """A 416 answer; ``actual_size`` is S3's ``ActualObjectSize`` when it sent one.
    The first GET of a read takes it as an answer (the size); anywhere else the object
    got shorter than the bytes asked of it: ``translate`` says it changed."""

    def __init__(self, actual_size: int | None, etag: str | None) -> None:
        super().__init__(f"416 InvalidRange (ActualObjectSize={actual_size})")
        self.actual_size = actual_size
        self.etag = etag


#: The most of a transport failure's own text a message shows.
_MOST_CAUSE = 300


def translate(exc: BaseException, *, bucket: str, key: str, attempts: int = 1) -> DownloadError:
    """Map any failure of a request to the :class:`DownloadError` a user can act on."""
    if isinstance(exc, DownloadError):
        return exc
    where = {"bucket": bucket, "key": key}
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    if isinstance(exc, botocore_errors.ClientError):
        status, code = client_error_status(exc)
        message = exc.response.get("Error", {}).get("Message") or code
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
    if isinstance(exc, RangeNotSatisfiable):
        now = "" if exc.actual_size is None else f", it is now {exc.actual_size} bytes"
        return ObjectChangedError(f"the server refused bytes it had (HTTP 416){now}", **where)
    if isinstance(
        exc, botocore_errors.NoCredentialsError | botocore_errors.PartialCredentialsError
    ):
        return AccessDeniedError(
            f"no AWS credentials found ({exc}); set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            "or a profile",
            **where,
        )
    if isinstance(exc, botocore_errors.FlexibleChecksumError):
        return ChecksumError(
            f"botocore's checksum check failed: {exc}", bucket=bucket, key=key, mismatch=True
        )
    if isinstance(exc, botocore_errors.ParamValidationError):
        return InvalidRequestError(f"invalid request parameters: {exc}", **where)
    if isinstance(exc, (RetryableError, *_TRANSPORT_ERRORS)):
        cause = str(exc) or type(exc).__name__
        if len(cause) > _MOST_CAUSE:  # aiohttp quotes what it could not parse: any bytes
            cause = cause[: _MOST_CAUSE - 3] + "..."
        return DownloadError(f"transfer failed{tried}: {cause}", **where)
    if isinstance(exc, OSError):
        return DownloadError(f"local file error: {exc}", **where)
    return DownloadError(f"unexpected error {type(exc).__name__}: {exc}", **where)
