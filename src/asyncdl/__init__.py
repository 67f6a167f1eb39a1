"""asyncdl: an asyncio engine for downloading objects from S3 and S3-compatible stores.

A public name's module is imported when the name is first used (PEP 562), so
``import asyncdl`` and the command's ``--help`` do not pay for aiobotocore, aiohttp
and botocore (about a third of a second) until something downloads.
"""

import importlib
import typing

if typing.TYPE_CHECKING:  # what type checkers and IDEs see: the names, imported as usual
    from ._bulk.bulk import DownloadRequest
    from ._files.key_paths import relative_path
    from ._reads.random_access import RandomAccessReader
    from ._reads.streaming import ObjectStream
    from ._reads.sync_reader import SyncReader
    from ._transfer.strategies import GetFirst, HeadFirst, Strategy
    from .api import download
    from .config import TransferConfig
    from .engine import Engine
    from .errors import (
        AccessDeniedError,
        ChecksumError,
        DownloadError,
        InvalidRequestError,
        ObjectChangedError,
        ObjectNotFoundError,
        TargetBusyError,
    )
    from .object_info import ObjectInfo
    from .results import DownloadResult
    from .stats import EngineStats, RequestCounts

    #: The installed version (``"0.1.0"``), read from the package's metadata once asked for.
    __version__: str

__all__ = [
    "AccessDeniedError",
    "ChecksumError",
    "DownloadError",
    "DownloadRequest",
    "DownloadResult",
    "Engine",
    "EngineStats",
    "GetFirst",
    "HeadFirst",
    "InvalidRequestError",
    "ObjectChangedError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStream",
    "RandomAccessReader",
    "RequestCounts",
    "Strategy",
    "SyncReader",
    "TargetBusyError",
    "TransferConfig",
    "download",
    "relative_path",
]

#: The module behind each public name.
_MODULES = {
    "AccessDeniedError": "errors",
    "ChecksumError": "errors",
    "DownloadError": "errors",
    "DownloadRequest": "_bulk.bulk",
    "DownloadResult": "results",
    "Engine": "engine",
    "EngineStats": "stats",
    "GetFirst": "_transfer.strategies",
    "HeadFirst": "_transfer.strategies",
    "InvalidRequestError": "errors",
    "ObjectChangedError": "errors",
    "ObjectInfo": "object_info",
    "ObjectNotFoundError": "errors",
    "ObjectStream": "_reads.streaming",
    "RandomAccessReader": "_reads.random_access",
    "RequestCounts": "stats",
    "Strategy": "_transfer.strategies",
    "SyncReader": "_reads.sync_reader",
    "TargetBusyError": "errors",
    "TransferConfig": "config",
    "download": "api",
    "relative_path": "_files.key_paths",
}


def _version() -> str:
    from importlib import metadata  # noqa: PLC0415 - ~20 ms that only --version needs

    try:
        return metadata.version("asyncdl")
    except metadata.PackageNotFoundError:  # a source tree imported without being installed
        return "0+unknown"


if not typing.TYPE_CHECKING:  # hidden from type checkers, which would let any name through

    def __getattr__(name: str) -> object:
        if name == "__version__":
            value: object = _version()
        elif name in _MODULES:
            value = getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value  # found once: later uses are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__, "__version__"})
