"""Removals that fail: ``asyncdl clean`` says which leftover it could not remove and
why, goes on with the rest and exits 1; ``sync --delete`` counts a file it could not
delete apart from the objects (none of which failed)."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import payload
from .test_cli import without_summary

Undeletable = Callable[[Path], None]


@pytest.fixture
def undeletable(monkeypatch: pytest.MonkeyPatch) -> Iterator[Undeletable]:
    """Makes a file impossible to remove (or to open for writing) for this process.

    Root ignores permissions: there the file is made immutable (``chattr +i``, as an
    administrator would), which stops root too. Elsewhere its directory is made
    read-only. Where neither is possible (root on a file system without the
    immutable flag), ``os.unlink`` of it fails as it would: the logic is the same.
    """
    made: list[Path] = []
    readonly: list[Path] = []

    def make(path: Path) -> None:
        if os.geteuid() != 0:
            path.parent.chmod(0o555)
            readonly.append(path.parent)
            return
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if done.returncode == 0:
            made.append(path)
            return
        unlink = os.unlink

        def refuse(target: Any, *args: Any, **kwargs: Any) -> None:
            # sync --delete unlinks a name in its directory's descriptor.
            by_name = kwargs.get("dir_fd") is not None and target == path.name
            if Path(target) == path or by_name:
                raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(target))
            unlink(target, *args, **kwargs)

        monkeypatch.setattr(os, "unlink", refuse)

    try:
        yield make
    finally:
        for path in made:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        for directory in readonly:
            directory.chmod(0o755)


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def aged(path: Path, data: bytes = b"x") -> Path:
    path.write_bytes(data)
    hour_ago = time.time() - 3600
    os.utime(path, (hour_ago, hour_ago))
    return path


def test_clean_reports_a_leftover_it_cannot_remove_and_goes_on(
    undeletable: Undeletable, tmp_path: Path
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    free = [
        aged(tmp_path / ".a.asyncdl-partial"),
        aged(tmp_path / ".a.asyncdl-journal"),
        aged(tmp_path / ".b.0123abcd.asyncdl-tmp"),
    ]
    stuck = [
        aged(locked / ".c.asyncdl-partial"),
        aged(locked / ".c.asyncdl-journal"),
        aged(locked / ".d.0123abcd.asyncdl-tmp"),
    ]
    for path in stuck:
        undeletable(path)

    result = CliRunner().invoke(cli, ["clean", str(tmp_path)])

    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 1, result.output
    assert all(not path.exists() for path in free)
    assert all(path.exists() for path in stuck)
    assert sorted(line.split(",")[0] for line in result.stdout.splitlines()) == [
        f"removed: {tmp_path / '.a.asyncdl-partial'}",
        f"removed: {tmp_path / '.b.0123abcd.asyncdl-tmp'}",
    ]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, result.stderr
    # Which file stopped it (of a partial and its journal, the first that would not
    # go: as root the immutable journal, which cannot be opened to lock it), and why.
    pair = tuple(f"error: cannot remove {path}: " for path in stuck[:2])
    assert sorted(errors)[0].startswith(pair), errors
    assert sorted(errors)[1].startswith(f"error: cannot remove {stuck[2]}: "), errors
    for error in errors:
        assert error.endswith(("Operation not permitted", "Permission denied")), errors
    assert result.stderr.splitlines()[-1] == "could not remove 2 leftovers; freed 0.0 MiB"


def test_sync_counts_a_file_it_could_not_delete_apart_from_the_objects(
    undeletable: Undeletable, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for name in ("a", "b", "c", "d"):
        s3.put_object(Bucket=bucket, Key=f"p/{name}", Body=payload(100, seed=ord(name)))
    dest = tmp_path / "dest"
    locked = dest / "locked"

    def sync(*args: str) -> Any:
        return CliRunner().invoke(
            cli, ["sync", "--endpoint-url", proxy.url, *args, f"s3://{bucket}/p", str(dest)]
        )

    assert sync().exit_code == 0
    s3.put_object(Bucket=bucket, Key="p/locked/e", Body=b"e")
    assert sync().exit_code == 0
    for name in ("b", "locked/e"):
        s3.delete_object(Bucket=bucket, Key=f"p/{name}")
    undeletable(locked / "e")

    result = sync("--delete")

    assert result.exit_code == 1, result.output
    assert result.stdout == f"delete: {dest / 'b'}\n"
    assert (locked / "e").read_bytes() == b"e"
    *_, summary = without_summary(result.stderr).splitlines()
    assert summary == "could not delete 1 file"
    (error, _) = without_summary(result.stderr).splitlines()
    assert error.startswith(f"error: cannot delete {locked / 'e'}: ")


def test_clean_removes_a_link_planted_at_a_partials_name_never_what_it_points_to(
    tmp_path: Path,
) -> None:
    (tmp_path / "precious").write_bytes(b"database")
    (tmp_path / ".a.asyncdl-partial").symlink_to(tmp_path / "precious")
    (tmp_path / ".loop.asyncdl-partial").symlink_to(tmp_path / ".loop.asyncdl-partial")
    (tmp_path / ".t.0123abcd.asyncdl-tmp").symlink_to(tmp_path / "precious")
    hour_ago = time.time() - 3600
    for link in tmp_path.glob(".*"):  # the links' own ages (a young temp file is busy)
        os.utime(link, (hour_ago, hour_ago), follow_symlinks=False)

    result = CliRunner().invoke(cli, ["clean", str(tmp_path)])

    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 0, result.output
    assert os.listdir(tmp_path) == ["precious"]
    assert (tmp_path / "precious").read_bytes() == b"database"


def test_clean_reports_a_leftover_it_cannot_look_at_and_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Root may look at anything: the refusal a user meets in a directory it may list
    # but not enter is made here (the logic after it is the same).
    hidden = aged(tmp_path / ".h.asyncdl-partial")
    seen = aged(tmp_path / ".s.0123abcd.asyncdl-tmp")
    lstat = os.lstat

    def refuse(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(path) == hidden:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", refuse)

    result = CliRunner().invoke(cli, ["clean", str(tmp_path)])

    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 1, result.output
    assert not seen.exists()
    assert hidden.exists()
    assert result.stderr.splitlines() == [
        f"error: cannot look at {hidden}: Permission denied",
        "could not remove 1 leftover; freed 0.0 MiB",
    ]
