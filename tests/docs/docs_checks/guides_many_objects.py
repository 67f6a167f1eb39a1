"""What docs/guides/many-objects.md's examples did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncdl
from tests.docs import docs_world


def _tree(root: str) -> dict[str, bytes]:
    base = Path(root)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}


async def check(namespace: dict[str, Any]) -> None:
    objects = docs_world.OBJECTS
    # download_prefix: every object under reports/, the part after the folder its path.
    reports = {k: v for k, v in objects.items() if k.startswith("reports/")}
    assert _tree("reports") == {k.removeprefix("reports/"): v for k, v in reports.items()}
    # download_many: two files, one failure that did not stop them.
    assert Path("a.csv").read_bytes() == objects["reports/a.csv"]
    assert Path("cat.jpg").read_bytes() == objects["photos/2026/cat.jpg"]
    assert not Path("missing.csv").exists()
    [failure] = namespace["failed"]
    assert isinstance(failure.error, asyncdl.ObjectNotFoundError)
    assert failure.key == "reports/missing.csv"
    # Filters: only the 2026 CSV files, nothing else written.
    assert sorted(namespace["csv_2026"]) == ["reports/2026/q1.csv", "reports/2026/q2.csv"]
    assert _tree("only-2026") == {
        "2026/q1.csv": objects["reports/2026/q1.csv"],
        "2026/q2.csv": objects["reports/2026/q2.csv"],
    }
    # listed=: the totals of photos/2026/.
    photos = {k: v for k, v in objects.items() if k.startswith("photos/2026/")}
    assert namespace["totals"] == {"objects": len(photos), "bytes": sum(map(len, photos.values()))}
    assert _tree("photos") == {k.removeprefix("photos/2026/"): v for k, v in photos.items()}
    # Leaving early: one result taken, no temp file left behind.
    first = namespace["first_log"]
    assert first.ok
    assert first.key.startswith("logs/")
    assert first.path.read_bytes() == objects[first.key]
    leftovers = [p for p in Path("first-log").rglob("*") if p.name.startswith(".")]
    assert leftovers == [], leftovers
    # Tiny objects: one GET each.
    photos_all = namespace["photos"]
    assert len(photos_all) == sum(k.startswith("photos/") for k in objects)
    assert all(r.ok and r.requests == 1 for r in photos_all), photos_all
