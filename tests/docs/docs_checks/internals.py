"""What docs/internals.md's example did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.docs import docs_world


async def check(namespace: dict[str, Any]) -> None:
    small, big, head_first = namespace["small"], namespace["big"], namespace["head_first"]
    # GET-first: one request for an object of one chunk; a larger one, a GET per chunk
    # and the HEAD that brings the checksum. HEAD-first: a HEAD, then a GET.
    assert (small.requests, big.requests, head_first.requests) == (1, 4, 2)
    assert (small.strategy, big.strategy, head_first.strategy) == (
        "get-first",
        "get-first",
        "head-first",
    )
    assert big.etag is not None
    assert big.size == len(docs_world.OBJECTS["datasets/big.bin"])
    stats = namespace["engine"].stats()
    assert (stats.gets.ok, stats.heads.ok) == (5, 2)
    assert Path("small.json").read_bytes() == docs_world.OBJECTS["small.json"]
    assert Path("small-2.json").read_bytes() == docs_world.OBJECTS["small.json"]
    assert Path("big.bin").read_bytes() == docs_world.OBJECTS["datasets/big.bin"]
    assert not [p for p in Path().iterdir() if p.name.endswith(".asyncdl-tmp")]
