"""The retry policy: which failures get another attempt, and how long to wait first.

asyncdl owns retries. A client the engine creates has botocore's retries turned
off, so one failed request is retried once, here, where a retry can resume a part
from its last written byte instead of starting the request over.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..config import TransferConfig
from ..errors import describe, is_retryable, source_name, translate
from ..stats import Counters

logger = logging.getLogger("asyncdl")

_T = TypeVar("_T")


def backoff_delay(config: TransferConfig, failures: int) -> float:
    """Full-jitter exponential backoff: uniform in ``[0, min(max, base * 2**(n-1))]``."""
    ceiling = min(config.backoff_max, config.backoff_base * 2 ** (failures - 1))
    return random.uniform(0, ceiling)


async def after_failure(
    config: TransferConfig,
    exc: Exception,
    failures: int,
    *,
    bucket: str,
    key: str,
    what: str,
    counters: Counters | None,
) -> int:
    """Count a failed attempt at ``what``: raise ``exc`` as a ``DownloadError`` unless it
    earns another attempt, else back off and return the failures so far (a retry, in
    the engine's ``counters``)."""
    failures += 1
    if not is_retryable(exc) or failures >= config.max_attempts:
        error = translate(exc, bucket=bucket, key=key, attempts=failures)
        if error is exc:
            # Already ours: as it is, with its own cause (``from exc`` would make it
            # its own cause, losing the real one and looping whoever walks causes).
            raise error
        raise error from exc
    if counters is not None:
        counters.retries += 1
    delay = backoff_delay(config, failures)
    logger.info(
        "retrying %s of %s (attempt %d of %d) in %.2fs after %s",
        what,
        source_name(bucket, key),
        failures + 1,
        config.max_attempts,
        delay,
        describe(exc),
    )
    await asyncio.sleep(delay)
    return failures


async def with_retries(
    config: TransferConfig,
    call: Callable[[], Awaitable[_T]],
    *,
    bucket: str,
    key: str,
    what: str,
    counters: Counters | None,
) -> _T:
    """``await call()``, again after each failure that earns another attempt (see
    :func:`after_failure`), for a request that has nothing to resume."""
    failures = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            failures = await after_failure(
                config, exc, failures, bucket=bucket, key=key, what=what, counters=counters
            )
