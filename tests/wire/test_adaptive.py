"""Adaptive concurrency: the budget's arithmetic (pure), and an engine in front of a
server that answers 503 SlowDown above N requests in flight (moto, through the proxy)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import asyncdl
from asyncdl._wire.adaptive import Budget
from asyncdl.errors import EngineClosed
from asyncdl.testing.tcp_proxy import Fault, TcpProxy
from asyncdl.testing.throttle import SlowDownAbove

from ..bulk.test_bulk import put_in_backend
from ..conftest import make_client, payload

N = 8
OBJECTS = 400


async def test_a_throttle_cuts_the_limit_once_per_epoch() -> None:
    budget = Budget(64)
    epochs = [await budget.acquire() for _ in range(64)]
    for epoch in epochs:  # one burst of 503s: the requests let in before the cut
        budget.throttled(epoch)
        budget.release()
    assert budget.limit == 32
    assert budget.cuts == 1
    later = await budget.acquire()
    budget.throttled(later)  # let in after the cut: the crowd is still too large
    budget.release()
    assert budget.limit == 16


async def test_the_limit_grows_by_one_per_limit_successes_up_to_the_maximum() -> None:
    budget = Budget(10)
    budget.throttled(await budget.acquire())
    budget.release()
    assert budget.limit == 5
    for _ in range(4):
        await budget.acquire()
        budget.release_ok()
    assert budget.limit == 5
    await budget.acquire()
    budget.release_ok()
    assert budget.limit == 6
    for _ in range(1000):
        await budget.acquire()
        budget.release_ok()
    assert budget.limit == 10


async def test_the_limit_never_goes_below_one() -> None:
    budget = Budget(3)
    for _ in range(10):
        budget.throttled(await budget.acquire())
        budget.release()
        assert budget.limit >= 1
    assert budget.limit == 1


async def test_a_fixed_budget_ignores_throttles() -> None:
    budget = Budget(5, adaptive=False)
    budget.throttled(await budget.acquire())
    budget.release()
    assert budget.limit == 5


async def test_requests_above_a_lowered_limit_finish_and_new_ones_wait() -> None:
    budget = Budget(4)
    epochs = [await budget.acquire() for _ in range(4)]
    budget.throttled(epochs[0])  # limit 2, four still in flight
    assert (budget.limit, budget.in_flight) == (2, 4)
    waiter = asyncio.create_task(budget.acquire())
    await asyncio.sleep(0)
    budget.release()
    budget.release()
    await asyncio.sleep(0)
    assert not waiter.done()  # two in flight: at the limit
    budget.release()
    await waiter
    assert budget.in_flight == 2


async def test_a_cancelled_waiter_hands_its_slot_on() -> None:
    budget = Budget(1)
    await budget.acquire()
    first = asyncio.create_task(budget.acquire())
    second = asyncio.create_task(budget.acquire())
    await asyncio.sleep(0)
    budget.release()  # granted to ``first``, which is cancelled before it runs
    first.cancel()
    await second
    assert budget.in_flight == 1
    with pytest.raises(asyncio.CancelledError):
        await first


def test_adaptive_is_on_by_default_and_a_bool() -> None:
    assert asyncdl.TransferConfig().adaptive is True
    with pytest.raises(ValueError, match="adaptive must be a bool"):
        asyncdl.TransferConfig(adaptive=1)  # type: ignore[arg-type]


async def _download_throttled(
    proxy: TcpProxy, bucket: str, tmp_path: Path, *, adaptive: bool
) -> tuple[list[asyncdl.DownloadResult], int, list[int]]:
    """Download OBJECTS tiny objects at concurrency 64 from a server that serves N at
    a time; the results, the 503s the proxy sent, and the limit seen after each of
    the second half's results."""
    config = asyncdl.TransferConfig(
        max_concurrency=64,
        adaptive=adaptive,
        max_attempts=30,
        backoff_base=0.01,
        backoff_max=0.2,
    )
    proxy.reset_stats()
    throttle = SlowDownAbove(proxy, N)
    proxy.rule = throttle
    items = [(bucket, f"k{i}", tmp_path / f"{adaptive}-{i}") for i in range(OBJECTS)]
    limits = []
    results = []
    async with (
        make_client(proxy.url, max_pool_connections=64) as client,
        asyncdl.Engine(client, config=config) as engine,
    ):
        async for result in engine.download_many(items, strategy="get-first"):
            results.append(result)
            if len(results) > OBJECTS // 2:
                limits.append(engine.stats().concurrency_limit)
    return results, throttle.throttled, limits


