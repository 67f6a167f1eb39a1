"""Writes on the event loop under attack (``file_writes.WriteHops``): a write that
holds the loop past the read timeout, stalls now and then, two disks at once, a discard
or an executor shut down with writes queued, the CRCs, a durable resume."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import quick_io
from asyncdl._files.partial_file import PartialFile
from asyncdl._files.quick_io import QuickWrites
from asyncdl._files.writer import TempFile

from ..conftest import make_client, payload, temp_files
from ..transfer.test_integrity import corrupt_gets
from .test_writes_on_loop import writes as writes  # noqa: PLC0414 - the fixture

MiB = 1024 * 1024


class Heartbeat:
    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._stop = False

    async def run(self) -> None:
        last = time.perf_counter()
        while not self._stop:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now

    def stop(self) -> None:
        self._stop = True


def _stall_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The 3rd and 9th write (counted in the list returned) hold the loop for 1 s."""
    write_sync = TempFile._write_sync
    calls = [0]

    def stall_once(self: TempFile, offset: int, chunks: Sequence[bytes], *rest: Any) -> Any:
        calls[0] += 1
        if calls[0] in (3, 9):
            time.sleep(1.0)
        return write_sync(self, offset, chunks, *rest)

    monkeypatch.setattr(TempFile, "_write_sync", stall_once)
    return calls


@pytest.mark.parametrize("max_attempts", [1, 5])
async def test_a_write_holding_the_loop_is_no_stall_of_the_other_parts(
    s3: Any,
    bucket: str,
    client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    max_attempts: int,
) -> None:
    """A write on the loop that holds it past read_timeout (an NFS hiccup, dirty pages
    throttled): the other parts' stall timers fire late, and must not take the bytes
    that came meanwhile for a stall. With one attempt a false stall fails the download;
    with more, it is a retry."""
    data = payload(8 * MiB)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    calls = _stall_writes(monkeypatch)
    config = asyncdl.TransferConfig(
        chunk_size=1 * MiB,
        max_concurrency=8,
        read_timeout=0.5,
        max_attempts=max_attempts,
        backoff_base=0.01,
    )
    async with asyncdl.Engine(client, config=config) as engine:
        for attempt in range(3):
            calls[0] = 0
            # Writes on the loop for each: the stalls of the one before sent them off.
            monkeypatch.setattr(quick_io, "QUICK_WRITES", QuickWrites())
            await engine.download(bucket, "k", tmp_path / f"k{attempt}")
            assert (tmp_path / f"k{attempt}").read_bytes() == data
        retries = engine.stats().retries
    assert retries == 0


@pytest.mark.alone
async def test_rare_slow_writes_stall_the_loop_once(
    s3: Any,
    bucket: str,
    client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writes: QuickWrites,
    request: pytest.FixtureRequest,
) -> None:
    """One write in five takes 150 ms (a throttled disk): too rare to make two slow
    calls in a row, but each is a stall, and the first sends writes off the loop."""
    data = payload(16 * MiB)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    write_sync = TempFile._write_sync
    calls = [0]

    def every_fifth_slow(self: TempFile, offset: int, chunks: Sequence[bytes], *rest: Any) -> Any:
        calls[0] += 1
        if calls[0] % 5 == 0:
            time.sleep(0.15)
        return write_sync(self, offset, chunks, *rest)

    monkeypatch.setattr(TempFile, "_write_sync", every_fifth_slow)
    config = asyncdl.TransferConfig(chunk_size=1 * MiB, max_concurrency=4, backoff_base=0.01)
    # The test process holds some 400,000 objects (pytest, moto, boto3): a full pass of
    # the collector over them holds the loop ~0.24 s, whenever allocations happen to
    # call for one. That pause is not asyncdl's writes: those objects are frozen out of
    # the collector's passes, as test_event_loop's are.
    gc.collect()
    gc.freeze()
    request.addfinalizer(gc.unfreeze)
    beat = Heartbeat()
    async with asyncdl.Engine(client, config=config) as engine:
        task = asyncio.create_task(beat.run())
        await engine.download(bucket, "k", tmp_path / "k")
        beat.stop()
        await task
    assert (tmp_path / "k").read_bytes() == data
    stalls = [round(g, 3) for g in beat.gaps if g > 0.1]
    # The first tells the file system stalls (no write can be known slow before it
    # ends), and sends the rest off the loop.
    assert len(stalls) <= 1, (len(stalls), stalls[:10], calls[0])


