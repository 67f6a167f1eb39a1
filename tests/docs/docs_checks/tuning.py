"""What docs/tuning.md's examples did, and that its table of fields is TransferConfig's:
every field, with its default as the code has it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from tests.docs import docs_world
from tests.docs.docs_runner import ROOT

MiB = 2**20
_SIZES = {"chunk_size", "write_size"}
#: A figure with a decimal point (2.87, 314.6), or a count of three digits or more.
_FIGURE = re.compile(r"\b\d+\.\d+\b|\b\d{3,}\b")
_SECONDS = {"read_timeout", "connect_timeout", "backoff_base", "backoff_max"}


def _shown(name: str, value: object) -> str:
    """A default as the page's table writes it."""
    if name in _SIZES:
        assert isinstance(value, int)
        assert value % MiB == 0, (name, value)
        return f"{value // MiB} MiB"
    if name in _SECONDS:
        assert isinstance(value, float)
        return f"{value:g} s"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def _table(page: str) -> dict[str, str]:
    """The rows of the page's table of fields: field -> default."""
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", page, re.MULTILINE)
    return {name: default.strip() for name, default in rows}


async def check(namespace: dict[str, Any]) -> None:
    here = Path.cwd()
    big = docs_world.OBJECTS["datasets/big.bin"]
    assert (here / "big.bin").read_bytes() == big
    assert (here / "big-4mib.bin").read_bytes() == big
    assert (here / "app.json").read_bytes() == docs_world.OBJECTS["config/app.json"]

    reports = {k: v for k, v in docs_world.OBJECTS.items() if k.startswith("reports/")}
    results = namespace["results"]
    assert sorted(r.key for r in results) == sorted(reports)
    assert all(r.ok and r.requests == 1 for r in results)
    for key, body in reports.items():
        assert (here / "reports" / key.removeprefix("reports/")).read_bytes() == body

    assert namespace["received"] == len(docs_world.OBJECTS["videos/intro.mp4"])
    far = namespace["far"]
    assert (far.max_concurrency, far.chunk_size, far.connect_timeout) == (64, 16 * MiB, 20.0)
    stats = namespace["stats"]
    assert (stats.concurrency_limit, stats.max_concurrency, stats.objects_done) == (32, 32, 1)

    # The table lists every field of TransferConfig, with the code's default.
    page = (ROOT / "docs" / "tuning.md").read_text()
    table = _table(page)
    fields = {f.name: f.default for f in dataclasses.fields(asyncdl.TransferConfig)}
    assert sorted(table) == sorted(fields), sorted(set(table) ^ set(fields))
    for name, default in fields.items():
        assert table[name] == _shown(name, default), (name, table[name], default)

    # The bounds the page states: each one is accepted, one step beyond it refused.
    bounds = {
        "max_concurrency": (1, 10_000),
        "chunk_size": (64 * 1024, 5 * 1024 * MiB),
        "write_size": (4 * 1024, 64 * MiB),
        "stream_prefetch": (1, 1000),
        "max_attempts": (1, 100),
    }
    make: Any = asyncdl.TransferConfig  # field names as strings
    for name, (low, high) in bounds.items():
        for value in (low, high):
            make(**{name: value})
        for value in (low - 1, high + 1):
            with pytest.raises(ValueError, match=name):
                make(**{name: value})
    make(backoff_base=0.0)
    for name in ("read_timeout", "connect_timeout", "backoff_max"):
        with pytest.raises(ValueError, match=name):
            make(**{name: 0.0})

    # Every figure the benchmarks section quotes is one benchmarks/README.md holds.
    quoted = page.split("\n## The benchmarks\n", 1)[1]
    measured = (ROOT / "benchmarks" / "README.md").read_text()
    rows = [row for row in quoted.splitlines() if row.startswith("| [")]
    figures = {figure for row in rows for figure in _FIGURE.findall(row)}
    assert figures, quoted
    unmeasured = sorted(figure for figure in figures if figure not in measured)
    assert not unmeasured, unmeasured

    # The library does not choose an event loop: only the command's loop module
    # imports uvloop.
    package = ROOT / "src" / "asyncdl"
    importers = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if re.search(r"^\s*(import|from) uvloop", p.read_text(), re.MULTILINE)
    ]
    assert importers == ["cli/loops.py"], importers
