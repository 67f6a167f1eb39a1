"""What a resumed download takes from the disk: reused bytes read back and checked
against the journal when nothing made them durable, and planted symbolic links at the
partial's or the journal's name never written through."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import journal, partial_file, partial_paths
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy

from ..conftest import CHUNK, payload
from ..transfer.test_resume import SIZE, interrupted, leftovers, resumable


def fetched(requests: list[RequestRecord]) -> list[tuple[int, int]]:
    """The byte ranges the ranged GETs asked for, half-open."""
    spans = []
    for request in requests:
        if request.method == "GET" and request.range is not None:
            first, last = request.range.removeprefix("bytes=").split("-")
            spans.append((int(first), int(last) + 1))
    return spans


def covered(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    position = start
    for first, last in sorted(spans):
        if first <= position < last:
            position = last
    return position >= end


@pytest.mark.parametrize("resume_fsync", [False, True], ids=["then-no-fsync", "then-fsync"])
@pytest.mark.parametrize("checksum", ["CRC32", "CRC64NVME", None])
async def test_a_reused_range_damaged_on_disk_is_fetched_again(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    s3_without_checksums: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    checksum: str | None,
    resume_fsync: bool,
) -> None:
    """The power-loss case: with fsync=False the journal may outlive the bytes it
    records (they read back as zeros). Whatever the next run's fsync, they are read
    back and checked, and what does not match is fetched again."""
    data = payload(SIZE)
    if checksum is None:
        s3_without_checksums.put_object(Bucket=bucket, Key="k", Body=data)
    else:
        s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=checksum)
    target = tmp_path / "k"
    await interrupted(client, resumable(config), proxy, bucket, target)
    found = partial_paths.lookup(target, RuntimeError)
    assert found is not None
    assert found.damaged is None
    start, end, _ = found.ranges[len(found.ranges) // 2]
    # Zeroed, as preallocated extents read back, and a scribble in another range.
    zeroed = (start, min(end, start + CHUNK))
    with (tmp_path / ".k.asyncdl-partial").open("r+b") as partial:
        partial.seek(zeroed[0])
        partial.write(bytes(zeroed[1] - zeroed[0]))
        first_start = found.ranges[0][0]
        partial.seek(first_start + 17)
        partial.write(b"scribbled")
    async with asyncdl.Engine(client, config=resumable(config, fsync=resume_fsync)) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data, "damaged bytes of the partial were reused"
    assert result.partial_discarded is None
    assert 0 < result.reused_bytes <= SIZE - (zeroed[1] - zeroed[0])
    spans = fetched(proxy.requests)
    assert covered(spans, *zeroed), spans
    assert covered(spans, first_start + 17, first_start + 26), spans
    assert result.verified == (checksum is not None)
    assert leftovers(tmp_path) == []


async def test_intact_reused_bytes_are_not_fetched_again(
    client: Any,
    config: asyncdl.TransferConfig,
    s3_without_checksums: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """An object without a stored checksum still resumes: the journal's own CRC32 of
    each range is what the bytes read back are checked against."""
    data = payload(SIZE)
    s3_without_checksums.put_object(Bucket=bucket, Key="k", Body=data)
    target = tmp_path / "k"
    await interrupted(client, resumable(config), proxy, bucket, target)
    found = partial_paths.lookup(target, RuntimeError)
    assert found is not None
    recorded = sum(end - start for start, end, _ in found.ranges)
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.reused_bytes == recorded > 0
    for start, end, _ in found.ranges:
        assert not any(first < end and start < last for first, last in fetched(proxy.requests))


PLANTS = {
    "partial": (True, False),
    "journal": (False, True),
    "both": (True, True),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
async def test_a_planted_symlink_is_never_written_through(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    plant: str,
) -> None:
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    shared = tmp_path / "shared"
    shared.mkdir()
    database = tmp_path / "database"
    original = payload(256 * 1024, seed=7)
    database.write_bytes(original)
    target = shared / "k"
    for path, planted in zip(partial_paths.paths_for(target), PLANTS[plant], strict=True):
        if planted:
            path.symlink_to(database)
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        result = await engine.download(bucket, "k", target)
    assert database.read_bytes() == original, "the download wrote through a planted link"
    assert not target.is_symlink()
    assert target.read_bytes() == data
    assert result.verified
    assert leftovers(shared) == []


@pytest.mark.parametrize("plant", sorted(PLANTS))
async def test_a_planted_dangling_symlink_creates_nothing_outside(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    plant: str,
) -> None:
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "k"
    outside = [tmp_path / "made-by-partial", tmp_path / "made-by-journal"]
    for path, planted, to in zip(
        partial_paths.paths_for(target), PLANTS[plant], outside, strict=True
    ):
        if planted:
            path.symlink_to(to)
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        await engine.download(bucket, "k", target)
    assert [path for path in outside if path.is_symlink() or path.exists()] == []
    assert target.read_bytes() == data
    assert leftovers(shared) == []


async def test_a_partial_replaced_by_a_symlink_is_not_adopted(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """Planted between two runs, a link to a file of the object's size that the
    journal's sizes would accept."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    database = tmp_path / "database"
    original = payload(SIZE, seed=9)
    database.write_bytes(original)
    partial, _ = partial_paths.paths_for(target)
    partial.unlink()
    partial.symlink_to(database)
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert database.read_bytes() == original, "the download wrote through a planted link"
    assert target.read_bytes() == data
    assert not target.is_symlink()
    assert result.reused_bytes == 0
    assert result.partial_discarded is not None
    assert "regular file" in result.partial_discarded
    assert leftovers(shared) == []


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` made unwritable: mode 0o444, or for root the immutable attribute."""
    path.chmod(0o444)
    immutable = False
    try:
        if os.access(path, os.W_OK):
            chattr = shutil.which("chattr")
            if chattr is None or subprocess.run([chattr, "+i", path], check=False).returncode:
                pytest.fail("running as root, and chattr +i failed: cannot build the case")
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run([shutil.which("chattr") or "chattr", "-i", path], check=True)
        path.chmod(0o644)


def test_peek_reads_a_journal_it_could_not_write(tmp_path: Path) -> None:
    header = journal.Header("b", "k", None, '"e"', 100, "k")
    path = tmp_path / ".k.asyncdl-journal"
    path.write_bytes(header.line() + journal.line_of([0, 10, {"CRC32": 5}]))
    with unwritable(path):
        found, busy = partial_paths.peek(path)
    assert not busy
    assert found is not None, "peek could not read a journal it cannot write"
    assert found.header == header
    assert found.ranges == [(0, 10, {"CRC32": 5})]


async def test_a_partial_that_reads_back_as_zeros_is_discarded_and_says_why(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    partial, _ = partial_paths.paths_for(target)
    partial.write_bytes(bytes(SIZE))  # the power-loss case, every extent unwritten
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.verified
    assert result.reused_bytes == 0
    assert result.partial_discarded is not None
    assert "did not read back" in result.partial_discarded
    assert covered(fetched(proxy.requests), 0, SIZE)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("read_size", [1 << 20, 4096], ids=["blocks", "streamed"])
@pytest.mark.parametrize("algorithm", ["CRC64NVME", "CRC32C"])
async def test_every_recorded_crc_of_a_reused_range_is_checked(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    algorithm: str,
    read_size: int,
) -> None:
    """A range zeroed on disk whose line's CRC32 says zeros while its other CRC (the
    one the end-to-end check uses) is of the object's bytes: the range is read back
    against every CRC recorded, so it is fetched again, never reused unchecked.
    (Ranges shorter than a read are read back a block of several at a time, longer
    ones streamed.)"""
    monkeypatch.setattr(partial_file, "_READ_SIZE", read_size)
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)
    target = tmp_path / "k"
    await interrupted(client, resumable(config), proxy, bucket, target)
    found = partial_paths.lookup(target, RuntimeError)
    assert found is not None
    assert found.header is not None
    index = next(i for i, (_, _, crcs) in enumerate(found.ranges) if algorithm in crcs)
    start, end, crcs = found.ranges[index]
    partial, path = partial_paths.paths_for(target)
    with partial.open("r+b") as file:
        file.seek(start)
        file.write(bytes(end - start))
    ranges = list(found.ranges)
    ranges[index] = (start, end, {**crcs, "CRC32": zlib.crc32(bytes(end - start))})
    path.write_bytes(journal.content(found.header, ranges, fsync=False))
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data, "a range was reused on its CRC32 alone"
    assert result.verified
    assert covered(fetched(proxy.requests), start, end)
    assert leftovers(tmp_path) == []