async def test_two_downloads_fast_disk_masks_slow_disk(
    s3: Any,
    bucket: str,
    client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writes: QuickWrites,
) -> None:
    """One process-wide policy: a download to a fast disk, whose quick writes count
    too, does not keep a concurrent download's stalling writes on the loop."""
    data = payload(16 * MiB)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    slow_dir = tmp_path / "slow"
    fast_dir = tmp_path / "fast"
    slow_dir.mkdir()
    fast_dir.mkdir()
    write_sync = TempFile._write_sync
    on_loop_slow = [0]

    def by_dir(self: TempFile, offset: int, chunks: Sequence[bytes], *rest: Any) -> Any:
        if str(slow_dir) in str(self._path):
            if threading.current_thread() is threading.main_thread():
                on_loop_slow[0] += 1
            # A stall (past QuickWrites.STALL): each keeps the writes off the loop for
            # a time in proportion to it, so a shorter one keeps as many tries of the
            # loop in the run.
            time.sleep(QuickWrites.STALL + 0.01)
        return write_sync(self, offset, chunks, *rest)

    monkeypatch.setattr(TempFile, "_write_sync", by_dir)
    config = asyncdl.TransferConfig(
        chunk_size=256 * 1024, max_concurrency=16, write_size=64 * 1024, backoff_base=0.01
    )
    beat = Heartbeat()
    async with asyncdl.Engine(client, config=config) as engine:
        task = asyncio.create_task(beat.run())
        await asyncio.gather(
            engine.download(bucket, "k", fast_dir / "k"),
            engine.download(bucket, "k", slow_dir / "k"),
        )
        beat.stop()
        await task
    assert (slow_dir / "k").read_bytes() == data
    assert (fast_dir / "k").read_bytes() == data
    blocked = sum(g for g in beat.gaps if g > 0.05)
    assert on_loop_slow[0] <= 4, (on_loop_slow[0], round(blocked, 2))


def _trip(writes: QuickWrites) -> None:
    writes._off = time.monotonic() + 3600


async def test_discard_while_hop_runs_and_writes_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: QuickWrites
) -> None:
    _trip(writes)
    gate = threading.Event()
    entered = threading.Event()
    write_sync = TempFile._write_sync

    def held(self: TempFile, *args: Any) -> Any:
        entered.set()
        gate.wait(5)
        return write_sync(self, *args)

    monkeypatch.setattr(TempFile, "_write_sync", held)
    temp = TempFile(tmp_path / "t", 300)
    await temp.open()
    first = asyncio.create_task(temp.write(0, b"a" * 100))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert await asyncio.to_thread(entered.wait, 5)
    queued = [asyncio.create_task(temp.write(i * 100, b"b" * 100)) for i in (1, 2)]
    await asyncio.sleep(0.01)
    for t in (first, *queued):
        t.cancel()
    temp.discard()
    gate.set()
    await asyncio.gather(first, *queued, return_exceptions=True)
    for _ in range(100):
        if not temp_files(tmp_path) and not os.listdir(tmp_path):
            break
        await asyncio.sleep(0.01)
    assert os.listdir(tmp_path) == []
    # A write after discard is refused, not hung.
    with pytest.raises(Exception):  # noqa: B017,PT011
        await asyncio.wait_for(temp.write(0, b"x" * 100), 2)
    assert os.listdir(tmp_path) == []


async def test_executor_shut_down_while_writes_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: QuickWrites
) -> None:
    _trip(writes)
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(2)
    loop.set_default_executor(pool)
    try:
        gate = threading.Event()
        write_sync = TempFile._write_sync

        def held(self: TempFile, *args: Any) -> Any:
            gate.wait(5)
            return write_sync(self, *args)

        temp = TempFile(tmp_path / "t", 300)
        await temp.open()
        monkeypatch.setattr(TempFile, "_write_sync", held)
        first = asyncio.create_task(temp.write(0, b"a" * 100))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(temp.write(100, b"b" * 100))
        await asyncio.sleep(0.05)
        pool.shutdown(wait=False)
        gate.set()
        results = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 3)
        assert results[0] is None
        assert isinstance(results[1], RuntimeError), results
        temp.discard()
        assert os.listdir(tmp_path) == []
    finally:
        loop.set_default_executor(ThreadPoolExecutor())


