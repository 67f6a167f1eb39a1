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
from tests import docs_world
from tests.docs_runner import ROOT

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

    # sync --include '*.jpg' left the notes out, and --delete --dry-run did nothing.
    assert not (here / "photos" / "notes.txt").exists()
    assert (here / "photos" / "mine.txt").read_text() == "my own notes\n"
    # cat --range 0-99 --range -64: the first 100 bytes, then the last 64.
    big = docs_world.OBJECTS["datasets/big.bin"]
    assert (here / "ends.bin").read_bytes() == big[:100] + big[-64:]
    # The failed copy wrote nothing.
    assert not (here / "missing.json").exists()

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

    # The statuses the page shows.
    missing = _asyncdl("cp", "s3://my-bucket/missing.json", "elsewhere.json")
    assert missing.returncode == 1, missing
    assert missing.stderr.splitlines() == [
        "error: s3://my-bucket/missing.json: no such object (NoSuchKey)",
        "1 of 1 objects failed",
    ]
    bad_size = _asyncdl("cp", "--chunk-size", "8M", "s3://my-bucket/small.json", ".")
    assert bad_size.returncode == 2, bad_size
    assert bad_size.stderr.startswith("error: Invalid value for '--chunk-size': '8M'")

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
