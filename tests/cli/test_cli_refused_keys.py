"""A refused key in ``cp -r --no-resume`` (a key that cannot be a file under DEST) is one
failed object with no path of its own: the other objects are written, the run exits 1
naming it, and the per-object clean-up of ``--no-resume`` (an earlier copy's partial
file of each target) never takes DEST, or anything outside it, for a target."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import TcpProxy

from .test_cli import without_summary

NAMES = ("a.txt", "b.txt", "c/d.txt", "e", "f")
VALID = {f"p/{name}": f"body of {name}".encode() for name in NAMES}


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def snapshot(top: Path, leave_out: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``top`` but those under ``leave_out``: its bytes and mtime."""
    seen = {}
    for path in sorted(top.rglob("*")):
        if path == leave_out or leave_out in path.parents or not path.is_file():
            continue
        seen[str(path.relative_to(top))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return seen


def plant_partial(directory: Path, name: str) -> None:
    """What an earlier, interrupted copy to ``directory/name`` would have left: a
    partial and its journal (unlocked, an hour old)."""
    hour_ago = time.time() - 3600
    for suffix in ("partial", "journal"):
        path = directory / f".{name}.asyncdl-{suffix}"
        path.write_bytes(b"an earlier copy's " + suffix.encode())
        os.utime(path, (hour_ago, hour_ago))


@pytest.mark.parametrize("refused", ["p/a//b.txt", "p/.e.asyncdl-partial"])
@pytest.mark.parametrize("dest", [".", "data"])
def test_a_refused_key_is_one_failed_object_and_nothing_outside_dest_is_touched(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dest: str,
    refused: str,
) -> None:
    for key, body in {**VALID, refused: b"refused"}.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    work = tmp_path / "work"
    cwd = work / "here" if dest == "." else work
    cwd.mkdir(parents=True)
    # What a clean-up that took DEST for a target would remove: the partial and
    # journal of DEST's own name, in its parent, outside DEST.
    root = (cwd / dest).resolve()
    root.mkdir(exist_ok=True)
    plant_partial(root.parent, root.name)
    (work / "keep.txt").write_bytes(b"mine")
    before = snapshot(tmp_path, leave_out=root)
    monkeypatch.chdir(cwd)  # restored when the test ends

    result = CliRunner().invoke(
        cli, ["cp", "-r", "--no-resume", "--endpoint-url", proxy.url, f"s3://{bucket}/p/", dest]
    )

    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 1, result.output
    written = {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file()
    }
    assert written == {key.removeprefix("p/"): body for key, body in VALID.items()}
    errors = without_summary(result.stderr).splitlines()
    assert len(errors) == 2, result.stderr
    assert errors[0].startswith(f"error: s3://{bucket}/{refused}: refusing key {refused!r}")
    assert errors[1] == "1 of 6 objects failed"
    assert "unexpected" not in result.stderr
    assert snapshot(tmp_path, leave_out=root) == before
