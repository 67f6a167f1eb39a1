"""What a caller may ask of a download: bucket, key, GetObject arguments and target path.

Validated before any request is sent or any file is touched.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from ..config import is_int_at_least
from ..errors import InvalidRequestError

#: GetObject arguments that asyncdl sends on every request of a download, HEAD included.
#: Range, IfMatch and PartNumber are the engine's own.
ALLOWED_EXTRA_ARGS = frozenset(
    {
        "VersionId",
        "SSECustomerAlgorithm",
        "SSECustomerKey",
        "SSECustomerKeyMD5",
        "RequestPayer",
        "ExpectedBucketOwner",
        "ChecksumMode",
    }
)
_SECRET_ARGS = frozenset({"SSECustomerKey"})
#: Arguments that may be given as ``bytes`` as well as ``str``, as boto3 takes them
#: (``SSECustomerKey=os.urandom(32)`` in its examples): botocore base64-encodes either.
_BYTES_ARGS = frozenset({"SSECustomerKey"})

#: GetObject arguments as asyncdl takes them: strings, and ``bytes`` where boto3 takes
#: them too (the SSE-C key).
ExtraArgs = Mapping[str, str | bytes]

_EMPTY: ExtraArgs = MappingProxyType({})

# botocore's own rule for bucket names, plus access-point and Outposts ARNs: strict
# DNS rules would refuse legacy buckets and third-party stores that S3 clients reach.
_BUCKET = re.compile(r"[a-zA-Z0-9.\-_]{1,255}", re.ASCII)
_ARN = re.compile(r"arn:[^:]+:s3(?:-object-lambda|-outposts)?:[^:]*:\d*:.+", re.ASCII)
_MAX_KEY_BYTES = 1024


def check_bucket_and_key(bucket: object, key: object) -> None:
    if not isinstance(bucket, str) or not bucket:
        raise InvalidRequestError(
            "bucket must be a non-empty string", bucket=str(bucket), key=str(key)
        )
    if not isinstance(key, str) or not key:
        raise InvalidRequestError("key must be a non-empty string", bucket=bucket, key=str(key))
    if not (_BUCKET.fullmatch(bucket) or _ARN.fullmatch(bucket)):
        raise InvalidRequestError(
            f"invalid bucket name {bucket!r}: use letters, digits, '.', '-' and '_' "
            "(at most 255), or an access point ARN",
            bucket=bucket,
            key=key,
        )
    if len(key.encode("utf-8", "surrogatepass")) > _MAX_KEY_BYTES:
        raise InvalidRequestError(
            f"key is longer than S3's limit of {_MAX_KEY_BYTES} bytes", bucket=bucket, key=key
        )


def check_extra_args(extra_args: ExtraArgs | None, *, bucket: str, key: str) -> ExtraArgs:
    """Return ``extra_args`` as a read-only mapping, or raise naming the allowed keys."""
    if not extra_args:
        return _EMPTY
    unknown = sorted(set(extra_args) - ALLOWED_EXTRA_ARGS)
    if unknown:
        raise InvalidRequestError(
            f"unsupported extra_args {unknown}; allowed: {sorted(ALLOWED_EXTRA_ARGS)}",
            bucket=bucket,
            key=key,
        )
    for name, value in extra_args.items():
        if name in _BYTES_ARGS and isinstance(value, str | bytes):
            if not value:  # botocore would send it, and S3 refuse it
                raise InvalidRequestError(
                    f"extra_args[{name!r}] must not be empty", bucket=bucket, key=key
                )
            continue
        if not isinstance(value, str):
            kinds = "a string or bytes" if name in _BYTES_ARGS else "a string"
            raise InvalidRequestError(
                f"extra_args[{name!r}] must be {kinds}", bucket=bucket, key=key
            )
    return MappingProxyType(dict(extra_args))


#: What an ETag may hold: it travels in an ``If-Match`` header.
_ETAG = re.compile(r"[\x21-\x7e]+")


def normalize_etag(etag: str) -> str | None:
    """ETags travel quoted; a caller may hand one over bare (as some listings print it).
    A weak one is ``None``, as one in an answer is (``get_response.strong_etag``)."""
    if etag.startswith("W/"):
        return None
    if etag.startswith('"'):
        return etag
    return f'"{etag}"'


def check_size_and_etag(
    size: object, etag: object, *, bucket: str, key: str, pins: bool = False
) -> tuple[int | None, str | None]:
    """A caller's size and ETag of the object, checked (a bare ETag quoted, a weak one
    ``None``: ``If-Match`` never matches it; refused where the ETag ``pins`` reads the
    caller expects to be of that version). An ETag goes into a header: printable
    ASCII only."""
    if size is not None and not is_int_at_least(size, 0):
        raise InvalidRequestError(f"size must be an int >= 0, got {size!r}", bucket=bucket, key=key)
    assert size is None or isinstance(size, int)  # for mypy: is_int_at_least said so
    if etag is None:
        return size, None
    if not isinstance(etag, str) or not etag:
        raise InvalidRequestError(
            f"etag must be a non-empty string, got {etag!r}", bucket=bucket, key=key
        )
    if _ETAG.fullmatch(etag) is None:
        raise InvalidRequestError(
            f"etag must be printable ASCII with no spaces, got {etag[:80]!r}",
            bucket=bucket,
            key=key,
        )
    if pins and etag.startswith("W/"):
        raise InvalidRequestError(
            f"a weak etag ({etag}) cannot pin reads to a version: If-Match never matches "
            "one; give a strong ETag, or none",
            bucket=bucket,
            key=key,
        )
    return size, normalize_etag(etag)


def redacted(extra_args: ExtraArgs) -> dict[str, str | bytes]:
    """A copy safe to log or show: SSE-C keys replaced."""
    return {name: "***" if name in _SECRET_ARGS else value for name, value in extra_args.items()}


#: The class ``Path(...)`` makes here (``PosixPath`` or ``WindowsPath``).
_PATH = type(Path())


#: The errors of a stat that ``Path.is_dir`` takes for "no" before Python 3.14 (any
#: other it raises, as a name too long): the errnos, then the Windows error codes.
#: Kept on every version, 3.14's (which says no to every error) included: a name too
#: long is refused before any request, where the check after it would let it pass.
_NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})
_NOT_THERE_WINDOWS = frozenset({21, 123, 1921})


def _is_dir(text: str) -> bool:
    """``Path.is_dir`` for a path's text, without a second ``Path``."""
    try:
        return stat.S_ISDIR(os.stat(text).st_mode)
    except OSError as exc:
        if exc.errno in _NOT_THERE or getattr(exc, "winerror", None) in _NOT_THERE_WINDOWS:
            return False
        raise
    except ValueError:
        return False


