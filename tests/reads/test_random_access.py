"""engine.open_reader(bucket, key): the random-access reader and its SyncReader, against moto
through the proxy, counting requests there; a real ZIP and a real Parquet file."""

from __future__ import annotations

import asyncio
import gc
import io
import threading
import zipfile
from collections.abc import AsyncIterator, Coroutine
from typing import Any, assert_type

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, gets, make_client, payload

KiB = 1024
BLOCK = 4 * KiB


async def test_open_is_one_get_of_the_first_block_then_reads_are_pinned(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(20 * BLOCK + 5)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    f = await engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=8)
    assert (f.size, f.etag, f.tell()) == (len(data), etag, 0)
    assert [r.range for r in proxy.requests] == [f"bytes=0-{BLOCK - 1}"]
    assert await f.read(10) == data[:10]  # from the cache: no request
    assert len(proxy.requests) == 1
    f.seek(-7, 2)
    assert await f.read() == data[-7:]
    assert await f.read() == b""
    f.seek(5 * BLOCK + 3)
    assert await f.read(2 * BLOCK) == data[5 * BLOCK + 3 : 7 * BLOCK + 3]
    assert f.tell() == 7 * BLOCK + 3
    assert len(proxy.requests) == 3
    assert all(r.headers.get("if-match") == etag for r in proxy.requests[1:])
    assert all(r.method == "GET" for r in proxy.requests)  # no HEAD
    await f.aclose()
    with pytest.raises(ValueError, match="closed"):
        await f.read(1)


