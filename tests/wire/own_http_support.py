"""What the tests of the engine's own HTTP client share: a pool to test, closed after,
and a body read whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from asyncdl._wire.own_http import OwnPool, OwnResponse


@asynccontextmanager
async def own_pool(
    read_timeout: float = 5.0, tls: Any = True, limit: int | None = None
) -> AsyncIterator[OwnPool]:
    """An :class:`OwnPool` (TLS as ``tls``: a context, ``True`` or ``False``), closed
    after."""
    pool = OwnPool(tls, 5.0, read_timeout, limit=limit)
    try:
        yield pool
    finally:
        pool.close()


async def read_body(response: OwnResponse) -> bytes:
    """The rest of ``response``'s body, its pieces joined."""
    pieces = []
    while piece := (await response.readchunk())[0]:
        pieces.append(piece)
    return b"".join(pieces)
