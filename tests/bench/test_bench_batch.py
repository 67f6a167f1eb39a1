"""The batch benchmark's own logic (benchmarks/batch.py): its options, the order of
its rounds and what it keeps; no client is run (``run_client`` is replaced)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import batch  # found through the path above
import report


def test_a_negative_warm_up_or_no_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--warm-up", "-1"], ["--runs", "0"]):
        with pytest.raises(SystemExit) as exited:
            batch.parse_args(argv)
        assert exited.value.code == 2
        assert "--runs must be 1 or more, and --warm-up 0 or more" in capsys.readouterr().err


def test_files_kept_are_sized_where_they_go_without_a_dest() -> None:
    # Without --dest the files go to the system temp dir: its free space decides.
    args = batch.parse_args(["--objects", "3", "--size", "1KiB"])
    assert args.dest is None
    assert batch.keeps_files(args, 2) is True


def test_the_warm_up_counts_in_the_files_kept(tmp_path: Path) -> None:
    # 2 clients x 1 KiB (a block each): 3 rounds fit in the bound, the warm-up's a 4th.
    most = 3 * 2 * batch.BLOCK
    argv = ["--objects", "1", "--size", "1KiB", "--runs", "3", "--dest", str(tmp_path)]
    args = batch.parse_args(argv)
    args.warm_up = 0
    original = batch.KEEP_FILES_MOST
    try:
        batch.KEEP_FILES_MOST = most
        assert batch.keeps_files(args, 2) is True
        args.warm_up = 1
        assert batch.keeps_files(args, 2) is False
    finally:
        batch.KEEP_FILES_MOST = original


def _rounds(monkeypatch: pytest.MonkeyPatch, argv: list[str], failing: str = "") -> Any:
    ran: list[str] = []

    def run_client(client: str, loop: str, *_: Any, **__: Any) -> dict[str, Any]:
        name = batch.row_name(client, loop)
        ran.append(name)
        if name == failing and len(ran) <= 3:  # its warm-up
            return {"client": name, "loop": loop, "failed": "exit status 1\nboom"}
        return {"client": name, "loop": loop, "wall_s": 1.0}

    monkeypatch.setattr(batch, "run_client", run_client)
    args = batch.parse_args(argv)
    pairs = batch.rows(args.clients, batch.loops_of(args.loop))
    warm_ups, runs = batch.run_rounds(pairs, args, None, None, bucket="b", digests=[], kept=None)
    return ran, warm_ups, runs


def test_warm_ups_go_first_in_the_first_rounds_order_and_are_not_counted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--runs", "2", "--clients", "asyncdl-cli,asyncdl-get-first,s5cmd"]
    ran, warm_ups, runs = _rounds(monkeypatch, argv)
    first = ["asyncdl-cli", "asyncdl-get-first", "s5cmd"]
    assert ran[:3] == first  # the warm-up round
    assert ran[3:6] == first  # the first counted round: its first client follows another's
    assert [r["client"] for r in warm_ups] == first
    assert [(r["run"], r["client"]) for r in runs] == [
        (1, "asyncdl-cli"),
        (1, "asyncdl-get-first"),
        (1, "s5cmd"),
        (2, "asyncdl-get-first"),
        (2, "s5cmd"),
        (2, "asyncdl-cli"),
    ]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "warm-up 1/1 asyncdl-cli            1.00s (not counted)"
    assert printed[3] == "run 1/2 asyncdl-cli                1.00s"


def test_no_warm_up_when_asked_for_none(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--runs", "1", "--warm-up", "0", "--clients", "asyncdl-get-first,plain-get"]
    ran, warm_ups, runs = _rounds(monkeypatch, argv)
    assert warm_ups == []
    assert len(ran) == len(runs)


def test_a_failed_warm_up_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--runs", "1", "--clients", "asyncdl-get-first,plain-get"]
    _, warm_ups, runs = _rounds(monkeypatch, argv, failing="plain-get")
    args = argparse.Namespace(loop="asyncio", server_name="moto")
    found = report.notes({"median": {}}, batch.told(runs, warm_ups), args)
    assert any(line.startswith("plain-get (warm-up) worker FAILED") for line in found)


def test_a_dest_that_is_no_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused before a server starts or a bucket is seeded (it failed in mkdtemp then).
    file = tmp_path / "file"
    file.write_bytes(b"")
    for dest in (tmp_path / "missing", file):
        with pytest.raises(SystemExit) as exited:
            batch.parse_args(["--dest", str(dest)])
        assert exited.value.code == 2
        assert f"--dest {dest}: not a directory" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == [file]


def test_the_page_warm_up_writes_in_large_writes_up_to_its_bound_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        # The file has no name while it is written (a worker killed leaves none).
        assert list(tmp_path.iterdir()) == []
        writes.append(len(data))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    batch.warm_large_pages(tmp_path, 2 * batch.WARM_WRITE + 5)
    assert writes == [batch.WARM_WRITE, batch.WARM_WRITE, 5]
    assert list(tmp_path.iterdir()) == []
    writes.clear()
    monkeypatch.setattr(batch, "WARM_MOST", batch.WARM_WRITE)
    batch.warm_large_pages(tmp_path, 10 * batch.WARM_WRITE)
    assert writes == [batch.WARM_WRITE]
    assert list(tmp_path.iterdir()) == []


def test_a_worker_warms_the_pages_before_a_large_download_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warmed: list[tuple[Path, int]] = []
    monkeypatch.setattr(batch, "warm_large_pages", lambda where, size: warmed.append((where, size)))
    monkeypatch.setattr(batch, "run_worker", lambda client, job: {"wall_s": 1.0})
    monkeypatch.setattr(os, "_exit", lambda status: None)
    dest = tmp_path / "run"
    dest.mkdir()
    for size, objects in (("512MiB", "1"), ("1KiB", "1000")):
        argv = ["--worker", "crt", "--endpoint-url", "http://127.0.0.1:9", "--bucket", "b"]
        argv += ["--objects", objects, "--size", size, "--dest", str(dest)]
        batch.worker_main(batch.parse_args(argv))
    assert warmed == [(tmp_path, 2 * 512 * 1024 * 1024)]
