"""The copies of asyncdl's fsspec file system: ``get`` and ``get_file``, through
``Engine.download``. Before anything is made or fetched, ``get`` checks where each
object lands: the names it builds come from keys, and a key is hostile. A key whose
segments would blur on disk (``a//b``, ``./x``), one named like asyncdl's own files,
two objects that would land on one file, or a key that is both a file and a
"directory" (``a`` and ``a/b``) refuse the whole copy with ``ValueError``: copied as
they are, one object would silently replace another, or be taken for asyncdl's own.

A destination may be shared. The directories of targets named from keys are reached
from the destination down as ``download_prefix`` reaches them (``held_dirs``): another
user's symbolic link on the way is refused (``LinkRefused``, an ``OSError``), not
followed out of the destination, and each file is made in the directory so opened.
Every directory that exists already is looked at before anything is made or fetched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from glob import has_magic
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.implementations.local import LocalFileSystem, make_path_posix, trailing_sep
from fsspec.utils import other_paths

from .._bulk.bulk import DownloadRequest, placed
from .._files import held_dirs
from .._files.held_dirs import HeldDir
from .._files.key_paths import relative_path
from ..engine import Engine
from ._paths import split, strip, translated


class Copies:
    """``get`` and ``get_file`` (a base of the file system)."""

    if TYPE_CHECKING:  # the file system's and fsspec's, declared for the type checker

        async def engine(self) -> Engine: ...
        async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]: ...
        async def _expand_path(self, path: Any, **kwargs: Any) -> list[str]: ...
        async def _isdir(self, path: str) -> bool: ...
        def _forget(self, path: str) -> Callable[[], None]: ...

    async def _get(
        self,
        rpath: Any,
        lpath: Any,
        recursive: bool = False,
        callback: Any = DEFAULT_CALLBACK,
        maxdepth: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """fsspec's ``get``: the same sources and targets, checked before any of them
        is made or fetched."""
        if isinstance(lpath, list) and isinstance(rpath, list):
            rpaths, lpaths, root = [strip(p) for p in rpath], lpath, None
        else:
            rpaths, lpaths, root = await self._targets(rpath, lpath, recursive, maxdepth)
            if not rpaths:
                return None
        await self._check_targets(rpaths, lpaths, root)
        if root is not None and held_dirs.SUPPORTED:
            return await self._get_under(rpaths, lpaths, root, callback)
        get = super()._get  # type: ignore[misc]  # fsspec's, through the file system
        return await get(rpaths, lpaths, callback=callback, **kwargs)

    async def _targets(
        self, rpath: Any, lpath: Any, recursive: bool, maxdepth: int | None
    ) -> tuple[list[str], list[str], str | None]:
        """The sources and their targets, as fsspec's ``get`` pairs them (and the
        destination the targets' names were built under)."""
        source_is_str = isinstance(rpath, str)
        source_not_trailing_sep = source_is_str and not trailing_sep(rpath)
        rpath = strip(rpath) if source_is_str else [strip(p) for p in rpath]
        rpaths = await self._expand_path(rpath, recursive=recursive, maxdepth=maxdepth)
        if source_is_str and (not recursive or maxdepth is not None):
            # Not recursive: a directory is not copied (fsspec's rule)
            rpaths = [p for p in rpaths if not (trailing_sep(p) or await self._isdir(p))]
            if not rpaths:
                return [], [], None
        lpath = make_path_posix(lpath)
        dest_is_dir = isinstance(lpath, str) and (
            trailing_sep(lpath) or LocalFileSystem().isdir(lpath)
        )
        exists = source_is_str and (
            (has_magic(rpath) and len(rpaths) == 1)
            or (not has_magic(rpath) and dest_is_dir and source_not_trailing_sep)
        )
        lpaths = other_paths(rpaths, lpath, exists=exists, flatten=not source_is_str)
        if not isinstance(lpath, str):
            return rpaths, lpaths, None
        # The names were built from keys under lpath: landing() checks each (a ".."
        # among them included, which recent fsspec's own check_contained refuses too).
        return rpaths, lpaths, lpath.rstrip("/")

    async def _check_targets(self, rpaths: list[str], lpaths: list[str], root: str | None) -> None:
        """Refuse (``ValueError``) targets that blur, collide or clash, before anything
        is made or fetched: see the module's docstring."""
        landed = landing(rpaths, lpaths, root)
        under: dict[str, str] = {}  # a target that others land in -> one of those
        for where, rp in landed.items():
            for above in ancestors(where):
                if above in under:
                    break  # and so are the directories above it
                if above in landed:
                    under[above] = rp
        for above, rp in under.items():  # one look each (mostly the listings cache's)
            if (await self._info(landed[above]))["type"] == "file":
                raise ValueError(
                    f"get: {landed[above]!r} is an object and {rp!r} is under it: "
                    "on disk it cannot be both a file and a directory of the same name"
                )

    async def _get_under(
        self, rpaths: list[str], lpaths: list[str], root: str, callback: Any
    ) -> None:
        """Copy sources to targets named from their keys under ``root`` (and any that is
        ``root`` itself, which the caller named), their directories held open from the
        destination down (see the module's docstring); the first failure raises."""
        infos = [await self._info(rp) for rp in rpaths]  # the listings cache's, mostly
        named: list[tuple[str, str]] = []
        below: list[tuple[str, dict[str, Any], Path, tuple[str, ...]]] = []
        for rp, lp, info in zip(rpaths, lpaths, infos, strict=True):
            if lp == root:
                named.append((rp, lp))
                continue
            parts = tuple(lp[len(root) + 1 :].split("/"))
            folder = parts if info["type"] == "directory" else parts[:-1]
            below.append((rp, info, Path(lp), folder))
        top = Path(root)
        await asyncio.to_thread(_look_below, top, sorted({folder for *_, folder in below}))
        callback.set_size(len(lpaths))
        for rp, lp in named:  # a path the caller named: made as named, as fsspec makes it
            await asyncio.to_thread(os.makedirs, os.path.dirname(lp) or ".", exist_ok=True)
            await self._get_file(rp, lp)
            callback.relative_update(1)
        if not below:
            return
        engine = await self.engine()
        requests = _requests(top, below, callback)
        async with contextlib.aclosing(engine.download_many(requests)) as results:
            async for result in results:
                if result.error is not None:
                    path = f"{result.bucket}/{result.key}"
                    with translated(path, forget=self._forget(path)):
                        raise result.error
                callback.relative_update(1)

    async def _get_file(self, rpath: str, lpath: str, callback: Any = None, **kwargs: Any) -> None:
        """Copy one object to ``lpath`` with ``Engine.download`` (its temp file, atomic
        publish, retries, resume when the config says so, the shared budget); a size
        and ETag from the listings cache skip discovery."""
        path = strip(rpath)
        info = await self._info(path)
        if info["type"] == "directory":
            os.makedirs(lpath, exist_ok=True)
            return
        bucket, key = split(path)
        engine = await self.engine()
        progress: Callable[[int, int | None], None] | None = None
        if callback is not None and hasattr(callback, "relative_update"):

            def progress(delta: int, total: int | None) -> None:
                if total is not None and callback.size != total:
                    callback.set_size(total)
                callback.relative_update(delta)

        with translated(path, forget=self._forget(path)):
            await engine.download(
                bucket, key, lpath, size=info["size"], etag=info["ETag"], progress=progress
            )


