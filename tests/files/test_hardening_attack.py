"""Hardening III, attacked: what a hostile co-user of a shared directory, a full disk
and a directory moved mid-run do to the fixes of links in DEST, a failed
preallocation, ``--no-resume`` clean-up, records and ``asyncdl clean``.

Real links and real ownership (the tests run as root, which may give a file away), a
real tmpfs where a disk must fill, moto through the recording proxy, and ``asyncdl
clean`` run as another user in a process of its own.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncdl._files import file_records, held_dirs
from asyncdl._files.held_dirs import HeldDir
from asyncdl._files.journal import Header
from asyncdl._files.partial_file import PartialFile
from asyncdl._files.partial_paths import paths_for
from asyncdl.cli import cli
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..cli.test_cli import without_summary
from ..conftest import payload
from .test_clean_live import held_by_another_process
from .test_dest_links import ANOTHER, OTHER, link, new_bucket, outside, run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives files away: needs root")

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def no_endpoint_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


# -- a link of this user's leading to another user's link -----------------------------


@pytest.fixture(params=["O_PATH", "no O_PATH"])
def o_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Links opened themselves (Linux), or looked at before and after (elsewhere)."""
    if request.param == "no O_PATH":
        monkeypatch.setattr(held_dirs, "_O_PATH", None)


