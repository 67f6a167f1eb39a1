"""The journal of a resumable download stays small: contiguous recorded ranges are
merged (their CRCs combined) once it grows, so its size follows the holes of the
partial file, not the number of writes; and a journal larger than any asyncdl used to
allow is still read."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from awscrt import checksums as crt

import asyncdl
from asyncdl._files import journal, partial_paths
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, payload
from ..transfer.test_resume import SIZE, interrupted, leftovers, resumable

_CRCS = {"CRC32": zlib.crc32, "CRC32C": crt.crc32c, "CRC64NVME": crt.crc64nvme}


def recorded(data: bytes, start: int, end: int, *algorithms: str) -> journal.Recorded:
    return start, end, {name: _CRCS[name](data[start:end], 0) for name in algorithms}


def test_merged_ranges_carry_the_crc_of_their_bytes() -> None:
    data = random.Random(1).randbytes(10_000)
    ranges = [
        recorded(data, 0, 100, "CRC32", "CRC32C", "CRC64NVME"),
        recorded(data, 100, 1000, "CRC32", "CRC64NVME"),
        recorded(data, 1000, 1001, "CRC32", "CRC64NVME"),
        # A hole, then a run whose last range is a part still being written.
        recorded(data, 2000, 3000, "CRC32"),
        recorded(data, 3000, 4000, "CRC32"),
        recorded(data, 4000, 5000, "CRC32"),
        recorded(data, 6000, 7000, "CRC32"),
        recorded(data, 7000, 7500, "CRC32"),
    ]
    merged = journal.merge(ranges, open_starts={4000, 7000, 6000}, size=len(data))
    assert merged == [
        recorded(data, 0, 1001, "CRC32", "CRC64NVME"),
        recorded(data, 2000, 4000, "CRC32"),
        recorded(data, 4000, 5000, "CRC32"),
        # 7000 is open, but its range ends where none follows: only its own start is
        # kept apart; 6000 is followed by 7000, so it is done.
        recorded(data, 6000, 7000, "CRC32"),
        recorded(data, 7000, 7500, "CRC32"),
    ]
    # A range with no CRC in common with its neighbour loses nothing by merging: the
    # merged range holds the CRCs both had.
    assert journal.merge([(0, 5, {}), (5, 9, {"CRC32": 1})], open_starts=set(), size=9) == [
        (0, 9, {})
    ]


async def test_many_writes_keep_the_journal_small_and_it_still_resumes(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journal, "COMPACT_AT", 512)
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32C")
    target = tmp_path / "k"
    # 4 KiB writes: 16 lines per part before merging.
    config = resumable(config, write_size=4096)
    await interrupted(client, config, proxy, bucket, target)
    found = partial_paths.lookup(target, RuntimeError)
    assert found is not None
    assert found.damaged is None
    reused = sum(end - start for start, end, _ in found.ranges)
    assert reused >= 8 * CHUNK  # about 100 writes
    size = (tmp_path / ".k.asyncdl-journal").stat().st_size
    lines = (tmp_path / ".k.asyncdl-journal").read_bytes().count(b"\n")
    assert size < 2048, f"{size} bytes, {lines} lines for {reused // 4096} writes"
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.verified
    assert result.reused_bytes == reused
    assert leftovers(tmp_path) == []


async def test_a_journal_past_the_old_size_cap_still_resumes(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """An interrupted download of a very large object by an asyncdl that wrote a line
    per write: a journal past 64 MiB, most of its lines superseded by later ones."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target)
    path = tmp_path / ".k.asyncdl-journal"
    header, *lines = path.read_bytes().splitlines(keepends=True)
    body = b"".join(lines)
    repeats = (65 * 1024 * 1024) // len(body) + 1
    path.write_bytes(header + body * repeats)
    assert path.stat().st_size > 64 * 1024 * 1024
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.partial_discarded is None
    assert result.reused_bytes > 0
    assert result.verified
    assert leftovers(tmp_path) == []