#: Directories of a copy kept open after their last file, for the next ones.
_HELD_MAX = 32


def _look_below(top: Path, folders: list[tuple[str, ...]]) -> None:
    """Walk to each folder as far as it exists, making nothing: a link that is not
    followed, or a file where a directory goes, raises before anything is made."""
    try:
        root = held_dirs.open_root(top, create=False)
    except FileNotFoundError:
        return  # nothing below it exists either
    for folder in folders:
        with contextlib.suppress(FileNotFoundError):  # made by the copy, with nothing on the way
            held_dirs.open_below(root, folder, create=False)


async def _requests(
    top: Path, below: list[tuple[str, dict[str, Any], Path, tuple[str, ...]]], callback: Any
) -> AsyncIterator[DownloadRequest]:
    """Each file's request, its directory opened (made where missing) just before: as
    the engine pulls them, so a copy of many directories holds few open at once."""
    root = await asyncio.to_thread(held_dirs.open_root, top, create=True)
    held: OrderedDict[tuple[str, ...], HeldDir] = OrderedDict()
    for rp, info, target, folder in below:
        where = held.get(folder)
        if where is None:
            where = await asyncio.to_thread(held_dirs.open_below, root, folder, create=True)
            held[folder] = where
            if len(held) > _HELD_MAX:
                held.popitem(last=False)
        held.move_to_end(folder)
        if info["type"] == "directory":
            callback.relative_update(1)
            continue
        bucket, key = split(rp)
        yield placed(bucket, key, target, size=info["size"], etag=info["ETag"], where=where)


def landing(rpaths: list[str], lpaths: list[str], root: str | None) -> dict[str, str]:
    """Where each source lands (the target, absolute and in the platform's case) and
    what lands there; ``ValueError`` for a name that blurs (``root`` is the destination
    the targets' names were built under from the keys) or two sources on one target."""
    if len(rpaths) != len(lpaths):
        raise ValueError("get: as many local paths as remote ones are needed")
    landed: dict[str, str] = {}
    for rp, lp in zip(rpaths, lpaths, strict=True):
        if root is not None and lp != root:
            # The part of the name that came from the key: each of its segments must
            # name itself, as for the engine's own downloads of a prefix.
            tail = lp[len(root) :]
            try:
                if not tail.startswith("/"):
                    raise ValueError("it does not land under the destination")
                if tail == "/":  # a name ending in "/": an empty last segment
                    raise ValueError("its empty segment would blur the destination")
                relative_path(tail[1:], "")
            except ValueError as exc:
                raise ValueError(f"get: cannot copy {rp!r} to {lp!r}: {exc}") from None
        where = os.path.normcase(os.path.abspath(lp))
        if where in landed:
            raise ValueError(
                f"get: {landed[where]!r} and {rp!r} would be copied to the same file {lp!r}"
            )
        landed[where] = rp
    return landed


def ancestors(where: str) -> list[str]:
    """The directories above an absolute path, nearest first."""
    found = []
    up = os.path.dirname(where)
    while up and up != where:
        found.append(up)
        where, up = up, os.path.dirname(up)
    return found
