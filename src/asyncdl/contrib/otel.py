"""An engine's stats as OpenTelemetry metrics (``pip install 'asyncdl[otel]'``).

``instrument(engine)`` registers observable instruments whose callbacks read
``engine.stats()`` when the SDK collects (on its export interval), so the download
path pays nothing for them: the engine counts as it always does, and nothing of
OpenTelemetry is imported unless this module is.

The instruments (one meter, ``asyncdl``):

| name | kind | attributes |
|---|---|---|
| ``asyncdl.requests`` | counter | ``kind``, ``outcome`` (below) |
| ``asyncdl.bytes_received`` | counter (By) | none |
| ``asyncdl.retries`` | counter | none |
| ``asyncdl.throttles`` | counter | none |
| ``asyncdl.objects`` | counter | ``outcome`` (done, failed) |
| ``asyncdl.concurrency`` | gauge | ``limit`` (current, max) |

A request's ``kind`` is get, head or list; its ``outcome`` is ok, throttled,
client_error, server_error, network_error or cancelled (as in
:class:`~asyncdl.RequestCounts`).

Every one also carries the ``engine`` attribute (the ``name`` given to
:func:`instrument`), so one process's engines stay apart.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import fields

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from ..engine import Engine
from ..stats import EngineStats, RequestCounts

_KINDS = ("get", "head", "list")
_OUTCOMES = tuple(field.name for field in fields(RequestCounts))


def instrument(
    engine: Engine,
    *,
    name: str = "default",
    meter_provider: metrics.MeterProvider | None = None,
) -> None:
    """Publish ``engine.stats()`` through OpenTelemetry, as the ``engine=name``
    series. Call it once per engine (open or not); the engine is not kept alive by
    it: once collected, its series stop."""
    meter = metrics.get_meter("asyncdl", meter_provider=meter_provider)
    stats = _reader(engine)
    base = {"engine": name}

    def observe(
        read: Callable[[EngineStats], Iterable[tuple[int, dict[str, str]]]],
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            snapshot = stats()
            if snapshot is None:
                return []
            return [Observation(value, {**base, **extra}) for value, extra in read(snapshot)]

        return callback

    meter.create_observable_counter(
        "asyncdl.requests",
        [observe(_requests)],
        unit="{request}",
        description="HTTP requests sent, by kind and outcome",
    )
    meter.create_observable_counter(
        "asyncdl.bytes_received",
        [observe(lambda s: [(s.bytes_received, {})])],
        unit="By",
        description="Object bytes received and kept",
    )
    meter.create_observable_counter(
        "asyncdl.retries",
        [observe(lambda s: [(s.retries, {})])],
        unit="{retry}",
        description="Requests sent again after a failure",
    )
    meter.create_observable_counter(
        "asyncdl.throttles",
        [observe(lambda s: [(s.throttles, {})])],
        unit="{answer}",
        description="Throttling answers (503 SlowDown, 429) received",
    )
    meter.create_observable_counter(
        "asyncdl.objects",
        [
            observe(
                lambda s: [
                    (s.objects_done, {"outcome": "done"}),
                    (s.objects_failed, {"outcome": "failed"}),
                ]
            )
        ],
        unit="{object}",
        description="Downloads to a file, finished or failed",
    )
    meter.create_observable_gauge(
        "asyncdl.concurrency",
        [
            observe(
                lambda s: [
                    (s.concurrency_limit, {"limit": "current"}),
                    (s.max_concurrency, {"limit": "max"}),
                ]
            )
        ],
        unit="{request}",
        description="Requests the engine lets in flight: its adaptive limit, and the most",
    )


def _reader(engine: Engine) -> Callable[[], EngineStats | None]:
    """``engine.stats()`` while the engine lives and has been opened, else ``None``."""
    ref = weakref.ref(engine)

    def read() -> EngineStats | None:
        alive = ref()
        if alive is None:
            return None
        try:
            return alive.stats()
        except RuntimeError:  # not opened yet
            return None

    return read


def _requests(stats: EngineStats) -> list[tuple[int, dict[str, str]]]:
    counts = (stats.gets, stats.heads, stats.lists)
    return [
        (getattr(kind_counts, outcome), {"kind": kind, "outcome": outcome})
        for kind, kind_counts in zip(_KINDS, counts, strict=True)
        for outcome in _OUTCOMES
    ]