async def test_no_loop_write_while_a_hop_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: QuickWrites
) -> None:
    """The policy allows the loop again while a hop of the file is in a thread: the next
    write must still wait for the hop, never write the file from two threads."""
    _trip(writes)
    inside = [0, 0]
    lock = threading.Lock()
    write_sync = TempFile._write_sync

    def counted(self: TempFile, *args: Any) -> Any:
        with lock:
            inside[0] += 1
            inside[1] = max(inside)
        try:
            time.sleep(0.05)
            return write_sync(self, *args)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(TempFile, "_write_sync", counted)
    data = payload(64 * 100)
    temp = TempFile(tmp_path / "t", len(data))
    await temp.open()
    tasks = [asyncio.create_task(temp.write(0, data[:100]))]
    await asyncio.sleep(0.01)
    writes._off = 0.0  # allowed again, the hop still running
    writes.LIMIT = 10.0
    for i in range(1, 64):
        tasks.append(asyncio.create_task(temp.write(i * 100, data[i * 100 : (i + 1) * 100])))
        await asyncio.sleep(0.003)
    await asyncio.gather(*tasks)
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == data
    assert inside[1] == 1


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
@pytest.mark.parametrize("mode", ["loop", "mixed"])
async def test_crc_verifies_and_catches_corruption(
    s3: Any,
    bucket: str,
    proxy: Any,
    client: Any,
    tmp_path: Path,
    writes: QuickWrites,
    algorithm: str,
    mode: str,
) -> None:
    data = payload(3 * MiB + 77)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm=algorithm)
    if mode == "mixed":
        writes.LIMIT = -1.0  # two writes on the loop, then the executor, then again
        writes.OFF_LOOP = 0.001
    config = asyncdl.TransferConfig(
        chunk_size=1 * MiB,
        max_concurrency=4,
        write_size=64 * 1024,
        backoff_base=0.01,
    )
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "ok")
        assert (tmp_path / "ok").read_bytes() == data
        assert result.verified, result.unverified_reason
    proxy.rule = corrupt_gets(1_000)
    async with make_client(proxy.url) as bad, asyncdl.Engine(bad, config=config) as engine:
        with pytest.raises(asyncdl.ChecksumError):
            await engine.download(bucket, "k", tmp_path / "bad", strategy="head-first")
    assert not (tmp_path / "bad").exists()
    assert temp_files(tmp_path) == []


async def test_resume_fsync_writes_on_the_loop(
    s3: Any,
    bucket: str,
    client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writes: QuickWrites,
) -> None:
    """resume=True, fsync=True: each write syncs the partial file to the disk before
    its journal line, so none runs on the loop."""
    data = payload(32 * MiB)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    write_sync = PartialFile._write_sync
    on_loop: list[float] = []
    off_loop: list[float] = []

    def timed(self: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return write_sync(self, *args)
        finally:
            took = time.perf_counter() - started
            main = threading.current_thread() is threading.main_thread()
            (on_loop if main else off_loop).append(took)

    monkeypatch.setattr(PartialFile, "_write_sync", timed)
    config = asyncdl.TransferConfig(
        chunk_size=4 * MiB, max_concurrency=4, backoff_base=0.01, resume=True, fsync=True
    )
    beat = Heartbeat()
    async with asyncdl.Engine(client, config=config) as engine:
        task = asyncio.create_task(beat.run())
        await engine.download(bucket, "k", tmp_path / "k")
        beat.stop()
        await task
    assert (tmp_path / "k").read_bytes() == data
    report = (
        len(on_loop),
        round(sum(on_loop), 3),
        round(max(on_loop, default=0), 4),
        len(off_loop),
        round(max(beat.gaps), 4),
    )
    assert not on_loop, report
