"""The writes of asyncdl's fsspec file system, every one refused: the file system
reads, and a write (``pipe``, ``put``, ``open(..., "wb")``, ``rm``, ``mkdir``, ``cp``,
``touch``, ``open_async(..., "wb")``) raises ``PermissionError`` saying so, before
anything is sent."""

from __future__ import annotations

from typing import Any

from ._paths import read_only


class ReadOnly:
    """fsspec's write methods, refused (a base of the file system)."""

    async def _pipe_file(self, path: str, value: Any, **kwargs: Any) -> None:
        raise read_only(path, "write an object")

    async def _pipe(self, path: Any, value: Any = None, **kwargs: Any) -> None:
        raise read_only(path, "write an object")

    async def _put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        raise read_only(rpath, "upload a file")

    async def _put(self, lpath: Any, rpath: Any, **kwargs: Any) -> None:
        raise read_only(rpath, "upload a file")

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        raise read_only(path2, "copy an object")

    async def _copy(self, path1: Any, path2: Any, **kwargs: Any) -> None:
        raise read_only(path2, "copy an object")

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        raise read_only(path, "remove an object")

    async def _rm(self, path: Any, recursive: bool = False, **kwargs: Any) -> None:
        raise read_only(path, "remove an object")

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        raise read_only(path, "make a directory")

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        raise read_only(path, "make a directory")

    async def open_async(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        """Refused for writing (``PermissionError``); for reading, fsspec's async files
        are not offered: ``_cat_file`` and ``_cat_ranges`` read (``NotImplementedError``)."""
        if any(c in mode for c in "wax+"):
            raise read_only(path, f"open a file in mode {mode!r}")
        raise NotImplementedError(
            "asyncdl's file system has no async files: read with await fs._cat_file() or "
            "fs._cat_ranges(), or open the file from a sync file system"
        )

    def rmdir(self, path: str) -> None:
        """Refused: the file system is read-only (``PermissionError``)."""
        raise read_only(path, "remove a directory")

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """Refused: the file system is read-only (``PermissionError``)."""
        raise read_only(path, "write an object")
