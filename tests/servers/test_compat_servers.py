"""The user-facing calls on two independent S3 servers: moto (Python) and ``rclone serve
s3`` (Go, a code base of its own).

Each test runs on both, through the recording proxy, for the sizes where a download's
plan changes (empty, one byte, either side of a chunk, several chunks) and with both
strategies. Where a server differs from S3, the test that meets the difference names
it (``QUIRKS``); nothing here is skipped for a server.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.config import Config
from click.testing import CliRunner
from fastapi import FastAPI, Request, Response

import asyncdl
from asyncdl.cli import cli
from asyncdl.contrib.fastapi import object_response
from asyncdl.testing.moto_server import FAKE_ENV
from asyncdl.testing.rclone_server import (
    RCLONE_ACCESS_KEY,
    RCLONE_REGION,
    RCLONE_SECRET_KEY,
    rclone_server,
)
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, payload, temp_files

#: Where each server differs from S3, as the tests below meet it.
QUIRKS = {
    "moto": set[str](),
    "rclone": {
        # A ranged GET answered 200 (not 206), with a Content-Range naming exactly the
        # bytes sent.
        "range-answered-200",
        # If-Match is not honoured: a GET pinned to another ETag gets 200 and the bytes.
        "if-match-ignored",
        # A range of an empty object is a 416 without ActualObjectSize.
        "empty-416-without-size",
        # A suffix range longer than the object is refused with 416 (RFC 9110: the
        # whole object).
        "long-suffix-416",
    },
}

SIZES = [0, 1, CHUNK - 1, CHUNK + 1, 3 * CHUNK + 5]
STRATEGIES = ["get-first", "head-first"]
_buckets = itertools.count()


@dataclass
class Store:
    """One S3 server, as the tests reach it."""

    name: str
    endpoint: str
    access_key: str
    secret_key: str
    #: A synchronous client straight to the server, for seeding and inspecting.
    s3: Any

    @property
    def quirks(self) -> set[str]:
        return QUIRKS[self.name]

    def new_bucket(self) -> str:
        name = f"compat-{self.name}-{next(_buckets)}"
        self.s3.create_bucket(Bucket=name)
        return name

    def env(self, endpoint: str) -> dict[str, str]:
        """The environment a command run needs for this server, through ``endpoint``."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": RCLONE_REGION,
            "AWS_ENDPOINT_URL_S3": endpoint,
        }


def _sync_client(endpoint: str, access_key: str, secret_key: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
    )


@pytest.fixture(scope="session")
def rclone_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with rclone_server(tmp_path_factory.mktemp("rclone-root")) as url:
        yield url