async def test_a_resumed_large_journal_is_compacted(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """Adopted, a journal past the threshold is written again small, atomically."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    config = resumable(config)
    await interrupted(client, config, proxy, bucket, target, at=8 * CHUNK)
    path = tmp_path / ".k.asyncdl-journal"
    header, *lines = path.read_bytes().splitlines(keepends=True)
    body = b"".join(lines)
    path.write_bytes(header + body * ((2 * journal.COMPACT_AT) // len(body) + 1))
    await interrupted(client, config, proxy, bucket, target, at=14 * CHUNK)
    assert path.stat().st_size < journal.COMPACT_AT
    found = partial_paths.lookup(target, RuntimeError)
    assert found is not None
    assert found.damaged is None
    assert found.ranges[0][0] == 0
    assert leftovers(tmp_path) == [".k.asyncdl-journal", ".k.asyncdl-partial"]
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", target)
    assert target.read_bytes() == data
    assert result.verified


async def test_a_compacted_journal_stays_locked(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compacted journal is renamed over the old one: the name never names an
    unlocked journal, so a reader is refused all along, and a second download of
    the target still fails at once."""
    monkeypatch.setattr(journal, "COMPACT_AT", 512)
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data)

    def hold_the_last_part(request: RequestRecord) -> Fault | None:
        if request.range is not None and request.range.startswith(f"bytes={16 * CHUNK}-"):
            return Fault(delay=1.0)
        return None

    proxy.rule = hold_the_last_part
    target = tmp_path / "k"
    path = tmp_path / ".k.asyncdl-journal"
    inodes: set[int] = set()
    refused = False
    config = resumable(config, write_size=4096)
    async with asyncdl.Engine(client, config=config) as engine:
        first = asyncio.create_task(engine.download(bucket, "k", target))
        while not first.done():
            try:
                found = partial_paths.lookup(target, RuntimeError)
            except RuntimeError:
                found = None  # busy: as it must be
            else:
                # No journal (not made yet, or removed once published), or refused.
                assert found is None, "a reader locked the journal of a running download"
            with contextlib.suppress(FileNotFoundError):
                inodes.add(path.stat().st_ino)
            if len(inodes) > 1 and not (tmp_path / "k").exists():
                with pytest.raises(asyncdl.TargetBusyError, match="another download is writing"):
                    await engine.download(bucket, "k", target)
                refused = True
                break
            await asyncio.sleep(0.001)
        result = await first
    assert len(inodes) > 1, "the journal was not compacted"
    assert refused
    assert result.ok
    assert target.read_bytes() == data
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("algorithm", "value"),
    [("CRC64NVME", 1 << 64), ("CRC32", 1 << 32), ("CRC32C", 1 << 32), ("CRC32", 1 << 200)],
)
def test_a_crc_wider_than_its_algorithm_is_a_damaged_journal(algorithm: str, value: int) -> None:
    """Else awscrt's combine raises ValueError at every attempt, and the partial stays."""
    header = journal.Header("b", "k", None, '"e"', 100, "k")
    lines = [(0, 10, {algorithm: value}), (10, 20, {algorithm: 1})]
    found = journal.parse(journal.content(header, lines, fsync=False))
    assert found.damaged is not None, found
    assert "CRC" in found.damaged
    widest = journal.parse(journal.content(header, [(0, 10, {algorithm: value - 1})], fsync=False))
    assert widest.damaged is None or value > 1 << 64


async def test_a_resumed_download_reads_the_journal_s_ranges_once(
    client: Any,
    config: asyncdl.TransferConfig,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lookup before the download reads the header alone; the ranges are read when
    the partial is adopted (a journal of a million ranges costs seconds a read)."""
    data = payload(SIZE)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    target = tmp_path / "k"
    await interrupted(client, resumable(config), proxy, bucket, target)
    lines = (tmp_path / ".k.asyncdl-journal").read_bytes().count(b"\n") - 1
    read: list[int] = []
    range_of = journal._range_of

    def counted(value: Any, size: int) -> journal.Recorded:
        read.append(1)
        return range_of(value, size)

    monkeypatch.setattr(journal, "_range_of", counted)
    async with asyncdl.Engine(client, config=resumable(config)) as engine:
        result = await engine.download(bucket, "k", target)
    assert result.reused_bytes > 0
    assert target.read_bytes() == data
    assert 0 < len(read) <= lines, f"{len(read)} range lines read of a journal of {lines}"


def test_a_journal_of_more_lines_than_asyncdl_writes_is_damaged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journal, "MAX_LINES", 10)
    header = journal.Header("b", "k", None, '"e"', 100, "k")
    ranges = [(start, start + 1, {"CRC32": 0}) for start in range(12)]
    found = journal.parse(journal.content(header, ranges, fsync=False))
    assert found.damaged is not None
    assert "lines" in found.damaged
    assert journal.parse(journal.content(header, ranges[:9], fsync=False)).damaged is None


def test_a_line_repeated_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three million copies of a line took 11 s a read; the same line again says
    nothing new."""
    parsed: list[int] = []
    parse_line = journal._parse_line

    def counted(line: bytes) -> Any:
        parsed.append(1)
        return parse_line(line)

    monkeypatch.setattr(journal, "_parse_line", counted)
    header = journal.Header("b", "k", None, '"e"', 100, "k")
    line = journal.line_of([0, 10, {"CRC32": 5}])
    found = journal.parse(header.line() + line * 100_000 + journal.line_of([0, 20, {"CRC32": 6}]))
    assert found.damaged is None
    assert found.ranges == [(0, 20, {"CRC32": 6})]
    assert len(parsed) == 3, f"{len(parsed)} lines parsed"


def test_a_journal_replaced_as_it_is_opened_is_opened_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compaction renames the new journal over the old one just after a reader opened
    # the old: the file it holds has no name left (st_nlink 0). That is no hard link,
    # nor a damaged journal: the name now holds the new one, which is opened instead.
    path = tmp_path / ".t.asyncdl-journal"
    path.write_bytes(b"old")
    path.chmod(0o600)
    real_open = os.open
    replaced: list[bool] = []

    def open_then_replace(
        name: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        fd = real_open(name, flags, mode, dir_fd=dir_fd)
        if not replaced:
            replaced.append(True)
            new = tmp_path / "new"
            new.write_bytes(b"new")
            new.chmod(0o600)
            os.replace(new, path)
        return fd

    monkeypatch.setattr(os, "open", open_then_replace)
    fd = partial_paths.open_locked(path, RuntimeError, shared=True)
    monkeypatch.undo()
    assert fd is not None
    try:
        assert replaced
        assert os.pread(fd, 10, 0) == b"new"
    finally:
        os.close(fd)
