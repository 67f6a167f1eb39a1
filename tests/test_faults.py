"""Failures injected by the TCP proxy: errors mapped, retries that resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from .conftest import CHUNK, payload, temp_files


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
    assert result.requests == len(proxy.requests) == 6


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
            # Hold the connection open a moment after the cut: aiohttp drops bytes still
            # buffered when it sees the connection end, and the engine can only resume
            # after bytes it has received.
            return Fault(cut_after=cut, stall=0.3)
        return None

    proxy.rule = cut_each_part_once
    result = await engine.download(bucket, "k", tmp_path / "k")

    assert (tmp_path / "k").read_bytes() == data
    ranges = [r.range for r in proxy.requests]
    for i in range(3):
        assert f"bytes={i * CHUNK + cut}-{(i + 1) * CHUNK - 1}" in ranges
    assert result.requests == len(proxy.requests) == 6
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
