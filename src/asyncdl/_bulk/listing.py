"""The objects of a folder's listing, each with its place under a destination
(nothing written): :func:`list_prefix` reads the pages that ``list_objects`` fetches;
:func:`list_ahead` does the same from a task of its own that reads up to
``LIST_AHEAD`` keys ahead of its consumer, so that a prefix's totals are known long
before its downloads are done.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from array import array
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .._files.key_paths import relative_parts
from .._wire.ranges import LARGEST_SIZE
from ..errors import DownloadError, describe, scrubbed, translate
from .filters import Filters


@dataclass(frozen=True, slots=True)
class Listed:
    """One object of a prefix's listing, and where it lands under the destination."""

    key: str
    size: int
    etag: str | None
    #: Its path's segments under the destination (``key_paths.relative_parts``);
    #: ``None`` when the key is refused (``refusal``).
    relative: tuple[str, ...] | None
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
                    try:
                        key, size = entry["Key"], int(entry["Size"])
                    except _UNREADABLE:
                        size = -1  # refused below, saying why
                    if not 0 < size <= LARGEST_SIZE:
                        if size == 0 and key.endswith("/"):
                            continue  # a folder marker, not a file
                        if size != 0:
                            refused = _refused(entry, prefix, filters)
                            if refused is not None:
                                yield refused
                            continue
                    if filters is not None and not filters.includes(key[len(prefix) :]):
                        continue
                    try:
                        relative, refusal = relative_parts(key, prefix), None
                    except ValueError as exc:
                        relative, refusal = None, str(exc)
                    yield Listed(key, size, entry.get("ETag"), relative, refusal)


#: What reading an entry's Key and Size raises when it has none (``LookupError``) or
#: its Size is no number (botocore gives an ``int``; a page made by hand may not).
_UNREADABLE = (LookupError, TypeError, ValueError)


class _KeylessEntry(Exception):
    """A listing entry without a Key: the listing cannot name each of its objects, so
    it is not whole (``sync --delete`` would remove what that entry is)."""


def _refused(entry: Mapping[str, Any], prefix: str, filters: Filters | None) -> Listed | None:
    """The refusal of an entry no object can be made of, that says what the listing
    gave; ``None`` when the filters leave it out. Raises ``_KeylessEntry`` for one
    with no Key. Called for such an entry only: an object's entry pays nothing."""
    key, etag = entry.get("Key"), entry.get("ETag")
    if not isinstance(key, str):
        shown = scrubbed(f"Size {entry.get('Size')}, ETag {etag}", 200)
        raise _KeylessEntry(f"the listing has an entry without a Key ({shown})")
    if filters is not None and not filters.includes(key[len(prefix) :]):
        return None
    if "Size" not in entry:
        return Listed(key, 0, etag, None, "the listing gave it no Size")
    given = entry["Size"]
    why = f"the listing gave it a Size of {scrubbed(str(given), 100)}"
    try:
        size = int(given)
    except _UNREADABLE:
        why += ": not a number"
    else:
        too_large = f"more than any file can hold ({LARGEST_SIZE} bytes)"
        why += f": {too_large}" if size > 0 else ": a size below 0"
    return Listed(key, 0, etag, None, why)


def shown_entry(entry: Mapping[str, Any], *, bucket: str, prefix: str) -> tuple[str, int]:
    """An entry's Key and Size, for a reader that shows or keeps them whole (``ls``,
    the fsspec listings, Dask's manifest); one no object can be made of (see
    :func:`_refused`) fails the listing, saying what the listing gave."""
    try:
        key, size = entry["Key"], int(entry["Size"])
        if type(key) is str and 0 <= size <= LARGEST_SIZE:
            return key, size
    except _UNREADABLE:
        pass
    try:
        refused = _refused(entry, prefix, None)
    except _KeylessEntry as exc:
        raise DownloadError(str(exc), bucket=bucket, key=prefix) from None
    assert refused is not None  # no filters: every refusal is said
    raise DownloadError(f"{refused.key}: {refused.refusal}", bucket=bucket, key=prefix)


