"""The test proxy's per-connection bandwidth cap: real transfers through it, bounded below.

Only lower bounds on time (a slow machine can only make a transfer slower) and one
upper bound with a wide margin (two connections at once finish well inside the time
one connection would need for both), so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from asyncdl.testing.tcp_proxy import TcpProxy

from ..conftest import make_client, payload

KiB = 1024
CAP = 512 * KiB  # response body bytes per second, per connection
SIZE = 1024 * KiB  # two seconds' worth at CAP


@pytest.fixture
def capped(s3_endpoint: str) -> Iterator[TcpProxy]:
    with TcpProxy.for_url(s3_endpoint, bandwidth=CAP) as running:
        yield running


async def _get(client: Any, bucket: str, key: str) -> bytes:
    response = await client.get_object(Bucket=bucket, Key=key)
    async with response["Body"] as body:
        data: bytes = await body.read()
    return data


async def test_a_download_takes_at_least_size_over_cap(
    capped: TcpProxy, s3: Any, bucket: str
) -> None:
    s3.put_object(Bucket=bucket, Key="big", Body=payload(SIZE))
    async with make_client(capped.url) as client:
        started, cpu = time.perf_counter(), time.process_time()
        data = await _get(client, bucket, "big")
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert data == payload(SIZE)
    assert elapsed >= 0.95 * SIZE / CAP, elapsed
    # The cap sleeps its debt off: waiting two seconds must not cost two seconds of CPU
    # (moto, the proxy and the client together: a few tens of milliseconds).
    assert cpu < 0.5 * elapsed, (cpu, elapsed)


async def test_two_connections_are_capped_separately(
    capped: TcpProxy, s3: Any, bucket: str
) -> None:
    for seed, key in enumerate(("one", "two")):
        s3.put_object(Bucket=bucket, Key=key, Body=payload(SIZE, seed=seed))
    async with make_client(capped.url) as client:
        started = time.perf_counter()
        # Two requests in flight at once: aiobotocore's pool opens two connections.
        one, two = await asyncio.gather(_get(client, bucket, "one"), _get(client, bucket, "two"))
        elapsed = time.perf_counter() - started
    assert (one, two) == (payload(SIZE, seed=0), payload(SIZE, seed=1))
    assert capped.max_in_flight == 2
    # Each connection is held to CAP ...
    assert elapsed >= 0.95 * SIZE / CAP, elapsed
    # ... and not the two together: one shared bucket would need 2 * SIZE / CAP (4 s).
    assert elapsed < 2 * SIZE / CAP, elapsed


@pytest.mark.parametrize("bandwidth", [0, -1.0, float("nan")])
def test_a_cap_must_be_a_positive_rate(bandwidth: float) -> None:
    with pytest.raises(ValueError, match="bandwidth must be a positive number"):
        TcpProxy("127.0.0.1", 9, bandwidth=bandwidth)