async def test_adaptive_engine_converges_near_what_the_server_serves(
    proxy: TcpProxy, bucket: str, tmp_path: Path
) -> None:
    put_in_backend(bucket, {f"k{i}": payload(1024, seed=i) for i in range(OBJECTS)})
    proxy.rtt = 0.01  # each request stays in flight a while, as over a network

    _, fixed_503s, fixed_limits = await _download_throttled(proxy, bucket, tmp_path, adaptive=False)
    adaptive, adaptive_503s, limits = await _download_throttled(
        proxy, bucket, tmp_path, adaptive=True
    )

    assert [r.error for r in adaptive] == [None] * OBJECTS
    for result in adaptive:
        assert result.path.read_bytes() == payload(1024, seed=int(result.key[1:]))
    assert set(fixed_limits) == {64}
    assert fixed_503s > OBJECTS  # more 503s than objects: most requests are turned away
    assert adaptive_503s * 4 < fixed_503s
    assert min(limits) >= 1
    assert max(limits) <= 2 * N


async def test_a_429_is_retried_and_lowers_the_limit(
    engine: asyncdl.Engine, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    put_in_backend(bucket, {"k": payload(1000)})
    answers = iter([Fault(status=429, error_code="TooManyRequests")])
    proxy.rule = lambda request: next(answers, None)
    result = await engine.download(bucket, "k", tmp_path / "k")
    assert result.path.read_bytes() == payload(1000)
    assert result.requests == 2
    stats = engine.stats()
    assert (stats.gets.throttled, stats.limit_cuts) == (1, 1)
    assert stats.concurrency_limit < engine.config.max_concurrency


async def test_a_listing_page_holds_a_slot_and_a_throttled_one_lowers_the_limit(
    bucket: str, proxy: TcpProxy
) -> None:
    """S3 rates a prefix's LISTs and GETs together: a page request takes a slot of the
    budget as a GET does, and its SlowDown cuts the limit as a GET's would."""
    from asyncdl._wire.list_objects import list_pages  # noqa: PLC0415 - the module under test

    put_in_backend(bucket, {f"p/k{i}": b"x" for i in range(3)})
    answers = iter([Fault(status=503, error_code="SlowDown"), Fault(delay=0.3)])
    proxy.rule = lambda request: next(answers, None) if "list-type" in request.path else None
    budget = Budget(4)
    config = asyncdl.TransferConfig(backoff_base=0.01)
    held = []
    async with make_client(proxy.url) as client:
        pages = list_pages(client, config, bucket=bucket, prefix="p/", budget=budget)
        listing = asyncio.create_task(anext(pages))
        while not listing.done():  # the slow (second) attempt is in flight
            held.append(budget.in_flight)
            await asyncio.sleep(0.01)
        page = listing.result()
        await pages.aclose()
    assert len(page["Contents"]) == 3
    assert max(held) == 1
    assert (budget.cuts, budget.limit, budget.in_flight) == (1, 2, 0)


async def test_a_waiter_granted_in_the_step_the_engine_closes_in_sends_nothing() -> None:
    budget = Budget(1)
    await budget.acquire()  # the one slot, held
    waiting = asyncio.ensure_future(budget.acquire())
    await asyncio.sleep(0)  # the second request waits for it
    budget.release()  # handed to the waiter: its future is done, the waiter not yet run
    budget.close()
    with pytest.raises(EngineClosed):
        await waiting
    assert budget.in_flight == 0
    with pytest.raises(EngineClosed):
        await budget.acquire()
