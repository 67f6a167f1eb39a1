"""The bytes path of a large download: pieces written as they came, memory bounded
whatever the concurrency, stalls told apart from slow writes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import file_writes, quick_io
from asyncdl._files.writer import TempFile
from asyncdl._transfer.parts import BUFFERED, Fetch, fetch_ranges
from asyncdl._transfer.verify import Verifier
from asyncdl._wire.body_reader import BodyReader
from asyncdl.progress import Reporter
from asyncdl.testing.moto_server import serving_ranges
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import make_client, payload

KiB = 1024
MiB = 1024 * KiB


class HoldingSink:
    """A sink that holds every write until each of ``parts`` parts has handed one over,
    as a disk that cannot keep up would: the bytes held then are all that the parts
    gathered at once."""

    def __init__(self, size: int, parts: int) -> None:
        self.data = bytearray(size)
        self._parts = parts
        self._writers: set[int] = set()
        self._open = asyncio.Event()
        self.held = 0
        self.peak = 0
        self.largest_piece = 0

    async def write_chunks(
        self, offset: int, chunks: list[bytes], crc: Callable[..., Any] | None, previous: Any
    ) -> Any:
        self.largest_piece = max(self.largest_piece, *map(len, chunks))
        await self.write(offset, b"".join(chunks))
        return previous

    async def write(self, offset: int, data: bytes) -> None:
        self.held += len(data)
        self.peak = max(self.peak, self.held)
        self._writers.add(asyncio.current_task() or 0)  # type: ignore[arg-type]
        if len(self._writers) >= self._parts:
            self._open.set()
        await self._open.wait()
        self.data[offset : offset + len(data)] = data
        self.held -= len(data)


async def test_bytes_held_at_once_stay_bounded_at_high_concurrency(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    # 64 parts of 512 KiB, all in flight at once, each with more than it may gather.
    parts, part_size = 64, 512 * KiB
    data = payload(parts * part_size)
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    config = asyncdl.TransferConfig(chunk_size=part_size, max_concurrency=parts)
    sink = HoldingSink(len(data), parts)
    with serving_ranges():
        async with (
            make_client(proxy.url, max_pool_connections=parts) as client,
            asyncdl.Engine(client, config=config) as engine,
        ):
            ctx = engine._context
            obj = ctx.s3_object(bucket, "big", {})
            fetch = Fetch(
                ctx, obj, sink, None, len(data), Verifier("off", None), Reporter(None), False
            )
            await fetch_ranges(fetch, None, 0, 0)
    assert bytes(sink.data) == data
    # Each part writes once it has its share of BUFFERED, so one piece more at most.
    assert sink.peak <= BUFFERED + parts * sink.largest_piece


class SlowSink:
    """A sink whose first write takes longer than the read timeout, as a busy disk may."""

    def __init__(self, size: int, delay: float) -> None:
        self.data = bytearray(size)
        self._delay: float | None = delay

    async def write_chunks(
        self, offset: int, chunks: list[bytes], crc: Callable[..., Any] | None, previous: Any
    ) -> Any:
        await self.write(offset, b"".join(chunks))
        return previous

    async def write(self, offset: int, data: bytes) -> None:
        if self._delay is not None:
            delay, self._delay = self._delay, None
            await asyncio.sleep(delay)
        self.data[offset : offset + len(data)] = data


async def test_a_write_slower_than_the_read_timeout_is_not_a_stall(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(3 * MiB)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(chunk_size=MiB, read_timeout=0.5, write_size=256 * KiB)
    sink = SlowSink(len(data), delay=1.5)
    async with asyncdl.Engine(client, config=config) as engine:
        ctx = engine._context
        obj = ctx.s3_object(bucket, "k", {})
        fetch = Fetch(ctx, obj, sink, None, len(data), Verifier("off", None), Reporter(None), False)
        await fetch_ranges(fetch, None, 0, 0)
    assert bytes(sink.data) == data
    # Three ranges, each asked for once: no part was dropped as stalled and asked again.
    assert len([r for r in proxy.requests if r.method == "GET"]) == 3


async def test_pieces_are_written_back_to_back_without_a_join(tmp_path: Path) -> None:
    # Thousands of pieces of every size under 97 bytes, unjoined.
    pieces = [os.urandom(n % 97) for n in range(3000)]
    whole = b"".join(pieces)
    temp = TempFile(tmp_path / "t", len(whole) + 10)
    await temp.write(0, b"0123456789")
    await temp.write_chunks(10, pieces, None, None)
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"0123456789" + whole


async def test_a_short_vectored_write_resumes_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def at_most_five_bytes(fd: int, buffers: list[Any], offset: int) -> int:
        joined = b"".join(bytes(b) for b in buffers)[:5]
        return os.pwrite(fd, joined, offset)

    monkeypatch.setattr(os, "pwritev", at_most_five_bytes)
    pieces = [b"abc", b"", b"defghij", b"k", b"lmnopqrstu"]
    temp = TempFile(tmp_path / "t", 21)
    await temp.open()
    await temp.write_chunks(0, pieces, None, None)
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"abcdefghijklmnopqrstu"


async def test_a_small_file_in_pieces_stays_deferred_and_gets_its_crc(tmp_path: Path) -> None:
    from asyncdl._wire.checksums import crc_function  # noqa: PLC0415

    crc32c = crc_function("CRC32C")
    temp = TempFile(tmp_path / "t", 6)
    assert await temp.write_chunks(0, [b"abc", b"def"], crc32c, 0) == crc32c(b"abcdef", 0)
    assert not temp.opened
    assert os.listdir(tmp_path) == []
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"abcdef"


class CountingExecutor(ThreadPoolExecutor):
    """The loop's default executor, counting the calls handed to it."""

    def __init__(self) -> None:
        super().__init__(4)
        self.calls = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().submit(fn, *args, **kwargs)