#: What ends a path that names a directory.
_SEPARATORS = (os.sep, os.altsep) if os.altsep else (os.sep,)

#: Whether ``access("dir/")`` fails for anything but a directory, as POSIX has it.
_WRITABLE_DIR_IN_ONE_CALL = os.name == "posix"


def _as_directory(target: str) -> str:
    """``target``'s parent directory, with a trailing "/"."""
    parent = os.path.dirname(target) or "."
    return parent if parent.endswith("/") else parent + "/"


def check_target(path: str | os.PathLike[str], *, bucket: str, key: str) -> Path:
    """The target must be creatable in an existing, writable directory."""
    try:
        # A plain Path (a bulk download's targets) is taken as it is: parsed again, it
        # is the same Path, at a cost per object. It has no trailing separator to lose.
        raw = path if type(path) is _PATH else os.fspath(path)
        target = raw if type(raw) is _PATH else Path(raw)
    except TypeError:
        raise InvalidRequestError(
            f"path must be a str or os.PathLike, got {path!r}", bucket=bucket, key=key
        ) from None
    if isinstance(raw, str) and raw.endswith(_SEPARATORS):
        # "out/" names a directory: Path would drop the "/" and write a file "out".
        raise InvalidRequestError(
            f"path {raw!r} ends with a separator: it names a directory, not a file",
            bucket=bucket,
            key=key,
        )
    if isinstance(raw, str) and os.path.basename(raw) in (".", ".."):
        # As "out/.": Path makes it "out", a file that is then written.
        raise InvalidRequestError(
            f"path {raw!r} names a directory, not a file", bucket=bucket, key=key
        )
    text = str(target)
    if "\x00" in text:
        raise InvalidRequestError(f"path {text!r} holds a NUL byte", bucket=bucket, key=key)
    if not target.name or target.name in (".", ".."):
        raise InvalidRequestError(f"path {text!r} names no file", bucket=bucket, key=key)
    try:
        return _check_place(target, text, bucket=bucket, key=key)
    except OSError as exc:
        # A name too long for the file system, a directory on the way that may not be
        # searched: the OS's own reason, as this target's error (one object of many
        # fails alone, not the run).
        reason = exc.strerror or str(exc)
        raise InvalidRequestError(
            f"path {text!r} cannot be used: {reason}", bucket=bucket, key=key
        ) from None


def _check_place(target: Path, text: str, *, bucket: str, key: str) -> Path:
    """``check_target``'s checks on disk: no directory at the target, a writable one
    above it."""
    if _is_dir(text):
        raise InvalidRequestError(f"path {text!r} is a directory", bucket=bucket, key=key)
    if _WRITABLE_DIR_IN_ONE_CALL and os.access(_as_directory(text), os.W_OK | os.X_OK):
        # A writable directory (the trailing "/" makes any other file fail): what the
        # two checks below find, in one call and no second Path.
        return target
    parent = target.parent
    if not parent.is_dir():
        raise InvalidRequestError(
            f"directory {str(parent)!r} does not exist", bucket=bucket, key=key
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidRequestError(
            f"directory {str(parent)!r} is not writable", bucket=bucket, key=key
        )
    return target
