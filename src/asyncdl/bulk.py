"""Bulk downloads: many objects through one engine, pulled lazily, results as they finish.

Memory stays flat whatever the number of items: at most ``max_concurrency``
downloads exist at a time (each takes request slots from the engine's shared
budget), and the input is pulled only when one of them finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from aiofiles.os import wrap

from .errors import DownloadError, InvalidRequestError, translate
from .progress import ProgressCallback
from .request_args import ExtraArgs, redacted
from .results import DownloadResult
from .strategies import Strategy

if TYPE_CHECKING:
    from .engine import Engine


@dataclass(frozen=True, slots=True)
class DownloadRequest:
    """One object to download, with what is known of it (from a listing, say)."""

    bucket: str
    key: str
    path: str | os.PathLike[str]
    size: int | None = None
    etag: str | None = None
    extra_args: ExtraArgs | None = field(default=None)
    #: S3's checksum, ``"ALGORITHM:base64"``, when known.
    checksum: str | None = None

    def __repr__(self) -> str:
        args = redacted(self.extra_args) if self.extra_args else self.extra_args
        return (
            f"DownloadRequest(bucket={self.bucket!r}, key={self.key!r}, path={self.path!r}, "
            f"size={self.size!r}, etag={self.etag!r}, extra_args={args!r}, "
            f"checksum={self.checksum!r})"
        )


DownloadItem = DownloadRequest | tuple[str, str, "str | os.PathLike[str]"]


def as_request(item: object) -> DownloadRequest:
    if isinstance(item, DownloadRequest):
        return item
    if isinstance(item, tuple) and len(item) == 3:
        return DownloadRequest(*item)
    raise TypeError(f"expected a (bucket, key, path) tuple or a DownloadRequest, got {item!r}")


async def _pull(items: Iterable[Any] | AsyncIterable[Any]) -> AsyncGenerator[Any]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def download_many(
    engine: Engine,
    items: Iterable[Any] | AsyncIterable[Any],
    *,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
) -> AsyncGenerator[DownloadResult]:
    """See :meth:`Engine.download_many`. Items may also be ready-made (failed) results."""
    limit = engine.config.max_concurrency
    source = _pull(items)
    running: set[asyncio.Task[DownloadResult]] = set()
    exhausted = False
    try:
        while True:
            while not exhausted and len(running) < limit:
                try:
                    item = await anext(source)
                except StopAsyncIteration:
                    exhausted = True
                    break
                if isinstance(item, DownloadResult):
                    yield item
                    continue
                request = as_request(item)
                running.add(
                    asyncio.create_task(
                        _one(
                            engine,
                            request,
                            strategy=strategy,
                            extra_args=extra_args,
                            timeout=timeout,
                            progress=progress,
                        )
                    )
                )
            if not running:
                return
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                yield task.result()
    finally:
        for task in running:
            task.cancel()
        # Wait for the cancelled downloads to remove their temp files.
        await asyncio.gather(*running, return_exceptions=True)
        await source.aclose()


async def _one(
    engine: Engine,
    request: DownloadRequest,
    *,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    timeout: float | None,
    progress: ProgressCallback | None,
) -> DownloadResult:
    try:
        return await engine.download(
            request.bucket,
            request.key,
            request.path,
            strategy=strategy,
            extra_args=request.extra_args if request.extra_args is not None else extra_args,
            size=request.size,
            etag=request.etag,
            timeout=timeout,
            checksum=request.checksum,
            progress=progress,
        )
    except DownloadError as error:
        return failed(request.bucket, request.key, request.path, error, strategy)


def failed(
    bucket: str,
    key: str,
    path: str | os.PathLike[str],
    error: DownloadError,
    strategy: str | Strategy,
) -> DownloadResult:
    try:
        where = Path(os.fspath(path))
    except TypeError:
        where = Path()
    return DownloadResult(
        bucket=bucket,
        key=key,
        path=where,
        size=0,
        etag=None,
        strategy=strategy if isinstance(strategy, str) else strategy.name,
        requests=error.requests,
        error=error,
    )


async def download_prefix(
    engine: Engine,
    bucket: str,
    prefix: str,
    dest_dir: str | os.PathLike[str],
    *,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
) -> AsyncGenerator[DownloadResult]:
    """See :meth:`Engine.download_prefix`."""
    root = await _check_dest_dir_off_loop(dest_dir, bucket=bucket, prefix=prefix)
    listing = _list_requests(
        engine, bucket=bucket, prefix=prefix, root=root, strategy=strategy, extra_args=extra_args
    )
    results = download_many(
        engine,
        listing,
        strategy=strategy,
        extra_args=extra_args,
        timeout=timeout,
        progress=progress,
    )
    # Closing this generator closes the inner one at once: in-flight downloads are
    # cancelled and their temp files removed now, not when the collector runs.
    async with contextlib.aclosing(results):
        async for result in results:
            yield result


# ListObjectsV2 takes these of a download's arguments; the rest are per object.
_LIST_ARGS = ("RequestPayer", "ExpectedBucketOwner")


def _check_dest_dir(dest_dir: str | os.PathLike[str], *, bucket: str, prefix: str) -> Path:
    root = Path(os.fspath(dest_dir))
    if root.exists() and not root.is_dir():
        raise InvalidRequestError(f"{str(root)!r} is not a directory", bucket=bucket, key=prefix)
    return root


_check_dest_dir_off_loop = wrap(_check_dest_dir)
_makedirs = wrap(os.makedirs)


async def _list_requests(
    engine: Engine,
    *,
    bucket: str,
    prefix: str,
    root: Path,
    strategy: str | Strategy,
    extra_args: ExtraArgs | None,
) -> AsyncGenerator[DownloadRequest | DownloadResult]:
    params = {name: extra_args[name] for name in _LIST_ARGS if extra_args and name in extra_args}
    made: set[Path] = set()
    pages = engine.client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix, **params
    )
    try:
        async for page in pages:
            for entry in page.get("Contents", ()):
                key, size = entry["Key"], int(entry["Size"])
                if key.endswith("/") and size == 0:
                    continue  # a folder marker, not a file
                try:
                    relative = relative_path(key, prefix)
                except ValueError as exc:
                    refusal = InvalidRequestError(str(exc), bucket=bucket, key=key)
                    yield failed(bucket, key, root, refusal, strategy)
                    continue
                target = root.joinpath(*relative.parts)
                if target.parent not in made:
                    # Off the event loop: a busy disk can stall mkdir for long.
                    await _makedirs(target.parent, exist_ok=True)
                    made.add(target.parent)
                yield DownloadRequest(bucket, key, target, size=size, etag=entry.get("ETag"))
    except DownloadError:
        raise
    except Exception as exc:
        raise translate(exc, bucket=bucket, key=prefix) from exc


def relative_path(key: str, prefix: str) -> PurePosixPath:
    """Where ``key`` lands under the destination, or ``ValueError`` if it would escape it.

    The part of the key after ``prefix`` names the file; with a prefix that does not
    end in ``/`` (``logs`` for ``logs/a``), the one separator after it is dropped.
    """
    rest = key[len(prefix) :]
    if prefix and not prefix.endswith("/") and rest.startswith("/"):
        rest = rest[1:]
    if not rest:
        raise ValueError(f"key {key!r} names no file under the prefix {prefix!r}")
    if rest.startswith("/"):
        raise ValueError(f"refusing key {key!r}: an absolute path")
    segments = rest.split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ValueError(
                f"refusing key {key!r}: segment {segment!r} would leave or blur the destination"
            )
        if "\x00" in segment or "\\" in segment:
            raise ValueError(f"refusing key {key!r}: a NUL or backslash in a path segment")
    return PurePosixPath(*segments)