async def test_sequential_reads_fetch_ahead(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(64 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=16) as f:
        got = b""
        while piece := await f.read(BLOCK):
            got += piece
    assert got == data
    # One block per GET would be 64; read-ahead joins the blocks of each refill.
    assert len(gets(proxy)) <= 12


async def test_readinto_and_the_cache_is_bounded(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(10 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        buffer = bytearray(3 * BLOCK)
        f.seek(4 * BLOCK + 1)
        assert await f.readinto(buffer) == 3 * BLOCK  # more blocks than the cache holds
        assert bytes(buffer) == data[4 * BLOCK + 1 : 7 * BLOCK + 1]
        assert len(f._blocks.cache) == 2
        assert await f.read_at(1, 3) == data[1:4]
        assert f.tell() == 7 * BLOCK + 1


async def test_long_reads_are_whole_and_keep_their_last_block(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """A read across many blocks none of which is cached (pyarrow's tens of MiB) is
    copied once from the GETs' bytes: right however its GETs were cut and resumed, and
    the cache keeps its last block and those read ahead, which the next read takes."""
    data = payload(40 * BLOCK + 9)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    # The first GET of each long read cut after 1000 bytes: its piece resumes there.
    cut = {f"bytes={3 * BLOCK + 5}-", f"bytes={20 * BLOCK}-"}

    def cut_once(r: Any) -> Fault | None:
        for start in list(cut):
            if (r.range or "").startswith(start):
                cut.discard(start)
                return Fault(cut_after=1000)
        return None

    proxy.rule = cut_once
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=8) as f:
        f.seek(3 * BLOCK + 5)
        assert await f.read(6 * BLOCK) == data[3 * BLOCK + 5 : 9 * BLOCK + 5]
        assert sorted(f._blocks.cache) == [0, 9]
        asked = len(gets(proxy))
        assert await f.read(BLOCK - 5) == data[9 * BLOCK + 5 : 10 * BLOCK]
        # Sequential: the read-ahead of the next block goes out, nothing of this one.
        assert [r.range for r in gets(proxy)[asked:]] == [f"bytes={10 * BLOCK}-{11 * BLOCK - 1}"]
        # Block-aligned, then to the end, past the cache's size.
        f.seek(20 * BLOCK)
        assert await f.read(12 * BLOCK) == data[20 * BLOCK : 32 * BLOCK]
        assert await f.read() == data[32 * BLOCK :]
        assert await f.read_at(11 * BLOCK - 3, 4 * BLOCK) == data[11 * BLOCK - 3 : 15 * BLOCK - 3]
    assert not cut  # both were cut
    assert all(r.headers.get("if-match") for r in gets(proxy)[1:])


async def test_a_long_sequential_scan_fetches_the_next_read_meanwhile(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """Long reads one after the other (pyarrow's): each sends the GET of as much again
    after it, pinned, which the next read takes instead of asking; a read elsewhere
    drops it; closing cancels it."""
    data = payload(64 * BLOCK + 100)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        assert await f.read(5 * BLOCK) == data[: 5 * BLOCK]
        start = len(gets(proxy))
        # Sequential: the read asks its own bytes and the next 5 blocks'.
        assert await f.read(5 * BLOCK) == data[5 * BLOCK : 10 * BLOCK]
        for _ in range(50):
            if len(gets(proxy)) - start == 2:
                break
            await asyncio.sleep(0.01)
        assert [r.range for r in gets(proxy)[start:]] == [
            f"bytes={5 * BLOCK}-{10 * BLOCK - 1}",
            f"bytes={10 * BLOCK}-{15 * BLOCK - 1}",
        ]
        # The next read takes those, and sends the one after.
        assert await f.read(5 * BLOCK) == data[10 * BLOCK : 15 * BLOCK]
        assert await f.read(5 * BLOCK) == data[15 * BLOCK : 20 * BLOCK]
        ranges = [r.range for r in gets(proxy)[start:]]
        assert ranges.count(f"bytes={10 * BLOCK}-{15 * BLOCK - 1}") == 1
        assert ranges.count(f"bytes={15 * BLOCK}-{20 * BLOCK - 1}") == 1
        # Elsewhere: read as asked, the bytes fetched ahead dropped.
        assert await f.read_at(40 * BLOCK + 7, 4 * BLOCK) == data[40 * BLOCK + 7 : 44 * BLOCK + 7]
        # Up to the end, which nothing is fetched past.
        f.seek(44 * BLOCK + 7)
        while piece := await f.read(7 * BLOCK):
            assert piece == data[f.tell() - len(piece) : f.tell()]
        assert f.tell() == len(data)
        # The object replaced mid-scan: bytes fetched ahead before are of the version
        # the reader is pinned to; those asked for after are refused, never mixed in.
        f.seek(0)
        assert await f.read(3 * BLOCK) == data[: 3 * BLOCK]
        assert await f.read(3 * BLOCK) == data[3 * BLOCK : 6 * BLOCK]
        assert f._blocks.pending is not None
        await f._blocks.pending.task
        s3.put_object(Bucket=bucket, Key="k", Body=payload(64 * BLOCK + 100, seed=5))
        assert await f.read(3 * BLOCK) == data[6 * BLOCK : 9 * BLOCK]
        with pytest.raises(asyncdl.ObjectChangedError):
            await f.read(3 * BLOCK)
    assert all(r.headers.get("if-match") == etag for r in gets(proxy)[1:])
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    # Closed while the bytes after a read are on their way: their GET is cancelled.
    proxy.rule = lambda r: (
        Fault(delay=5) if r.range == f"bytes={6 * BLOCK}-{9 * BLOCK - 1}" else None
    )
    async with engine.open_reader(bucket, "k", block_size=BLOCK, cache_blocks=2) as f:
        await f.read(3 * BLOCK)
        await f.read(3 * BLOCK)
        assert f._blocks.pending is not None
        ahead = f._blocks.pending.task
    await asyncio.wait([ahead], timeout=2)  # a GET delayed 5 s: done only if cancelled
    assert ahead.cancelled()


async def test_an_object_replaced_between_reads_is_object_changed(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(8 * BLOCK, seed=1))
    async with engine.open_reader(bucket, "k", block_size=BLOCK) as f:
        s3.put_object(Bucket=bucket, Key="k", Body=payload(8 * BLOCK, seed=2))
        f.seek(5 * BLOCK)
        with pytest.raises(asyncdl.ObjectChangedError):
            await f.read(10)
    assert proxy.requests[-1].headers.get("if-match") is not None


async def test_small_and_empty_objects(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="small", Body=b"hello")
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    async with engine.open_reader(bucket, "small") as f:
        assert (f.size, await f.read(), await f.read()) == (5, b"hello", b"")
    async with engine.open_reader(bucket, "empty") as f:
        assert (f.size, await f.read()) == (0, b"")
    with pytest.raises(asyncdl.ObjectNotFoundError):
        await engine.open_reader(bucket, "missing")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"block_size": 0}, "block_size"),
        ({"block_size": True}, "block_size"),
        ({"block_size": 2 * CHUNK}, "block_size"),
        ({"cache_blocks": 0}, "cache_blocks"),
        ({"cache_blocks": 1.0}, "cache_blocks"),
        ({"extra_args": {"Range": "x"}}, "Range"),
    ],
)
async def test_hostile_arguments_send_nothing(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(asyncdl.InvalidRequestError, match=match):
        engine.open_reader(bucket, "k", **kwargs)
    assert proxy.requests == []


async def test_hostile_seeks_and_reads(engine: asyncdl.Engine, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    async with engine.open_reader(bucket, "k") as f:
        for offset, whence in [(-1, 0), (-11, 2), (1.5, 0), (True, 0), (0, 3)]:
            with pytest.raises(ValueError, match=r"offset|whence|seek"):
                f.seek(offset, whence)  # type: ignore[arg-type]
        for offset, n in [(-1, 1), (True, 1), (0, 1.5), (0, False)]:
            with pytest.raises(ValueError, match="offset must be"):
                await f.read_at(offset, n)  # type: ignore[arg-type]
        f.seek(100)
        assert await f.read() == b""


async def test_engine_open_opens_the_engine_and_open_reader_the_object(
    client: Any, bucket: str, s3: Any
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"abc")
    engine = asyncdl.Engine(client)
    # One meaning per name (mypy --strict checks the tests): open() is the engine's.
    opening = assert_type(engine.open(), Coroutine[Any, Any, None])
    assert asyncio.iscoroutine(opening)
    await opening
    await engine.open()  # idempotent
    assert engine.client is client
    with pytest.raises(TypeError):
        engine.open(bucket, "k")  # type: ignore[call-arg,unused-coroutine]
    reader = engine.open_reader(bucket, "k")
    assert_type(reader, asyncdl.RandomAccessReader)
    assert_type(await reader, asyncdl.RandomAccessReader)
    try:
        assert await engine.read_ranges(bucket, "k", [(1, 3)]) == [b"bc"]
    finally:
        await engine.aclose()


async def test_a_server_without_etags_cannot_pin_a_reader(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(3 * BLOCK))
    proxy.rule = lambda r: Fault(response_headers={"etag": None})
    with pytest.raises(asyncdl.DownloadError, match="no strong ETag"):
        await engine.open_reader(bucket, "k", block_size=BLOCK)
    async with engine.open_reader(bucket, "k") as f:  # one block holds it all: nothing to pin
        assert f.etag is None
        assert len(await f.read()) == 3 * BLOCK


async def test_open_reader_url(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(5 * BLOCK)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=data)["ETag"]
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    async with engine.open_reader_url(
        url.replace(s3.meta.endpoint_url, proxy.url), block_size=BLOCK
    ) as f:
        f.seek(3 * BLOCK)
        assert await f.read(5) == data[3 * BLOCK : 3 * BLOCK + 5]
    assert proxy.requests[-1].headers.get("if-match") == etag


# -- no slot is held between reads, nor after a reader is dropped or cancelled --

BUDGET = 2


@pytest.fixture
async def small_engine(proxy: TcpProxy) -> AsyncIterator[asyncdl.Engine]:
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=BUDGET)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        yield engine


async def test_readers_dropped_unclosed_leak_nothing(
    small_engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    data = payload(4 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with asyncio.timeout(20):  # a leaked slot hangs: fail instead
        for _ in range(3 * BUDGET):
            f = await small_engine.open_reader(bucket, "k", block_size=BLOCK)
            f.seek(2 * CHUNK)
            await f.read(10)
            del f
            gc.collect()
        stats = small_engine.stats()
        assert stats.concurrency_limit == BUDGET
        assert await small_engine.read_ranges(bucket, "k", [(0, 4 * CHUNK)]) == [data]


async def test_a_read_cancelled_midway_leaks_no_slot(
    small_engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    data = payload(8 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    f = await small_engine.open_reader(bucket, "k", block_size=CHUNK)
    proxy.rule = lambda r: Fault(cut_after=100, stall=30)  # every body stalls
    f.seek(4 * CHUNK)
    read = asyncio.create_task(f.read(3 * CHUNK))
    await asyncio.sleep(0.5)
    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
    proxy.rule = None
    async with asyncio.timeout(10):
        assert await small_engine.read_ranges(bucket, "k", [(0, 8 * CHUNK)]) == [data]
        assert await f.read(5) == data[4 * CHUNK : 4 * CHUNK + 5]  # still usable


# -- real files: a ZIP member through zipfile, a Parquet footer and column chunk --


async def test_a_zip_member_through_zipfile_in_a_worker_thread(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    members = {f"file{i}.bin": payload(30 * KiB, seed=i) for i in range(40)}
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as z:
        for name, body in members.items():
            z.writestr(name, body)
    blob = archive.getvalue()  # about 1.2 MiB
    s3.put_object(Bucket=bucket, Key="a.zip", Body=blob)
    async with engine.open_reader(bucket, "a.zip", block_size=64 * KiB) as f:
        raw = f.sync()

        def member() -> bytes:
            with zipfile.ZipFile(io.BufferedReader(raw)) as z:
                return z.read("file17.bin")

        assert await asyncio.to_thread(member) == members["file17.bin"]
        with pytest.raises(RuntimeError, match="would wait for itself"):
            raw.read(1)  # on the loop's thread
    # The first block, the central directory at the end, and the member's block(s):
    # a handful of GETs for a 1.2 MiB archive, never the whole of it.
    requests = gets(proxy)
    assert 3 <= len(requests) <= 5, [r.range for r in requests]
    assert proxy.response_bytes < len(blob) // 3


@pytest.fixture
async def default_engine(client: Any) -> AsyncIterator[asyncdl.Engine]:
    """The default config: GETs of up to 8 MiB."""
    async with asyncdl.Engine(client) as engine:
        yield engine


async def test_a_parquet_footer_and_one_column_chunk(
    default_engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    engine = default_engine
    n = 50_000
    table = pa.table({f"c{i}": pa.array(range(i * n, (i + 1) * n), pa.int64()) for i in range(6)})
    out = io.BytesIO()
    pq.write_table(table, out, compression="none", row_group_size=n)
    blob = out.getvalue()  # 6 columns of ~400 KB
    s3.put_object(Bucket=bucket, Key="t.parquet", Body=blob)
    meta = pq.ParquetFile(io.BytesIO(blob)).metadata
    column = meta.row_group(0).column(3)
    start = column.dictionary_page_offset or column.data_page_offset
    length = column.total_compressed_size
    async with engine.open_reader(bucket, "t.parquet", block_size=64 * KiB) as f:
        # The footer: its length and magic in the last 8 bytes, the metadata before.
        f.seek(-8, 2)
        tail = await f.read(8)
        assert tail[4:] == b"PAR1"
        footer_length = int.from_bytes(tail[:4], "little")
        f.seek(-8 - footer_length, 2)
        footer = await f.read(footer_length)
        assert len(footer) == footer_length
        before = len(gets(proxy))
        f.seek(start)
        chunk = await f.read(length)
    assert chunk == blob[start : start + length]
    # Open (1), the footer (1: its blocks at the end), the column chunk (1: adjacent
    # blocks in one GET).
    assert before == 2
    assert len(gets(proxy)) == 3
    assert all(r.headers.get("if-match") for r in gets(proxy)[1:])
    # And pyarrow itself reads the column through the sync adapter.
    async with engine.open_reader(bucket, "t.parquet", block_size=64 * KiB) as f:
        raw = f.sync()
        read = await asyncio.to_thread(lambda: pq.read_table(raw, columns=["c3"]))
    assert read.column("c3").to_pylist() == table.column("c3").to_pylist()


async def test_sync_reader_in_a_thread_reads_as_a_file(
    engine: asyncdl.Engine, s3: Any, bucket: str
) -> None:
    data = payload(5 * BLOCK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    async with engine.open_reader(bucket, "k", block_size=BLOCK) as f:
        raw = f.sync()

        def use() -> list[Any]:
            assert threading.current_thread() is not threading.main_thread()
            found = [raw.read(3), raw.seek(-2, io.SEEK_END), raw.read(), raw.tell()]
            raw.seek(BLOCK - 1)
            found.append(raw.read(2))
            raw.seek(0)
            found.append(raw.readall())
            return found

        assert await asyncio.to_thread(use) == [
            data[:3],
            len(data) - 2,
            data[-2:],
            len(data),
            data[BLOCK - 1 : BLOCK + 1],
            data,
        ]
        assert f.tell() == 0  # the async reader's own offset is its own
