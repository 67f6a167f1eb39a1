"""The temp-file writer on its own: no server."""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import os
import stat
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from asyncdl._files import quick_io, unnamed_files, writer
from asyncdl._files.writer import TEMP_RUN, TempFile, is_temp_file


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


async def settle() -> None:
    """Let executor calls that outlived a cancelled task finish."""
    for _ in range(100):
        await asyncio.sleep(0.01)


async def test_deferred_small_file_is_published_in_one_go(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 5)
    await temp.write(0, b"hello")
    assert listing(tmp_path) == []  # nothing on disk until commit
    await temp.commit()
    assert listing(tmp_path) == ["t"]
    assert (tmp_path / "t").read_bytes() == b"hello"


async def test_deferred_file_opens_on_a_partial_write(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 10)
    await temp.write(0, b"01234")
    assert temp.opened
    assert [n for n in listing(tmp_path) if is_temp_file(n)]
    await temp.write(5, b"56789")
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"0123456789"
    assert listing(tmp_path) == ["t"]


async def test_parts_in_any_order(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 9)
    await temp.open()
    await asyncio.gather(temp.write(6, b"ghi"), temp.write(0, b"abc"), temp.write(3, b"def"))
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"abcdefghi"


@pytest.mark.parametrize("algorithm", ["SHA1", "SHA256"])
async def test_digest(tmp_path: Path, algorithm: str) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    expected = base64.b64encode(hashlib.new(algorithm.lower(), data).digest()).decode()
    opened = TempFile(tmp_path / "a", len(data))
    await opened.open()
    await opened.write(0, data)
    deferred = TempFile(tmp_path / "b", len(data))
    await deferred.write(0, data)
    assert await opened.digest(algorithm) == await deferred.digest(algorithm) == expected
    opened.discard()
    deferred.discard()
    assert listing(tmp_path) == []


async def test_discard_during_open_leaves_nothing(tmp_path: Path) -> None:
    for _ in range(50):
        temp = TempFile(tmp_path / "t", 1024 * 1024)
        task = asyncio.create_task(temp.open())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        temp.discard()
    await settle()
    assert listing(tmp_path) == []


async def test_discard_during_writes_leaves_nothing(tmp_path: Path) -> None:
    temp = TempFile(tmp_path / "t", 64 * 1024 * 1024)
    await temp.open()
    writes = [asyncio.create_task(temp.write(i * 2**20, os.urandom(2**20))) for i in range(64)]
    await asyncio.sleep(0.005)
    for write in writes:
        write.cancel()
    temp.discard()
    await asyncio.gather(*writes, return_exceptions=True)
    await settle()
    assert listing(tmp_path) == []


