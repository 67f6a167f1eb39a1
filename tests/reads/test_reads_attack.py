"""The random-access reader's long reads and the bytes it fetches ahead of them, attacked:
sequential scans whose reads start off a block's start, reads longer than what is fetched
ahead, an engine closed or a reader dropped while bytes are on their way; against moto
through the proxy, counting the bytes each GET asked for."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, gets, make_client, payload

KiB = 1024
BLOCK = 4 * KiB


def asked(proxy: TcpProxy, since: int = 0) -> list[tuple[int, int]]:
    """The ``[start, end)`` each GET after the first ``since`` asked for."""
    found = []
    for r in gets(proxy)[since:]:
        low, _, high = (r.range or "").removeprefix("bytes=").partition("-")
        found.append((int(low), int(high) + 1))
    return found


async def settle(proxy: TcpProxy) -> None:
    """Wait until the GETs sent meanwhile (those fetched ahead) have all gone out."""
    count = -1
    for _ in range(100):
        await asyncio.sleep(0.02)
        if proxy.in_flight == 0 and len(gets(proxy)) == count:
            return
        count = len(gets(proxy))


async def test_a_scan_off_the_blocks_fetches_the_next_read_meanwhile(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """A sequential scan of long reads that do not start at a block's start (a header
    read first, then pyarrow's reads): each read's first block is the one the last
    read kept, and still the next read's bytes are fetched meanwhile, and taken."""
    data = payload(80 * BLOCK + 77)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        assert await f.read(100) == data[:100]
        step = 5 * BLOCK + 37
        assert await f.read(step) == data[100 : 100 + step]
        since = len(gets(proxy))
        at = 100 + step
        assert await f.read(step) == data[at : at + step]
        await settle(proxy)
        at += step
        # The next read's bytes were asked for while this one was read.
        assert any(low <= at and at + step <= high for low, high in asked(proxy, since))
        before = len(gets(proxy))
        assert await f.read(step) == data[at : at + step]
        at += step
        await settle(proxy)
        # Taken, not asked for again: the only GET since is of the read after it.
        assert [low for low, _ in asked(proxy, before)] == [at]
        while piece := await f.read(step):
            assert piece == data[at : at + len(piece)]
            at += len(piece)
        assert at == len(data)


async def test_reads_longer_than_what_is_fetched_ahead_take_it_and_ask_the_rest(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """Reads longer than the most fetched ahead (``PREFETCH_CHUNKS`` chunks): what was
    fetched ahead is the start of the next read, taken; only the rest is asked for, so
    a scan asks each byte once, not the fetched-ahead bytes twice."""
    most = 8 * CHUNK
    step = 3 * most
    data = payload(8 * step + 11)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        at = 0
        while piece := await f.read(step):
            assert piece == data[at : at + len(piece)]
            at += len(piece)
            await settle(proxy)  # the bytes fetched ahead arrive before the next read
        assert at == len(data)
    ranges = sorted(asked(proxy, 1))  # after the opening GET of block 0
    total = sum(high - low for low, high in ranges)
    # Each byte once, but the last block of each read, whose GET goes to the block's end.
    assert total <= len(data) + 8 * BLOCK, (total, len(data))


async def test_an_engine_closed_while_bytes_are_fetched_ahead(
    s3: Any, bucket: str, proxy: TcpProxy, config: asyncdl.TransferConfig
) -> None:
    """Closed while a long read's next bytes are on their way (their GET stalls): the
    GET ends, no warning (an unretrieved exception, a task destroyed pending, an
    unclosed connection) is left behind, and the reader refuses to read on."""
    data = payload(40 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: (
        Fault(cut_after=10, stall=30) if r.range == f"bytes={6 * BLOCK}-{9 * BLOCK - 1}" else None
    )
    engine = await asyncdl.Engine(endpoint_url=proxy.url, config=config).__aenter__()
    f = await engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2)
    assert await f.read(3 * BLOCK) == data[: 3 * BLOCK]
    assert await f.read(3 * BLOCK) == data[3 * BLOCK : 6 * BLOCK]
    assert f._blocks.pending is not None
    ahead = f._blocks.pending.task
    await asyncio.sleep(0.2)
    async with asyncio.timeout(5):
        await engine.aclose()
    async with asyncio.timeout(5):
        await asyncio.wait([ahead])
    with pytest.raises(RuntimeError, match="Engine is closed"):
        await f.read(10)
    del f, ahead
    gc.collect()
    await asyncio.sleep(0.05)


async def test_a_reader_dropped_while_bytes_are_fetched_ahead_leaks_no_slot(
    s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """Readers dropped unclosed, each with a long read's next bytes on their way: the
    budget is whole again once those end, nothing is left pending."""
    data = payload(40 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=2)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        async with asyncio.timeout(20):  # a leaked slot hangs: fail instead
            for _ in range(6):
                f = await engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2)
                await f.read(3 * BLOCK)
                await f.read(3 * BLOCK)
                del f
                gc.collect()
            assert await engine.read_ranges(bucket, "k", [(0, len(data))]) == [data]
            await settle(proxy)
            assert engine.stats().concurrency_limit == 2


def loop_errors() -> list[dict[str, Any]]:
    """What the running loop's exception handler is given from now on (an exception
    never retrieved, a task destroyed pending), recorded instead of logged."""
    found: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: found.append(context))
    return found