#: Keys :func:`list_ahead` holds at most, read but not yet taken (one page more while
#: it waits for room). About 190 bytes each (the key, the ETag, the size), so some 19 MB
#: at most, whatever the prefix: a listing's pages come at a thousand keys a request,
#: much faster than tiny objects download, and would otherwise pile up.
LIST_AHEAD = 100_000

#: ``progress(objects, size, ended)``: see :func:`list_ahead`.
ListingProgress = Callable[[int, int, bool], object]


class _Batch:
    """The objects of one page that the filters keep, held compactly while they wait:
    three flat sequences, no object per key; and the entries refused (see
    :func:`_refused`), which come after them."""

    __slots__ = ("etags", "keys", "refused", "sizes")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.sizes = array("q")  # signed 64 bits: LARGEST_SIZE at most
        self.etags: list[str | None] = []
        self.refused: list[Listed] | None = None

    def __len__(self) -> int:
        return len(self.keys) + (len(self.refused) if self.refused is not None else 0)

    def add_page(self, page: Mapping[str, Any], prefix: str, filters: Filters | None) -> int:
        """Take the page's objects (folder markers and what the filters exclude left
        out); their bytes. ``_KeylessEntry`` for an entry with no Key."""
        total = 0
        for entry in page.get("Contents", ()):
            try:
                key, size = entry["Key"], int(entry["Size"])
            except _UNREADABLE:
                size = -1  # refused below, saying why
            if size <= 0:  # before the key's test: one comparison for most objects
                if size == 0 and key.endswith("/"):
                    continue  # a folder marker, not a file
                if size < 0:
                    self._refuse(entry, prefix, filters)
                    continue
            if filters is not None and not filters.includes(key[len(prefix) :]):
                continue
            try:
                self.sizes.append(size)  # first: a size beyond LARGEST_SIZE keeps nothing
            except OverflowError:
                self._refuse(entry, prefix, filters)
                continue
            self.keys.append(key)
            self.etags.append(entry.get("ETag"))
            total += size
        return total

    def _refuse(self, entry: Mapping[str, Any], prefix: str, filters: Filters | None) -> None:
        refused = _refused(entry, prefix, filters)
        if refused is not None:
            if self.refused is None:
                self.refused = []
            self.refused.append(refused)


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
                        relative, refusal = relative_parts(key, prefix), None
                    except ValueError as exc:
                        relative, refusal = None, str(exc)
                    yield Listed(key, size, etag, relative, refusal)
                if batch.refused is not None:
                    for refused in batch.refused:
                        yield refused
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
                    count = len(batch)
                    objects += count
                    if count:
                        self._waiting.append(batch)
                        self._held += count
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
        self._held -= len(batch)
        self._room.set()
        return batch


@contextlib.contextmanager
def translated(bucket: str, prefix: str) -> Iterator[None]:
    """A listing's failure as a ``DownloadError`` on the prefix."""
    try:
        yield
    except DownloadError as error:
        cause = error.__cause__
        if type(error) is DownloadError and isinstance(cause, ValueError):
            # botocore reads a page's numbers as it parses it (``int(text)``): one that
            # is none fails the page with a bare ValueError, "unexpected" to translate.
            raise DownloadError(_unreadable(cause), bucket=error.bucket, key=error.key) from cause
        raise
    except _KeylessEntry as exc:
        raise DownloadError(str(exc), bucket=bucket, key=prefix) from None
    except Exception as exc:
        raise translate(exc, bucket=bucket, key=prefix) from exc


#: ``int()``'s words for text that is no number, and the text (as ``repr`` shows it).
_NOT_A_NUMBER = re.compile(r"invalid literal for int\(\) with base 10: (.*)", re.DOTALL)


def _unreadable(cause: ValueError) -> str:
    """What a page botocore could not parse sent, as far as its error says."""
    found = _NOT_A_NUMBER.fullmatch(str(cause))
    if found is not None:
        given = scrubbed(found.group(1), 100)
        return f"a listing page gives {given} where a number belongs (a Size, KeyCount, MaxKeys)"
    return f"a listing page could not be read: {describe(cause)}"
