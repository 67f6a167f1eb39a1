"""Transfer settings: one frozen value shared by an engine and all its downloads."""

from __future__ import annotations

import math
from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: S3 serves ranges of any size, but parts below 64 KiB cost more in requests than
#: they gain in parallelism, and one part above 5 GiB is larger than S3 lets anyone
#: upload in one piece: both bounds catch unit mistakes (bytes vs MiB) early.
MIN_CHUNK_SIZE = 64 * KiB
MAX_CHUNK_SIZE = 5 * GiB


@dataclass(frozen=True, slots=True)
class TransferConfig:
    """How an :class:`~asyncdl.Engine` downloads:
    ``Engine(config=TransferConfig(max_concurrency=64))``.

    Every field is validated on construction; a bad value raises ``ValueError``.
    Frozen: ``dataclasses.replace(config, chunk_size=16 * 1024 * 1024)`` makes a
    changed copy.
    """

    #: Bytes per ranged GET. An object no larger than this is fetched in one request.
    chunk_size: int = 8 * MiB
    #: The engine's budget of in-flight S3 requests, shared by every download it runs.
    #: The connection pool of a client the engine creates is sized to match.
    max_concurrency: int = 10
    #: Lower the number of requests in flight when S3 throttles (503 SlowDown), for
    #: every download of the engine, and raise it again slowly as requests succeed,
    #: never above ``max_concurrency`` (the guide *Throttling, bandwidth and metrics*
    #: says how). False: always ``max_concurrency``.
    adaptive: bool = True
    #: Attempts per request (first try included) before a part gives up.
    max_attempts: int = 5
    #: Seconds a read may wait for bytes before the connection is dropped and retried.
    read_timeout: float = 30.0
    #: Seconds to establish a connection.
    connect_timeout: float = 10.0
    #: Bytes a part gathers from the network before one (vectored) write to the file.
    #: Bounds memory per in-flight part: no part body is held whole. With more than 10
    #: requests in flight each part gathers less, so the engine's parts gather about
    #: 10 MiB all together whatever ``max_concurrency``.
    write_size: int = 1 * MiB
    #: Base delay of the full-jitter exponential backoff between attempts, in seconds.
    backoff_base: float = 0.1
    #: Largest backoff delay between two attempts, in seconds.
    backoff_max: float = 20.0
    #: fsync the temp file before it replaces the target, and its directory after the
    #: rename (durability against power loss, at a cost per file).
    fsync: bool = False
    #: Send GETs through asyncdl's lean signed path: botocore prepares one request per
    #: bucket and asyncdl signs each GET from it, which saves most of the CPU a tiny
    #: object costs; what it cannot reproduce exactly goes through ``get_object``.
    #: False sends every GET with ``get_object``.
    lean_get: bool = True
    #: Checksum policy: ``"when_available"`` (check every checksum the responses
    #: carry, send nothing extra for one), ``"required"`` (fail unless verified), or
    #: ``"off"``. The guide *Integrity* says what each checks.
    validate: str = "when_available"
    #: Keep a failed, cancelled or killed download's partial file and its journal next
    #: to the target, and continue it the next time the same object is downloaded to
    #: the same path (the guide *Resume and sync* says more). False: a failed download
    #: leaves nothing.
    resume: bool = False
    #: Parts a ``stream()`` fetches ahead of its reader; memory is about this many
    #: ``chunk_size`` buffers per stream.
    stream_prefetch: int = 4
    #: Bytes per second that every download and stream of the engine reads at most,
    #: all together (``None``: no cap).
    max_bandwidth: int | None = None

    def __post_init__(self) -> None:
        _check_int("chunk_size", self.chunk_size, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
        _check_int("max_concurrency", self.max_concurrency, 1, 10_000)
        _check_int("max_attempts", self.max_attempts, 1, 100)
        _check_int("write_size", self.write_size, 4 * KiB, 64 * MiB)
        _check_int("stream_prefetch", self.stream_prefetch, 1, 1000)
        if self.max_bandwidth is not None and not is_int_at_least(self.max_bandwidth, 1):
            raise ValueError(
                "max_bandwidth must be an int of bytes per second > 0, or None for no cap, "
                f"got {self.max_bandwidth!r}"
            )
        _check_seconds("read_timeout", self.read_timeout)
        _check_seconds("connect_timeout", self.connect_timeout)
        _check_seconds("backoff_max", self.backoff_max)
        if not finite(self.backoff_base) or self.backoff_base < 0:
            raise ValueError(f"backoff_base must be a number >= 0, got {self.backoff_base!r}")
        if self.validate not in ("when_available", "required", "off"):
            raise ValueError(
                f"validate must be 'when_available', 'required' or 'off', got {self.validate!r}"
            )
        for name in ("adaptive", "fsync", "lean_get", "resume"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")


def is_int_at_least(value: object, low: int) -> bool:
    """An int (not a bool: ``True`` is a bug, not 1) that is at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")


def _check_seconds(name: str, value: object) -> None:
    if not finite(value) or value <= 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")


def finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
