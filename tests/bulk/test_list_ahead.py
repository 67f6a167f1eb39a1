"""``download_prefix`` lists ahead of its downloads, within a bound: its ``listing``
callback has the totals after the first pages, and ``list_ahead`` holds no more than
its bound (and a page) of keys its consumer has not taken."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

import asyncdl
from asyncdl._bulk.listing import list_ahead
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from .test_bulk import put_in_backend


def lists(proxy: TcpProxy) -> int:
    return sum("list-type" in r.path for r in proxy.requests)


async def test_the_listing_ends_long_before_the_downloads(
    client: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_in_backend(bucket, {f"p/{i:04d}": b"z" * 3 for i in range(2500)})
    proxy.rule = lambda r: Fault(delay=0.01) if "list-type" not in r.path else None
    calls: list[tuple[int, int, bool, int]] = []
    done = 0

    def listing(objects: int, size: int, ended: bool) -> None:
        calls.append((objects, size, ended, done))

    config = asyncdl.TransferConfig(max_concurrency=8)
    async with asyncdl.Engine(client, config=config) as engine:
        async for result in engine.download_prefix(bucket, "p/", tmp_path, listing=listing):
            assert result.ok
            done += 1
    assert [call[:3] for call in calls] == [
        (1000, 3000, False),
        (2000, 6000, False),
        (2500, 7500, False),
        (2500, 7500, True),
    ]
    # Every total was known while most downloads were still to come.
    assert calls[-1][3] < 500, calls


async def test_list_ahead_holds_no_more_than_its_bound(
    client: Any, bucket: str, proxy: TcpProxy
) -> None:
    put_in_backend(bucket, {f"p/{i:04d}": b"" for i in range(5000)})
    async with asyncdl.Engine(client) as engine:
        pages = engine.list_pages(bucket, "p/")
        items = list_ahead(pages, bucket=bucket, prefix="p/", filters=None, ahead=2000)
        async with contextlib.aclosing(items):
            first = await anext(items)
            # 2000 held, one page more while waiting for room, and the one asked ahead.
            for _ in range(200):
                if lists(proxy) >= 4:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)  # time enough for the fifth page, were it unbounded
            assert lists(proxy) == 4
            rest = [item async for item in items]
    assert [first.key, *(item.key for item in rest)] == [f"p/{i:04d}" for i in range(5000)]
    assert lists(proxy) == 5


async def test_a_failed_page_comes_after_the_objects_before_it(
    client: Any, bucket: str, proxy: TcpProxy
) -> None:
    put_in_backend(bucket, {f"p/{i:04d}": b"" for i in range(1500)})
    proxy.rule = lambda r: (
        Fault(status=403, error_code="AccessDenied") if "continuation-token" in r.path else None
    )
    async with asyncdl.Engine(client) as engine:
        pages = engine.list_pages(bucket, "p/")
        seen: list[str] = []

        async def drain() -> None:
            async for item in list_ahead(pages, bucket=bucket, prefix="p/", filters=None):
                seen.append(item.key)

        with pytest.raises(asyncdl.AccessDeniedError) as failure:
            await drain()
    assert failure.value.key == "p/"
    assert len(seen) == 1000
