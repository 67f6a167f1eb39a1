"""Listing a bucket into a manifest, on the workers, one task per common prefix."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import pandas as pd

from .._bulk.listing import shown_entry
from ..config import TransferConfig
from ..errors import translate
from ._errors import ManifestError
from ._runtime import runtime

#: A listing's columns: what S3 Inventory and ListObjectsV2 both give.
MANIFEST_DTYPES: dict[str, str] = {
    "bucket": "object",
    "key": "object",
    "size": "int64",
    "etag": "object",
}


def list_level(
    bucket: str,
    prefix: str,
    delimiter: str | None,
    config: TransferConfig,
    list_args: Mapping[str, str],
) -> tuple[pd.DataFrame, list[str]]:
    """The objects under ``prefix`` (directly under it, with a delimiter) and, with a
    delimiter, the common prefixes below it. Runs in a worker's task thread."""
    return runtime().run(_list(bucket, prefix, delimiter, config, list_args))


def list_all(
    bucket: str, prefix: str, config: TransferConfig, list_args: Mapping[str, str]
) -> pd.DataFrame:
    """Every object under ``prefix``: one partition of the manifest."""
    return list_level(bucket, prefix, None, config, list_args)[0]


async def _list(
    bucket: str,
    prefix: str,
    delimiter: str | None,
    config: TransferConfig,
    list_args: Mapping[str, str],
) -> tuple[pd.DataFrame, list[str]]:
    keys: list[str] = []
    sizes: list[int] = []
    etags: list[str | None] = []
    prefixes: list[str] = []
    try:
        engine = await runtime().engine(config)
        listing = engine.list_pages(bucket, prefix, delimiter=delimiter, params=list_args)
        async with contextlib.aclosing(listing) as pages:
            async for page in pages:
                for entry in page.get("Contents", ()):
                    key, size = shown_entry(entry, bucket=bucket, prefix=prefix)
                    if key.endswith("/") and size == 0:
                        continue  # a folder marker, not a file
                    keys.append(key)
                    sizes.append(size)
                    etags.append(entry.get("ETag"))
                prefixes.extend(common["Prefix"] for common in page.get("CommonPrefixes", ()))
    except Exception as exc:
        # asyncdl's errors take keyword arguments, which do not survive the pickling
        # back to the client; the message (with the S3 error) does.
        error = translate(exc, bucket=bucket, key=prefix)
        raise ManifestError(f"listing failed: {type(error).__name__}: {error}") from exc
    frame = pd.DataFrame(
        {"bucket": [bucket] * len(keys), "key": keys, "size": sizes, "etag": etags}
    )
    return frame.astype(MANIFEST_DTYPES), prefixes
