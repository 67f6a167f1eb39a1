"""A size the disk has no room for is refused before anything is allocated.

ext4 allocates what it can before it answers ENOSPC, so a ``posix_fallocate`` past the
free space fills the disk to its last block, under every other process writing to it,
before the download fails. The size is the server's word (a listing's ``Size``, a
``Content-Range``'s total): a hostile or broken one must not fill the disk. So
``preallocate`` checks the file system's free space first (``f_bavail``, less what
other preallocations under way are being given) and refuses with ENOSPC, naming the
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import file_calls
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..bulk.test_listing_entries_hostile import answering_listings, entry
from ..conftest import CHUNK, make_client, temp_files

#: Past the free space by more than any other writer on the machine frees meanwhile.
PAST = 1024**4
BODY = b"hello"


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[int, int]]:
    """Each ``posix_fallocate`` asked for: (size, free space at the time). One past the
    free space is answered ENOSPC here, not by filling the disk."""
    calls: list[tuple[int, int]] = []
    real = os.posix_fallocate

    def recording(fd: int, offset: int, length: int) -> None:
        free = free_bytes(tmp_path)
        calls.append((offset + length, free))
        if offset + length > free:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", recording)
    return calls


def gets_of_objects(proxy: TcpProxy) -> list[RequestRecord]:
    return [r for r in proxy.requests if r.method == "GET" and "list-type" not in r.path]


def claiming_total(total: int) -> Callable[[RequestRecord], Fault | None]:
    """A proxy rule: the first GET's answer says the object is ``total`` bytes."""
    first = [True]

    def rule(request: RequestRecord) -> Fault | None:
        if request.method != "GET" or not first[0]:
            return None
        first[0] = False
        return Fault(response_headers={"content-range": f"bytes 0-{len(BODY) - 1}/{total}"})

    return rule


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
    s3.put_object(Bucket=bucket, Key="k", Body=BODY)
    target = tmp_path / "k"
    target.write_bytes(b"old")
    proxy.rule = claiming_total(total)
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
        device, need = file_calls._reserve(a.fileno(), share)
        assert need == share
        try:
            with pytest.raises(OSError, match="bytes free") as raised:
                file_calls._reserve(b.fileno(), share)
            assert raised.value.errno == errno.ENOSPC
        finally:
            file_calls._release(device, need)
        file_calls._release(*file_calls._reserve(b.fileno(), share))
    assert file_calls._pending == {}


def test_what_a_file_holds_already_is_not_asked_again(tmp_path: Path) -> None:
    # A file with blocks (a partial made before) needs only the rest from the disk.
    with (tmp_path / "f").open("wb") as file:
        file.write(os.urandom(4 * 1024 * 1024))
        file.flush()
        os.fsync(file.fileno())
        held = os.fstat(file.fileno()).st_blocks * 512
        device, need = file_calls._reserve(file.fileno(), held + 1024 * 1024)
        file_calls._release(device, need)
    assert held >= 4 * 1024 * 1024
    assert need == 1024 * 1024


def test_a_size_that_fits_is_preallocated(tmp_path: Path, asked: list[tuple[int, int]]) -> None:
    with (tmp_path / "f").open("wb") as file:
        file_calls.preallocate(file.fileno(), 1024 * 1024)
        assert os.fstat(file.fileno()).st_size == 1024 * 1024
    assert [size for size, _ in asked] == [1024 * 1024]
    assert file_calls._pending == {}
