"""A download's writes go on the event loop while that is quick; once writes are slow,
to the executor, one hop at a time per file."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import file_writes, quick_io
from asyncdl._files.quick_io import QuickWrites
from asyncdl._files.writer import TempFile

from ..conftest import payload
from .test_publish_on_loop import CountingExecutor
from .test_publish_on_loop import executor as executor  # noqa: PLC0414 - the fixture

MiB = 1024 * 1024


def hops(executor: CountingExecutor) -> int:
    """The write hops handed to the executor."""
    return sum("WriteHops._run" in call for call in executor.calls)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> QuickWrites:
    # A fresh policy: the process's may have been sent off the loop by slow writes of
    # earlier tests (a loaded machine), as it is meant to be.
    fresh = QuickWrites()
    monkeypatch.setattr(quick_io, "QUICK_WRITES", fresh)
    return fresh


async def test_a_multi_part_download_writes_without_a_thread(
    s3: Any,
    bucket: str,
    engine: asyncdl.Engine,
    tmp_path: Path,
    executor: CountingExecutor,
    writes: QuickWrites,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = payload(3 * MiB + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    # Which thread writes, not how long a write takes: on a loaded machine slow writes
    # would send them off the loop, as they are meant to (the tests below judge that).
    monkeypatch.setattr(writes, "took", lambda seconds: None)
    result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert result.size == len(data)
    assert hops(executor) == 0, executor.calls
    # The file's create and rename still go to a thread.
    assert executor.calls


async def test_slow_writes_go_to_a_thread_one_hop_at_a_time(
    tmp_path: Path,
    executor: CountingExecutor,
    writes: QuickWrites,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes.LIMIT = -1.0  # every write on the loop counts as slow
    writes.OFF_LOOP = 3600.0  # seconds: then off for the whole test, however slow the machine
    inside, most = 0, 0
    lock = threading.Lock()
    write_sync = TempFile._write_sync

    def slow_write(self: TempFile, offset: int, chunks: Sequence[bytes], *rest: Any) -> Any:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        try:
            time.sleep(0.02)  # a slow disk: more writes come while this one runs
            return write_sync(self, offset, chunks, *rest)
        finally:
            with lock:
                inside -= 1

    monkeypatch.setattr(TempFile, "_write_sync", slow_write)
    data = payload(40 * 64 * 1024)
    temp = TempFile(tmp_path / "t", len(data))
    await temp.open()

    async def part(index: int) -> None:
        start = index * 64 * 1024
        for piece in range(4):
            await asyncio.sleep(0.003 * ((index + piece) % 3))  # writes in many turns
            offset = start + piece * 16 * 1024
            await temp.write(offset, data[offset : offset + 16 * 1024])

    await part(0)  # two slow writes on the loop: the next go to the executor
    assert not writes.allowed()
    await asyncio.gather(*(part(index) for index in range(1, 40)))
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == data
    assert most == 1  # one hop at a time: two threads would spin on the file's lock
    # 156 writes off the loop, in far fewer hops (those issued while one ran, together).
    assert 2 <= hops(executor) < 100, hops(executor)


async def test_a_write_larger_than_the_loop_takes_goes_to_a_thread(
    tmp_path: Path, executor: CountingExecutor, writes: QuickWrites
) -> None:
    size = file_writes.LOOP_WRITE_MOST + 1
    data = payload(size)
    temp = TempFile(tmp_path / "t", size + 1)
    await temp.write(0, data)  # opens it: not the whole file
    await temp.write(size, b"!")
    await temp.commit()
    assert (tmp_path / "t").read_bytes() == data + b"!"
    assert hops(executor) == 1, executor.calls
    assert writes.allowed()
