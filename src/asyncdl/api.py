"""The one-call function: open an engine, download, close it."""

from __future__ import annotations

import os
from typing import Any

from ._transfer.strategies import Strategy
from ._wire.request_args import ExtraArgs
from .config import TransferConfig
from .engine import Engine
from .progress import ProgressCallback
from .results import DownloadResult


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
    engine open instead (it reuses its client and connections). The arguments are
    :meth:`Engine.download`'s and :class:`Engine`'s.

    Args:
        bucket: The bucket's name.
        key: The object's key.
        path: The file to write; its directory must exist.
        strategy: As for :meth:`Engine.download`.
        config: The engine's :class:`TransferConfig`.
        client: An aiobotocore S3 client to borrow, as for :class:`Engine`.
        extra_args: GetObject arguments, as for :meth:`Engine.download`.
        size: The object's size, when known, as for :meth:`Engine.download`.
        etag: The object's ETag, when known.
        timeout: Seconds for the whole download.
        checksum: The object's checksum, when known.
        progress: Called as bytes reach the file, as for :meth:`Engine.download`.
        endpoint_url: For the client the engine creates, as for :class:`Engine`.
        region: For the client the engine creates.
        profile: For the client the engine creates.
        unsigned: Read a public bucket anonymously, as for :class:`Engine`.
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
