"""asyncdl.contrib.otel: the engine's stats as OpenTelemetry metrics, read by the SDK's
in-memory reader after real downloads through the recording proxy."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

import asyncdl
from asyncdl.contrib.otel import instrument
from asyncdl.testing.tcp_proxy import Fault, TcpProxy

from ..conftest import CHUNK, payload


def collected(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Any]:
    """Every data point by (instrument, sorted attributes)."""
    data = reader.get_metrics_data()
    points: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
    if data is None:  # nothing observed
        return points
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)  # counters and gauges only
                    attributes = tuple(sorted((point.attributes or {}).items()))
                    points[(metric.name, attributes)] = point.value
    return points


async def test_the_metrics_are_the_engines_stats(
    s3: Any, bucket: str, proxy: TcpProxy, client: Any, tmp_path: Path
) -> None:
    for number in range(3):
        s3.put_object(Bucket=bucket, Key=f"k{number}", Body=payload(3 * CHUNK + number))
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    config = asyncdl.TransferConfig(chunk_size=CHUNK, max_concurrency=4, backoff_base=0.01)
    engine = asyncdl.Engine(client, config=config)
    instrument(engine, name="test", meter_provider=provider)
    assert collected(reader) == {}  # not open yet: no series
    slow_down = iter([Fault(status=503, error_code="SlowDown")])
    proxy.rule = lambda request: next(slow_down, None)
    async with engine:
        for number in range(3):
            await engine.download(bucket, f"k{number}", tmp_path / f"k{number}")
        with pytest.raises(asyncdl.ObjectNotFoundError):
            await engine.download(bucket, "missing", tmp_path / "missing")
        stats = engine.stats()
        points = collected(reader)

    engine_label = ("engine", "test")
    assert (
        points[("asyncdl.requests", (engine_label, ("kind", "get"), ("outcome", "ok")))] == 11
    )  # 3 + 4 + 4 ranges
    assert (
        points[("asyncdl.requests", (engine_label, ("kind", "get"), ("outcome", "throttled")))] == 1
    )
    assert (
        points[("asyncdl.requests", (engine_label, ("kind", "get"), ("outcome", "client_error")))]
        == 1
    )
    sent = sum(value for (name, _), value in points.items() if name == "asyncdl.requests")
    # The checksum HEADs (validate="when_available": one per multi-range object).
    assert points[("asyncdl.requests", (engine_label, ("kind", "head"), ("outcome", "ok")))] == 3
    assert sent == stats.requests == len(proxy.requests) == 16
    assert points[("asyncdl.bytes_received", (engine_label,))] == 3 * (3 * CHUNK) + 3
    assert points[("asyncdl.retries", (engine_label,))] == stats.retries == 1
    assert points[("asyncdl.throttles", (engine_label,))] == 1
    assert points[("asyncdl.objects", (engine_label, ("outcome", "done")))] == 3
    assert points[("asyncdl.objects", (engine_label, ("outcome", "failed")))] == 1
    assert points[("asyncdl.concurrency", (engine_label, ("limit", "max")))] == 4
    assert points[("asyncdl.concurrency", (engine_label, ("limit", "current")))] == (
        stats.concurrency_limit
    )

    del engine
    gc.collect()
    assert collected(reader) == {}  # the engine is gone: so are its series
    provider.shutdown()


def test_asyncdl_does_not_import_opentelemetry() -> None:
    """Costs nothing when not used: not even the import."""
    probe = (
        "import sys, asyncdl, asyncdl.cli, asyncdl.cli.work, asyncdl.dask; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
