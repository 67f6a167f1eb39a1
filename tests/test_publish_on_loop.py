"""Small files are published on the event loop while that is quick, in a thread once
the file system is slow."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from asyncdl import writer
from asyncdl.writer import TempFile


class CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(2)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
async def executor() -> AsyncIterator[CountingExecutor]:
    loop = asyncio.get_running_loop()
    pool = CountingExecutor()
    loop.set_default_executor(pool)
    yield pool
    loop.set_default_executor(ThreadPoolExecutor())  # the session's loop lives on


@pytest.fixture
def on_loop(monkeypatch: pytest.MonkeyPatch) -> writer._OnLoop:
    fresh = writer._OnLoop()
    monkeypatch.setattr(writer, "_ON_LOOP", fresh)
    return fresh


async def publish(path: Path, data: bytes, *, fsync: bool = False) -> None:
    temp = TempFile(path, len(data), fsync=fsync)
    await temp.write(0, data)
    await temp.commit()
    assert temp.published


async def test_a_small_file_is_published_without_a_thread(
    tmp_path: Path, executor: CountingExecutor, on_loop: writer._OnLoop
) -> None:
    for number in range(3):
        await publish(tmp_path / f"f{number}", b"x" * number)
    assert executor.submitted == 0
    assert [(tmp_path / f"f{n}").read_bytes() for n in range(3)] == [b"", b"x", b"xx"]


async def test_a_slow_publish_sends_the_next_ones_to_a_thread(
    tmp_path: Path, executor: CountingExecutor, on_loop: writer._OnLoop
) -> None:
    on_loop.LIMIT = -1.0  # every publish counts as slow
    on_loop.OFF_LOOP = 2
    submitted = []
    for number in range(4):
        await publish(tmp_path / f"f{number}", b"data")
        submitted.append(executor.submitted)
    # On the loop (slow), then two in a thread, then the loop is tried again.
    assert submitted == [0, 1, 2, 2]
    assert [(tmp_path / f"f{n}").read_bytes() for n in range(4)] == [b"data"] * 4


async def test_a_durable_publish_always_goes_to_a_thread(
    tmp_path: Path, executor: CountingExecutor, on_loop: writer._OnLoop
) -> None:
    await publish(tmp_path / "f", b"data", fsync=True)
    assert executor.submitted == 1  # fsync can take long: never on the loop