@pytest.fixture(scope="session", params=["moto", "rclone"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "moto":
        endpoint: str = request.getfixturevalue("s3_endpoint")
        keys = (FAKE_ENV["AWS_ACCESS_KEY_ID"], FAKE_ENV["AWS_SECRET_ACCESS_KEY"])
    else:
        endpoint = request.getfixturevalue("rclone_endpoint")
        keys = (RCLONE_ACCESS_KEY, RCLONE_SECRET_KEY)
    made = Store(request.param, endpoint, *keys, _sync_client(endpoint, *keys))
    yield made
    # pytest tears a parametrized session fixture down when the tests it runs next
    # want the other server: its client's pooled sockets are closed here, not left to
    # the collector (whose ResourceWarning would fail whichever test it ran in).
    made.s3.close()


@pytest.fixture
def compat_bucket(store: Store) -> str:
    return store.new_bucket()


@pytest.fixture
def store_proxy(store: Store) -> Iterator[TcpProxy]:
    with TcpProxy.for_url(store.endpoint) as running:
        yield running


@pytest.fixture
async def store_engine(store: Store, store_proxy: TcpProxy) -> AsyncIterator[asyncdl.Engine]:
    client = get_session().create_client(
        "s3",
        endpoint_url=store_proxy.url,
        region_name="us-east-1",
        aws_access_key_id=store.access_key,
        aws_secret_access_key=store.secret_key,
        config=AioConfig(
            retries={"total_max_attempts": 1},
            response_checksum_validation="when_required",
            request_checksum_calculation="when_required",
        ),
    )
    async with client as opened:
        config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01)
        async with asyncdl.Engine(opened, config=config) as engine:
            yield engine


def put(store: Store, bucket: str, key: str, size: int, seed: int = 0) -> bytes:
    data = payload(size, seed)
    store.s3.put_object(Bucket=bucket, Key=key, Body=data)
    return data


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# -- the quirks themselves, named --------------------------------------------------------


def test_the_quirks_named_are_the_servers_own(store: Store, compat_bucket: str) -> None:
    """Each quirk the suite names for a server is there (and no other server has it):
    the list is what the server does, not what a test wished."""
    put(store, compat_bucket, "k", 10)
    put(store, compat_bucket, "empty", 0)
    ranged = store.s3.get_object(Bucket=compat_bucket, Key="k", Range="bytes=0-3")
    # Closed, not read: rclone sends the whole object's CRC32 with a range, which boto3
    # would check against the four bytes. Left open, its pooled socket outlived the test
    # (the collector's ResourceWarning then failed whichever test it ran in).
    ranged["Body"].close()
    status = ranged["ResponseMetadata"]["HTTPStatusCode"]
    assert ranged["ContentRange"] == "bytes 0-3/10"
    assert (status == 200) == ("range-answered-200" in store.quirks)
    pinned = _status(store.s3, Bucket=compat_bucket, Key="k", IfMatch='"not-its-etag"')
    assert pinned == (200 if "if-match-ignored" in store.quirks else 412)
    with pytest.raises(store.s3.exceptions.ClientError) as refused:
        store.s3.get_object(Bucket=compat_bucket, Key="empty", Range="bytes=0-9")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    sized = "ActualObjectSize" in refused.value.response["Error"]
    assert sized != ("empty-416-without-size" in store.quirks)
    suffix = _status(store.s3, Bucket=compat_bucket, Key="k", Range="bytes=-100")
    assert suffix == (416 if "long-suffix-416" in store.quirks else 206)


def _status(s3: Any, **params: Any) -> int:
    """The HTTP status of a GetObject, error or not."""
    try:
        answer = s3.get_object(**params)
    except s3.exceptions.ClientError as exc:
        status: int = exc.response["ResponseMetadata"]["HTTPStatusCode"]
        return status
    answer["Body"].close()
    return int(answer["ResponseMetadata"]["HTTPStatusCode"])


# -- one object ---------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("size", SIZES)
async def test_download(
    store: Store,
    compat_bucket: str,
    store_engine: asyncdl.Engine,
    tmp_path: Path,
    size: int,
    strategy: str,
) -> None:
    data = put(store, compat_bucket, "dir/obj.bin", size)
    target = tmp_path / "obj.bin"
    result = await store_engine.download(compat_bucket, "dir/obj.bin", target, strategy=strategy)
    assert target.read_bytes() == data
    assert result.size == size
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("size", SIZES)
async def test_stream_read_bytes_and_ranges(
    store: Store, compat_bucket: str, store_engine: asyncdl.Engine, size: int
) -> None:
    data = put(store, compat_bucket, "obj", size)
    streamed = b"".join([piece async for piece in store_engine.stream(compat_bucket, "obj")])
    assert streamed == data
    assert await store_engine.read_bytes(compat_bucket, "obj") == data
    if size == 0:
        assert await store_engine.read_ranges(compat_bucket, "obj", []) == []
        return
    spans = [(0, 1), (size // 2, size), (max(0, size - 3), size)]
    got = await store_engine.read_ranges(compat_bucket, "obj", spans)
    assert got == [data[a:b] for a, b in spans]
    tail = b"".join(
        [piece async for piece in store_engine.stream(compat_bucket, "obj", start=size // 2)]
    )
    assert tail == data[size // 2 :]


@pytest.mark.parametrize("size", SIZES)
async def test_open_reads_and_seeks(
    store: Store, compat_bucket: str, store_engine: asyncdl.Engine, size: int
) -> None:
    data = put(store, compat_bucket, "obj", size)
    async with store_engine.open_reader(compat_bucket, "obj") as reader:
        assert await reader.read() == data
        reader.seek(size // 3)
        assert await reader.read(CHUNK) == data[size // 3 : size // 3 + CHUNK]
    # A suffix range first (a Parquet footer's way): rclone answers it with 200 too.
    async with store_engine.open_reader(compat_bucket, "obj", first_block="end") as reader:
        assert reader.size == size
        reader.seek(-min(size, 10), 2)
        assert await reader.read() == data[-10:]


# -- presigned URLs -----------------------------------------------------------------------------


def presigned(store: Store, proxy: TcpProxy, bucket: str, key: str) -> str:
    """A SigV4 presigned GET URL through ``proxy`` (rclone refuses SigV2's)."""
    signer = boto3.client(
        "s3",
        endpoint_url=proxy.url,
        region_name="us-east-1",
        aws_access_key_id=store.access_key,
        aws_secret_access_key=store.secret_key,
        config=Config(signature_version="s3v4"),
    )
    url: str = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
    return url


@pytest.mark.parametrize("size", SIZES)
async def test_urls(
    store: Store,
    compat_bucket: str,
    store_engine: asyncdl.Engine,
    store_proxy: TcpProxy,
    tmp_path: Path,
    size: int,
) -> None:
    data = put(store, compat_bucket, "obj", size)
    url = presigned(store, store_proxy, compat_bucket, "obj")
    result = await store_engine.download_url(url, tmp_path / "obj")
    assert (tmp_path / "obj").read_bytes() == data
    assert result.size == size
    assert b"".join([piece async for piece in store_engine.stream_url(url)]) == data
    spans = [(0, 1), (size // 2, size)] if size else []
    assert await store_engine.read_ranges_url(url, spans) == [data[a:b] for a, b in spans]
    async with store_engine.open_reader_url(url) as reader:
        assert await reader.read() == data


async def test_url_of_an_object_overwritten_midway(
    store: Store,
    compat_bucket: str,
    store_engine: asyncdl.Engine,
    store_proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    put(store, compat_bucket, "obj", 4 * CHUNK, seed=1)
    url = presigned(store, store_proxy, compat_bucket, "obj")
    new = payload(4 * CHUNK, seed=2)
    _, store_proxy.rule = _overwrite_before(store, compat_bucket, "obj", new, nth_get=2)
    with pytest.raises(asyncdl.ObjectChangedError):
        await store_engine.download_url(url, tmp_path / "obj")
    assert not (tmp_path / "obj").exists()


# -- many objects ---------------------------------------------------------------------------


async def test_download_many_and_prefix(
    store: Store, compat_bucket: str, store_engine: asyncdl.Engine, tmp_path: Path
) -> None:
    objects = {f"p/{size}.bin": put(store, compat_bucket, f"p/{size}.bin", size) for size in SIZES}
    (tmp_path / "many" / "p").mkdir(parents=True)
    many = [
        result
        async for result in store_engine.download_many(
            [(compat_bucket, key, tmp_path / "many" / key) for key in objects]
        )
    ]
    assert sorted(result.key for result in many) == sorted(objects)
    assert all(result.error is None for result in many), [r.error for r in many]
    prefixed = [
        result
        async for result in store_engine.download_prefix(compat_bucket, "p/", tmp_path / "prefix")
    ]
    assert all(result.error is None for result in prefixed), [r.error for r in prefixed]
    assert len(prefixed) == len(objects)
    for key, data in objects.items():
        assert (tmp_path / "many" / key).read_bytes() == data
        assert (tmp_path / "prefix" / key.removeprefix("p/")).read_bytes() == data


# -- an object overwritten mid-download -------------------------------------------------------


def _overwrite_before(
    store: Store, bucket: str, key: str, new: bytes, *, nth_get: int
) -> tuple[list[int], Any]:
    """A proxy rule that overwrites ``key`` just before the ``nth_get``-th GET of it is
    forwarded: every answer after that one is of the new version."""
    seen = [0]

    def rule(request: RequestRecord) -> Fault | None:
        if request.method != "GET" or "list-type" in request.path:
            return None
        seen[0] += 1
        if seen[0] == nth_get:
            return Fault(before=lambda: store.s3.put_object(Bucket=bucket, Key=key, Body=new))
        return None

    return seen, rule


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_download_of_an_object_overwritten_midway_is_one_version_or_fails(
    store: Store,
    compat_bucket: str,
    store_engine: asyncdl.Engine,
    store_proxy: TcpProxy,
    tmp_path: Path,
    strategy: str,
) -> None:
    """The second part's GET finds a new version of the same size: on a server that
    honours If-Match a 412, on one that ignores it the answer's ETag, which is not the
    pinned one (``if-match-ignored``). Either way ObjectChangedError, never a mixture."""
    put(store, compat_bucket, "obj", 4 * CHUNK, seed=1)
    new = payload(4 * CHUNK, seed=2)
    _, store_proxy.rule = _overwrite_before(store, compat_bucket, "obj", new, nth_get=2)
    target = tmp_path / "obj"
    with pytest.raises(asyncdl.ObjectChangedError):
        await store_engine.download(compat_bucket, "obj", target, strategy=strategy)
    assert not target.exists()
    assert temp_files(tmp_path) == []
    store_proxy.rule = None
    await store_engine.download(compat_bucket, "obj", target, strategy=strategy)
    assert target.read_bytes() == new


async def test_download_whose_checksum_head_finds_a_new_version(
    store: Store,
    compat_bucket: str,
    store_engine: asyncdl.Engine,
    store_proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    """The HEAD that brings the checksum beside the ranges is pinned too: where the
    server ignores If-Match, its answer's ETag is what tells that the version changed
    after the bytes came. The bytes are one version, kept, and not called verified
    (checked against the new version's checksum, they would be a mismatch)."""
    old = put(store, compat_bucket, "obj", 4 * CHUNK, seed=1)
    new = payload(4 * CHUNK, seed=2)

    def rule(request: RequestRecord) -> Fault | None:
        if request.method == "HEAD":
            # Held until the parts have come (in milliseconds, on loopback): only the
            # HEAD's answer is of the new version.
            return Fault(
                delay=1.0,
                before=lambda: store.s3.put_object(Bucket=compat_bucket, Key="obj", Body=new),
            )
        return None

    store_proxy.rule = rule
    target = tmp_path / "obj"
    result = await store_engine.download(compat_bucket, "obj", target, strategy="get-first")
    assert [r.method for r in store_proxy.requests].count("HEAD") == 1
    assert target.read_bytes() == old
    assert not result.verified
    assert "changed" in (result.unverified_reason or "")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("size", [1, 3 * CHUNK + 5])
async def test_download_pinned_by_the_caller_to_a_version_gone(
    store: Store,
    compat_bucket: str,
    store_engine: asyncdl.Engine,
    tmp_path: Path,
    strategy: str,
    size: int,
) -> None:
    """``etag=`` names the version wanted; the object was overwritten since. Every
    request is pinned to it, the HEAD of HEAD-first too: where If-Match is ignored,
    the answers' ETags are what refuse the other version."""
    old_etag = store.s3.put_object(Bucket=compat_bucket, Key="obj", Body=payload(size, 1))["ETag"]
    put(store, compat_bucket, "obj", size, seed=2)
    target = tmp_path / "obj"
    with pytest.raises(asyncdl.ObjectChangedError):
        await store_engine.download(compat_bucket, "obj", target, strategy=strategy, etag=old_etag)
    assert not target.exists()
    assert temp_files(tmp_path) == []


async def test_stream_ranges_and_reader_of_an_object_overwritten_midway(
    store: Store, compat_bucket: str, store_engine: asyncdl.Engine, store_proxy: TcpProxy
) -> None:
    size = 4 * CHUNK
    put(store, compat_bucket, "obj", size, seed=1)

    def overwrite_at_second_get(seed: int) -> None:
        _, store_proxy.rule = _overwrite_before(
            store, compat_bucket, "obj", payload(size, seed), nth_get=2
        )

    overwrite_at_second_get(2)
    with pytest.raises(asyncdl.ObjectChangedError):
        async for _ in store_engine.stream(compat_bucket, "obj"):
            pass
    overwrite_at_second_get(3)
    with pytest.raises(asyncdl.ObjectChangedError):
        await store_engine.read_ranges(compat_bucket, "obj", [(0, 10), (3 * CHUNK, size)])
    overwrite_at_second_get(4)
    with pytest.raises(asyncdl.ObjectChangedError):
        await _read_two_blocks_apart(store_engine, compat_bucket)


async def _read_two_blocks_apart(engine: asyncdl.Engine, bucket: str) -> None:
    async with engine.open_reader(bucket, "obj", block_size=CHUNK) as reader:
        await reader.read(10)
        reader.seek(3 * CHUNK)
        await reader.read(10)


# -- the command -------------------------------------------------------------------------------


def _command(store: Store, proxy: TcpProxy, *args: str) -> Any:
    command, *rest = args
    env = store.env(proxy.url)
    return CliRunner(env=env).invoke(cli, [command, "--endpoint-url", proxy.url, *rest])


def test_command_cp_cp_recursive_and_cat_range(
    store: Store, compat_bucket: str, store_proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {f"d/{size}.bin": put(store, compat_bucket, f"d/{size}.bin", size) for size in SIZES}
    big = objects[f"d/{3 * CHUNK + 5}.bin"]
    one = _command(
        store,
        store_proxy,
        "cp",
        "--chunk-size",
        "64KiB",
        f"s3://{compat_bucket}/d/{3 * CHUNK + 5}.bin",
        str(tmp_path / "one.bin"),
    )
    assert one.exit_code == 0, one.stderr
    assert (tmp_path / "one.bin").read_bytes() == big
    tree = _command(
        store,
        store_proxy,
        "cp",
        "--recursive",
        "--chunk-size",
        "64KiB",
        f"s3://{compat_bucket}/d/",
        str(tmp_path / "tree"),
    )
    assert tree.exit_code == 0, tree.stderr
    for key, data in objects.items():
        assert (tmp_path / "tree" / key.removeprefix("d/")).read_bytes() == data
    cat = _command(
        store,
        store_proxy,
        "cat",
        "--range",
        f"{CHUNK - 2}-{CHUNK + 9}",
        f"s3://{compat_bucket}/d/{3 * CHUNK + 5}.bin",
    )
    assert cat.exit_code == 0, cat.stderr
    assert cat.stdout_bytes == big[CHUNK - 2 : CHUNK + 10]


def test_command_sync_twice_fetches_nothing_the_second_time(
    store: Store, compat_bucket: str, store_proxy: TcpProxy, tmp_path: Path
) -> None:
    objects = {f"s/{size}.bin": put(store, compat_bucket, f"s/{size}.bin", size) for size in SIZES}
    first = _command(store, store_proxy, "sync", f"s3://{compat_bucket}/s/", str(tmp_path))
    assert first.exit_code == 0, first.stderr
    for key, data in objects.items():
        assert (tmp_path / key.removeprefix("s/")).read_bytes() == data
    store_proxy.reset_stats()
    second = _command(store, store_proxy, "sync", f"s3://{compat_bucket}/s/", str(tmp_path))
    assert second.exit_code == 0, second.stderr
    assert [r.method for r in store_proxy.requests if r.method != "GET"] == []
    fetched = [r for r in store_proxy.requests if "list-type" not in r.path]
    assert fetched == []


def test_command_as_a_process(
    store: Store, compat_bucket: str, store_proxy: TcpProxy, tmp_path: Path
) -> None:
    """The installed command, started as a user starts it, on this server."""
    data = put(store, compat_bucket, "x.bin", CHUNK + 1)
    env = {**os.environ, **store.env(store_proxy.url)}
    done = subprocess.run(
        [sys.executable, "-m", "asyncdl.cli", "cp", f"s3://{compat_bucket}/x.bin", "-"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert md5(done.stdout) == md5(data)


# -- serving through FastAPI --------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
async def test_fastapi_serving(
    store: Store, compat_bucket: str, store_engine: asyncdl.Engine, size: int
) -> None:
    data = put(store, compat_bucket, "served.bin", size)
    app = FastAPI()

    @app.api_route("/o/{key:path}", methods=["GET", "HEAD"])
    async def serve(key: str, request: Request) -> Response:
        return await object_response(store_engine, compat_bucket, key, request)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
        whole = await http.get("/o/served.bin")
        assert (whole.status_code, whole.content) == (200, data)
        if size:
            part = await http.get("/o/served.bin", headers={"Range": f"bytes={size // 2}-"})
            assert (part.status_code, part.content) == (206, data[size // 2 :])
        head = await http.head("/o/served.bin")
        assert head.headers["content-length"] == str(size)
