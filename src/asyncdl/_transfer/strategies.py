"""How a download learns the object's size and ETag before it fans out.

A strategy's :meth:`~Strategy.discover` makes the first request(s) and returns a
:class:`Discovery`: the size, the ETag every later request is pinned to, and,
when the discovery request was itself a GET, that still-open response so its
body is written rather than fetched twice.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .._wire.checksums import ExpectedChecksum
from .._wire.ranges import ByteRange
from .._wire.s3_source import ObjectMeta, RangeNotSatisfiable, Response, S3Object
from ..errors import ObjectChangedError


@dataclass(slots=True)
class Discovery:
    size: int
    etag: str | None
    #: An open GET whose body covers ``[0, first_end)`` of the object, or ``None``.
    first: Response | None = None
    first_end: int = 0
    #: Discovery saw the whole (empty) object: nothing is left to fetch.
    complete: bool = False
    #: S3's full-object checksum, when discovery's answer carried one.
    checksum: ExpectedChecksum | None = None
    #: A HEAD still in flight that will bring the checksum (``validate="required"``).
    checksum_head: asyncio.Task[ObjectMeta] | None = None
    #: Fetch the object in one plain GET whatever its size: the server ignores Range.
    whole: bool = False

    @property
    def range_ignored(self) -> bool:
        """The first answer was the whole object where a range was asked for (or the
        strategy asked for the whole): the server may not serve ranges."""
        first = self.first
        return first is not None and first.status == 200 and first.content_range is None


@runtime_checkable
class Strategy(Protocol):
    """What runs before the parts: pass an instance wherever a strategy name is taken.

    :class:`GetFirst` and :class:`HeadFirst` are the two asyncdl has. The types
    ``discover`` takes and returns are internal and may change in any minor release:
    a strategy of your own is for tests and experiments.
    """

    #: The name a result reports in ``strategy``.
    name: str

    async def discover(
        self, obj: S3Object, *, chunk_size: int, size: int | None, etag: str | None
    ) -> Discovery:
        """Find size and ETag; ``size``/``etag`` are what the caller already knows, if any."""
        ...


class GetFirst:
    """The first request is a ranged GET of part 0; its headers carry size and ETag.

    An object that fits in one chunk is done in that one request.
    """

    #: The name it is known by: ``strategy="get-first"``.
    name = "get-first"

    async def discover(
        self, obj: S3Object, *, chunk_size: int, size: int | None, etag: str | None
    ) -> Discovery:
        """A ranged GET of ``[0, chunk_size)``, left open so its body is written."""
        try:
            response = await obj.get(ByteRange(0, chunk_size), if_match=etag)
        except RangeNotSatisfiable as exc:
            # S3 answers 416 to any range of an empty object, with its ActualObjectSize
            # but no ETag. A 416 that carries the ETag settles it; otherwise one plain
            # GET tells what is there (and brings the ETag and the checksum).
            known = exc.etag or etag
            if exc.actual_size == 0 and size in (None, 0) and known is not None:
                return Discovery(size=0, etag=known, complete=True)
            response = await obj.get(None, if_match=etag)
            return _whole_object(obj, response, expected_size=size)
        if response.status == 200 and response.content_range is None:
            # The server ignored Range: this body IS the object, so nothing more is fetched.
            return _whole_object(obj, response, expected_size=size)
        content_range = response.content_range
        if response.status == 206 and content_range is not None and content_range.total == 0:
            # Some servers answer a range of an empty object with 206 and "bytes 0-0/0"
            # (and a Content-Length of 1 they never send): the total settles it; the
            # body is not read.
            response.close()
            if size not in (None, 0):
                raise obj.error(f"object is 0 bytes, not the {size} given", ObjectChangedError)
            if response.etag is None and etag is None:
                response = await obj.get(None, if_match=None)
                return _whole_object(obj, response, expected_size=0)
            return Discovery(size=0, etag=response.etag or etag, complete=True)
        if response.status != 206 or content_range is None or content_range.start != 0:
            response.close()
            raise obj.error(
                f"unexpected answer to a ranged GET: HTTP {response.status}, "
                f"Content-Range {content_range}"
            )
        if size is not None and content_range.total != size:
            response.close()
            raise obj.error(
                f"object is {content_range.total} bytes, not the {size} given", ObjectChangedError
            )
        return Discovery(
            size=content_range.total,
            etag=response.etag,
            first=response,
            first_end=content_range.end,
        )


class HeadFirst:
    """A HEAD first; then one plain GET for an object that fits in a chunk, or ranged
    GETs for a larger one. Every GET is pinned to the HEAD's ETag."""

    #: The name it is known by: ``strategy="head-first"``.
    name = "head-first"

    async def discover(
        self, obj: S3Object, *, chunk_size: int, size: int | None, etag: str | None
    ) -> Discovery:
        """A HEAD; then, for an object that fits in one chunk, the plain GET of it."""
        meta = await obj.head(if_match=etag)
        if size is not None and meta.size != size:
            raise obj.error(
                f"object is {meta.size} bytes, not the {size} given", ObjectChangedError
            )
        composite = meta.checksum is not None and meta.checksum.composite
        if meta.size > chunk_size or (composite and meta.size > 0):
            # A COMPOSITE checksum is checked along upload parts, never in one GET.
            return Discovery(size=meta.size, etag=meta.etag, checksum=meta.checksum)
        response = await obj.get(None, if_match=meta.etag)
        discovery = _whole_object(obj, response, expected_size=meta.size)
        discovery.checksum = discovery.checksum or meta.checksum
        return discovery


def _whole_object(obj: S3Object, response: Response, *, expected_size: int | None) -> Discovery:
    """Discovery from a GET whose body is the whole object (a 200 without Content-Range)."""
    if response.status != 200 or response.content_range is not None:
        response.close()
        raise obj.error(f"expected the whole object, got HTTP {response.status}")
    if expected_size is not None and response.content_length != expected_size:
        response.close()
        raise obj.error(
            f"object is {response.content_length} bytes, not the {expected_size} expected",
            ObjectChangedError,
        )
    return Discovery(
        size=response.content_length,
        etag=response.etag,
        first=response,
        first_end=response.content_length,
        checksum=response.checksum,
    )


STRATEGIES: dict[str, Strategy] = {"get-first": GetFirst(), "head-first": HeadFirst()}


def resolve_strategy(strategy: str | Strategy, client: Any) -> Strategy:
    """Turn a name (or ``"auto"``) into a strategy object.

    ``"auto"`` follows the rule of the s3transfer pull request this project grew
    from: skip HEAD only when the client does not validate response checksums by
    default, since botocore can validate a full-object checksum only on a HEAD-led
    download.
    """
    if isinstance(strategy, str):
        if strategy == "auto":
            validation = getattr(client.meta.config, "response_checksum_validation", None)
            return STRATEGIES["get-first" if validation == "when_required" else "head-first"]
        try:
            return STRATEGIES[strategy]
        except KeyError:
            names = ", ".join(repr(name) for name in ["auto", *STRATEGIES])
            raise ValueError(f"unknown strategy {strategy!r}; use one of {names}") from None
    if isinstance(strategy, Strategy):
        return strategy
    raise ValueError(f"strategy must be a name or a Strategy object, got {strategy!r}")
