"""The FastAPI example and asyncdl.contrib.fastapi, in-process and under uvicorn."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

import asyncdl
from asyncdl.contrib.fastapi import lifespan
from asyncdl.testing.moto_server import free_port
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import payload
from ..docs.test_examples import load


@pytest.fixture
def app(proxy: TcpProxy, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    monkeypatch.setenv("ASYNCDL_BUCKETS", bucket)
    monkeypatch.setenv("ASYNCDL_DOWNLOAD_DIR", str(tmp_path / "downloads"))
    return load("fastapi_app").app


@pytest.fixture
async def http(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            yield client


async def test_get_object_streams_with_headers(
    http: httpx.AsyncClient, app: Any, s3: Any, bucket: str
) -> None:
    data = payload(3 * 2**20 + 5)
    etag = s3.put_object(Bucket=bucket, Key="dir/file.bin", Body=data)["ETag"]
    engine = app.state.asyncdl_engine
    client = engine.client
    response = await http.get(f"/objects/{bucket}/dir/file.bin")
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-length"] == str(len(data))
    assert response.headers["etag"] == etag
    head = await http.head(f"/objects/{bucket}/dir/file.bin")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == str(len(data))
    assert head.headers["etag"] == etag
    assert (await http.get(f"/objects/{bucket}/missing")).status_code == 404
    assert (await http.get("/objects/other-bucket/dir/file.bin")).status_code == 403
    assert app.state.asyncdl_engine is engine
    assert engine.client is client  # one client for every request


async def test_post_downloads_confines_names(
    http: httpx.AsyncClient, s3: Any, bucket: str, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="a/b.txt", Body=b"hello")
    keys = ["a/b.txt", "missing.txt", "../escape.txt", "/abs.txt"]
    response = await http.post("/downloads", json={"bucket": bucket, "keys": keys})
    assert response.status_code == 200
    by_key = {r["key"]: r for r in response.json()}
    assert set(by_key) == set(keys)
    assert by_key["a/b.txt"]["ok"]
    assert (tmp_path / "downloads" / "a" / "b.txt").read_bytes() == b"hello"
    assert not by_key["missing.txt"]["ok"]
    assert "refusing" in by_key["../escape.txt"]["error"]
    assert "refusing" in by_key["/abs.txt"]["error"]
    assert not (tmp_path / "escape.txt").exists()
    assert sorted(os.listdir(tmp_path / "downloads")) == ["a"]


@asynccontextmanager
async def uvicorn_serving(app: Any) -> AsyncIterator[int]:
    """The app under uvicorn on a loopback port (yielded), as a deployment runs it."""
    port = free_port()
    # A handler left waiting (a leak under test) must not hold the shutdown forever.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="error", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
            await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        await serving


async def test_under_uvicorn_a_client_that_disconnects_stops_the_prefetch(
    app: Any, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    size = 64 * 2**20  # 8 parts of 8 MiB
    s3.put_object(Bucket=bucket, Key="big", Body=bytes(size))
    async with (
        uvicorn_serving(app) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        whole = await client.get(f"/objects/{bucket}/big")
        assert whole.status_code == 200
        assert len(whole.content) == size
        proxy.reset_stats()
        # Parts after the first are held 10 s by the proxy: if the disconnect did
        # not cancel the prefetch, its tasks would still be waiting below.
        proxy.rule = lambda r: (
            Fault(delay=10) if r.range and not r.range.startswith("bytes=0-") else None
        )
        async with client.stream("GET", f"/objects/{bucket}/big") as response:
            assert response.headers["content-length"] == str(size)
            async for _ in response.aiter_bytes():
                break  # the client goes away after the first piece
        await asyncio.sleep(1.0)
        sent = len(proxy.requests)
        await asyncio.sleep(0.5)
        assert len(proxy.requests) == sent  # nothing goes on fetching
        assert sent <= 5  # the first part and the prefetch window, never all 8
        leftovers = [t for t in asyncio.all_tasks() if "_launch" in repr(t.get_coro())]
        assert leftovers == []


async def test_under_uvicorn_answers_that_never_read_the_body_free_their_slots(
    app: Any, s3: Any, bucket: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small budget, and a first part (8 MiB) larger than the socket buffers: a first
    # answer nobody closes keeps its slot, and stays in flight at the proxy.
    budget = 2
    config = asyncdl.TransferConfig(max_concurrency=budget)
    monkeypatch.setattr(app.router, "lifespan_context", lifespan(config=config))
    data = payload(2 * config.chunk_size + 5)
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    path = f"/objects/{bucket}/big"
    request = f"GET {path} HTTP/1.1\r\nHost: app\r\n\r\n".encode()

    async def leave_after_the_headers(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert f"content-length: {len(data)}".encode() in head.lower()
        writer.close()
        await writer.wait_closed()

    async def leave_while_it_opens(port: int) -> None:
        # The handler's open() still waits for S3 when the client goes away.
        proxy.rule = lambda r: Fault(delay=0.3)
        sent = len(proxy.requests)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        while len(proxy.requests) == sent:  # noqa: ASYNC110 - the proxy has no event
            await asyncio.sleep(0.01)
        writer.close()
        await writer.wait_closed()
        proxy.rule = None

    async with (
        asyncio.timeout(60),
        uvicorn_serving(app) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        for _ in range(3 * budget):
            await leave_after_the_headers(port)
            await leave_while_it_opens(port)
            head = await client.head(path)  # the headers only: the body is never read
            assert head.headers["content-length"] == str(len(data))
        whole = await client.get(path)
        assert whole.status_code == 200
        assert whole.content == data
        for _ in range(500):  # what the engine closed, the proxy sees end within 5 s
            if proxy.in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert proxy.in_flight == 0
