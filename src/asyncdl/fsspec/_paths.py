"""Paths, listing entries and errors of asyncdl's fsspec file system: ``bucket/key``
paths as fsspec hands them over, the info dicts fsspec's callers read, and the
engine's errors as the ``OSError`` subclasses those callers catch."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .._bulk.listing import shown_entry
from ..errors import AccessDeniedError, ObjectChangedError, ObjectNotFoundError

#: The URL schemes a path may carry: the file system's own, and S3's when
#: :func:`~asyncdl.fsspec.register_as_s3` routes ``s3://`` to it.
SCHEMES = ("asyncdl://", "s3://", "s3a://")


def strip(path: object) -> str:
    """``bucket/key`` of a path or URL: scheme and outer slashes removed."""
    text = str(path)  # a PurePath, or whatever os.fspath-able thing fsspec was handed
    for scheme in SCHEMES:
        if text.startswith(scheme):
            text = text[len(scheme) :]
            break
    return text.strip("/")


def split(path: str) -> tuple[str, str]:
    """The bucket and the key (``""`` for the bucket itself) of a stripped path."""
    bucket, _, key = path.partition("/")
    return bucket, key


def parent(path: str) -> str:
    """The directory a stripped path is in (``""`` for a bucket)."""
    return path.rpartition("/")[0]


def file_info(bucket: str, listed: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """One object of a ListObjectsV2 page (of ``prefix``), as fsspec's info dict; one
    whose Key or Size is no object's, ``DownloadError``."""
    key, size = shown_entry(listed, bucket=bucket, prefix=prefix)
    return {
        "name": f"{bucket}/{key}",
        "type": "file",
        "size": size,
        "ETag": listed.get("ETag"),
        "LastModified": listed.get("LastModified"),
    }


def dir_info(name: str) -> dict[str, Any]:
    """A directory (a common prefix, a folder marker, a bucket), as fsspec's info dict."""
    return {"name": name, "type": "directory", "size": 0}


def read_only(path: object, what: str) -> PermissionError:
    """The error every write gets: this file system never changes the store."""
    return PermissionError(
        errno.EROFS,
        f"asyncdl's file system is read-only: it cannot {what} (write with boto3, "
        "s3fs or the AWS CLI)",
        str(path),
    )


@contextlib.contextmanager
def translated(path: str, *, forget: Callable[[], None] | None = None) -> Iterator[None]:
    """The engine's "no such object or bucket" and "access denied" as the ``OSError``
    subclasses fsspec's callers (pandas, pyarrow, zarr) catch; the engine's error is
    the cause. Other errors pass as they are: a ``DownloadError`` says more.

    ``forget`` is called when the object is gone or changed (``ObjectChangedError``):
    what the caches say of it is stale, and a retry must not be pinned to it again."""
    try:
        yield
    except ObjectNotFoundError as exc:
        if forget is not None:
            forget()
        raise FileNotFoundError(errno.ENOENT, str(exc), path) from exc
    except ObjectChangedError:
        if forget is not None:
            forget()
        raise
    except AccessDeniedError as exc:
        raise PermissionError(errno.EACCES, str(exc), path) from exc


def within(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """fsspec's ``[start, end)`` (``None`` ends, negative from the end) cut to ``size``."""
    begin = 0 if start is None else start + size if start < 0 else start
    stop = size if end is None else end + size if end < 0 else end
    begin = min(max(begin, 0), size)
    return begin, min(max(stop, begin), size)
