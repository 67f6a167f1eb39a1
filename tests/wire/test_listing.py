"""ListObjectsV2 pages: retried like GETs, from the page that failed, for every caller."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import asyncdl
from asyncdl.dask import _runtime
from asyncdl.dask._listing import list_all
from asyncdl.testing.tcp_proxy import Fault, RequestRecord, TcpProxy

from ..bulk.test_bulk import put_in_backend, put_many


def listings(proxy: TcpProxy) -> list[str]:
    return [r.path for r in proxy.requests if "list-type=2" in r.path]


def fail_pages(proxy: TcpProxy, faults: dict[int, list[Fault]]) -> None:
    """Answer the n-th distinct page's first requests (1 is the first page) with faults."""
    pages: list[str] = []

    def rule(request: RequestRecord) -> Fault | None:
        if "list-type=2" not in request.path:
            return None
        if request.path not in pages:
            pages.append(request.path)
        waiting = faults.get(pages.index(request.path) + 1)
        return waiting.pop(0) if waiting else None

    proxy.rule = rule


async def keys_listed(engine: asyncdl.Engine, bucket: str, **kwargs: Any) -> list[str]:
    from asyncdl._wire.list_objects import list_pages  # noqa: PLC0415 - the module under test

    config = engine.config
    pages = list_pages(engine.client, config, bucket=bucket, prefix="p/", **kwargs)
    return [entry["Key"] async for page in pages for entry in page.get("Contents", ())]


async def test_each_page_is_retried_where_it_failed(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    keys = [f"p/{i}" for i in range(5)]
    put_many(s3, bucket, dict.fromkeys(keys, b"x"))
    slow_down = Fault(status=503, error_code="SlowDown")
    fail_pages(proxy, {2: [slow_down, Fault(reset=True)], 3: [Fault(status=500)]})

    assert await keys_listed(engine, bucket, page_size=2) == keys

    seen = listings(proxy)
    assert [seen.count(page) for page in dict.fromkeys(seen)] == [1, 3, 2]
    assert all("max-keys=2" in page for page in seen)


async def test_a_page_gives_up_after_max_attempts_or_at_once_if_not_retryable(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    put_many(s3, bucket, dict.fromkeys(["p/1", "p/2", "p/3"], b"x"))
    attempts = engine.config.max_attempts
    fail_pages(proxy, {2: [Fault(status=503, error_code="SlowDown")] * attempts})
    with pytest.raises(asyncdl.DownloadError, match="SlowDown") as raised:
        await keys_listed(engine, bucket, page_size=2)
    assert raised.value.key == "p/"
    assert len(listings(proxy)) == 1 + attempts  # the first page was not listed again

    proxy.reset_stats()
    fail_pages(proxy, {1: [Fault(status=403, error_code="AccessDenied")]})
    with pytest.raises(asyncdl.AccessDeniedError):
        await keys_listed(engine, bucket)
    assert len(listings(proxy)) == 1


@pytest.fixture
def own_runtime(monkeypatch: pytest.MonkeyPatch, proxy: TcpProxy) -> Iterator[None]:
    """The Dask workers' listing task, run here: a runtime of this test's own, whose
    engine reaches moto through the proxy (from the environment, as on a worker)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
    monkeypatch.setattr(_runtime, "_runtime", None)
    yield
    if _runtime._runtime is not None:
        _runtime._runtime.close()
        _runtime._runtime.loop.close()  # closed: the exit hook has nothing left to do


def test_dask_listing_retries_a_page_where_it_failed(
    own_runtime: None, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    files = {"p/a": b"a", "p/z1": b"z1", "p/z2": b"z2"}
    put_many(s3, bucket, files)
    # The first page (1,000 keys) ends among the folder markers.
    put_in_backend(bucket, dict.fromkeys((f"p/m{i:04d}/" for i in range(999)), b""))
    fail_pages(proxy, {2: [Fault(status=503, error_code="SlowDown"), Fault(reset=True)]})
    config = asyncdl.TransferConfig(backoff_base=0.01)

    frame = list_all(bucket, "p/", config, {})

    assert sorted(frame["key"]) == sorted(files)
    assert list(frame["size"]) == [len(files[key]) for key in frame["key"]]
    seen = listings(proxy)
    assert [seen.count(page) for page in dict.fromkeys(seen)] == [1, 3]


async def test_the_next_page_is_asked_for_while_this_one_is_worked_on(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    """One page ahead, no more; closing the listing early asks for nothing further."""
    from asyncdl._wire.list_objects import list_pages  # noqa: PLC0415 - the module under test

    put_many(s3, bucket, {f"p/{i}": b"x" for i in range(7)})
    pages = list_pages(engine.client, engine.config, bucket=bucket, prefix="p/", page_size=2)
    async with contextlib.aclosing(pages):
        first = await anext(pages)
        assert [entry["Key"] for entry in first["Contents"]] == ["p/0", "p/1"]
        for _ in range(500):  # page 2 goes out while page 1 is still in hand
            if len(listings(proxy)) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(listings(proxy)) == 2
        second = await anext(pages)
        assert [entry["Key"] for entry in second["Contents"]] == ["p/2", "p/3"]
    await asyncio.sleep(0.2)
    assert len(listings(proxy)) <= 3  # page 3 was cancelled (or had answered): no page 4


async def test_engine_list_pages_is_retried_counted_and_holds_a_slot(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    keys = [f"p/{i}" for i in range(3)] + ["p/d/x"]
    put_many(s3, bucket, dict.fromkeys(keys, b"x"))
    fail_pages(proxy, {1: [Fault(status=503, error_code="SlowDown")]})
    limit = engine.stats().concurrency_limit

    listing = engine.list_pages(bucket, "p/", delimiter="/", params={"MaxKeys": 2})
    async with contextlib.aclosing(listing) as pages:
        got = [page async for page in pages]

    assert [e["Key"] for page in got for e in page.get("Contents", ())] == keys[:3]
    assert [c["Prefix"] for page in got for c in page.get("CommonPrefixes", ())] == ["p/d/"]
    stats = engine.stats()
    assert (stats.lists.throttled, stats.lists.ok) == (1, len(got))
    assert stats.lists.total == len(listings(proxy)) == len(got) + 1
    assert stats.limit_cuts == 1  # the page held a slot of the budget: its throttle counts
    assert stats.concurrency_limit < limit
    assert all("max-keys=2" in page and "delimiter=%2F" in page for page in listings(proxy))


def test_the_dask_listing_is_counted_in_its_workers_engine(
    own_runtime: None, s3: Any, bucket: str, proxy: TcpProxy
) -> None:
    put_many(s3, bucket, {"p/a": b"a", "p/b": b"b"})
    fail_pages(proxy, {1: [Fault(status=503, error_code="SlowDown")]})
    config = asyncdl.TransferConfig(backoff_base=0.01)

    frame = list_all(bucket, "p/", config, {})

    assert sorted(frame["key"]) == ["p/a", "p/b"]
    worker = _runtime.runtime()
    stats = worker.run(worker.engine(config)).stats()
    assert (stats.lists.throttled, stats.lists.ok) == (1, 1) == (1, len(listings(proxy)) - 1)
    assert stats.limit_cuts == 1  # the page held a slot of the worker's budget
