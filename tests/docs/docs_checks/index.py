"""docs/index.md: the opening example downloaded its object, whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.docs.docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    body = OBJECTS["datasets/big.bin"]
    assert Path("big.bin").read_bytes() == body
    result = namespace["result"]
    # Three 8 MiB ranges, the first of them the discovery GET, and the checksum HEAD.
    assert (result.size, result.strategy, result.requests) == (len(body), "get-first", 4)
    assert sorted(p.name for p in Path().iterdir()) == ["big.bin"]
