"""What one HEAD request says of an object (``Engine.head()`` sends it): what a web
handler uses for its headers and conditional answers without asking for any byte."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a HEAD request says of an object (:meth:`~asyncdl.Engine.head`)."""

    #: The object's size in bytes.
    size: int
    #: The object's ETag, quoted as S3 sends it (``None`` if the answer had none).
    etag: str | None
    #: The answer's HTTP headers, lower-case names (Content-Type, Last-Modified...).
    headers: Mapping[str, str]
