"""asyncdl: an asyncio engine for downloading objects from S3 and S3-compatible stores."""

from .api import download
from .bulk import DownloadRequest
from .config import TransferConfig
from .engine import Engine
from .errors import (
    AccessDeniedError,
    ChecksumError,
    DownloadError,
    InvalidRequestError,
    ObjectChangedError,
    ObjectNotFoundError,
)
from .results import DownloadResult
from .strategies import GetFirst, HeadFirst, Strategy
from .streaming import ObjectStream

__all__ = [
    "AccessDeniedError",
    "ChecksumError",
    "DownloadError",
    "DownloadRequest",
    "DownloadResult",
    "Engine",
    "GetFirst",
    "HeadFirst",
    "InvalidRequestError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "ObjectStream",
    "Strategy",
    "TransferConfig",
    "download",
]
