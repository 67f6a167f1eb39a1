"""Temp files of killed writers: a later run over the same directories removes them,
never one a live writer holds (``asyncdl._files.dead_temps``)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import dead_temps, writer

from ..conftest import payload, temp_files

KILLED_WRITER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"half of an object")
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_writer(path: Path) -> None:
    """A writer killed between its temp file's creation and its rename."""
    run = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], check=False)
    assert run.returncode == -9
    assert path.exists()


async def test_a_run_removes_what_killed_writers_left_where_it_wrote(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    for key in ("p/a", "p/sub/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=payload(100))
    (tmp_path / "sub").mkdir()
    dead = [tmp_path / ".a.0123abcd.asyncdl-tmp", tmp_path / "sub" / ".b.89abcdef.asyncdl-tmp"]
    for path in dead:
        killed_writer(path)
    old = tmp_path / ".c.fedcba98.asyncdl-tmp"  # an older asyncdl's: it took no lock
    old.write_bytes(b"x")
    live = tmp_path / ".d.76543210.asyncdl-tmp"  # a writer still at work, elsewhere
    fd = os.open(live, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        async for result in engine.download_prefix(bucket, "p", tmp_path):
            assert result.ok, result.error
        assert temp_files(tmp_path) == [live.name]
        assert temp_files(tmp_path / "sub") == []
        assert (tmp_path / "sub" / "b").read_bytes() == payload(100)
    finally:
        os.close(fd)


async def test_a_writer_refused_its_lock_takes_another_name(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep that took the lock of a file made a moment before (and removes it): the
    # writer may not use that file, and goes on under another name.
    s3.put_object(Bucket=bucket, Key="k", Body=payload(100))
    refused: list[int] = []

    def hold_once(fd: int) -> bool:
        if not refused:
            refused.append(fd)
            return False
        return True

    monkeypatch.setattr(writer, "hold", hold_once)
    # A target that is there already: a new one is written unnamed (no temp file to
    # lock) where the system can; one that replaces another always has a temp name.
    (tmp_path / "k").write_bytes(b"old")
    result = await engine.download(bucket, "k", tmp_path / "k")
    assert result.ok, result.error
    assert refused
    assert (tmp_path / "k").read_bytes() == payload(100)
    # The refused file is the sweep's to remove; here nobody did, and it was not used.
    (left,) = temp_files(tmp_path)
    assert (tmp_path / left).read_bytes() == b""


def test_the_sweep_follows_no_link_below_the_destination(tmp_path: Path) -> None:
    # The destination itself may be the user's link (./data -> /mnt/...); below it, a
    # directory swapped for a link after the downloads leads the sweep nowhere.
    real = tmp_path / "real"
    (real / "a").mkdir(parents=True)
    dest = tmp_path / "data"
    dest.symlink_to(real)
    top = real / ".t.0123abcd.asyncdl-tmp"
    killed_writer(top)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / ".v.89abcdef.asyncdl-tmp"
    killed_writer(victim)
    (real / "a").rmdir()
    (real / "a").symlink_to(outside)
    assert dead_temps.remove_dead(dest, [dest, dest / "a"]) == 1
    assert not top.exists()
    assert victim.exists()
