"""docs/guides/urls.md: the presigned and plain URLs it fetches gave the world's bytes,
the results name no query string, and the command wrote what it was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncdl

from ..docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    big = OBJECTS["datasets/big.bin"]
    assert Path("big.bin").read_bytes() == big
    first = namespace["result"]
    assert isinstance(first, asyncdl.DownloadResult)
    # The last example's result: the resumable loop, done on its first URL.
    assert first.key.endswith("/my-bucket/other/key")
    assert "?" not in first.key
    assert first.bucket == ""
    assert namespace["attempt"] == 0
    assert Path("other.bin").read_bytes() == OBJECTS["other/key"]

    assert Path("data.csv").read_bytes() == OBJECTS["public/data.csv"]
    csv = namespace["csv"]
    assert (csv.size, csv.requests) == (len(OBJECTS["public/data.csv"]), 1)

    assert namespace["header"] == big[:16]
    assert namespace["stream"].size == len(big)

    report = namespace["report"]
    assert Path("q1.csv").read_bytes() == OBJECTS["reports/2026/q1.csv"]
    assert (report.verified, report.checksum) == (True, "CRC32:pvOL2Q==")

    # The command's copy and cat.
    assert Path("downloads/data.csv").read_bytes() == OBJECTS["public/data.csv"]
    assert Path("index.html").read_bytes() == OBJECTS["public/index.html"]
