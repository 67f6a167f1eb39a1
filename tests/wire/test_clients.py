"""The client an engine (or the command) creates for itself."""

from __future__ import annotations

import datetime
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
