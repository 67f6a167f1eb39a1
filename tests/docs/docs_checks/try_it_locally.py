"""docs/try-it-locally.md: the API, the command and the one-script example each wrote
the object the page put, whole. The bucket the page made on the suite's server (which
every page shares) is removed, so that no other page sees it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3

BODY = b"Hello from a local S3!\n"


async def check(namespace: dict[str, Any]) -> None:
    written = ["again.txt", "hello.txt", "world.txt"]
    for name in written:
        assert Path(name).read_bytes() == BODY, name
    assert sorted(p.name for p in Path().iterdir()) == written
    result = namespace["result"]  # the script's, from its own moto
    assert (result.size, result.requests) == (len(BODY), 1)
    # The page's first bucket was made on the suite's server (the environment's
    # endpoint, as a reader's moto on port 9000); the script's went with its moto.
    s3 = boto3.client("s3")
    s3.delete_object(Bucket="try-bucket", Key="hello/world.txt")
    s3.delete_bucket(Bucket="try-bucket")