async def test_existing_target_untouched_until_commit(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.write_bytes(b"old")
    temp = TempFile(target, 3)
    await temp.open()
    await temp.write(0, b"new")
    assert target.read_bytes() == b"old"
    temp.discard()
    assert target.read_bytes() == b"old"
    assert listing(tmp_path) == ["t"]


async def test_write_crc_matches_the_bytes(tmp_path: Path) -> None:
    from awscrt.checksums import crc32c  # noqa: PLC0415 - only this test needs it

    data = os.urandom(3 * 1024 * 1024)
    deferred = TempFile(tmp_path / "small", len(data))
    assert await deferred.write_crc(0, data, crc32c, 0) == crc32c(data)
    opened = TempFile(tmp_path / "big", len(data))
    await opened.open()
    crc = 0
    for offset in range(0, len(data), 1024 * 1024):
        crc = await opened.write_crc(offset, data[offset : offset + 1024 * 1024], crc32c, crc)
    assert crc == crc32c(data)
    await opened.commit()
    await deferred.commit()
    assert (tmp_path / "big").read_bytes() == (tmp_path / "small").read_bytes() == data


# -- names, modes, durability, publishing --

#: Names of exactly 255 bytes (the usual NAME_MAX), in 1- to 4-byte UTF-8 characters.
LONG_NAMES = {
    "ascii": "a" * 255,
    "2-byte": "\u00e9" * 127 + "a",
    "3-byte": "\u20ac" * 85,
    "4-byte": "\U0001f600" * 63 + "abc",
}


def temp_names(directory: Path) -> list[str]:
    return [name for name in listing(directory) if is_temp_file(name)]


@pytest.mark.parametrize("opened", [False, True], ids=["deferred", "opened"])
@pytest.mark.parametrize("kind", list(LONG_NAMES))
async def test_a_255_byte_name_works(tmp_path: Path, kind: str, opened: bool) -> None:
    name = LONG_NAMES[kind]
    assert len(name.encode()) == 255
    target = tmp_path / name
    temp = TempFile(target, 3)
    if opened:
        await temp.open()
        # A second download of the same target at the same time: its own temp file.
        other = TempFile(target, 3)
        await other.open()
        names = temp_names(tmp_path)
        assert len(names) == 2
        for temp_name in names:
            # Whole characters only (strict UTF-8), within NAME_MAX, next to the target.
            assert len(temp_name.encode("utf-8")) <= 255
            assert temp_name.startswith("." + name[:8])
        other.discard()
    await temp.write(0, b"abc")
    await temp.commit()
    assert listing(tmp_path) == [name]
    assert target.read_bytes() == b"abc"


@pytest.mark.parametrize("opened", [False, True], ids=["deferred", "opened"])
async def test_names_shorter_than_usual_are_asked_of_the_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: bool
) -> None:
    # As on a file system whose names are shorter than the limit first assumed
    # (eCryptfs takes 143 bytes): the first temp name is refused, a shorter one is not.
    monkeypatch.setattr(writer, "_NAME_MAX", 300)
    name = LONG_NAMES["3-byte"]
    temp = TempFile(tmp_path / name, 3)
    assert len(os.fsencode(temp.path.name)) > 255
    if opened:
        await temp.open()
        assert len(os.fsencode(temp.path.name)) <= 255
    await temp.write(0, b"abc")
    await temp.commit()
    assert listing(tmp_path) == [name]


async def test_temp_names_of_a_run_carry_its_id(tmp_path: Path) -> None:
    token = TEMP_RUN.set("0123456789abcdef")
    try:
        tagged = TempFile(tmp_path / LONG_NAMES["4-byte"], 3)
        short = TempFile(tmp_path / "t", 3)
    finally:
        TEMP_RUN.reset(token)
    plain = TempFile(tmp_path / "u", 3)
    for temp in (tagged, short, plain):
        await temp.open()
    assert len(os.fsencode(tagged.path.name)) <= 255
    for temp in (tagged, short):
        assert is_temp_file(temp.path.name)
        assert is_temp_file(temp.path.name, run="0123456789abcdef")
        assert not is_temp_file(temp.path.name, run="fedcba9876543210")
    assert is_temp_file(plain.path.name)
    assert not is_temp_file(plain.path.name, run="0123456789abcdef")
    # A name that only looks like one: no random part.
    assert not is_temp_file(".t.0123456789abcdef-.asyncdl-tmp", run="0123456789abcdef")
    for temp in (tagged, short, plain):
        temp.discard()
    assert listing(tmp_path) == []


@pytest.mark.parametrize("opened", [False, True], ids=["deferred", "opened"])
@pytest.mark.parametrize("mode", [0o600, 0o750])
async def test_replacing_a_file_keeps_its_mode(tmp_path: Path, mode: int, opened: bool) -> None:
    target = tmp_path / "t"
    target.write_bytes(b"old")
    target.chmod(mode)
    temp = TempFile(target, 3)
    if opened:
        await temp.open()
    await temp.write(0, b"new")
    await temp.commit()
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == mode


