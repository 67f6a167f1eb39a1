"""What docs/guides/throttling.md's examples did."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.docs import docs_world


async def check(namespace: dict[str, Any]) -> None:
    big = docs_world.OBJECTS["datasets/big.bin"]
    assert Path("big.bin").read_bytes() == big
    assert Path("small.json").read_bytes() == docs_world.OBJECTS["small.json"]
    # The first engine's stats, read once it was closed.
    stats = namespace["stats"]
    assert (stats.requests, stats.gets.ok, stats.heads.ok) == (5, 4, 1)
    assert stats.bytes_received == len(big) + len(docs_world.OBJECTS["small.json"])
    assert (stats.objects_done, stats.objects_failed, stats.retries) == (2, 0, 0)
    # Throttled through the proxy, and the download went through all the same.
    throttled = namespace["throttled"]
    assert throttled.throttles > 0
    assert throttled.limit_cuts > 0
    assert throttled.concurrency_limit < throttled.max_concurrency == 32
    assert throttled.gets.throttled == throttled.throttles - throttled.heads.throttled
    assert throttled.retries >= throttled.throttles
    assert throttled.objects_done == 1
    assert throttled.objects_failed == 0
    assert namespace["result"].size == len(big)
    assert os.environ["AWS_ENDPOINT_URL_S3"] == namespace["endpoint"]
    # The cap held the download to its rate; progress saw every byte once.
    intro = docs_world.OBJECTS["videos/intro.mp4"]
    assert Path("intro.mp4").read_bytes() == intro
    assert sum(delta for delta, _ in namespace["calls"]) == len(intro)
    assert {total for _, total in namespace["calls"]} == {len(intro)}
    assert namespace["elapsed"] >= len(intro) / (4 * 1024**2) - 0.1
    # OpenTelemetry saw what the engine counted.
    points = namespace["points"]
    assert points["asyncdl.bytes_received"] == [
        ({"engine": "downloads"}, len(docs_world.OBJECTS["other/key"]))
    ]
    requests = {
        (attributes["kind"], attributes["outcome"]): value
        for attributes, value in points["asyncdl.requests"]
    }
    otel_stats = namespace["engine"].stats()
    assert requests[("get", "ok")] == otel_stats.gets.ok >= 1
    names = {"asyncdl.retries", "asyncdl.throttles", "asyncdl.objects", "asyncdl.concurrency"}
    assert names <= set(points)
    assert Path("other.bin").read_bytes() == docs_world.OBJECTS["other/key"]
