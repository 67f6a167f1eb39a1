"""What every download of one engine shares: the client, the config, the request budget,
the lean GET sender, the bandwidth cap, the stats, and what the engine has learnt of
its server.

The engine creates one when it opens; one object's transfer, the part fetchers, bulk
downloads and streams take it instead of the engine, so nothing below the engine
reaches back up to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .adaptive import Budget
from .bandwidth import TokenBucket
from .config import TransferConfig
from .request_args import ExtraArgs
from .s3_source import S3Object
from .signed_get import SignedGets
from .stats import Counters


@dataclass(slots=True, eq=False)
class Context:
    """One open engine's resources."""

    #: The aiobotocore S3 client (the engine's own, or a borrowed one).
    client: Any
    config: TransferConfig
    #: The budget of requests in flight, shared by every download of the engine.
    #: Its limit moves with S3's throttling when ``config.adaptive``.
    budget: Budget
    #: The lean GET path, or ``None`` (``lean_get=False``, or a client it cannot serve).
    signed: SignedGets | None
    #: Whether the server answers PartNumber GETs part by part (``None``: not asked
    #: yet). One engine talks to one endpoint, so asking once is enough.
    part_gets: bool | None = None
    #: The bandwidth cap every body read of the engine draws from (``None``: no cap).
    bandwidth: TokenBucket | None = field(init=False)
    #: What the engine has done so far (``engine.stats()``).
    counters: Counters = field(default_factory=Counters)

    def __post_init__(self) -> None:
        rate = self.config.max_bandwidth
        self.bandwidth = None if rate is None else TokenBucket(rate)

    def s3_object(self, bucket: str, key: str, extra_args: ExtraArgs) -> S3Object:
        """The requests of one object through this client and budget."""
        return S3Object(
            self.client,
            self.budget,
            bucket,
            key,
            extra_args,
            counts=self.counters,
            signed=self.signed,
            checksum_mode=self.config.validate != "off",
        )
