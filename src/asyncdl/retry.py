"""The retry policy: which failures get another attempt, and how long to wait first.

asyncdl owns retries. A client the engine creates has botocore's retries turned
off, so one failed request is retried once, here, where a retry can resume a part
from its last written byte instead of starting the request over.
"""

from __future__ import annotations

import logging
import random

from .config import TransferConfig

logger = logging.getLogger("asyncdl")


def backoff_delay(config: TransferConfig, failures: int) -> float:
    """Full-jitter exponential backoff: uniform in ``[0, min(max, base * 2**(n-1))]``."""
    ceiling = min(config.backoff_max, config.backoff_base * 2 ** (failures - 1))
    return random.uniform(0, ceiling)
