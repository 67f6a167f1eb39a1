"""What ``Engine(client)`` accepts: an opened aiobotocore S3 client. The mistakes made
with it (boto3's client, another service's, the unopened ``create_client``, an
endpoint's URL in its place) are a ``ValueError`` at once that says what was passed,
not a failure at the first download after requests went out."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock, MagicMock, Mock, NonCallableMagicMock

import boto3
import pytest
from aiobotocore.session import get_session

import asyncdl
from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import make_client


def test_a_boto3_client_is_refused(proxy: TcpProxy) -> None:
    synchronous = boto3.client("s3", endpoint_url=proxy.url, region_name="us-east-1")
    with pytest.raises(ValueError, match=r"aiobotocore S3 client.*synchronous"):
        asyncdl.Engine(synchronous)
    assert proxy.requests == []


async def test_another_service_s_client_is_refused() -> None:
    session = get_session()
    async with session.create_client("sqs", region_name="us-east-1") as sqs:
        with pytest.raises(ValueError, match=r"aiobotocore S3 client.*'sqs'"):
            asyncdl.Engine(sqs)


async def test_the_unopened_create_client_is_refused(proxy: TcpProxy) -> None:
    unopened = make_client(proxy.url)
    with pytest.raises(ValueError, match="not opened: 'async with"):
        asyncdl.Engine(unopened)
    async with unopened:  # what was meant
        pass


@pytest.mark.parametrize("given", ["https://s3.example.com", b"bucket", 3])
def test_a_value_in_the_client_s_place_is_refused(given: Any) -> None:
    with pytest.raises(ValueError, match=f"aiobotocore S3 client, got {type(given).__name__}"):
        asyncdl.Engine(given)


def test_a_path_in_the_client_s_place_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="aiobotocore S3 client, got path"):
        asyncdl.Engine(tmp_path)
    with os.scandir(Path(__file__).parent) as entries, pytest.raises(ValueError, match="got path"):
        asyncdl.Engine(next(entries))


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: boto3.resource("s3", region_name="us-east-1"), "a boto3 resource"),
        (lambda: boto3.Session(region_name="us-east-1"), "a session, not a client"),
        (get_session, "a session, not a client"),
    ],
    ids=["boto3-resource", "boto3-session", "aiobotocore-session"],
)
def test_a_session_or_resource_in_the_client_s_place_is_refused(make: Any, named: str) -> None:
    # Each has a client to give, and none is one: the first download would fail with
    # an AttributeError after the engine had started.
    with pytest.raises(ValueError, match=f"aiobotocore S3 client, got {named}"):
        asyncdl.Engine(make())


@pytest.mark.parametrize("make", [MagicMock, AsyncMock, NonCallableMagicMock, Mock])
def test_a_mock_in_the_client_s_place_is_taken(make: Any) -> None:
    # A test's stand-in: a MagicMock also speaks os.PathLike (__fspath__), and is no
    # path for that.
    asyncdl.Engine(make())


async def test_an_opened_aiobotocore_s3_client_is_taken(proxy: TcpProxy) -> None:
    async with make_client(proxy.url) as client, asyncdl.Engine(client) as engine:
        assert engine.client is client


class Wrapped:
    """A wrapper that hands every attribute on to the client it holds (as tracing and
    metrics wrappers do): not an aiobotocore client by type, one by behaviour."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


async def test_a_wrapped_client_is_taken(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    async with make_client(proxy.url) as client, asyncdl.Engine(Wrapped(client)) as engine:
        await engine.download(bucket, "k", tmp_path / "k")
    assert (tmp_path / "k").read_bytes() == b"data"
