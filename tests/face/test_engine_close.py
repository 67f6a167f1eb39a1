"""``Engine.aclose()`` while downloads still run: no request is begun after it, and
what was running fails with a ``DownloadError`` that says the engine was closed (not one
about a client gone ``None``, nor a download that goes on and succeeds on a closed
engine). Against moto through the proxy, each request held back a little so that
the downloads are mid-way when the engine closes."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..conftest import CHUNK, gone_within_a_second, make_client, payload, temp_files


@pytest.mark.parametrize("lean_get", [True, False], ids=["lean", "botocore"])
async def test_closing_an_engine_ends_what_runs_on_it(
    s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path, lean_get: bool
) -> None:
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=payload(20 * CHUNK, seed=i))
    under_way = threading.Event()

    def held_back(request: RequestRecord) -> Fault:
        if len(proxy.requests) >= 6:  # every download under way, none done
            under_way.set()
        return Fault(delay=0.05)

    proxy.rule = held_back
    config = asyncdl.TransferConfig(
        chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01, lean_get=lean_get
    )
    async with make_client(proxy.url) as client:
        engine = asyncdl.Engine(client, config=config)
        await engine.__aenter__()
        running = [
            asyncio.ensure_future(engine.download(bucket, f"k{i}", tmp_path / f"f{i}"))
            for i in range(5)
        ]
        assert await asyncio.to_thread(under_way.wait, 30)
        await engine.aclose()
        sent = len(proxy.requests)
        outcomes = await asyncio.wait_for(
            asyncio.gather(*running, return_exceptions=True), timeout=30
        )
        await asyncio.sleep(0.2)  # anything still to be sent would be by now

    # Requests already under way as it closed (their slots taken: at most the budget's
    # limit) may still reach the server through a borrowed client's stack; no other.
    assert len(proxy.requests) - sent <= config.max_concurrency
    for outcome in outcomes:
        assert isinstance(outcome, asyncdl.DownloadError), outcome
        assert "the Engine was closed" in str(outcome)
    await gone_within_a_second(tmp_path)
    assert temp_files(tmp_path) == []
    assert os.listdir(tmp_path) == []


async def test_a_listing_after_the_close_fails_as_a_download_error(
    bucket: str, proxy: TcpProxy
) -> None:
    async with make_client(proxy.url) as client:
        async with asyncdl.Engine(client) as engine:
            pages = engine.list_pages(bucket, "")
        with pytest.raises(asyncdl.DownloadError, match="the Engine was closed"):
            async for _ in pages:
                pass
    assert proxy.requests == []
