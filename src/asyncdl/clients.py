"""The aiobotocore client an engine creates when it is not handed one."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from .config import TransferConfig


async def create_default_client(
    stack: AsyncExitStack,
    config: TransferConfig,
    *,
    endpoint_url: str | None = None,
    timestamps_as_text: bool = False,
) -> Any:
    """An S3 client from the default session, closed when ``stack`` closes.

    The session honours the standard AWS environment and config files
    (``AWS_ENDPOINT_URL_S3``, credentials, region); ``endpoint_url``, when given,
    overrides the endpoint they name (the command line's ``--endpoint-url``).

    ``timestamps_as_text`` leaves response timestamps (a listing's ``LastModified``)
    as S3 sent them: botocore parses each with dateutil, which was three quarters of
    the CPU of parsing a 1000-key listing page, for a value asyncdl never reads. Only
    for a client nobody else sees (the command's): others expect datetimes.
    """
    client_config = AioConfig(
        max_pool_connections=pool_size(config),
        # The engine decides what it validates; botocore's default would ask every
        # GET for checksums, which third-party stores have broken on.
        response_checksum_validation="when_required",
        request_checksum_calculation="when_required",
        # asyncdl retries, resuming parts; botocore retrying too would multiply attempts.
        retries={"total_max_attempts": 1},
        read_timeout=config.read_timeout,
        connect_timeout=config.connect_timeout,
    )
    session = get_session()  # a new session each time: its settings are this client's
    if timestamps_as_text:
        factory = session.get_component("response_parser_factory")
        factory.set_parser_defaults(timestamp_parser=_as_text)
    # botocore reads S3's models (a few MB of JSON) while it builds a client: ~60 ms
    # that would block the event loop. Read them in a thread first; botocore's loader
    # caches them, and create_client then takes a few ms on the loop.
    await asyncio.to_thread(_load_models, session)
    return await stack.enter_async_context(
        session.create_client("s3", config=client_config, endpoint_url=endpoint_url)
    )


def pool_size(config: TransferConfig) -> int:
    """Connections an engine's HTTP pool keeps: its budget's (aiobotocore's default
    of 10 would queue an engine's extra requests), never fewer than that default."""
    return max(10, config.max_concurrency)


def _as_text(value: str) -> str:
    return value


def _load_models(session: Any) -> None:
    loader = session.get_component("data_loader")
    for type_name in ("service-2", "endpoint-rule-set-1", "paginators-1"):
        loader.load_service_model("s3", type_name)
    for name in ("partitions", "endpoints", "_retry", "sdk-default-configuration"):
        loader.load_data(name)
