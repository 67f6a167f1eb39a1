"""What docs/guides/dask.md's examples did, on the local cluster the page starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncdl.dask as adask
from tests.docs import docs_world


def _tree(root: str) -> dict[str, bytes]:
    base = Path(root)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}


def _under(prefix: str) -> dict[str, bytes]:
    return {key: body for key, body in docs_world.OBJECTS.items() if key.startswith(prefix)}


async def check(namespace: dict[str, Any]) -> None:
    reports, logs = _under("reports/"), _under("logs/")
    # The first run downloaded every listed object, on the workers, at dest_dir/<key>.
    summary = namespace["summary"]
    assert (summary.downloaded, summary.skipped, summary.failed) == (len(reports), 0, 0)
    assert summary.bytes == sum(map(len, reports.values()))
    assert summary.workers, summary
    assert sum(w.downloaded for w in summary.workers.values()) == len(reports)
    # The second skipped all of them, sending nothing.
    again = namespace["again"]
    assert (again.downloaded, again.skipped, again.requests) == (0, len(reports), 0)
    # The CSV manifest: its paths, and one failure that did not stop the rest.
    photos = namespace["photos"]
    assert (photos.downloaded, photos.failed) == (2, 1)
    [failure] = photos.failures
    assert failure.key == "photos/2026/missing.jpg"
    assert failure.error_type == "ObjectNotFoundError"
    assert _tree("photos") == {
        "cat.jpg": docs_world.OBJECTS["photos/2026/cat.jpg"],
        "dog.jpg": docs_world.OBJECTS["photos/2026/dog.jpg"],
    }
    # download_results wrote its rows to Parquet; the files are in the mirror too.
    rows = sorted(p.name for p in Path("results").iterdir())
    assert rows, rows
    # Every file where its key says, and nothing of asyncdl's own left behind (the
    # record sidecar, where the file system takes no xattrs, is not a leftover).
    mirror = _tree("mirror")
    mirror = {k: v for k, v in mirror.items() if not k.startswith(".asyncdl-etags/")}
    assert mirror == {**reports, **logs}
    assert not Path("mirror/.asyncdl-runs").exists()
    assert namespace["client"].status == "closed"
    assert isinstance(summary, adask.ManifestSummary)