async def test_a_read_cancelled_while_it_waits_for_the_bytes_fetched_ahead(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """The read that takes the bytes fetched ahead, cancelled while their GET stalls:
    that GET is cancelled with it, no slot is kept, nothing is left unretrieved, and
    the reader reads on from where it was."""
    errors = loop_errors()
    data = payload(40 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    ahead_range = f"bytes={6 * BLOCK}-{9 * BLOCK - 1}"
    proxy.rule = lambda r: Fault(cut_after=10, stall=30) if r.range == ahead_range else None
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        assert await f.read(3 * BLOCK) == data[: 3 * BLOCK]
        assert await f.read(3 * BLOCK) == data[3 * BLOCK : 6 * BLOCK]
        assert f._blocks.pending is not None
        ahead = f._blocks.pending.task
        read = asyncio.create_task(f.read(3 * BLOCK))
        await asyncio.sleep(0.3)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        async with asyncio.timeout(5):
            await asyncio.wait([ahead])
        assert ahead.cancelled()
        proxy.rule = None
        async with asyncio.timeout(10):
            assert f.tell() == 6 * BLOCK
            assert await f.read(3 * BLOCK) == data[6 * BLOCK : 9 * BLOCK]
            assert await engine.read_ranges(bucket, "k", [(0, len(data))]) == [data]
    await settle(proxy)
    gc.collect()
    await asyncio.sleep(0.05)
    assert errors == []
    assert engine.stats().concurrency_limit == 4


async def test_bytes_fetched_ahead_that_failed_are_asked_for_again(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """The GET of the bytes fetched ahead refused (a 403) or answered with the wrong
    bytes (a Content-Range of other bytes): the read that wanted them asks again, and
    its bytes are right; its own failure shows when asking again fails too."""
    errors = loop_errors()
    data = payload(60 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    faults = {
        f"bytes={6 * BLOCK}-{9 * BLOCK - 1}": [Fault(status=403, error_code="AccessDenied")],
        f"bytes={12 * BLOCK}-{15 * BLOCK - 1}": [
            Fault(response_headers={"content-range": f"bytes 0-{3 * BLOCK - 1}/{len(data)}"})
        ],
        f"bytes={18 * BLOCK}-{21 * BLOCK - 1}": [Fault(status=403, error_code="AccessDenied")] * 2,
    }

    def rule(r: Any) -> Fault | None:
        left = faults.get(r.range or "")
        return left.pop() if left else None

    proxy.rule = rule
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        for at in range(0, 18 * BLOCK, 3 * BLOCK):
            assert await f.read(3 * BLOCK) == data[at : at + 3 * BLOCK]
        with pytest.raises(asyncdl.DownloadError):
            await f.read(3 * BLOCK)
    assert not any(faults.values())
    await settle(proxy)
    gc.collect()
    await asyncio.sleep(0.05)
    assert errors == []


async def test_a_long_scan_holds_its_last_block_and_what_is_fetched_ahead(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    """Memory: between the long reads of a scan the reader holds its last block (of
    each read, at most its cache) and the bytes fetched ahead, however long the
    object; none of the bytes it gave."""
    data = payload(64 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    step = 4 * CHUNK + 100  # off the blocks' starts; fetched ahead whole (8 chunks)
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        at = 0
        while piece := await f.read(step):
            assert piece == data[at : at + len(piece)]
            at += len(piece)
            held = sum(len(kept) for kept in f._blocks.cache.values()) + len(f._first[1])
            pending = f._blocks.pending
            if pending is not None:
                ahead = await pending.task
                held += sum(len(view) for view in ahead.views(pending.start, pending.end))
            assert held <= 3 * BLOCK + step, (held, at)
    assert at == len(data)
