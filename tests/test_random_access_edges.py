"""The random-access reader at its edges: a stopped loop, a closed engine, the
caller's task after a read, and arguments a file object would refuse."""

from __future__ import annotations

import asyncio
import io
import threading
from typing import Any

import pytest

import asyncdl
from asyncdl.adaptive import SLOT
from asyncdl.testing.tcp_proxy import TcpProxy

from .conftest import make_client, payload

KiB = 1024
BLOCK = 4 * KiB


def test_a_sync_reader_whose_loop_stopped_raises_instead_of_hanging(
    s3: Any, bucket: str, proxy: TcpProxy, config: asyncdl.TransferConfig
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    loop = asyncio.new_event_loop()
    held: dict[str, Any] = {}

    async def open_reader() -> None:
        held["client"] = make_client(proxy.url)
        client = await held["client"].__aenter__()
        held["engine"] = engine = asyncdl.Engine(client, config=config)
        await engine.open()
        held["sync"] = (await engine.open(bucket, "k", block_size=BLOCK)).sync()

    async def close() -> None:
        await held["engine"].aclose()
        await held["client"].__aexit__(None, None, None)

    loop.run_until_complete(open_reader())
    outcome: dict[str, BaseException | bytes] = {}

    def read() -> None:
        try:
            outcome["read"] = held["sync"].read(10)
        except BaseException as exc:
            outcome["read"] = exc

    # The loop is not running (stopped between run_until_complete calls): a read would
    # wait for it forever.
    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(10)
    try:
        assert not worker.is_alive(), "the read waits for a loop that is not running"
        assert isinstance(outcome["read"], RuntimeError), outcome
        assert "not running" in str(outcome["read"])
    finally:
        loop.run_until_complete(close())
        loop.close()


async def test_a_read_leaves_no_slot_marker_in_the_callers_task(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    # Were it left, the caller's own later requests on the borrowed client would be
    # counted, and their throttles obeyed, as the engine's.
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    assert SLOT.get() is None
    f = await engine.open(bucket, "k", block_size=BLOCK)
    assert SLOT.get() is None
    assert await f.read_at(8 * BLOCK, 5)
    assert SLOT.get() is None


async def test_a_reader_of_a_closed_engine_sends_nothing(
    s3: Any, bucket: str, proxy: TcpProxy, config: asyncdl.TransferConfig
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    async with make_client(proxy.url) as client:
        engine = asyncdl.Engine(client, config=config)
        await engine.open()
        f = await engine.open(bucket, "k", block_size=BLOCK)
        await engine.aclose()
        sent = len(proxy.requests)
        with pytest.raises(RuntimeError, match="Engine is closed"):
            await f.read_at(8 * BLOCK, 5)
        assert len(proxy.requests) == sent


async def test_open_takes_a_bucket_and_a_key_or_neither(engine: asyncdl.Engine) -> None:
    with pytest.raises(TypeError, match="a bucket and a key, or neither"):
        engine.open("my-bucket")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="a bucket and a key, or neither"):
        engine.open(key="k")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="go with a bucket and a key"):
        engine.open(block_size=5)  # type: ignore[call-overload]


async def test_seek_refuses_what_a_file_refuses(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    f = await engine.open(bucket, "k", block_size=BLOCK)
    f.seek(5)
    for whence in (True, 1.0):
        with pytest.raises(asyncdl.InvalidRequestError, match="whence"):
            f.seek(3, whence)  # type: ignore[arg-type]
    assert f.tell() == 5
    sync = f.sync()
    for offset in (1.5, "2"):
        with pytest.raises(TypeError):
            sync.seek(offset)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sync.seek(0, 1.0)  # type: ignore[arg-type]
    assert sync.seek(2, io.SEEK_SET) == 2


async def test_closing_while_a_read_is_in_flight_leaves_nothing_cached(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    f = await engine.open(bucket, "k", block_size=BLOCK)
    proxy.rule = lambda r: None
    read = asyncio.create_task(f.read_at(6 * BLOCK, 10))
    await asyncio.sleep(0)  # the read has taken the lock and sent its GET
    await f.aclose()
    assert len(await read) == 10
    assert f._cache == {}
