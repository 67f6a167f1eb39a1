"""The client an engine (or the command) creates for itself."""

from __future__ import annotations

import datetime
import threading
from contextlib import AsyncExitStack
from typing import Any

import pytest

from asyncdl._wire.clients import create_default_client
from asyncdl.config import TransferConfig


@pytest.mark.parametrize("as_text", [False, True])
async def test_timestamps_as_text_leave_last_modified_as_sent(
    s3: Any, bucket: str, s3_endpoint: str, as_text: bool
) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    async with AsyncExitStack() as stack:
        client = await create_default_client(
            stack, TransferConfig(), endpoint_url=s3_endpoint, timestamps_as_text=as_text
        )
        page = await client.list_objects_v2(Bucket=bucket)
        head = await client.head_object(Bucket=bucket, Key="k")
    modified = page["Contents"][0]["LastModified"]
    if as_text:
        # The command's client: the listing's text, unparsed (asyncdl never reads it).
        assert isinstance(modified, str)
        assert modified.endswith("Z")
    else:
        # Everyone else's: botocore's datetimes, as an engine's ``client`` promises.
        assert isinstance(modified, datetime.datetime)
        assert isinstance(head["LastModified"], datetime.datetime)
    assert page["Contents"][0]["Size"] == 1


async def test_the_session_is_made_and_its_models_read_off_the_event_loop(
    s3: Any, bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new botocore session registers ~120 handlers, inspecting each one's signature,
    # and S3's models are megabytes of JSON: neither may block the loop.
    import aiobotocore.session  # noqa: PLC0415

    made_in: list[threading.Thread] = []
    real = aiobotocore.session.get_session

    def get_session() -> Any:
        made_in.append(threading.current_thread())
        return real()

    monkeypatch.setattr(aiobotocore.session, "get_session", get_session)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    async with AsyncExitStack() as stack:
        client = await create_default_client(stack, TransferConfig(), endpoint_url=s3_endpoint)
        assert (await client.head_object(Bucket=bucket, Key="k"))["ContentLength"] == 1
    assert len(made_in) == 1
    assert made_in[0] is not threading.current_thread()
