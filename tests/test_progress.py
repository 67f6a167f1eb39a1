"""progress=: byte deltas with the total from discovery, rewound when bytes are discarded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from .conftest import CHUNK, make_client, payload


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, delta: int, total: int) -> None:
        self.calls.append((delta, total))

    @property
    def net(self) -> int:
        return sum(delta for delta, _ in self.calls)


async def test_download_progress(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    data = payload(5 * CHUNK + 7)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    seen = Recorder()
    await engine.download(bucket, "k", tmp_path / "k", progress=seen)
    assert seen.net == len(data)
    assert len(seen.calls) > 1
    assert {total for _, total in seen.calls} == {len(data)}
    assert all(delta > 0 for delta, _ in seen.calls)


async def test_async_progress_and_many(
    engine: asyncdl.Engine, s3: Any, bucket: str, tmp_path: Path
) -> None:
    sizes = {f"k{i}": 100 * (i + 1) for i in range(5)}
    for key, size in sizes.items():
        s3.put_object(Bucket=bucket, Key=key, Body=payload(size))
    deltas: list[int] = []

    async def record(delta: int, total: int) -> None:
        deltas.append(delta)

    items = [(bucket, key, tmp_path / key) for key in sizes]
    results = [r async for r in engine.download_many(items, progress=record)]
    assert all(r.ok for r in results)
    assert sum(deltas) == sum(sizes.values())
    deltas.clear()
    listed = tmp_path / "listed"
    listed.mkdir()
    results = [r async for r in engine.download_prefix(bucket, "k", listed, progress=record)]
    assert all(r.ok for r in results)
    assert sum(deltas) == sum(sizes.values())


async def test_progress_is_rewound_when_bytes_are_discarded(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data, ChecksumAlgorithm="CRC32")
    corrupted: list[RequestRecord] = []

    def corrupt_first(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and not corrupted:
            corrupted.append(request)
            return Fault(corrupt_at=10)
        return None

    proxy.rule = corrupt_first
    seen = Recorder()
    config = asyncdl.TransferConfig(chunk_size=CHUNK)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(
            bucket, "k", tmp_path / "k", strategy="head-first", progress=seen
        )
        assert result.verified
        assert min(delta for delta, _ in seen.calls) == -len(data)  # the fresh attempt
        assert seen.net == len(data)
        failed = Recorder()
        proxy.rule = lambda r: (
            Fault(status=403, error_code="AccessDenied", delay=0.5)
            if r.range == f"bytes={2 * CHUNK}-{3 * CHUNK - 1}"
            else None
        )
        with pytest.raises(asyncdl.AccessDeniedError):
            await engine.download(
                bucket, "k", tmp_path / "j", strategy="head-first", progress=failed
            )
        assert max(delta for delta, _ in failed.calls) > 0  # parts were written...
        assert failed.net == 0  # nothing of a failed download was kept


async def test_stream_progress(engine: asyncdl.Engine, s3: Any, bucket: str) -> None:
    data = payload(2 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    seen = Recorder()
    got = b"".join([p async for p in engine.stream(bucket, "k", start=1, progress=seen)])
    assert got == data[1:]
    assert seen.net == len(data) - 1
    assert {total for _, total in seen.calls} == {len(data) - 1}
