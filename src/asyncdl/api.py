"""The one-call function: open an engine, download, close it."""

from __future__ import annotations

import os
from typing import Any

from .config import TransferConfig
from .engine import Engine
from .progress import ProgressCallback
from .request_args import ExtraArgs
from .results import DownloadResult
from .strategies import Strategy


async def download(
    bucket: str,
    key: str,
    path: str | os.PathLike[str],
    *,
    strategy: str | Strategy = "auto",
    config: TransferConfig | None = None,
    client: Any = None,
    extra_args: ExtraArgs | None = None,
    size: int | None = None,
    etag: str | None = None,
    timeout: float | None = None,
    checksum: str | None = None,
    progress: ProgressCallback | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    unsigned: bool = False,
) -> DownloadResult:
    """Download ``s3://bucket/key`` to ``path`` and return what was written.

    Opens an :class:`Engine` for this one call; to download many objects, keep one
    engine open instead (it reuses its client and connections). ``config``, ``client``
    and the settings of the client it creates (``endpoint_url``, ``region``,
    ``profile``, ``unsigned``) are :class:`Engine`'s.
    """
    engine = Engine(
        client,
        config=config,
        endpoint_url=endpoint_url,
        region=region,
        profile=profile,
        unsigned=unsigned,
    )
    async with engine:
        return await engine.download(
            bucket,
            key,
            path,
            strategy=strategy,
            extra_args=extra_args,
            size=size,
            etag=etag,
            timeout=timeout,
            checksum=checksum,
            progress=progress,
        )
