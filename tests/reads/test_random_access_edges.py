"""The random-access reader at its edges: a stopped loop, a closed engine, the
caller's task after a read, and arguments a file object would refuse."""

from __future__ import annotations

import asyncio
import io
import threading
from typing import Any

import numpy as np
import pytest

import asyncdl
from asyncdl._wire.adaptive import SLOT
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import make_client, payload

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
        held["sync"] = (await engine.open_reader(bucket, "k", block_size=BLOCK)).sync()

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
    f = await engine.open_reader(bucket, "k", block_size=BLOCK)
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
        f = await engine.open_reader(bucket, "k", block_size=BLOCK)
        await engine.aclose()
        sent = len(proxy.requests)
        with pytest.raises(RuntimeError, match="Engine is closed"):
            await f.read_at(8 * BLOCK, 5)
        assert len(proxy.requests) == sent


async def test_open_reader_takes_a_bucket_and_a_key(engine: asyncdl.Engine) -> None:
    with pytest.raises(TypeError, match="key"):
        engine.open_reader("my-bucket")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bucket"):
        engine.open_reader(key="k")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bucket"):
        engine.open_reader(block_size=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        engine.open("my-bucket", "k")  # type: ignore[call-arg,unused-coroutine]


async def test_seek_refuses_what_a_file_refuses(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    f = await engine.open_reader(bucket, "k", block_size=BLOCK)
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
    f = await engine.open_reader(bucket, "k", block_size=BLOCK)
    proxy.rule = lambda r: None
    read = asyncio.create_task(f.read_at(6 * BLOCK, 10))
    await asyncio.sleep(0)  # the read has taken the lock and sent its GET
    await f.aclose()
    assert len(await read) == 10
    assert f._blocks.cache == {}


def test_a_sync_read_whose_loop_ends_under_it_raises_runtime_error(
    s3: Any, bucket: str, proxy: TcpProxy, config: asyncdl.TransferConfig
) -> None:
    """``asyncio.run`` returning cancels what runs on its loop, a thread's read too: the
    thread is told its loop stopped (``RuntimeError``, as documented), not handed a
    ``CancelledError`` it has no task to attribute to."""
    s3.put_object(Bucket=bucket, Key="k", Body=payload(10 * BLOCK))
    outcome: dict[str, BaseException | bytes] = {}
    started = threading.Event()

    def read(sync: io.RawIOBase) -> None:
        started.set()
        try:
            outcome["read"] = sync.read(10)
        except BaseException as exc:
            outcome["read"] = exc

    async def main() -> threading.Thread:
        async with (
            make_client(proxy.url) as client,
            asyncdl.Engine(client, config=config) as engine,
        ):
            reader = await engine.open_reader(
                bucket, "k", size=10 * BLOCK, etag='"x"', block_size=BLOCK
            )
            proxy.rule = lambda r: Fault(delay=5.0)
            worker = threading.Thread(target=read, args=(reader.sync(),), daemon=True)
            worker.start()
            started.wait(10)
            await asyncio.sleep(0.3)  # the read is on the loop, waiting for its answer
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()  # what asyncio.run does to the loop's tasks as it ends
            await asyncio.sleep(0.1)
            return worker

    worker = asyncio.run(main())
    worker.join(10)
    assert not worker.is_alive()
    assert isinstance(outcome["read"], RuntimeError), outcome
    assert "stopped" in str(outcome["read"])


async def test_numpy_offsets_and_counts_are_taken_as_ints(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    """As ``read_ranges`` takes them: a reader's offsets often come out of an array."""
    body = payload(10 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    f = await engine.open_reader(bucket, "k", block_size=BLOCK)
    assert f.seek(np.int64(3)) == 3
    assert type(f.tell()) is int
    assert await f.read(np.int32(5)) == body[3:8]
    assert await f.read_at(np.uint64(2 * BLOCK), np.int64(7)) == body[2 * BLOCK : 2 * BLOCK + 7]
    assert f.seek(np.int8(-2), 1) == 6
    bads: list[Any] = [np.bool_(True), np.float64(1), True, 1.0]
    for bad in bads:
        with pytest.raises(asyncdl.InvalidRequestError):
            f.seek(bad)
        with pytest.raises(asyncdl.InvalidRequestError):
            await f.read(bad)
        with pytest.raises(asyncdl.InvalidRequestError):
            await f.read_at(bad, 1)
    assert f.tell() == 6
