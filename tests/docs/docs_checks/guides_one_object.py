"""docs/guides/one-object.md: each example wrote its object whole, with the requests
and the outcome the page shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.docs.docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    written = {
        "intro.mp4": "videos/intro.mp4",
        "q1.csv": "reports/2026/q1.csv",
        "big.bin": "datasets/big.bin",
        "key.bin": "path/to/key",
    }
    for name, key in written.items():
        assert Path(name).read_bytes() == OBJECTS[key], name
    # Every download published its file and left no temp file behind.
    assert sorted(p.name for p in Path().iterdir()) == sorted(written)

    small, large, listed = namespace["small"], namespace["large"], namespace["listed"]
    assert (small.strategy, small.requests, small.verified) == ("head-first", 2, True)
    assert (large.strategy, large.requests) == ("get-first", 4)
    assert (listed.requests, listed.verified, listed.checksum) == (1, True, "CRC32:pvOL2Q==")

    # The progress callable saw every byte of the object, with its size as the total.
    assert namespace["done"]["bytes"] == len(OBJECTS["datasets/big.bin"])

    # 16 MiB chunks: two GETs for 20 MiB and the checksum HEAD.
    assert namespace["config"].fsync is True
    assert namespace["result"].requests == 3

    # The stale ETag failed the download (key.bin is still the bytes the extra_args
    # example wrote: checked above).
    assert "error" not in namespace  # an except clause's name is gone after it
