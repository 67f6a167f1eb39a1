"""Failures injected by the TCP proxy: errors mapped, retries that resume."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import gc
import logging
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, gone_within_a_second, payload, temp_files


@pytest.mark.parametrize("strategy", ["get-first", "head-first"])
@pytest.mark.parametrize("code", ["AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"])
async def test_403_is_access_denied_and_not_retried(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    strategy: str,
    code: str,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    proxy.rule = lambda r: Fault(status=403, error_code=code)
    with pytest.raises(asyncdl.AccessDeniedError) as caught:
        await engine.download(bucket, "k", tmp_path / "k", strategy=strategy)
    assert isinstance(caught.value.__cause__, botocore.exceptions.ClientError)
    assert len(proxy.requests) == 1
    assert os.listdir(tmp_path) == []


async def test_503_is_retried(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(2 * CHUNK + 3)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    seen: set[str | None] = set()

    def once_each(request: RequestRecord) -> Fault | None:
        if request.range in seen:
            return None
        seen.add(request.range)
        return Fault(status=503, error_code="SlowDown")

    proxy.rule = once_each
    result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    # Three ranged GETs and the checksum HEAD (no Range): each answered 503 once.
    assert result.requests == len(proxy.requests) == 8


async def test_cut_stream_resumes_from_the_cut(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut = 10_000
    originals = {f"bytes={i * CHUNK}-{(i + 1) * CHUNK - 1}" for i in range(3)}
    cut_once: set[str] = set()

    def cut_each_part_once(request: RequestRecord) -> Fault | None:
        if request.range in originals and request.range not in cut_once:
            cut_once.add(request.range)
            # The cut reaches the client a moment after the bytes (a stall, then the
            # close): cuts that reach it at once are test_first_range_resume's.
            return Fault(cut_after=cut, stall=0.3)
        return None

    proxy.rule = cut_each_part_once
    result = await engine.download(bucket, "k", tmp_path / "k")

    assert (tmp_path / "k").read_bytes() == data
    ranges = [r.range for r in proxy.requests]
    for i in range(3):
        assert f"bytes={i * CHUNK + cut}-{(i + 1) * CHUNK - 1}" in ranges
    # Three parts, each resumed once, and the HEAD that brings the checksum.
    assert result.requests == len(proxy.requests) == 6 + 1
    assert result.verified
    etag = s3.head_object(Bucket=bucket, Key="k")["ETag"]
    assert all(r.headers["if-match"] == etag for r in proxy.requests[1:])


async def test_retries_exhausted(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(2 * CHUNK))
    target = tmp_path / "k"
    target.write_bytes(b"old")
    proxy.rule = lambda r: Fault(cut_after=100) if r.range != "bytes=0-65535" else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_attempts=3, backoff_base=0.001)
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.DownloadError, match="after 3 attempts") as caught:
            await engine.download(bucket, "k", target)
    assert type(caught.value) is asyncdl.DownloadError
    assert temp_files(tmp_path) == []
    assert target.read_bytes() == b"old"


@pytest.mark.parametrize("strategy", ["get-first", "head-first"])
async def test_cut_single_response_object_resumes(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, strategy: str
) -> None:
    # Small enough for the one-hop writer: the resumed write must still land right.
    data = payload(50_000)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut_once: list[RequestRecord] = []

    def cut_first_get(request: RequestRecord) -> Fault | None:
        if request.method == "GET" and not cut_once:
            cut_once.append(request)
            return Fault(cut_after=10_000, stall=0.3)
        return None

    proxy.rule = cut_first_get
    result = await engine.download(bucket, "k", tmp_path / "k", strategy=strategy)
    assert (tmp_path / "k").read_bytes() == data
    gets = [r for r in proxy.requests if r.method == "GET"]
    assert [r.range for r in gets][-1] == "bytes=10000-49999"
    assert result.requests == len(proxy.requests)
    assert temp_files(tmp_path) == []


async def test_stalled_part_is_retried_after_read_timeout(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(3 * CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    stalled: list[str] = []
    part = f"bytes={CHUNK}-{2 * CHUNK - 1}"

    def stall_part_once(request: RequestRecord) -> Fault | None:
        if request.range == part and not stalled:
            stalled.append(part)
            return Fault(cut_after=1000, stall=30)  # far longer than the read timeout
        return None

    proxy.rule = stall_part_once
    config = asyncdl.TransferConfig(chunk_size=CHUNK, read_timeout=0.5, backoff_base=0.01)
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert f"bytes={CHUNK + 1000}-{2 * CHUNK - 1}" in [r.range for r in proxy.requests]
    assert result.requests == 4 + 1  # and the checksum HEAD


async def test_connection_reset_on_accept_is_retried(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"hello")
    resets: list[int] = []

    def reset_twice(request: RequestRecord) -> Fault | None:
        if len(resets) < 2:
            resets.append(1)
            return Fault(reset=True)
        return None

    proxy.rule = reset_twice
    result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == b"hello"
    assert len(proxy.requests) == 3
    # aiohttp resends once, unseen, when a reused keep-alive connection turns out dead.
    assert result.requests in (2, 3)


async def test_503_storm_during_a_bulk_download(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {f"o{i}": payload(200 + i, seed=i) for i in range(500)}
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()
            )
        )
    chance = random.Random(30)
    proxy.rule = lambda r: (
        Fault(status=503, error_code="SlowDown") if chance.random() < 0.3 else None
    )
    config = asyncdl.TransferConfig(
        chunk_size=CHUNK, max_concurrency=32, max_attempts=10, backoff_base=0.005, backoff_max=0.05
    )
    items = [(bucket, key, tmp_path / key) for key in objects]
    async with asyncdl.Engine(client, config=config) as engine:
        results = [r async for r in engine.download_many(items)]
    assert all(r.ok for r in results), [str(r.error) for r in results if r.error][:3]
    assert all((tmp_path / key).read_bytes() == data for key, data in objects.items())
    assert len(proxy.requests) > 600  # the storm happened
    assert sum(r.requests for r in results) == len(proxy.requests)


async def test_overall_timeout(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(4 * CHUNK))
    target = tmp_path / "k"
    target.write_bytes(b"old")
    proxy.rule = lambda r: (
        Fault(delay=1.0) if r.range and not r.range.startswith("bytes=0-") else None
    )
    with pytest.raises(asyncdl.DownloadError, match=r"did not finish within 0\.3s"):
        await engine.download(bucket, "k", target, timeout=0.3)
    assert temp_files(tmp_path) == []
    assert target.read_bytes() == b"old"
    with pytest.raises(ValueError, match="timeout"):
        await engine.download(bucket, "k", target, timeout=0)


async def test_cancellation_at_random_points(
    client: Any, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    data = payload(8 * CHUNK + 3)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rtt = 0.005
    chance = random.Random(50)
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=3)
    target = tmp_path / "k"
    async with asyncdl.Engine(client, config=config) as engine:
        for _ in range(50):
            task = asyncio.create_task(engine.download(bucket, "k", target))
            await asyncio.sleep(chance.uniform(0, 0.12))
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            # A cancel that lands during the final rename may let it finish: the target
            # is then whole. It is never partial.
            if target.exists():
                assert target.read_bytes() == data
                target.unlink()
            await gone_within_a_second(tmp_path)
    gc.collect()  # an unclosed connection or file would warn here, and warnings are errors


@pytest.mark.parametrize("where", ["posix_fallocate", "pwritev"])
async def test_disk_full_removes_the_temp_file_and_is_not_retried(
    engine: asyncdl.Engine,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(3 * CHUNK))
    target = tmp_path / "k"
    target.write_bytes(b"old")

    def full(*args: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, where, full)
    with pytest.raises(asyncdl.DownloadError, match="No space left on device"):
        await engine.download(bucket, "k", target)
    monkeypatch.undo()
    assert temp_files(tmp_path) == []
    assert target.read_bytes() == b"old"
    # One try per request: the first GET (and, when the disk fills mid-write, the
    # parts already started, and the checksum HEAD), never a retry of a write.
    assert len([r for r in proxy.requests if r.method == "GET"]) <= 3


async def test_retries_are_logged_without_secrets(
    client: Any,
    s3: Any,
    bucket: str,
    proxy: TcpProxy,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = os.urandom(32).decode("latin-1")
    sse = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": secret}
    s3.put_object(Bucket=bucket, Key="k", Body=b"data", **sse)
    failures = [Fault(status=503, error_code="SlowDown")]
    proxy.rule = lambda r: failures.pop() if failures else None
    caplog.set_level(logging.INFO, logger="asyncdl")
    config = asyncdl.TransferConfig(chunk_size=CHUNK, backoff_base=0.001)
    async with asyncdl.Engine(client, config=config) as engine:
        await engine.download(bucket, "k", tmp_path / "k", extra_args=sse)
        with pytest.raises(asyncdl.ObjectNotFoundError) as caught:
            await engine.download(bucket, "nope", tmp_path / "n", extra_args=sse)
    retry_lines = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retry_lines) == 1
    assert f"s3://{bucket}/k" in retry_lines[0]
    assert "attempt 2 of 5" in retry_lines[0]
    assert "SlowDown" in retry_lines[0]
    encoded = base64.b64encode(secret.encode("latin-1")).decode()
    request = asyncdl.DownloadRequest(bucket, "k", "p", extra_args=sse)
    for text in [*(r.getMessage() for r in caplog.records), str(caught.value), repr(request)]:
        assert secret not in text
        assert encoded not in text
    assert "'SSECustomerKey': '***'" in repr(request)


async def test_whole_object_from_a_server_ignoring_range_resumes_after_a_cut(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # The server answers every GET with the whole object; the first one is cut: the
    # retry asks for the rest, gets the whole object again and reads past what it has.
    data = payload(3 * CHUNK + 7)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    cut: list[RequestRecord] = []

    def rule(request: RequestRecord) -> Fault:
        if not cut:
            cut.append(request)
            return Fault(headers={"range": None}, cut_after=CHUNK + 100, stall=0.3)
        return Fault(headers={"range": None})

    proxy.rule = rule
    result = await engine.download(bucket, "k", tmp_path / "k", strategy="get-first")
    assert (tmp_path / "k").read_bytes() == data
    assert result.requests == len(proxy.requests) == 2
    assert proxy.requests[1].range == f"bytes={CHUNK + 100}-{len(data) - 1}"


async def test_attempts_start_again_after_progress(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    # Every answer is cut after 20,000 bytes: each attempt moves a good share of the part,
    # so four cuts in a row do not exhaust three attempts.
    data = payload(CHUNK)
    s3.put_object(Bucket=bucket, Key="k", Body=data)
    proxy.rule = lambda r: Fault(cut_after=20_000, stall=0.3) if r.method == "GET" else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_attempts=3, backoff_base=0.01)
    async with asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == data
    assert result.requests == 4


async def test_a_link_that_cuts_every_few_bytes_still_ends(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=payload(CHUNK))
    proxy.rule = lambda r: Fault(cut_after=100, stall=0.3) if r.method == "GET" else None
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_attempts=3, backoff_base=0.01)
    async with asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.DownloadError, match="after 3 attempts"):
            await engine.download(bucket, "k", tmp_path / "k")
    assert len(proxy.requests) == 3
    assert os.listdir(tmp_path) == []
