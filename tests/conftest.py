"""Fixtures: one moto S3 server per session, a fresh proxy and bucket per test."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from _pytest import nodes
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.config import Config

import asyncdl
from asyncdl._files.writer import is_temp_file
from asyncdl.testing.moto_server import FAKE_ENV, moto_server
from asyncdl.testing.tcp_proxy import RequestRecord, TcpProxy

CHUNK = 64 * 1024
_bucket_numbers = itertools.count()

#: The event loop the tests run on: ``asyncio`` (the default) or ``uvloop``
#: (``nox -s tests_uvloop``), which uvicorn runs whenever it is installed.
TEST_LOOP = os.environ.get("ASYNCDL_TEST_LOOP", "asyncio")

if TEST_LOOP == "uvloop":
    import uvloop

    def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Any:
        return {"uvloop": uvloop.new_event_loop}

elif TEST_LOOP != "asyncio":
    raise pytest.UsageError(f"ASYNCDL_TEST_LOOP must be asyncio or uvloop, not {TEST_LOOP!r}")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (the nox sessions), give each test marked
    ``xdist_group(NAME)`` the node id ``...@NAME`` by which xdist keeps a group on one
    worker. xdist does it itself by setting ``item._nodeid``, which pytest 9.2 no longer
    reads (a node's id is ``item._id``): its groups were then split over the workers,
    and a group's module fixtures (the Dask cluster, its 5,000 objects) made on each
    (pytest-dev/pytest-xdist#1386; drop this once xdist sets the id pytest reads)."""
    if not config.getoption("loadgroup", default=False):
        return
    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        suffix = "@" + "_".join(names)
        if not names or item.nodeid.endswith(suffix):  # xdist's own renaming held
            continue
        item._id = nodes.coerce_node_id(item.nodeid + suffix)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def s3(s3_endpoint: str) -> Any:
    """A synchronous client straight to moto, for seeding and inspecting objects."""
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


@pytest.fixture(scope="session")
def s3_without_checksums(s3_endpoint: str) -> Any:
    """A client that stores objects with no checksum: boto3 adds a CRC32 to every put
    unless told it is needed only when required."""
    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        config=Config(request_checksum_calculation="when_required"),
    )


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"test-bucket-{next(_bucket_numbers)}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def proxy(s3_endpoint: str) -> Iterator[TcpProxy]:
    """A proxy in front of moto that records every request the engine sends."""
    with TcpProxy.for_url(s3_endpoint) as running:
        yield running


def make_client(endpoint: str, **config: Any) -> Any:
    return get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=AioConfig(
            retries={"total_max_attempts": 1},
            **{"response_checksum_validation": "when_required", **config},
        ),
    )


@pytest.fixture
async def client(proxy: TcpProxy) -> AsyncIterator[Any]:
    async with make_client(proxy.url) as made:
        yield made


@pytest.fixture
def config() -> asyncdl.TransferConfig:
    return asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01)


@pytest.fixture
async def engine(client: Any, config: asyncdl.TransferConfig) -> AsyncIterator[asyncdl.Engine]:
    async with asyncdl.Engine(client, config=config) as opened:
        yield opened


def gets(proxy: TcpProxy) -> list[RequestRecord]:
    """The GETs the proxy saw, in order."""
    return [r for r in proxy.requests if r.method == "GET"]


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic random bytes: a misplaced or repeated part shows up as a mismatch."""
    return random.Random(f"{seed}-{size}").randbytes(size)


def temp_files(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if is_temp_file(name)]


async def gone_within_a_second(directory: Path) -> None:
    """A file operation already running in a worker thread when the download was
    cancelled finishes first (its descriptor is never closed under it); the temp file
    goes right after, well within the one second the engine promises."""
    for _ in range(100):
        if not temp_files(directory):
            return
        await asyncio.sleep(0.01)
    assert temp_files(directory) == []


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials and a region in the environment, for an engine against a scripted
    server (it signs, but nothing checks the signature)."""
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
