"""The aiobotocore client an engine creates when it is not handed one, and what the
engine hooks on one it borrows."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

from ..config import TransferConfig
from ..stats import NETWORK_ERROR, OK, THROTTLED, Counters, answer_outcome
from .adaptive import SLOT, Budget
from .body_endings import note_body_ending


async def create_default_client(
    stack: AsyncExitStack,
    config: TransferConfig,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    unsigned: bool = False,
    timestamps_as_text: bool = False,
) -> Any:
    """An S3 client from the default session, closed when ``stack`` closes.

    The session honours the standard AWS environment and config files
    (``AWS_ENDPOINT_URL_S3``, ``AWS_PROFILE``, ``AWS_REGION`` (over
    ``AWS_DEFAULT_REGION``, as the AWS CLI v2), credentials); each
    setting given overrides what they name: ``endpoint_url``, ``region``, ``profile``
    (the config files' profile to read; botocore's ``ProfileNotFound`` if neither file
    has it). ``unsigned`` sends every request without a signature (a public bucket's
    anonymous access): no credentials are looked up, nor sent if the environment has
    some.

    Its answers are read by :mod:`asyncdl._wire.answer_parsing`: botocore's results, for
    less CPU. ``timestamps_as_text`` leaves response timestamps (a listing's
    ``LastModified``) as S3 sent them, a value asyncdl never reads. Only for a client
    nobody else sees (the command's): others expect datetimes.
    """
    # Here, not at the top: an engine that makes no client (a URL command's) never
    # loads aiobotocore.
    from aiobotocore.config import AioConfig  # noqa: PLC0415
    from aiobotocore.session import get_session  # noqa: PLC0415
    from botocore import UNSIGNED  # noqa: PLC0415

    signing: dict[str, Any] = {"signature_version": UNSIGNED} if unsigned else {}
    client_config = AioConfig(
        **signing,
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
    from .answer_parsing import ParserFactory, parse_timestamp  # noqa: PLC0415

    if region is None:
        # botocore reads AWS_DEFAULT_REGION alone; the AWS CLI v2 and the other SDKs
        # read AWS_REGION first, and users of either set that one.
        region = os.environ.get("AWS_REGION") or None
    # botocore's results, read for less CPU (a listing's page most of all).
    factory = ParserFactory()
    factory.set_parser_defaults(
        timestamp_parser=_as_text if timestamps_as_text else parse_timestamp
    )

    def new_session() -> Any:
        session = get_session()  # a new session each time: its settings are this client's
        if profile is not None:
            # As botocore's Session(profile=...): it wins over AWS_PROFILE, and the
            # environment's keys are no longer taken over the profile's.
            session.set_config_variable("profile", profile)
        session.register_component("response_parser_factory", factory)
        _load_models(session)
        return session

    # In a thread, not on the event loop: botocore reads S3's models (a few MB of
    # JSON, ~60 ms) while it builds a client, and a new session registers its ~120
    # handlers, each with its signature inspected (7-15 ms). The loader caches the
    # models, so create_client then takes only its own few ms on the loop.
    session = await asyncio.to_thread(new_session)
    client = await stack.enter_async_context(
        session.create_client(
            "s3", config=client_config, endpoint_url=endpoint_url, region_name=region
        )
    )
    client.meta.events.register_first(ANSWERED, note_endings, unique_id=ENDINGS_ID)
    return client


#: botocore's event for a GetObject answer before its parsing: its body is not read yet.
ANSWERED = "before-parse.s3.GetObject"
#: The handler's registration on a client (one per client, whatever the engines on it).
ENDINGS_ID = "asyncdl-endings"


def note_endings(*, response_dict: Any = None, **_: Any) -> None:
    """Take how a ``get_object`` answer's body will end while its connection is there
    (``body_endings.note_ending``): a body that only the connection's end delimits and
    that came whole with the answer has its connection gone, its TLS and its session
    with it, before any reader looks. Between the answer and this event botocore does
    not give the loop a turn; the handler is registered first, before any that might."""
    if isinstance(response_dict, Mapping):
        note_body_ending(response_dict.get("body"))


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


class ClientRetries:
    """Counts the retries a borrowed client makes by itself.

    A client the engine creates never retries (asyncdl does, resuming parts); one
    handed in may, inside one call: botocore asks ``needs-retry`` after each attempt
    and, when a handler answers with a delay, sleeps and creates the request again.
    Each attempt's outcome is noted in the call's context (kept across its attempts)
    when it ends, and counted when the next attempt is created, that is, once botocore
    has decided to retry: a retry, the attempt by its outcome, and a throttled one cuts
    the adaptive limit as asyncdl's own do. The call's last attempt is the answer the
    engine sees and counts itself.

    A call is the engine's when the slot its task took last is of the engine's budget
    (``adaptive.SLOT``): two engines on one client, or the caller's own calls, are not
    mixed up. The handlers are registered while the engine is open: the client
    outlives it.
    """

    def __init__(self, client: Any, budget: Budget, counters: Counters) -> None:
        self._events = client.meta.events
        self._budget = budget
        self._kinds = {
            "GetObject": counters.gets,
            "HeadObject": counters.heads,
            "ListObjectsV2": counters.lists,
        }
        self._counters = counters
        self._id = f"asyncdl-retries-{id(self)}"
        #: Where an attempt's outcome waits in the call's context (one per engine).
        self._note = f"{self._id}-attempt"

    @classmethod
    def hook(cls, client: Any, budget: Budget, counters: Counters) -> ClientRetries | None:
        """Register on ``client``'s events; ``None`` for a client without botocore's."""
        events = getattr(getattr(client, "meta", None), "events", None)
        if events is None or not hasattr(events, "unregister"):
            return None
        hooked = cls(client, budget, counters)
        events.register("needs-retry.s3", hooked._ended, unique_id=f"{hooked._id}-ended")
        events.register("request-created.s3", hooked._created, unique_id=f"{hooked._id}-made")
        # How its bodies end, as on a client the engine creates. One handler per client
        # (a second engine's registration is a no-op), left when the engine closes: an
        # engine still open on the client needs it, and it changes nothing a caller of
        # the client sees (it notes how a close-delimited body ends, on its answer).
        # First: a handler of the caller's own on the event may give the loop turns (an
        # async one), in which a body that came whole has its connection end.
        events.register_first(ANSWERED, note_endings, unique_id=ENDINGS_ID)
        return hooked

    def unhook(self) -> None:
        self._events.unregister("needs-retry.s3", unique_id=f"{self._id}-ended")
        self._events.unregister("request-created.s3", unique_id=f"{self._id}-made")

    def _ended(
        self,
        *,
        operation: Any = None,
        request_dict: Any = None,
        response: Any = None,
        caught_exception: BaseException | None = None,
        **_: Any,
    ) -> None:
        slot = SLOT.get()
        counts = self._kinds.get(getattr(operation, "name", ""))
        if slot is None or slot[0] is not self._budget or counts is None:
            return  # another engine's call, the caller's own, or not one the engine sends
        context = request_dict.get("context") if isinstance(request_dict, Mapping) else None
        if not isinstance(context, dict):
            return
        if caught_exception is not None or not isinstance(response, tuple):
            where = NETWORK_ERROR
        else:
            http, parsed = response
            error = parsed.get("Error") if isinstance(parsed, Mapping) else None
            code = error.get("Code") if isinstance(error, Mapping) else None
            status = getattr(http, "status_code", 0)
            status = status if isinstance(status, int) else 0
            where = OK if status < 300 and code is None else answer_outcome(status, code)
        context[self._note] = (counts, where, slot[1])

    def _created(self, *, request: Any = None, **_: Any) -> None:
        context = getattr(request, "context", None)
        if not isinstance(context, dict):
            return
        ended = context.pop(self._note, None)
        if ended is None:
            return  # a first attempt
        counts, where, epoch = ended
        self._counters.retries += 1
        counts[where] += 1
        if where == THROTTLED:
            self._budget.throttled(epoch)
