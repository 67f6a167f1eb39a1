"""Habits users bring from boto3: an SSE-C key given as ``bytes`` (``os.urandom(32)``)."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import CHUNK, payload

STRATEGIES = ["get-first", "head-first"]


def sse_c(key: bytes) -> dict[str, str | bytes]:
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}


def assert_every_request_carries(proxy: TcpProxy, key: bytes) -> None:
    assert proxy.requests
    for request in proxy.requests:
        assert request.headers["x-amz-server-side-encryption-customer-algorithm"] == "AES256"
        assert request.headers["x-amz-server-side-encryption-customer-key"] == (
            base64.b64encode(key).decode()
        )
        assert request.headers["x-amz-server-side-encryption-customer-key-md5"] == (
            base64.b64encode(hashlib.md5(key).digest()).decode()
        )


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_download_with_a_bytes_sse_c_key(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, strategy: str
) -> None:
    key = os.urandom(32)
    data = payload(2 * CHUNK + 7)
    s3.put_object(Bucket=bucket, Key="secret", Body=data, **sse_c(key))  # boto3 takes bytes
    result = await engine.download(
        bucket, "secret", tmp_path / "secret", strategy=strategy, extra_args=sse_c(key)
    )
    assert (tmp_path / "secret").read_bytes() == data
    assert result.size == len(data)
    assert result.requests == len(proxy.requests) == 4  # three GETs and a HEAD, either way
    assert_every_request_carries(proxy, key)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_download_many_with_a_bytes_sse_c_key(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, strategy: str
) -> None:
    key, own_key = os.urandom(32), os.urandom(32)
    data = {"a": payload(10), "b": payload(CHUNK + 1), "own": payload(2 * CHUNK)}
    for name, body in data.items():
        s3.put_object(
            Bucket=bucket, Key=name, Body=body, **sse_c(own_key if name == "own" else key)
        )
    items: list[asyncdl.DownloadRequest | tuple[str, str, str | os.PathLike[str]]] = [
        (bucket, "a", tmp_path / "a"),
        (bucket, "b", tmp_path / "b"),
        # An item's own arguments replace the batch's: a different bytes key.
        asyncdl.DownloadRequest(bucket, "own", tmp_path / "own", extra_args=sse_c(own_key)),
    ]
    results = [
        r async for r in engine.download_many(items, strategy=strategy, extra_args=sse_c(key))
    ]
    assert [r.error for r in results] == [None, None, None]
    for name, body in data.items():
        assert (tmp_path / name).read_bytes() == body


async def test_stream_with_a_bytes_sse_c_key(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    key = os.urandom(32)
    data = payload(3 * CHUNK + 1)
    s3.put_object(Bucket=bucket, Key="secret", Body=data, **sse_c(key))
    got = b"".join([p async for p in engine.stream(bucket, "secret", extra_args=sse_c(key))])
    assert got == data
    assert await engine.read_bytes(bucket, "secret", extra_args=sse_c(key)) == data
    assert_every_request_carries(proxy, key)


def test_a_bytes_sse_c_key_is_redacted() -> None:
    key = os.urandom(32)
    request = asyncdl.DownloadRequest("b", "k", "p", extra_args=sse_c(key))
    assert repr(key) not in repr(request)
    assert "'SSECustomerKey': '***'" in repr(request)


BAD_ARGS: dict[str, tuple[dict[str, Any], str]] = {
    "bytes VersionId": ({"VersionId": b"v1"}, "extra_args['VersionId'] must be a string"),
    "bytes algorithm": (
        {"SSECustomerAlgorithm": b"AES256", "SSECustomerKey": b"k" * 32},
        "extra_args['SSECustomerAlgorithm'] must be a string",
    ),
    "bytes key MD5": (
        {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": b"k" * 32, "SSECustomerKeyMD5": b"x"},
        "extra_args['SSECustomerKeyMD5'] must be a string",
    ),
    "empty bytes key": (
        {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": b""},
        "extra_args['SSECustomerKey'] must not be empty",
    ),
    "empty str key": (
        {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": ""},
        "extra_args['SSECustomerKey'] must not be empty",
    ),
    "bytearray key": (
        {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": bytearray(32)},
        "extra_args['SSECustomerKey'] must be a string or bytes",
    ),
}


@pytest.mark.parametrize("case", BAD_ARGS)
async def test_other_bytes_arguments_are_refused_before_anything_is_sent(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, case: str
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    args, message = BAD_ARGS[case]
    with pytest.raises(asyncdl.InvalidRequestError) as refused:
        await engine.download(bucket, "k", tmp_path / "k", extra_args=args)
    assert refused.value.message == message
    with pytest.raises(asyncdl.InvalidRequestError, match=message.replace("[", r"\[")):
        engine.stream(bucket, "k", extra_args=args)
    results = [
        r async for r in engine.download_many([(bucket, "k", tmp_path / "k")], extra_args=args)
    ]
    assert [type(r.error) for r in results] == [asyncdl.InvalidRequestError]
    assert proxy.requests == []
    assert os.listdir(tmp_path) == []
