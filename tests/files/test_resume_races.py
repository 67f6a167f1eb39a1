"""Two downloads of one target racing over names that hold no journal of theirs (one
an older asyncdl left group-writable, or someone planted), and the dead-temp sweep
racing a journal's compaction: each window forced open with a hook on the real code,
on real files."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from asyncdl._files import dead_temps, journal, partial_file, partial_paths, writer
from asyncdl._files.journal import Header
from asyncdl._files.partial_file import PartialFile

SIZE = 1 << 20


class Busy(Exception):
    pass


def foreign_pair(target: Path) -> tuple[Path, Path, Header]:
    """A partial and a journal at ``target``'s names that are not ours alone."""
    header = Header("bkt", "k", None, '"e"', SIZE, target.name)
    partial, path = partial_paths.paths_for(target)
    partial.write_bytes(bytes(SIZE))
    path.write_bytes(journal.content(header, [], fsync=False))
    os.chmod(path, 0o664)
    return partial, path, header


def test_a_download_that_found_a_foreign_journal_never_takes_a_live_ones_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both find the foreign journal; A (another process) runs its whole open while B
    # holds the foreign file open, about to lock it: B must then find A's journal
    # held, not remove A's names and publish-by-name over A's partial.
    target = tmp_path / "k"
    partial, path, header = foreign_pair(target)
    first = PartialFile(target, header, Busy, fsync=False, adopt=False)
    second = PartialFile(target, header, Busy, fsync=False, adopt=False)
    real_lock, fired = partial_paths.lock, list[int]()

    def lock(fd: int, busy: partial_paths.Busy, *, shared: bool) -> None:
        if not fired and not shared:
            fired.append(fd)
            first._open_sync()
        real_lock(fd, busy, shared=shared)

    monkeypatch.setattr(partial_paths, "lock", lock)
    try:
        with pytest.raises(Busy):
            second._open_sync()
        assert os.path.samestat(os.fstat(first._fd), os.stat(partial))
        assert os.path.samestat(os.fstat(first._journal_fd), os.stat(path))
    finally:
        first.discard()


def test_removing_a_foreign_pair_never_removes_a_live_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `asyncdl clean` (or --no-resume) removes a pair whose journal is not ours; a
    # download of the target starting meanwhile keeps its own partial.
    target = tmp_path / "k"
    partial, path, header = foreign_pair(target)
    second = PartialFile(target, header, Busy, fsync=False, adopt=False)
    real_remove, fired = partial_paths.remove_name, list[Path]()

    def remove_name(name: Path, dir_fd: int | None = None) -> None:
        if name == partial and not fired:
            fired.append(name)
            with contextlib.suppress(Busy):
                second._open_sync()  # another process's download starts now
        real_remove(name, dir_fd)

    monkeypatch.setattr(partial_paths, "remove_name", remove_name)
    try:
        with contextlib.suppress(Busy):
            partial_paths.remove_pair(partial, path, Busy)
        assert fired
        if second._fd >= 0:  # it opened: its partial is still under its name
            assert os.path.samestat(os.fstat(second._fd), os.stat(partial))
    finally:
        second.discard()


def test_the_dead_temp_sweep_never_takes_a_journal_being_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A download_prefix ending in the same directory sweeps right when a journal's new
    # file is made and not yet locked: the journal is still replaced, whole.
    target = tmp_path / "k"
    header = Header("bkt", "k", None, '"e"', SIZE, "k")
    made = PartialFile(target, header, Busy, fsync=False, adopt=False)
    real_hold, swept = writer.hold, list[int]()

    def hold(fd: int) -> bool:
        if not swept:
            swept.append(dead_temps.remove_dead(tmp_path, [tmp_path]))
        return real_hold(fd)

    monkeypatch.setattr(partial_file, "hold", hold)
    try:
        made._open_sync()
        assert swept[0] == 1  # it took the first new file
        assert os.path.samestat(os.fstat(made._journal_fd), os.stat(made.files[1]))
        with open(made.files[1], "rb") as lines:
            assert lines.readline().startswith(b'{"v":')
    finally:
        made.discard()
