"""The FastAPI example and asyncdl.contrib.fastapi, in-process and under uvicorn."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from asyncdl.testing.moto_server import free_port
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from .conftest import payload
from .test_examples import load


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


async def test_under_uvicorn_a_client_that_disconnects_stops_the_prefetch(
    app: Any, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    size = 64 * 2**20  # 8 parts of 8 MiB
    s3.put_object(Bucket=bucket, Key="big", Body=bytes(size))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
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
    finally:
        server.should_exit = True
        await serving
