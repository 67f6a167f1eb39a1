"""Small files are published on the event loop while that is quick, in a thread once
the file system is slow."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._files import quick_io
from asyncdl._files.quick_io import QuickIO
from asyncdl._files.writer import TempFile

# The modules that use the policy, imported (as in any process that downloaded before)
# while the process's own policy is in place.
importlib.import_module("asyncdl._transfer.transfer")
importlib.import_module("asyncdl._files.writer")
#: The process's own policy.
PROCESS_POLICY = quick_io.QUICK_IO


class CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(2)
        self.submitted = 0
        self.calls: list[str] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        self.calls.append(repr(fn))
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
async def executor() -> AsyncIterator[CountingExecutor]:
    loop = asyncio.get_running_loop()
    pool = CountingExecutor()
    loop.set_default_executor(pool)
    yield pool
    loop.set_default_executor(ThreadPoolExecutor())  # the session's loop lives on


@pytest.fixture
def on_loop(monkeypatch: pytest.MonkeyPatch) -> QuickIO:
    # A fresh policy: the process's may have been sent off the loop by slow calls of
    # earlier tests (a loaded machine's temp directory), as it is meant to be.
    fresh = QuickIO()
    monkeypatch.setattr(quick_io, "QUICK_IO", fresh)
    return fresh


async def publish(path: Path, data: bytes, *, fsync: bool = False) -> None:
    temp = TempFile(path, len(data), fsync=fsync)
    await temp.write(0, data)
    await temp.commit()
    assert temp.published


async def test_a_small_file_is_published_without_a_thread(
    tmp_path: Path, executor: CountingExecutor, on_loop: QuickIO
) -> None:
    for number in range(3):
        await publish(tmp_path / f"f{number}", b"x" * number)
    assert executor.submitted == 0
    assert [(tmp_path / f"f{n}").read_bytes() for n in range(3)] == [b"", b"x", b"xx"]


async def test_a_slow_publish_sends_the_next_ones_to_a_thread(
    tmp_path: Path, executor: CountingExecutor, on_loop: QuickIO
) -> None:
    on_loop.LIMIT = -1.0  # every publish counts as slow
    on_loop.OFF_LOOP = 0.3  # seconds
    submitted = []
    for number in range(5):
        if number == 4:
            await asyncio.sleep(0.35)
        await publish(tmp_path / f"f{number}", b"data")
        submitted.append(executor.submitted)
    # Two on the loop (slow, in a row), then in a thread for OFF_LOOP seconds, then
    # the loop again.
    assert submitted == [0, 0, 1, 2, 2]
    assert [(tmp_path / f"f{n}").read_bytes() for n in range(5)] == [b"data"] * 5


async def test_a_durable_publish_always_goes_to_a_thread(
    tmp_path: Path, executor: CountingExecutor, on_loop: QuickIO
) -> None:
    await publish(tmp_path / "f", b"data", fsync=True)
    assert executor.submitted == 1  # fsync can take long: never on the loop


def test_one_slow_call_is_not_a_slow_file_system() -> None:
    policy = QuickIO()
    for seconds in (0.5, 0.0001, 0.5, 0.0001):  # a busy machine delays one call now and then
        policy.took(seconds)
        assert policy.allowed()
    policy.took(0.5)
    policy.took(0.5)
    assert not policy.allowed()


async def test_a_download_checks_and_publishes_without_a_thread(
    s3: Any,
    bucket: str,
    client: Any,
    tmp_path: Path,
    executor: CountingExecutor,
    on_loop: QuickIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"tiny")
    # The process's policy off the loop (as slow calls of earlier tests can leave it):
    # the download must follow the policy in place now, which is on_loop's.
    monkeypatch.setattr(PROCESS_POLICY, "_off", 10**6)
    async with asyncdl.Engine(client) as engine:
        # The first request creates the client's connection pool (aiobotocore builds
        # its SSL contexts in a thread): once per client, not per object.
        await engine.download(bucket, "k", tmp_path / "first", strategy="get-first")
        executor.submitted = 0
        executor.calls.clear()
        result = await engine.download(bucket, "k", tmp_path / "k", strategy="get-first")
    assert (result.size, (tmp_path / "k").read_bytes()) == (4, b"tiny")
    assert executor.submitted == 0, executor.calls