@pytest.mark.parametrize("opened", [False, True], ids=["deferred", "opened"])
async def test_replacing_a_link_gives_a_new_file_mode(tmp_path: Path, opened: bool) -> None:
    # The link is replaced, not written through: the file it points at lends nothing,
    # not even its mode (a link planted to an executable must not make the download one).
    program = tmp_path / "program"
    program.write_bytes(b"#!/bin/sh\n")
    program.chmod(0o755)
    target = tmp_path / "t"
    target.symlink_to(program)
    previous = os.umask(0o022)
    try:
        temp = TempFile(target, 3)
        if opened:
            await temp.open()
        await temp.write(0, b"new")
        await temp.commit()
    finally:
        os.umask(previous)
    assert not target.is_symlink()
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert program.read_bytes() == b"#!/bin/sh\n"
    assert stat.S_IMODE(program.stat().st_mode) == 0o755


@pytest.mark.parametrize("opened", [False, True], ids=["deferred", "opened"])
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
async def test_a_new_file_gets_the_umask_default(tmp_path: Path, umask: int, opened: bool) -> None:
    previous = os.umask(umask)  # the runner's umask must not matter
    try:
        temp = TempFile(tmp_path / "t", 3)
        if opened:
            await temp.open()
        await temp.write(0, b"new")
        await temp.commit()
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "t").stat().st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("opened", [False, True], ids=["deferred", "opened"])
@pytest.mark.parametrize("fsync", [False, True])
async def test_fsync_syncs_the_file_then_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: bool, fsync: bool
) -> None:
    """Power loss cannot be tested; what fsync=True promises rests on these calls."""
    target = tmp_path / "t"
    synced: list[tuple[str, int, bool]] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        st = os.fstat(fd)
        kind = "directory" if stat.S_ISDIR(st.st_mode) else "file"
        synced.append((kind, st.st_ino, target.exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    temp = TempFile(target, 3, fsync=fsync)
    if opened:
        await temp.open()
    await temp.write(0, b"new")
    await temp.commit()
    expected = [
        # The data before the rename, the rename (the directory entry) after it.
        ("file", os.stat(target).st_ino, False),
        ("directory", os.stat(tmp_path).st_ino, True),
    ]
    assert synced == (expected if fsync else [])


@pytest.mark.parametrize("opened", [False, True], ids=["deferred", "opened"])
@pytest.mark.parametrize("interruption", ["cancel", "timeout"])
async def test_a_cancellation_during_commit_waits_for_the_rename(
    tmp_path: Path, interruption: str, opened: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "t"
    target.write_bytes(b"old")
    temp = TempFile(target, 3)
    if opened:
        await temp.open()
    await temp.write(0, b"new")
    # A slow file system: a deferred file is published in a thread too.
    slow = quick_io.QuickIO()
    slow.took(1.0)
    slow.took(1.0)
    monkeypatch.setattr(quick_io, "QUICK_IO", slow)
    loop = asyncio.get_running_loop()
    # One worker thread, held busy: the commit is submitted and waits its turn there
    # when the cancellation lands, as it would behind a slow disk.
    loop.set_default_executor(ThreadPoolExecutor(1))
    gate = threading.Event()
    busy = loop.run_in_executor(None, gate.wait)
    if interruption == "cancel":
        task = asyncio.create_task(temp.commit())
        await asyncio.sleep(0.02)
        task.cancel()
        loop.call_later(0.05, gate.set)
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        loop.call_later(0.1, gate.set)  # after the timeout, on the same clock
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02):
                await temp.commit()
    await busy
    # The rename happened, and the caller can tell.
    assert target.read_bytes() == b"new"
    assert temp_names(tmp_path) == []
    assert temp.published
    temp.discard()  # what the engine does on the way out: nothing left to remove
    assert listing(tmp_path) == ["t"]
    assert target.read_bytes() == b"new"


def _no_named_temp_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Temp names from now on point into a directory that does not exist: a file
    published by way of a named temp file fails, one that needs no name does not."""
    monkeypatch.setattr(writer, "temp_name", lambda name, run, name_max: f"missing/{name}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE is Linux's")
async def test_a_new_small_file_is_published_with_no_name_in_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_named_temp_file(monkeypatch, tmp_path)
    temp = TempFile(tmp_path / "t", 5)
    await temp.write(0, b"hello")
    await temp.commit()
    assert temp.published
    assert listing(tmp_path) == ["t"]
    assert (tmp_path / "t").read_bytes() == b"hello"
    temp.discard()  # what the engine does on the way out: nothing left to remove
    assert listing(tmp_path) == ["t"]


@pytest.mark.parametrize("existing", ["file", "symlink", "dangling symlink"])
async def test_an_existing_target_is_replaced_by_way_of_a_temp_file(
    tmp_path: Path, existing: str
) -> None:
    # A link never replaces: what is there is renamed over, never written through.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = elsewhere / "o"
    target = tmp_path / "dir" / "t"
    target.parent.mkdir()
    if existing == "file":
        target.write_bytes(b"old")
    else:
        if existing == "symlink":
            outside.write_bytes(b"outside")
        target.symlink_to(outside)
    temp = TempFile(target, 3)
    await temp.write(0, b"new")
    await temp.commit()
    assert not target.is_symlink()
    assert target.read_bytes() == b"new"
    assert listing(target.parent) == ["t"]
    assert listing(elsewhere) == (["o"] if existing == "symlink" else [])
    if existing == "symlink":
        assert outside.read_bytes() == b"outside"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE is Linux's")
async def test_a_file_system_without_unnamed_files_gets_a_named_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # open() of a directory for writing is refused (EISDIR), as a file system
    # without O_TMPFILE refuses it: that directory is then not asked again.
    monkeypatch.setattr(unnamed_files, "_TMPFILE_FLAGS", os.O_WRONLY)
    monkeypatch.setattr(unnamed_files, "_NO_TMPFILE", set())
    temp = TempFile(tmp_path / "t", 3)
    await temp.write(0, b"abc")
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"abc"
    assert str(tmp_path) in unnamed_files._NO_TMPFILE
    assert len(unnamed_files._NO_TMPFILE) == 1
    _no_named_temp_file(monkeypatch, tmp_path)
    again = TempFile(tmp_path / "u", 3)
    await again.write(0, b"abc")
    with pytest.raises(FileNotFoundError):
        await again.commit()  # the named way, not the refused one
    assert listing(tmp_path) == ["t"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE is Linux's")
async def test_an_unnamed_file_that_cannot_be_linked_is_written_again_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where /proc cannot link the open file (no /proc, an old kernel).
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    temp = TempFile(tmp_path / "t", 3)
    await temp.write(0, b"abc")
    await temp.commit()
    assert temp.published
    assert listing(tmp_path) == ["t"]
    assert (tmp_path / "t").read_bytes() == b"abc"


async def test_published_only_after_the_rename(tmp_path: Path) -> None:
    committed = TempFile(tmp_path / "a", 3)
    await committed.write(0, b"abc")
    assert not committed.published
    await committed.commit()
    assert committed.published
    discarded = TempFile(tmp_path / "b", 3)
    await discarded.open()
    discarded.discard()
    assert not discarded.published
    # A rename that fails (the directory is gone) publishes nothing and leaves nothing.
    failing = TempFile(tmp_path / "gone" / "c", 3)
    await failing.write(0, b"abc")
    with pytest.raises(FileNotFoundError):
        await failing.commit()
    assert not failing.published
    assert listing(tmp_path) == ["a"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE is Linux's")
async def test_a_close_that_fails_after_the_link_still_says_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The target is there, whole, once linked: the caller must hear it was published.
    linked: list[str] = []
    real_link, real_close = os.link, os.close

    def link(*args: Any, **kwargs: Any) -> None:
        real_link(*args, **kwargs)
        linked.append(str(args[1]))

    def close(fd: int) -> None:
        real_close(fd)
        if linked:
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "close", close)
    temp = TempFile(tmp_path / "t", 3)
    await temp.write(0, b"abc")
    await temp.commit()
    monkeypatch.undo()
    assert linked == [str(tmp_path / "t")]
    assert temp.published
    assert (tmp_path / "t").read_bytes() == b"abc"
