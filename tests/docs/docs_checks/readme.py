"""README.md: the API and the command in five lines did what they say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncdl import DownloadResult

from ..docs_world import OBJECTS


async def check(namespace: dict[str, Any]) -> None:
    assert Path("local.bin").read_bytes() == OBJECTS["path/to/key"]
    assert namespace["data"] == OBJECTS["small.json"]
    last = namespace["result"]
    assert isinstance(last, DownloadResult)
    assert last.key.startswith("logs/2026/")
    assert Path("logs/01.json").read_bytes() == OBJECTS["logs/2026/01.json"]
    assert Path("logs/02/03.json").read_bytes() == OBJECTS["logs/2026/02/03.json"]
    assert Path("data.csv").read_bytes() == OBJECTS["public/data.csv"]