async def test_writes_issued_together_share_one_executor_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes off the loop (as on a file system found slow): on the loop while they are
    # quick, they make no hop at all (tests/files/test_writes_on_loop.py).
    off_loop = quick_io.QuickWrites()
    off_loop.OFF_LOOP = 3600.0  # seconds: off for the whole test, however slow the machine
    off_loop.took(1.0)
    off_loop.took(1.0)
    monkeypatch.setattr(quick_io, "QUICK_WRITES", off_loop)
    executor = CountingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    temp = TempFile(tmp_path / "t", 80)
    await temp.open()
    before = executor.calls
    # Parts woken by the same turn of the loop (bytes for each arrived together).
    await asyncio.gather(*(temp.write(i * 10, bytes([i]) * 10) for i in range(8)))
    assert executor.calls - before == 1
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"".join(bytes([i]) * 10 for i in range(8))


@pytest.mark.asyncio_internals  # asyncio transport's max_size; uvloop's has none
@pytest.mark.parametrize(("size", "expected"), [(128 * 1024, 64 * 1024), (1024 * 1024, 256 * 1024)])
async def test_socket_reads_are_half_a_write_at_most(
    s3: Any, bucket: str, client: Any, size: int, expected: int
) -> None:
    # At high concurrency a write is small: each of the many responses then reads its
    # socket half a write at a time, not asyncio's 256 KiB (which, per response, was
    # most of the bytes held at once). At the default a write is 1 MiB: unchanged.
    s3.put_object(Bucket=bucket, Key="k", Body=payload(4 * size))
    response = await client.get_object(Bucket=bucket, Key="k")
    body = response["Body"]
    try:
        with BodyReader(body, read_timeout=10.0, size=size) as reader:
            transport = body._raw_stream.connection.transport
            assert transport.max_size == expected
            assert await reader.read()
    finally:
        body.close()


def _recording(
    calls: list[tuple[int, int]],
    real: Callable[..., int],
    buffers_per_call: list[int] | None = None,
) -> Callable[..., int]:
    def record(fd: int, buffers: list[Any], offset: int) -> int:
        calls.append((offset, sum(memoryview(b).nbytes for b in buffers)))
        if buffers_per_call is not None:
            buffers_per_call.append(len(buffers))
        return real(fd, buffers, offset)

    return record


def _within_steps(calls: list[tuple[int, int]]) -> bool:
    step = file_writes.WRITE_STEP
    return all(
        0 < size <= step and offset // step == (offset + size - 1) // step for offset, size in calls
    )


async def test_no_write_call_takes_more_than_a_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each write system call's bytes get page-cache folios as large as the call: large
    # ones come from the free blocks a VM's host may have taken back (file_writes).
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "pwritev", _recording(calls, os.pwritev))
    pieces = [os.urandom(n) for n in (1, 300 * KiB, 5, 64 * KiB, 70_000, MiB, 0, 3)]
    whole = b"".join(pieces)
    temp = TempFile(tmp_path / "t", 10 + len(whole))
    await temp.write(0, b"0123456789")
    await temp.write_chunks(10, pieces, None, None)
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == b"0123456789" + whole
    assert _within_steps(calls)
    # Back to back: no byte written twice, none skipped.
    assert sum(size for _, size in calls) == 10 + len(whole)


@pytest.mark.parametrize("fsync", [False, True])
async def test_a_small_file_published_in_one_go_is_written_in_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    # Unnamed and linked (no fsync), or named and renamed: either way in steps.
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "pwritev", _recording(calls, os.pwritev))
    data = os.urandom(200 * KiB + 7)
    temp = TempFile(tmp_path / "t", len(data), fsync=fsync)
    await temp.write_chunks(0, [data], None, None)
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == data
    assert _within_steps(calls)
    assert sum(size for _, size in calls) == len(data)


async def test_more_pieces_in_a_step_than_one_call_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    buffers: list[int] = []
    monkeypatch.setattr(os, "pwritev", _recording(calls, os.pwritev, buffers))
    pieces = [bytes([n % 251]) for n in range(file_writes._IOV_MAX + 5)]
    temp = TempFile(tmp_path / "t", len(pieces) + 3)
    await temp.open()
    await temp.write_chunks(3, pieces, None, None)
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == bytes(3) + b"".join(pieces)
    assert buffers == [file_writes._IOV_MAX, 5]
    assert _within_steps(calls)


def test_a_write_that_writes_nothing_fails_rather_than_spins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries: list[int] = []

    def nothing(fd: int, buffers: Any, offset: int) -> int:
        tries.append(offset)
        if len(tries) > 100:
            raise AssertionError("still writing after 100 calls that wrote nothing")
        return 0

    monkeypatch.setattr(os, "pwritev", nothing)
    monkeypatch.setattr(os, "pwrite", nothing)
    monkeypatch.setattr(file_writes, "_PWRITE", nothing, raising=False)
    with (tmp_path / "t").open("wb") as file, pytest.raises(OSError, match="wrote none"):
        file_writes.write_all(file.fileno(), [b"abc"], 0)
