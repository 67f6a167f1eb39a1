"""``asyncdl clean`` and a live download's temp file: every live writer holds ``flock``
on its temp file (``writer.hold``), so a locked one is left alone whatever its age. A
writer whose bytes stall for minutes in its retries must not lose its file to
``clean`` and fail at publish after fetching every byte."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner

from asyncdl._files.partials import TEMP_QUIET, find_partials, remove_partial
from asyncdl.cli import cli

from ..spawn import spawned

#: A child that takes the temp file's lock as a writer does, says so, and holds it
#: until its stdin closes (or it is killed).
_HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def held_by_another_process(path: Path) -> Iterator[subprocess.Popen[str]]:
    """``path`` locked (``flock``, exclusive) by a child process, as a live writer holds
    its temp file, until the block ends. The child gets the stop signals at their
    default (``spawned``): killed on the way out whatever started pytest."""
    with spawned(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline() == "locked\n"
        yield child
        child.stdin.close()
        assert child.wait(timeout=10) == 0


def aged(path: Path, seconds: float = 3600) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_clean_leaves_a_locked_temp_file_alone_whatever_its_age(tmp_path: Path) -> None:
    live = tmp_path / ".big.bin.0123abcd.asyncdl-tmp"
    live.write_bytes(b"bytes a stalled download wrote")
    dead = tmp_path / ".old.bin.89abcdef.asyncdl-tmp"
    dead.write_bytes(b"a killed download's")
    with held_by_another_process(live):
        # Unchanged for an hour, well past the quiet time: only the lock says it lives.
        aged(live)
        aged(dead)
        assert time.time() - live.stat().st_mtime > 10 * TEMP_QUIET
        (found_live,) = [f for f in find_partials(tmp_path) if f.paths == (live,)]
        assert found_live.busy

        dry = CliRunner().invoke(cli, ["clean", "--dry-run", str(tmp_path)])
        assert dry.exit_code == 0, dry.output
        assert f"busy (left alone): {live}" in dry.stdout

        result = CliRunner().invoke(cli, ["clean", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert live.read_bytes() == b"bytes a stalled download wrote"
        assert not dead.exists()
        assert f"busy (left alone): {live}" in result.stdout
        assert f"removed: {dead}" in result.stdout

        older = CliRunner().invoke(cli, ["clean", "--older-than", "30m", str(tmp_path)])
        assert older.exit_code == 0, older.output
        assert live.exists()
    # Once its writer is gone, it is a dead writer's: removed.
    result = CliRunner().invoke(cli, ["clean", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert os.listdir(tmp_path) == []


def test_a_temp_file_locked_after_it_was_found_is_not_removed(tmp_path: Path) -> None:
    """The lock is tried when the file is removed, not only when it was found: a
    writer may have made and locked the file at that name meanwhile."""
    live = tmp_path / ".k.0123abcd.asyncdl-tmp"
    live.write_bytes(b"x")
    aged(live)
    (leftover,) = find_partials(tmp_path)
    assert not leftover.busy
    with held_by_another_process(live):
        assert remove_partial(leftover) is False
        assert live.exists()
    assert remove_partial(leftover) is True
    assert not live.exists()
