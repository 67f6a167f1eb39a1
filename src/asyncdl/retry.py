"""The retry policy: which failures get another attempt, and how long to wait first.

asyncdl owns retries. A client the engine creates has botocore's retries turned
off, so one failed request is retried once, here, where a retry can resume a part
from its last written byte instead of starting the request over.
"""

from __future__ import annotations

import asyncio
import logging
import random

from .config import TransferConfig
from .errors import is_retryable, translate

logger = logging.getLogger("asyncdl")


def backoff_delay(config: TransferConfig, failures: int) -> float:
    """Full-jitter exponential backoff: uniform in ``[0, min(max, base * 2**(n-1))]``."""
    ceiling = min(config.backoff_max, config.backoff_base * 2 ** (failures - 1))
    return random.uniform(0, ceiling)


async def after_failure(
    config: TransferConfig, exc: Exception, failures: int, *, bucket: str, key: str, what: str
) -> int:
    """Count a failed attempt at ``what``: raise ``exc`` as a ``DownloadError`` unless it
    earns another attempt, else back off and return the failures so far."""
    failures += 1
    if not is_retryable(exc) or failures >= config.max_attempts:
        raise translate(exc, bucket=bucket, key=key, attempts=failures) from exc
    delay = backoff_delay(config, failures)
    logger.info(
        "retrying %s of s3://%s/%s (attempt %d of %d) in %.2fs after %s",
        what,
        bucket,
        key,
        failures + 1,
        config.max_attempts,
        delay,
        describe(exc),
    )
    await asyncio.sleep(delay)
    return failures


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
