"""The Dask run's temp-file sweep on its own: a journal of directories, no cluster."""

from __future__ import annotations

import os
from pathlib import Path

from asyncdl.dask import _sweep

RUN, OTHER = "0123456789abcdef", "fedcba9876543210"


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_a_run_sweeps_only_its_own_temp_files_in_its_own_directories(tmp_path: Path) -> None:
    _sweep.record_dirs(tmp_path, RUN, [tmp_path, tmp_path / "a", tmp_path / "a" / "b"])
    _sweep.record_dirs(tmp_path, RUN, [tmp_path / "a"])  # a later partition, same directory
    _sweep.record_dirs(tmp_path, OTHER, [tmp_path / "a"])
    mine = [
        touch(tmp_path / f".top.{RUN}-0123abcd.asyncdl-tmp"),
        touch(tmp_path / "a" / f".x.{RUN}-0123abcd.asyncdl-tmp"),
        touch(tmp_path / "a" / "b" / f".y.{RUN}-89abcdef.asyncdl-tmp"),
    ]
    kept = [
        touch(tmp_path / "a" / f".z.{OTHER}-0123abcd.asyncdl-tmp"),  # a concurrent run's
        touch(tmp_path / "a" / ".w.0123abcd.asyncdl-tmp"),  # a CLI or library download's
        touch(tmp_path / "c" / f".v.{RUN}-0123abcd.asyncdl-tmp"),  # never listed: not seen
        touch(tmp_path / "a" / "data"),
    ]
    assert _sweep.sweep(str(tmp_path), RUN) == len(mine)
    assert not any(path.exists() for path in mine)
    assert all(path.exists() for path in kept)
    # The run's journal went with its temp files; the other run's is still there.
    assert [p.name.split(".")[0] for p in (tmp_path / _sweep.JOURNAL_DIR).iterdir()] == [OTHER]
    assert _sweep.sweep(str(tmp_path), RUN) == 0


def test_without_a_run_id_every_recorded_run_is_swept(tmp_path: Path) -> None:
    _sweep.record_dirs(tmp_path, RUN, [tmp_path / "a"])
    _sweep.record_dirs(tmp_path, OTHER, [tmp_path / "b"])
    mine = touch(tmp_path / "a" / f".x.{RUN}-0123abcd.asyncdl-tmp")
    theirs = touch(tmp_path / "b" / f".x.{OTHER}-0123abcd.asyncdl-tmp")
    untagged = touch(tmp_path / "a" / ".w.0123abcd.asyncdl-tmp")
    assert _sweep.sweep(str(tmp_path), None) == 2
    assert not mine.exists()
    assert not theirs.exists()
    assert untagged.exists()
    assert not (tmp_path / _sweep.JOURNAL_DIR).exists()


def test_a_journal_never_leads_the_sweep_outside_dest_dir(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _sweep.record_dirs(dest, RUN, [dest / "a"])
    outside = touch(tmp_path / "out" / f".x.{RUN}-0123abcd.asyncdl-tmp")
    journal = next((dest / _sweep.JOURNAL_DIR).iterdir())
    with open(journal, "a") as lines:
        lines.write(f"../out\n{tmp_path / 'out'}\n")
    assert _sweep.sweep(str(dest), RUN) == 0
    assert outside.exists()


def test_no_journal_no_work(tmp_path: Path) -> None:
    touch(tmp_path / "a" / f".x.{RUN}-0123abcd.asyncdl-tmp")
    assert _sweep.sweep(str(tmp_path), None) == 0
    assert _sweep.sweep(str(tmp_path / "missing"), RUN) == 0
    assert sorted(os.listdir(tmp_path)) == ["a"]


def test_a_journal_planted_as_a_fifo_or_a_link_is_not_read(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _sweep.record_dirs(dest, RUN, [dest / "a"])
    mine = touch(dest / "a" / f".x.{RUN}-0123abcd.asyncdl-tmp")
    journals = dest / _sweep.JOURNAL_DIR
    # A FIFO under another run's name would hold the sweep forever; a link, lead it to a
    # file of someone else's choosing.
    os.mkfifo(journals / f"{OTHER}.host-1{_sweep._SUFFIX}")
    elsewhere = touch(tmp_path / "list")
    os.symlink(elsewhere, journals / f"{OTHER}.host-2{_sweep._SUFFIX}")
    assert _sweep.sweep(str(dest), None) == 1  # in time: pytest's timeout would end a wait
    assert not mine.exists()
    assert elsewhere.exists()


def test_journals_not_ours_alone_lead_nowhere(tmp_path: Path) -> None:
    # In a shared destination anyone may plant a journal naming a directory: a run's
    # temp files there are swept only on the word of a journal this user wrote.
    dest = tmp_path / "dest"
    _sweep.record_dirs(dest, RUN, [dest / "a"])
    journal = next((dest / _sweep.JOURNAL_DIR).iterdir())
    planted = journal.with_name(f"{RUN}.elsewhere-9{_sweep._SUFFIX}")
    planted.write_text('"b"\n')
    planted.chmod(0o666)  # anyone's to write
    theirs = touch(dest / "b" / f".x.{RUN}-0123abcd.asyncdl-tmp")
    assert _sweep.sweep(str(dest), RUN) == 0
    assert theirs.exists()


def test_a_journaled_directory_that_is_a_link_out_of_dest_dir_is_not_swept(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "dest"
    _sweep.record_dirs(dest, RUN, [dest / "a"])
    outside = touch(tmp_path / "out" / f".x.{RUN}-0123abcd.asyncdl-tmp")
    os.symlink(tmp_path / "out", dest / "a")  # made after the run wrote its journal
    assert _sweep.sweep(str(dest), RUN) == 0
    assert outside.exists()