@pytest.mark.parametrize("command", ["cp", "sync"])
@pytest.mark.parametrize("text", ["v2", "v2/inner", "ABSOLUTE"])
@pytest.mark.usefixtures("o_path")
def test_a_link_of_mine_to_another_users_link_is_not_followed_through_it(
    command: str, text: str, s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    """``latest -> v2`` is this user's (followed), ``v2 -> /elsewhere`` another user's
    in a directory of a third (refused when met by its own name): met through the
    text of ``latest``, it is refused too. Whatever the text, relative or absolute."""
    name = new_bucket(s3, {"p/latest/a.bin": b"through the other user's link"})
    dest, elsewhere = tmp_path / "dest", outside(tmp_path)
    (elsewhere / "inner").mkdir()
    (elsewhere / "inner" / "a.bin").write_bytes(b"a file outside the destination")
    dest.mkdir()
    os.chown(dest, ANOTHER, ANOTHER)
    link(dest / "v2", elsewhere, owner=OTHER)
    to = dest / "v2" if text == "ABSOLUTE" else Path(text)
    link(dest / "latest", to, owner=os.geteuid())

    result = run(proxy, command, f"s3://{name}/p", str(dest))

    assert result.exit_code == 1, result.output
    assert (elsewhere / "a.bin").read_bytes() == b"a file outside the destination"
    assert (elsewhere / "inner" / "a.bin").read_bytes() == b"a file outside the destination"
    assert sorted(os.listdir(elsewhere)) == ["a.bin", "inner"]
    assert sorted(os.listdir(elsewhere / "inner")) == ["a.bin"]
    assert "symbolic link" in result.output
    assert f"owned by uid {OTHER}" in result.output


@pytest.mark.usefixtures("o_path")
def test_a_chain_of_my_own_links_is_followed_and_a_loop_is_an_error(
    s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    name = new_bucket(s3, {"p/latest/a.bin": b"data", "p/loop/b.bin": b"never"})
    dest, disk = tmp_path / "dest", tmp_path / "disk"
    dest.mkdir()
    disk.mkdir()
    link(dest / "v2", disk, owner=os.geteuid())
    link(dest / "latest", Path("v2"), owner=os.geteuid())
    link(dest / "loop", Path("loop"), owner=os.geteuid())

    result = run(proxy, "cp", f"s3://{name}/p", str(dest))

    assert result.exit_code == 1, result.output
    assert (disk / "a.bin").read_bytes() == b"data"
    assert str(dest / "loop") in result.output
    assert sorted(os.listdir(dest)) == ["latest", "loop", "v2"]


# -- cp -r --no-resume: the clean-up after each object ---------------------------------


def test_no_resume_clean_up_does_not_follow_a_link_swapped_in_mid_run(
    s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    """The download writes in the directory it decided on; the clean-up of an earlier
    copy's partial that follows must not walk the path again through a link another
    user put there meanwhile, removing a partial and journal outside DEST."""
    body = payload(3000, seed=7)
    name = new_bucket(s3, {"p/sub/a.bin": body})
    dest, elsewhere = tmp_path / "dest", tmp_path / "elsewhere"
    (dest / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    # Another download's partial and journal, outside the destination: this user's.
    partial, journal = paths_for(elsewhere / "a.bin")
    for made in (partial, journal):
        made.write_bytes(b"another download's")
        made.chmod(0o600)

    def swap() -> None:
        os.rename(dest / "sub", dest / "moved")
        link(dest / "sub", elsewhere, owner=OTHER)

    swaps = iter([Fault(before=swap)])

    def rule(request: RequestRecord) -> Fault | None:
        return (
            next(swaps, None) if request.method == "GET" and "sub/a.bin" in request.path else None
        )

    proxy.rule = rule

    result = run(proxy, "cp", "--no-resume", f"s3://{name}/p", str(dest))

    assert result.exit_code == 0, result.output
    assert (dest / "moved" / "a.bin").read_bytes() == body
    assert sorted(os.listdir(elsewhere)) == sorted([partial.name, journal.name])


def test_no_resume_still_discards_an_earlier_partial_below_dest(
    s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    name = new_bucket(s3, {"p/sub/deeper/a.bin": b"data"})
    dest, disk = tmp_path / "dest", tmp_path / "disk"
    (disk / "deeper").mkdir(parents=True)
    dest.mkdir()
    link(dest / "sub", disk, owner=os.geteuid())  # this user's: followed
    earlier = paths_for(disk / "deeper" / "a.bin")
    for made in earlier:
        made.write_bytes(b"an earlier copy's")
        made.chmod(0o600)

    result = run(proxy, "cp", "--no-resume", f"s3://{name}/p", str(dest))

    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(disk / "deeper")) == ["a.bin"]
    assert "discarded an earlier copy's partial file" in result.stderr


# -- a failed preallocation, in a directory moved meanwhile ----------------------------


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True, capture_output=True)


def test_a_failed_preallocation_removes_its_files_in_its_own_directory(tmp_path: Path) -> None:
    """The partial and journal are made in the directory held open; when preallocation
    fails they go from there, not from whatever the path names by then (the directory
    renamed, a new one of another download in its place)."""
    with tmpfs(tmp_path / "disk", "2m") as disk:
        held_at = disk / "d"
        held_at.mkdir()
        where = HeldDir(os.open(held_at, os.O_RDONLY | os.O_DIRECTORY), str(held_at))
        target = held_at / "a.bin"
        header = Header("b", "k", None, "etag", 8 * MIB, "a.bin")
        download = PartialFile(target, header, RuntimeError, fsync=False, adopt=False, where=where)
        # The directory moves; another download's files appear at the old path.
        os.rename(held_at, disk / "moved")
        held_at.mkdir()
        theirs = paths_for(target)
        for made in theirs:
            made.write_bytes(b"theirs")
            made.chmod(0o600)

        failure = None
        try:
            # The blocking half of open(), here: an executor's thread would keep the
            # error's frames (and the directory) alive past the test.
            download._open_sync()
        except OSError as exc:
            failure = exc.errno
        finally:
            del where, download  # the directory closed: the file system can go
            gc.collect()

        assert failure == errno.ENOSPC
        assert [path.read_bytes() for path in theirs] == [b"theirs", b"theirs"]
        assert os.listdir(disk / "moved") == []


# -- records on a file another user owns -----------------------------------------------


def test_a_record_on_another_users_file_does_not_make_sync_skip_it(
    s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    """A co-user plants a file at a key's target before the first sync, with a record
    that claims it holds the object (its size and mtime, the listing's ETag, the
    directory's inode: all of it public). Its owner may change its bytes and set its
    mtime back at will: no record vouches for it, and sync downloads the object."""
    body = b"the real bytes of the object"
    name = new_bucket(s3, {"p/data.csv": body})
    etag = s3.head_object(Bucket=name, Key="p/data.csv")["ETag"].strip('"')
    dest = tmp_path / "dest"
    dest.mkdir()
    dest.chmod(0o777)  # a shared directory, not sticky
    planted = dest / "data.csv"
    planted.write_bytes(b"X" * len(body))
    os.chown(planted, OTHER, OTHER)
    st = planted.stat()
    claim = {
        "etag": etag,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "bucket": name,
        "key": "p/data.csv",
        "root": dest.stat().st_ino,
        "path": "data.csv",
    }
    os.setxattr(planted, file_records.XATTR, json.dumps(claim).encode())

    result = run(proxy, "sync", f"s3://{name}/p", str(dest))

    assert result.exit_code == 0, result.output
    assert planted.read_bytes() == body
    assert planted.stat().st_uid == os.geteuid()


def test_sync_delete_leaves_another_users_file_alone_whatever_its_record_says(
    s3: Any, proxy: TcpProxy, tmp_path: Path
) -> None:
    name = new_bucket(s3, {"p/keep.csv": b"k"})
    dest = tmp_path / "dest"
    dest.mkdir()
    theirs = dest / "theirs.csv"
    theirs.write_bytes(b"a co-user's file")
    os.chown(theirs, OTHER, OTHER)
    st = theirs.stat()
    claim = {
        "etag": "0" * 32,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "bucket": name,
        "key": "p/theirs.csv",
        "root": dest.stat().st_ino,
        "path": "theirs.csv",
    }
    os.setxattr(theirs, file_records.XATTR, json.dumps(claim).encode())

    result = run(proxy, "sync", "--delete", f"s3://{name}/p", str(dest))

    assert result.exit_code == 0, result.output
    assert theirs.read_bytes() == b"a co-user's file"
    assert without_summary(result.stderr) == (
        f"left alone: {theirs} (another user's (uid {OTHER}), whatever its record says)\n"
    )


# -- asyncdl clean, run by a co-user ---------------------------------------------------


def clean_as(uid: int, directory: Path) -> tuple[int, str]:
    """``asyncdl clean DIRECTORY`` run by the user ``uid``: in a child forked from this
    process (the interpreter's own files may be closed to that user), which drops root
    for good before it runs the command; its exit status and output."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 70
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            result = CliRunner().invoke(cli, ["clean", str(directory)])
            os.write(write, json.dumps([result.exit_code, result.output]).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    code, output = json.loads(said)
    return int(code), str(output)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may write in, not sticky (a team's), where every user
    can reach it (pytest's own are root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="asyncdl-shared-"))
    try:
        top.chmod(0o755)
        (top / "shared").mkdir()
        (top / "shared").chmod(0o777)
        yield top / "shared"
    finally:
        shutil.rmtree(top)


def test_clean_by_a_co_user_spares_a_live_temp_file_it_cannot_open(shared: Path) -> None:
    """A download of one user stalls past a minute in a shared directory, and another
    user's ``asyncdl clean`` cannot open its temp file (``0o600``) to see its writer's
    lock. It must not remove it by its age alone."""
    live = shared / ".big.bin.0123abcd.asyncdl-tmp"
    live.write_bytes(b"bytes a stalled download wrote")
    live.chmod(0o600)
    os.chown(live, ANOTHER, ANOTHER)
    then = time.time() - 3600
    os.utime(live, (then, then))
    with held_by_another_process(live):
        code, output = clean_as(OTHER, shared)
        assert live.exists(), output
    assert code == 1, output
    assert f"error: cannot remove {live}: Permission denied" in output


def test_clean_by_a_co_user_spares_a_live_partial_it_cannot_open(shared: Path) -> None:
    """The same for a resumable download's partial and journal (``0o600``, locked)."""
    partial, journal = paths_for(shared / "big.bin")
    for made in (partial, journal):
        made.write_bytes(b"a stalled download's")
        made.chmod(0o600)
        os.chown(made, ANOTHER, ANOTHER)
        then = time.time() - 3600
        os.utime(made, (then, then))
    with held_by_another_process(journal):
        code, output = clean_as(OTHER, shared)
        assert partial.exists(), output
        assert journal.exists(), output
    assert code == 1, output
    assert f"error: cannot remove {journal}: " in output
    assert "another user's file this user may not read" in output


def test_clean_by_a_co_user_still_removes_a_link_planted_at_a_temp_name(shared: Path) -> None:
    target = shared.parent / "target"
    target.write_bytes(b"pointed at")
    planted = shared / ".x.0123abcd.asyncdl-tmp"
    planted.symlink_to(target)
    then = time.time() - 3600
    os.utime(planted, (then, then), follow_symlinks=False)
    os.chown(planted, ANOTHER, ANOTHER, follow_symlinks=False)

    code, output = clean_as(OTHER, shared)

    assert code == 0, output
    assert not os.path.lexists(planted)
    assert target.read_bytes() == b"pointed at"


def test_without_o_path_a_link_swapped_away_and_back_around_its_reading_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a link cannot be opened itself, it is looked at, read, and looked at again.
    A co-user who may rename in the directory moves this user's link away just before
    it is read, puts their own there, and moves this user's back just after: the same
    inode looks at the name both times, but the text read was theirs. The rename
    changed the link's change time: it is looked at again, and the text followed is
    this user's."""
    dest, disk, elsewhere = tmp_path / "dest", tmp_path / "disk", tmp_path / "elsewhere"
    for made in (dest, disk, elsewhere):
        made.mkdir()
    dest.chmod(0o777)  # shared, not sticky: a co-user may rename this user's link
    os.chown(dest, ANOTHER, ANOTHER)
    link(dest / "latest", disk, owner=os.geteuid())
    link(dest / "theirs", elsewhere, owner=OTHER)
    monkeypatch.setattr(held_dirs, "_O_PATH", None)
    real_readlink = os.readlink
    swaps = iter([True])

    def readlink_meanwhile(path: Any, *, dir_fd: int | None = None) -> str:
        # The co-user's renames, at the worst moment: around the read of the text.
        if path == "latest" and next(swaps, False):
            os.rename(dest / "latest", dest / "away")
            os.rename(dest / "theirs", dest / "latest")
            text = real_readlink(path, dir_fd=dir_fd)
            os.rename(dest / "latest", dest / "theirs")
            os.rename(dest / "away", dest / "latest")
            return str(text)
        return str(real_readlink(path, dir_fd=dir_fd))

    monkeypatch.setattr(os, "readlink", readlink_meanwhile)
    root = held_dirs.open_root(dest, create=False)
    held = held_dirs.open_below(root, ["latest"], create=False)

    assert next(swaps, None) is None  # the swap happened
    assert os.fstat(held.fd).st_ino == disk.stat().st_ino
