"""A size the disk has no room for is refused before anything is allocated.

ext4 allocates what it can before it answers ENOSPC, so a ``posix_fallocate`` past the
free space fills the disk to its last block, under every other process writing to it,
before the download fails. The size is the server's word (a listing's ``Size``, a
``Content-Range``'s total): a hostile or broken one must not fill the disk. So
``preallocate`` checks the file system's room first (``f_bavail``, less what other
preallocations under way are being given, less a margin for the file system's own
blocks) and again before each step of 128 MiB, and refuses with ENOSPC, naming the
size and the room there is.

Against moto via the proxy, on this machine's real file system: the proxy makes the
listing, or the first GET's answer, claim a size 1 TiB past the free space of the
test's directory. ``posix_fallocate`` is wrapped to record what it is asked: asked
more than the free space it answers ENOSPC itself instead of filling this disk (which
is what the code before the check did: the record says so, and the test fails).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import disk_room, file_calls
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy

from ..bulk.test_listing_entries_hostile import BODY, answering_listings, entry
from ..conftest import CHUNK, make_client, temp_files
from ..wire.test_content_range_hostile import BODY as RANGED_BODY
from ..wire.test_content_range_hostile import claiming

#: Past the free space by more than any other writer on the machine frees meanwhile.
PAST = 1024**4


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[int, int]]:
    """Each ``posix_fallocate`` asked for: (where it ends, free space at the time). One
    asking more than the free space is answered ENOSPC here, not by filling the disk."""
    calls: list[tuple[int, int]] = []
    real = os.posix_fallocate

    def recording(fd: int, offset: int, length: int) -> None:
        free = free_bytes(tmp_path)
        calls.append((offset + length, free))
        if length > free:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", recording)
    return calls


def gets_of_objects(proxy: TcpProxy) -> list[RequestRecord]:
    return [r for r in proxy.requests if r.method == "GET" and "list-type" not in r.path]


def assert_refused_for_room(message: str, size: int) -> None:
    assert os.strerror(errno.ENOSPC) in message
    assert f"{size} bytes" in message
    assert "bytes free" in message


@pytest.mark.parametrize("resume", [False, True], ids=["temp", "resume"])
async def test_a_listed_size_past_the_free_space_is_refused_before_any_allocation(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    asked: list[tuple[int, int]],
    resume: bool,
) -> None:
    size = free_bytes(tmp_path) + PAST
    s3.put_object(Bucket=bucket, Key="p/a", Body=BODY)
    proxy.rule = answering_listings(bucket, entry("p/a", str(size)))
    dest = tmp_path / "d"
    config = asyncdl.TransferConfig(chunk_size=CHUNK, resume=resume)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        [result] = [r async for r in engine.download_prefix(bucket, "p/", dest)]
    assert result.error is not None
    assert_refused_for_room(result.error.message, size)
    assert [(s, free) for s, free in asked if s > free] == []
    # Refused before the bytes: no GET of the object, no file, partial or journal.
    assert gets_of_objects(proxy) == []
    assert os.listdir(dest) == []


@pytest.mark.parametrize("resume", [False, True], ids=["temp", "resume"])
async def test_a_content_range_past_the_free_space_is_refused_before_any_allocation(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    asked: list[tuple[int, int]],
    resume: bool,
) -> None:
    total = free_bytes(tmp_path) + PAST
    s3.put_object(Bucket=bucket, Key="k", Body=RANGED_BODY)
    target = tmp_path / "k"
    target.write_bytes(b"old")
    proxy.rule = claiming(total)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, resume=resume, backoff_base=0.01)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.DownloadError) as raised:
            await engine.download(bucket, "k", target)
    assert_refused_for_room(raised.value.message, total)
    assert [(s, free) for s, free in asked if s > free] == []
    assert len(gets_of_objects(proxy)) == 1  # the first GET, which told the size
    assert os.listdir(tmp_path) == ["k"]
    assert target.read_bytes() == b"old"
    assert temp_files(tmp_path) == []


def test_two_preallocations_under_way_are_counted_against_one_free_space(
    tmp_path: Path,
) -> None:
    # Each fits alone, not both: while the first is being given its blocks (which the
    # free space does not show yet), the second is refused; once it is done, not.
    share = free_bytes(tmp_path) * 6 // 10
    with (tmp_path / "a").open("wb") as a, (tmp_path / "b").open("wb") as b:
        first = disk_room.Room(a.fileno(), share)
        try:
            with pytest.raises(OSError, match="bytes free") as raised:
                disk_room.Room(b.fileno(), share)
            assert raised.value.errno == errno.ENOSPC
        finally:
            first.release()
        disk_room.Room(b.fileno(), share).release()
    assert disk_room._pending == {}


def test_a_size_just_under_the_free_space_is_refused_for_the_file_systems_own_blocks(
    tmp_path: Path,
) -> None:
    # ext4 needs blocks of its own for the extents (up to one in 340 where the free
    # space lies in single blocks): without a margin such a size still filled it.
    free = free_bytes(tmp_path)
    with (tmp_path / "f").open("wb") as file:
        with pytest.raises(OSError, match="bytes free"):
            disk_room.Room(file.fileno(), free - free // 1000)
        disk_room.Room(file.fileno(), free // 2).release()
    assert disk_room._pending == {}


def made_up_room(monkeypatch: pytest.MonkeyPatch, room: list[int]) -> None:
    """Pure logic: ``os.fstatvfs`` answers ``room[0]`` bytes free (the file system's
    other figures its own)."""
    real = os.fstatvfs

    def fstatvfs(fd: int) -> Any:
        st = real(fd)
        fields = list(st)
        fields[4] = room[0] // st.f_frsize  # f_bavail
        fields[2] = max(st.f_blocks, fields[4])  # f_blocks
        return os.statvfs_result(fields)

    monkeypatch.setattr(os, "fstatvfs", fstatvfs)


def test_each_step_asks_again_what_another_process_took_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process takes the room after the first step: the second step is refused
    # before it is asked for.
    step = 1024 * 1024
    room = [10 * step]
    calls: list[tuple[int, int]] = []

    def fallocate(fd: int, offset: int, length: int) -> None:
        calls.append((offset, length))
        room[0] = step  # someone else's file took the rest

    made_up_room(monkeypatch, room)
    monkeypatch.setattr(disk_room, "STEP", step)
    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    with (
        (tmp_path / "f").open("wb") as file,
        pytest.raises(OSError, match="still to allocate") as raised,
    ):
        file_calls.preallocate(file.fileno(), 4 * step)
    assert raised.value.errno == errno.ENOSPC
    assert calls == [(0, step)]
    assert disk_room._pending == {}


def test_an_object_that_fits_a_nearly_full_disk_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The margin is a share of the size and a few blocks, not a flat sum that refuses
    # a 2 MiB object with 2.1 MiB free (nor 128 MiB where CephFS reports 4 MiB blocks).
    made_up_room(monkeypatch, [2 * 1024 * 1024 + 100 * 1024])
    with (tmp_path / "f").open("wb") as file:
        disk_room.Room(file.fileno(), 2 * 1024 * 1024).release()
        with pytest.raises(OSError, match="kept for the file system's own blocks"):
            disk_room.Room(file.fileno(), 2 * 1024 * 1024 + 96 * 1024)
    assert disk_room.margin(2 * 1024 * 1024, 4 * 1024 * 1024) <= 8 * 1024 + 64 * 1024
    assert disk_room._pending == {}


def test_a_size_that_fits_is_preallocated_in_steps(
    tmp_path: Path, asked: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk_room, "STEP", 256 * 1024)
    with (tmp_path / "f").open("wb") as file:
        file_calls.preallocate(file.fileno(), 1024 * 1024 + 1)
        assert os.fstat(file.fileno()).st_size == 1024 * 1024 + 1
        assert os.fstat(file.fileno()).st_blocks * 512 >= 1024 * 1024 + 1
    assert [size for size, _ in asked] == [256 * 1024 * n for n in (1, 2, 3, 4)] + [1024 * 1024 + 1]
    assert disk_room._pending == {}
