"""What one HEAD request says of an object: ``Engine.head()``, which a web handler
uses for its headers and conditional answers without asking for any byte."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .context import Context
from .request_args import ExtraArgs, check_bucket_and_key, check_extra_args
from .retry import with_retries


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a HEAD request says of an object (:meth:`~asyncdl.Engine.head`)."""

    #: The object's size in bytes.
    size: int
    #: The object's ETag, quoted as S3 sends it (``None`` if the answer had none).
    etag: str | None
    #: The answer's HTTP headers, lower-case names (Content-Type, Last-Modified...).
    headers: Mapping[str, str]


async def head(ctx: Context, bucket: str, key: str, extra_args: ExtraArgs | None) -> ObjectInfo:
    """One HEAD of the object (retried as any request), through the engine's budget."""
    check_bucket_and_key(bucket, key)
    obj = ctx.s3_object(bucket, key, check_extra_args(extra_args, bucket=bucket, key=key))
    meta = await with_retries(
        ctx.config, obj.head, bucket=bucket, key=key, what="the HEAD", counters=ctx.counters
    )
    return ObjectInfo(meta.size, meta.etag, meta.headers)
