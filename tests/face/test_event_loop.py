"""asyncdl never blocks the event loop: asyncio's debug mode flags any callback
(a step of a task) that runs longer than 50 ms; none of asyncdl's may."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import linecache
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK, payload


@contextlib.contextmanager
def loop_debug(loop: asyncio.AbstractEventLoop, slow: float) -> Iterator[None]:
    debug, duration = loop.get_debug(), loop.slow_callback_duration
    loop.set_debug(True)
    loop.slow_callback_duration = slow
    try:
        yield
    finally:
        loop.set_debug(debug)
        loop.slow_callback_duration = duration


@pytest.mark.alone
async def test_no_slow_callbacks(
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    objects = {f"small/{i}": payload(1000 + i, seed=i) for i in range(100)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    s3.put_object(Bucket=bucket, Key="big", Body=payload(40 * CHUNK), ChecksumAlgorithm="CRC32")
    caplog.set_level(logging.WARNING, logger="asyncio")
    # Flush what earlier tests left for the disk (moto spools big objects to files):
    # under writeback every stat() stalls, asyncio's debug mode itself stats a file
    # per frame of each handle it creates, and that stall is not asyncdl's.
    await asyncio.to_thread(os.sync)
    # Debug mode records a traceback, source lines included, for every future, task
    # and handle it creates: linecache stat()s each frame's file and reads and
    # tokenizes it the first time it is seen (the first GET reads dozens of botocore,
    # aiohttp and asyncdl files, 57 ms in one CI run). The test measures asyncdl, not
    # that bookkeeping; and objects earlier tests left behind are frozen out of the
    # collector's passes.
    monkeypatch.setattr(linecache, "checkcache", lambda filename=None: None)
    monkeypatch.setattr(linecache, "getline", lambda filename, lineno, module_globals=None: "")
    gc.collect()
    gc.freeze()
    request.addfinalizer(gc.unfreeze)
    loop = asyncio.get_running_loop()
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=16, validate="required")
    with loop_debug(loop, 0.05):
        # The engine creates its own client here: botocore's model loading included.
        async with asyncdl.Engine(config=config) as engine:
            results = [r async for r in engine.download_prefix(bucket, "small/", tmp_path)]
            big = await engine.download(bucket, "big", tmp_path / "big", strategy="head-first")
            streamed = [piece async for piece in engine.stream(bucket, "big")]
    assert all(r.ok for r in results)
    assert big.verified
    assert sum(map(len, streamed)) == 40 * CHUNK
    # Only asyncdl runs on this loop here (moto and the proxy have their own threads),
    # so every slow step is asyncdl's, even one that asyncio attributes to this test.
    slow = [r.getMessage() for r in caplog.records if "took" in r.getMessage()]
    assert slow == [], slow


async def test_the_tests_run_on_the_loop_asked_for() -> None:
    """``nox -s tests_uvloop`` runs the suite on uvloop: make sure it does."""
    from ..conftest import TEST_LOOP  # noqa: PLC0415

    loop = asyncio.get_running_loop()
    if TEST_LOOP == "uvloop":
        assert type(loop).__module__.startswith("uvloop"), type(loop)
    else:
        assert isinstance(loop, asyncio.BaseEventLoop), type(loop)
        assert not type(loop).__module__.startswith("uvloop"), type(loop)
