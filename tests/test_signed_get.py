"""The lean GET path sends what get_object would, and hands back what it cannot do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy

from .conftest import CHUNK, make_client, payload

KEYS = [
    "plain.txt",
    "dir/sub dir/with space.bin",
    "unicode/ünïcödé-日本.txt",
    "chars/a+b=c&d;e,f@g$h'i(j)k*l!m~n%o#p",
    "slashes//double/and/trailing./x",
    "-leading-dash",
]
# Per request, or signed per request: the rest must match get_object's to the byte.
VOLATILE = {"authorization", "x-amz-date", "amz-sdk-invocation-id", "user-agent"}


def comparable(request: RequestRecord) -> tuple[str, str, dict[str, str]]:
    headers = {k: v for k, v in request.headers.items() if k not in VOLATILE}
    return request.method, request.path, headers


async def run(
    proxy: TcpProxy, bucket: str, key: str, path: Path, lean: bool, **kwargs: Any
) -> list[tuple[str, str, dict[str, str]]]:
    proxy.reset_stats()
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=lean)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        result = await engine.download(bucket, key, path, **kwargs)
    assert result.requests == len(proxy.requests)
    return [comparable(r) for r in proxy.requests]


@pytest.mark.parametrize("key", KEYS)
async def test_lean_requests_match_get_object(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, key: str
) -> None:
    data = payload(2 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    lean = await run(proxy, bucket, key, tmp_path / "lean", lean=True)
    slow = await run(proxy, bucket, key, tmp_path / "slow", lean=False)
    assert (tmp_path / "lean").read_bytes() == (tmp_path / "slow").read_bytes() == data
    assert len(lean) == 3
    assert lean == slow


async def test_lean_requests_match_with_every_argument(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    sse = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": os.urandom(32).decode("latin-1")}
    version = s3.put_object(Bucket=bucket, Key="k", Body=payload(CHUNK + 9), **sse)["VersionId"]
    extra = {**sse, "VersionId": version, "RequestPayer": "requester"}
    extra["ExpectedBucketOwner"] = "123456789012"
    lean = await run(proxy, bucket, "k", tmp_path / "lean", lean=True, extra_args=extra)
    slow = await run(proxy, bucket, "k", tmp_path / "slow", lean=False, extra_args=extra)
    assert lean == slow
    assert len(lean) == 2


async def test_errors_through_the_lean_path(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    config = asyncdl.TransferConfig(chunk_size=CHUNK, lean_get=True)
    async with make_client(proxy.url) as client, asyncdl.Engine(client, config=config) as engine:
        with pytest.raises(asyncdl.ObjectNotFoundError, match="NoSuchKey"):
            await engine.download(bucket, "missing", tmp_path / "m")
        s3.put_object(Bucket=bucket, Key="empty", Body=b"")
        result = await engine.download(bucket, "empty", tmp_path / "e")
    assert (result.size, result.requests) == (0, 1)  # the 416's ActualObjectSize was read
    assert not (tmp_path / "m").exists()
