"""The objects of a folder's listing, each with its place under a destination
(nothing written): :func:`list_prefix` reads the pages that ``list_objects`` fetches;
:func:`list_ahead` does the same from a task of its own that reads up to
``LIST_AHEAD`` keys ahead of its consumer, so that a prefix's totals are known long
before its downloads are done.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from .._files.key_paths import relative_path
from ..errors import DownloadError, translate
from .filters import Filters


@dataclass(frozen=True, slots=True)
class Listed:
    """One object of a prefix's listing, and where it lands under the destination."""

    key: str
    size: int
    etag: str | None
    #: Its path under the destination; ``None`` when the key is refused (``refusal``).
    relative: PurePosixPath | None
    refusal: str | None = None


async def list_prefix(
    pages: AsyncGenerator[dict[str, Any]],
    *,
    bucket: str,
    prefix: str,
    filters: Filters | None,
) -> AsyncGenerator[Listed]:
    """The objects in ``pages``, the listing of the folder ``prefix`` (ending in ``/``,
    or empty), that ``filters`` include, folder markers left out, each with its place;
    nothing is written. A listing that fails raises its ``DownloadError``."""
    with translated(bucket, prefix):
        async with contextlib.aclosing(pages):  # closed early: the page ahead is cancelled
            async for page in pages:
                for entry in page.get("Contents", ()):
                    key, size = entry["Key"], int(entry["Size"])
                    if key.endswith("/") and size == 0:
                        continue  # a folder marker, not a file
                    if filters is not None and not filters.includes(key[len(prefix) :]):
                        continue
                    try:
                        relative, refusal = relative_path(key, prefix), None
                    except ValueError as exc:
                        relative, refusal = None, str(exc)
                    yield Listed(key, size, entry.get("ETag"), relative, refusal)


#: Keys :func:`list_ahead` holds at most, read but not yet taken (one page more while
#: it waits for room). About 190 bytes each (the key, the ETag, the size), so some 19 MB
#: at most, whatever the prefix: a listing's pages come at a thousand keys a request,
#: much faster than tiny objects download, and would otherwise pile up.
LIST_AHEAD = 100_000

#: ``progress(objects, size, ended)``: see :func:`list_ahead`.
ListingProgress = Callable[[int, int, bool], object]


class _Batch:
    """The objects of one page that the filters keep, held compactly while they wait:
    three flat sequences, no object per key."""

    __slots__ = ("etags", "keys", "sizes")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.sizes = array("q")
        self.etags: list[str | None] = []

    def add_page(self, page: Mapping[str, Any], prefix: str, filters: Filters | None) -> int:
        """Take the page's objects (folder markers and what the filters exclude left
        out); their bytes."""
        total = 0
        for entry in page.get("Contents", ()):
            key, size = entry["Key"], int(entry["Size"])
            if key.endswith("/") and size == 0:
                continue  # a folder marker, not a file
            if filters is not None and not filters.includes(key[len(prefix) :]):
                continue
            self.keys.append(key)
            self.sizes.append(size)
            self.etags.append(entry.get("ETag"))
            total += size
        return total


async def list_ahead(
    pages: AsyncGenerator[dict[str, Any]],
    *,
    bucket: str,
    prefix: str,
    filters: Filters | None,
    progress: ListingProgress | None = None,
    ahead: int = LIST_AHEAD,
) -> AsyncGenerator[Listed]:
    """What :func:`list_prefix` yields, the pages read by a task of its own up to
    ``ahead`` keys ahead of the consumer.

    ``progress(objects, size, ended)`` is called after each page: the objects listed so
    far (those this generator will yield), their listed bytes, and whether the listing
    has ended (once more with ``True`` at its end; never after a failure). A listing
    that fails raises its ``DownloadError`` once the objects read before the failure
    have been yielded, as :func:`list_prefix` does. Closing the generator stops the
    listing (the page in flight is cancelled).
    """
    reading = _Ahead(ahead)
    reader = asyncio.create_task(reading.read(pages, prefix, filters, progress))
    try:
        with translated(bucket, prefix):
            while (batch := await reading.next()) is not None:
                for key, size, etag in zip(batch.keys, batch.sizes, batch.etags, strict=True):
                    try:
                        relative, refusal = relative_path(key, prefix), None
                    except ValueError as exc:
                        relative, refusal = None, str(exc)
                    yield Listed(key, size, etag, relative, refusal)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


class _Ahead:
    """The batches :func:`list_ahead`'s reader has read and its consumer not yet taken."""

    def __init__(self, ahead: int) -> None:
        self._ahead = ahead
        self._waiting: deque[_Batch] = deque()
        self._held = 0
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._ended = False
        self._failure: BaseException | None = None

    async def read(
        self,
        pages: AsyncGenerator[dict[str, Any]],
        prefix: str,
        filters: Filters | None,
        progress: ListingProgress | None,
    ) -> None:
        objects = size = 0
        try:
            async with contextlib.aclosing(pages):
                async for page in pages:
                    batch = _Batch()
                    size += batch.add_page(page, prefix, filters)
                    objects += len(batch.keys)
                    if batch.keys:
                        self._waiting.append(batch)
                        self._held += len(batch.keys)
                        self._ready.set()
                    if progress is not None:
                        progress(objects, size, False)
                    while self._held >= self._ahead:
                        self._room.clear()
                        await self._room.wait()
            if progress is not None:
                progress(objects, size, True)
        except Exception as exc:  # raised where the consumer reaches it
            self._failure = exc
        finally:
            self._ended = True
            self._ready.set()

    async def next(self) -> _Batch | None:
        """The next batch; ``None`` at the listing's end; its failure, once every batch
        read before it has been taken."""
        while not self._waiting:
            if self._ended:
                if self._failure is not None:
                    raise self._failure
                return None
            self._ready.clear()
            await self._ready.wait()
        batch = self._waiting.popleft()
        self._held -= len(batch.keys)
        self._room.set()
        return batch


@contextlib.contextmanager
def translated(bucket: str, prefix: str) -> Iterator[None]:
    """A listing's failure as a ``DownloadError`` on the prefix."""
    try:
        yield
    except DownloadError:
        raise
    except Exception as exc:
        raise translate(exc, bucket=bucket, key=prefix) from exc
