"""asyncdl: an asyncio engine for downloading objects from S3 and S3-compatible stores."""

from importlib import metadata as _metadata

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

try:
    #: The installed version: pyproject.toml's, as pip recorded it (one source of truth).
    __version__: str = _metadata.version("asyncdl")
except _metadata.PackageNotFoundError:  # a source tree imported without being installed
    __version__ = "0+unknown"

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
