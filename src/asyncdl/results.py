"""What a finished download reports."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from .errors import DownloadError


@dataclass(frozen=True, slots=True)
class DownloadResult:
    """One object written to ``path``: what :meth:`~asyncdl.Engine.download` returns,
    and what the bulk downloads yield for each item (then ``error`` holds a failure).
    """

    #: The object's bucket (``""`` for a URL download).
    bucket: str
    #: The object's key (for a URL download, the URL without its query string).
    key: str
    #: Where the object now is. A key a prefix's download refused (one that cannot be a
    #: file under its destination) has no file of its own: its path is the destination.
    path: Path
    #: Object size in bytes, as written. On a failed result, the size the request
    #: carried (a listing's, say), or ``None`` when it was not known.
    size: int | None
    #: The ETag every request was pinned to (quoted, as S3 sends it). ``None`` only when
    #: the server sent none (then the object came in one GET), or on a failed result.
    etag: str | None
    #: Name of the strategy that ran: ``"get-first"``, ``"head-first"`` or a
    #: :class:`~asyncdl.Strategy`'s own. A result that failed or was skipped before
    #: one ran carries the one asked for (``"auto"``, say).
    strategy: str
    #: S3 requests this download made, retries included.
    requests: int
    #: Why the download failed, in bulk downloads; ``None`` on success.
    error: DownloadError | None = None
    #: S3's checksum of the object, ``"ALGORITHM:base64"`` (``-N`` when COMPOSITE), if seen.
    checksum: str | None = None
    #: Whether every byte was checked against S3's checksum.
    verified: bool = False
    #: Why the object was not verified (``None`` when it was).
    unverified_reason: str | None = None
    #: Bytes kept from an earlier attempt's partial file (``resume=True``): not fetched
    #: again.
    reused_bytes: int = 0
    #: Why a partial file from an earlier attempt was found and not used (the object
    #: changed, its journal was damaged, ...); ``None`` when none was found or it was used.
    partial_discarded: str | None = None
    #: Already there (``skip_existing``): nothing was sent and the file was not touched.
    skipped: bool = False

    @property
    def ok(self) -> bool:
        """Whether the object was downloaded or skipped: ``error`` is ``None``."""
        return self.error is None


#: The fields, in the order :func:`finished` sets them; each one's slot setter.
_FIELDS = (
    "bucket",
    "key",
    "path",
    "size",
    "etag",
    "strategy",
    "requests",
    "error",
    "checksum",
    "verified",
    "unverified_reason",
    "reused_bytes",
    "partial_discarded",
    "skipped",
)
if set(_FIELDS) != {field.name for field in fields(DownloadResult)}:  # pragma: no cover
    raise AssertionError("finished() must set every field of DownloadResult")
_SLOTS = tuple(DownloadResult.__dict__[name].__set__ for name in _FIELDS)


def finished(
    bucket: str,
    key: str,
    path: Path,
    *,
    size: int,
    etag: str | None,
    strategy: str,
    requests: int,
    checksum: str | None,
    verified: bool,
    unverified_reason: str | None,
    reused_bytes: int,
    partial_discarded: str | None,
) -> DownloadResult:
    """A download's successful result, equal to (and as frozen as) the one
    ``DownloadResult(...)`` makes of the same values, for about two thirds of its
    instructions: a frozen dataclass sets each field through ``object.__setattr__``,
    here each slot is set directly. One is made per object of a bulk download."""
    result = object.__new__(DownloadResult)
    (set_bucket, set_key, set_path, set_size, set_etag, set_strategy, set_requests) = _SLOTS[:7]
    set_bucket(result, bucket)
    set_key(result, key)
    set_path(result, path)
    set_size(result, size)
    set_etag(result, etag)
    set_strategy(result, strategy)
    set_requests(result, requests)
    (set_error, set_checksum, set_verified, set_reason, set_reused, set_discarded, set_skipped) = (
        _SLOTS[7:]
    )
    set_error(result, None)
    set_checksum(result, checksum)
    set_verified(result, verified)
    set_reason(result, unverified_reason)
    set_reused(result, reused_bytes)
    set_discarded(result, partial_discarded)
    set_skipped(result, False)
    return result
