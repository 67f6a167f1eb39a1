"""An engine belongs to the event loop that opened it: its connections, its budget's
waiters and its tasks are that loop's. Used from another loop (a second thread's, or
a later ``asyncio.run``) it refuses at once with a ``RuntimeError`` that says so,
sends nothing, and the loop that owns it downloads on unharmed.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import make_client

OTHER_LOOP = "opened on another event loop"


async def test_a_second_thread_s_loop_is_refused_and_the_owner_is_unharmed(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    for i in range(8):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"x" * 1000)
    refused: list[BaseException] = []

    def elsewhere() -> None:
        async def use() -> None:
            await engine.download(bucket, "k0", tmp_path / "other")

        try:
            asyncio.run(use())
        except BaseException as exc:
            refused.append(exc)

    before = len(proxy.requests)
    thread = threading.Thread(target=elsewhere)
    thread.start()
    await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive()
    assert len(refused) == 1
    assert isinstance(refused[0], RuntimeError)
    assert OTHER_LOOP in str(refused[0])
    assert len(proxy.requests) == before  # nothing sent
    assert not (tmp_path / "other").exists()

    async with asyncio.timeout(30):
        results = await asyncio.gather(
            *(engine.download(bucket, f"k{i}", tmp_path / f"f{i}") for i in range(8))
        )
    assert all(result.size == 1000 for result in results)


@pytest.mark.parametrize("use", ["download", "read_bytes", "head", "list_pages", "stream"])
def test_an_engine_used_under_another_asyncio_run_is_refused_at_once(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, use: str
) -> None:
    # A module's engine, opened on one loop, then called under an asyncio.run of its
    # own (a script's second run, a test's new loop).
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    config = asyncdl.TransferConfig(backoff_base=0.01)
    first = asyncio.new_event_loop()
    client = first.run_until_complete(make_client(proxy.url).__aenter__())
    engine = asyncdl.Engine(client, config=config)
    first.run_until_complete(engine.__aenter__())
    first.run_until_complete(engine.download(bucket, "k", tmp_path / "first"))
    sent = len(proxy.requests)

    async def again() -> None:
        if use == "download":
            await engine.download(bucket, "k", tmp_path / "second")
        elif use == "read_bytes":
            await engine.read_bytes(bucket, "k")
        elif use == "head":
            await engine.head(bucket, "k")
        elif use == "list_pages":
            async for _ in engine.list_pages(bucket, ""):
                pass
        else:
            async with engine.stream(bucket, "k") as stream:
                async for _ in stream:
                    pass

    try:
        with pytest.raises(RuntimeError, match=OTHER_LOOP):
            asyncio.run(again())
        assert len(proxy.requests) == sent
        assert not (tmp_path / "second").exists()
        with pytest.raises(RuntimeError, match=OTHER_LOOP):  # nor closed from there
            asyncio.run(engine.aclose())
        # The loop that opened it still downloads with it.
        first.run_until_complete(engine.download(bucket, "k", tmp_path / "third"))
        assert (tmp_path / "third").read_bytes() == b"data"
    finally:
        first.run_until_complete(engine.aclose())
        first.run_until_complete(client.__aexit__(None, None, None))
        first.close()


@pytest.mark.parametrize("made", ["reader", "stream", "list_pages", "download_many"])
def test_what_an_engine_made_is_refused_on_another_loop(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, made: str
) -> None:
    # A reader, stream or generator made on the engine's loop, then used under another
    # asyncio.run: refused at once too (its blocks, parts and pages are the engine's
    # loop's), never a hang or retries on another loop's connections.
    s3.put_object(Bucket=bucket, Key="k", Body=b"x" * (3 * 1024 * 1024))
    first = asyncio.new_event_loop()
    client = first.run_until_complete(make_client(proxy.url).__aenter__())
    engine = asyncdl.Engine(client, config=asyncdl.TransferConfig(backoff_base=0.01))
    first.run_until_complete(engine.__aenter__())

    async def make() -> Any:
        if made == "reader":
            return await engine.open_reader(bucket, "k")
        if made == "stream":
            return engine.stream(bucket, "k")
        if made == "list_pages":
            return engine.list_pages(bucket, "")
        return engine.download_many([(bucket, "k", tmp_path / "many")])

    thing = first.run_until_complete(make())
    sent = len(proxy.requests)

    async def use() -> None:
        if made == "reader":
            await thing.read_at(2 * 1024 * 1024, 10)
        elif made == "stream":
            async with thing as stream:
                async for _ in stream:
                    pass
        else:
            async for _ in thing:
                pass

    try:
        with pytest.raises((RuntimeError, asyncdl.DownloadError), match=OTHER_LOOP):
            asyncio.run(asyncio.wait_for(use(), 20))
        assert len(proxy.requests) == sent
    finally:
        if made == "reader":
            first.run_until_complete(thing.aclose())
        first.run_until_complete(engine.aclose())
        first.run_until_complete(client.__aexit__(None, None, None))
        first.close()
