"""What docs/guides/resume-and-sync.md's examples did."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import asyncdl
from tests.docs import docs_world
from tests.docs.docs_runner import SH_OUTPUT

BIG = docs_world.OBJECTS["datasets/big.bin"]


def _tree(root: str) -> dict[str, bytes]:
    base = Path(root)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}


def _under(prefix: str) -> dict[str, bytes]:
    return {
        key.removeprefix(prefix): body
        for key, body in docs_world.OBJECTS.items()
        if key.startswith(prefix)
    }


async def check(namespace: dict[str, Any]) -> None:
    # Resumed: part of the object came from the partial file, and the file is whole.
    result = namespace["result"]
    assert result.ok
    assert 0 < result.reused_bytes < len(BIG), result
    assert result.partial_discarded is None
    assert Path("big.bin").read_bytes() == BIG
    # The second download of the same target was refused while the first ran.
    assert isinstance(namespace["refused"], asyncdl.TargetBusyError)
    assert namespace["again"].ok
    assert Path("again.bin").read_bytes() == BIG
    # The command's copy, stopped (its partial file listed) and continued from it.
    assert Path("copy.bin").read_bytes() == BIG
    (stopped,) = [o for o in namespace[SH_OUTPUT] if "would remove: .copy.bin.asyncdl-partial" in o]
    assert "would free " in stopped
    resumed = re.search(r"to copy\.bin \(resumed: ([\d.]+) MiB were already here\)", stopped)
    assert resumed is not None, stopped
    assert 0 < float(resumed[1]) < len(BIG) / 2**20, stopped
    # No partial file, journal or temp file is left anywhere.
    own = (".asyncdl-partial", ".asyncdl-journal", ".asyncdl-tmp")
    leftovers = [p for p in Path().rglob(".*") if p.name.endswith(own)]
    assert leftovers == [], leftovers
    # sync: the logs, and the file asyncdl did not write left alone by --delete.
    logs = _tree("logs")
    assert logs.pop("notes.txt") == b"my notes\n"
    assert logs == _under("logs/")
    # skip_existing="etag": the second run skipped everything, sending nothing.
    reports = _under("reports/")
    assert _tree("mirror") == reports
    results = namespace["results"]
    assert len(results) == len(reports)
    assert all(r.skipped and r.requests == 0 for r in results), results
    # --dry-run wrote nothing and made no directory.
    assert not Path("reports").exists()
