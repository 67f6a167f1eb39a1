"""What docs/cli.md's commands did: every file they wrote holds the object's bytes, the
ones they must not write are absent, and the statuses and options the page states are
the command's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from asyncdl.cli import cli
from tests.docs import docs_world
from tests.docs.docs_runner import ROOT, SH_OUTPUT

#: File written by the page (relative to its scratch directory) -> the key it holds.
WRITTEN = {
    "local.bin": "path/to/key",
    "downloads/video.mp4": "video.mp4",
    "reports/a.csv": "reports/a.csv",
    "reports/b.csv": "reports/b.csv",
    "reports/2026/q1.csv": "reports/2026/q1.csv",
    "reports/2026/q2.csv": "reports/2026/q2.csv",
    "reports/2025/q4.csv": "reports/2025/q4.csv",
    "logs/01.json": "logs/2026/01.json",
    "logs/02/03.json": "logs/2026/02/03.json",
    "photos/cat.jpg": "photos/2026/cat.jpg",
    "photos/dog.jpg": "photos/2026/dog.jpg",
    "data.csv": "public/data.csv",
    "downloads/index.html": "public/index.html",
    "copy.csv": "public/data.csv",
    "data.bin": "checked/data.bin",
    "small.json": "small.json",
    "big.bin": "datasets/big.bin",
    "app.json": "config/app.json",
    "big-fast.bin": "datasets/big.bin",
    "intro.mp4": "videos/intro.mp4",
    "small-again.json": "small.json",
    "open-data.csv": "public/data.csv",
    "reports-csv/a.csv": "reports/a.csv",
    "reports-csv/b.csv": "reports/b.csv",
    "reports-csv/2026/q1.csv": "reports/2026/q1.csv",
    "reports-csv/2026/q2.csv": "reports/2026/q2.csv",
}


def _asyncdl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncdl.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".*") if "asyncdl-" in p.name)


async def check(namespace: dict[str, Any]) -> None:
    here = Path.cwd()
    for name, key in WRITTEN.items():
        assert (here / name).read_bytes() == docs_world.OBJECTS[key], name

    # cp -r's filters: the last that matches wins, so 2025/ is left out; its dry run
    # wrote nothing.
    assert not (here / "reports-csv" / "2025").exists()
    assert not (here / "reports-2026").exists()
    # sync --include '*.jpg' left the notes out, and --delete --dry-run did nothing.
    assert not (here / "photos" / "notes.txt").exists()
    assert (here / "photos" / "mine.txt").read_text() == "my own notes\n"
    # cat --range 0-99 --range -64: the first 100 bytes, then the last 64.
    big = docs_world.OBJECTS["datasets/big.bin"]
    assert (here / "ends.bin").read_bytes() == big[:100] + big[-64:]
    # The failed copy wrote nothing, nor did the one with a missing profile.
    assert not (here / "missing.json").exists()
    assert not (here / "nothing.json").exists()

    ok, failed = (json.loads(line) for line in (here / "results.jsonl").read_text().splitlines())
    assert ok["ok"]
    assert ok["verified"]
    assert ok["checksum"].startswith("SHA256:")
    assert (ok["strategy"], ok["requests"]) == ("head-first", 2)
    assert ok["size"] == len(docs_world.OBJECTS["checked/data.bin"])
    assert not failed["ok"]
    assert failed["error"]["type"] == "ObjectNotFoundError"

    # The resumed copy left no partial file; clean removed the interrupted one's.
    assert _leftovers(here) == [], _leftovers(here)
    assert list((here / "interrupted").iterdir()) == []

    # What the commands printed is what the page shows.
    printed = "\n".join(namespace[SH_OUTPUT])
    lines = set(printed.splitlines())
    for line in (
        "download: s3://my-bucket/path/to/key to local.bin",
        "download: s3://my-bucket/reports/2026/q1.csv to reports/2026/q1.csv",
        "(dryrun) download: s3://my-bucket/photos/2026/notes.txt to photos/notes.txt",
        "left alone: photos/mine.txt (not written by asyncdl)",
        "error: s3://my-bucket/missing.json: no such object (NoSuchKey)",
        "1 of 1 objects failed",
        "exit status 1",
        "exit status 2",
        "exit status 143",
        "stats: objects: 1 done, 0 failed",
    ):
        assert line in lines, line
    # asyncio's loop here; uvloop's where it is installed (nox -s tests_uvloop).
    assert any(line.startswith("INFO asyncdl: event loop: ") for line in lines)
    assert "date,region,amount\n2026-q1-01,eu-west-1,37\n2026-q1-02,eu-west-1,74\n" in printed
    # The second sync of logs/ downloaded nothing: two lines for the two objects.
    assert printed.count("download: s3://my-bucket/logs/2026/") == 2
    assert "error: Invalid value for '--chunk-size': '8M' is not a size" in printed
    # The demo's table: one request per small object GET-first, two HEAD-first.
    rows = {row[0]: row for line in printed.splitlines() if len(row := line.split()) == 7}
    assert rows["get-first"][1] == rows["head-first"][1] == "101", rows
    assert (rows["get-first"][5], rows["head-first"][5]) == ("1.00", "2.00"), rows

    page = (ROOT / "docs" / "cli.md").read_text()
    # The guide (above the generated reference) names every option of every command.
    guide = page.split("\n## Reference\n", 1)[0]
    names = {
        name
        for command in [cli, *cli.commands.values()]
        for param in command.params
        for name in [*param.opts, *param.secondary_opts]
        if name.startswith("--") and name != "--help"
    }
    assert names, cli.commands
    assert not [n for n in names if n not in guide], sorted(n for n in names if n not in guide)

    # Every option of `asyncdl demo --help` (argparse's, not click's: the generated
    # reference cannot show them) is on the page.
    demo_help = _asyncdl("demo", "--help")
    assert demo_help.returncode == 0, demo_help
    options = set(re.findall(r"--[a-z][a-z-]+", demo_help.stdout)) - {"--help"}
    assert options, demo_help.stdout
    assert all(option in page for option in options), sorted(o for o in options if o not in page)
    assert os.environ["AWS_ENDPOINT_URL_S3"]  # the page's --endpoint-url example used it
