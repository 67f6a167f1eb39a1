"""asyncdl's fsspec file system: ``AsyncdlFileSystem``, read-only, over the Engine.

Every call goes through one engine per event loop the file system runs on, opened
there on first use: the caller's with ``asynchronous=True``, fsspec's own loop thread
otherwise. One file system may serve several loops (fsspec hands the same instance to
every caller with the same options: Zarr's loop thread and an application's, say).
Listings are the engine's (``Engine.list_pages``); a directory's listing is kept in
fsspec's listings cache, whose sizes and ETags let a later read or copy of one of its
objects skip discovery and pin every GET."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from fsspec.asyn import AsyncFileSystem

from .._reads.random_access import FirstBlock, RandomAccessReader
from ..config import TransferConfig
from ..engine import Engine
from ..errors import InvalidRequestError, ObjectNotFoundError
from ._copies import Copies
from ._engines import Opened, close_all, close_opened, engine_on_loop, transfer_config
from ._file import AsyncdlFile
from ._heads import Heads
from ._paths import dir_info, file_info, parent, read_only, split, strip, translated, within
from ._read_only import ReadOnly

#: fsspec's own options (its listings cache): passed on to it, not to the engine.
_LISTING_OPTIONS = ("use_listings_cache", "listings_expiry_time", "max_paths")
_SETTINGS = "config, endpoint_url, region, profile, unsigned (or anon), engine"
#: What ``cat_file`` of a whole object reads at most: no bound but memory's, as
#: s3fs's ``cat``; ``Engine.read_bytes`` wants one.
_NO_LIMIT = 2**62


class AsyncdlFileSystem(ReadOnly, Copies, AsyncFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """S3 through asyncdl's engine, read-only, as an fsspec file system: paths are
    ``bucket/key`` (``asyncdl://bucket/key`` as a URL; ``s3://`` too once
    :func:`~asyncdl.fsspec.register_as_s3` routes it here).

    ``storage_options``: ``config`` (a :class:`~asyncdl.TransferConfig` or a dict of
    its fields), ``endpoint_url``, ``region``, ``profile``, ``unsigned`` (``anon``,
    s3fs's name for it, too), as :class:`~asyncdl.Engine` takes them; or ``engine``,
    an Engine of the caller's (used as it is, never closed). Else the file system
    opens an engine on first use on each event loop it runs on (fsspec's loop thread
    for the sync methods, the caller's with ``asynchronous=True``), shared by every
    call there; :meth:`aclose` and :meth:`close` close them, and so does the file
    system's collection.
    """

    #: The URL scheme fsspec knows it by: ``asyncdl://bucket/key``.
    protocol = ("asyncdl",)
    #: Paths have no leading ``/``: ``bucket/key``, as s3fs's.
    root_marker = ""
    #: fsspec reuses one instance for the same options (its engines are per loop).
    cachable = True

    def __init__(
        self,
        *,
        engine: Engine | None = None,
        config: TransferConfig | Mapping[str, Any] | None = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        unsigned: bool = False,
        anon: bool | None = None,
        asynchronous: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
        batch_size: int | None = None,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - set(_LISTING_OPTIONS))
        if unknown:
            raise TypeError(
                f"unknown storage option(s) {', '.join(unknown)}: asyncdl's file system "
                f"takes {_SETTINGS}; credentials come from the environment or the profile"
            )
        if anon is not None and not isinstance(anon, bool):
            raise ValueError(f"anon must be a bool, got {anon!r}")
        settings: dict[str, Any] = {
            "config": transfer_config(config),
            "endpoint_url": endpoint_url,
            "region": region,
            "profile": profile,
            "unsigned": unsigned or bool(anon),
        }
        if engine is not None:
            if not isinstance(engine, Engine):
                raise ValueError(f"engine must be an asyncdl.Engine, got {engine!r}")
            if any(v not in (None, False) for v in settings.values()):
                raise ValueError(
                    "engine is used as it is: its settings are its own; pass engine or "
                    "the settings (config, endpoint_url, ...), not both"
                )
        else:
            Engine(**settings)  # checks the settings now; it opens on first use
        super().__init__(asynchronous=asynchronous, loop=loop, batch_size=batch_size, **options)
        self._settings = settings
        self._given = engine
        self._engines: dict[asyncio.AbstractEventLoop, Opened] = {}
        self._heads = Heads(self.dircache.listings_expiry_time)
        weakref.finalize(self, close_all, self._engines)

    # -- the engine -------------------------------------------------------------------

    @property
    def chunk_size(self) -> int:
        """The engine's ``chunk_size``: the largest block a file reads in one GET."""
        config = self._given.config if self._given is not None else self._settings["config"]
        return (config or TransferConfig()).chunk_size

    async def engine(self) -> Engine:
        """The engine of the running loop, opened on first use there: one per event
        loop, since an engine's connections belong to the loop that opened them."""
        if self._given is not None:
            return self._given
        return await engine_on_loop(self._engines, self._settings)

    async def aclose(self) -> None:
        """Close the engine the file system opened on the running loop (an engine
        passed in stays open); the next call there opens a new one."""
        opened = self._engines.pop(asyncio.get_running_loop(), None)
        if opened is not None:
            await close_opened(opened)

    def close(self) -> None:
        """Close every engine the file system opened, each on its loop (from sync
        code: fsspec's loop thread, where a sync file system runs, say)."""
        close_all(self._engines)

    async def open_reader(
        self,
        bucket: str,
        key: str,
        block_size: int,
        blocks: int,
        *,
        first_block: FirstBlock,
        pinned: tuple[int, str] | None = None,
    ) -> RandomAccessReader:
        """The engine's reader of the object, open: its first GET sent, or none when the
        listings cache has the object's size and ETag, or ``pinned`` gives them (a file
        unpickled: it reads the version it was opened on, or fails)."""
        engine = await self.engine()
        path = f"{bucket}/{key}"
        listed = next((e for e in self._listed(parent(path)) or () if e["name"] == path), None)
        # Listed, or its HEAD seen: its size and ETag open the reader with no GET.
        size, etag = (listed["size"], listed["ETag"]) if listed and listed["ETag"] else (None, None)
        if etag is None and (headed := self._heads.get(path)) is not None:
            size, etag = headed
        if pinned is not None:
            size, etag = pinned
        reader = engine.open_reader(
            bucket,
            key,
            block_size=block_size,
            cache_blocks=blocks,
            first_block=first_block,
            size=size,
            etag=etag,
        )
        return await reader.open()

    # -- paths and listings ---------------------------------------------------------------

    def invalidate_cache(self, path: str | None = None) -> None:
        """Forget the cached listings and HEADs: all of them, or those of ``path``, of
        what is under it, and of the directories above it (whose listings hold it)."""
        name = strip(path) if path is not None else ""
        if not name:
            self.dircache.clear()
            self._heads.forget()
        else:
            for cached in [c for c in self.dircache if c == name or c.startswith(f"{name}/")]:
                self.dircache.pop(cached, None)
            up = name
            while up:
                up = parent(up)
                self.dircache.pop(up, None)
            self._heads.forget(name)
        super().invalidate_cache(path)

    def _forget(self, path: str) -> Callable[[], None]:
        """What ``translated`` calls when ``path`` is gone or changed: its cached size
        and ETag are stale, and the next read must find the object anew."""
        return lambda: self.invalidate_cache(path)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return strip(path)

    def unstrip_protocol(self, name: str) -> str:
        """``name`` as an ``asyncdl://`` URL."""
        return f"asyncdl://{strip(name)}"

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = strip(path)
        entries = None if kwargs.get("refresh") else self._listed(path)
        if entries is None:
            entries = await self._list_dir(path)
        return entries if detail else [entry["name"] for entry in entries]

    def _listed(self, path: str) -> list[dict[str, Any]] | None:
        try:
            entries: list[dict[str, Any]] = self.dircache[path]
        except KeyError:
            return None
        return entries

    async def _list_dir(self, path: str) -> list[dict[str, Any]]:
        bucket, key = split(path)
        if not bucket:
            engine = await self.engine()
            with translated(path):
                answer = await engine.client.list_buckets()
            return [dir_info(b["Name"]) for b in answer.get("Buckets", [])]
        prefix = f"{key}/" if key else ""
        entries: list[dict[str, Any]] = []
        async for page in self._pages(bucket, prefix, delimiter="/"):
            entries += [
                dir_info(f"{bucket}/{p['Prefix'].rstrip('/')}")
                for p in page.get("CommonPrefixes", [])
            ]
            contents = page.get("Contents", [])  # less the folder's own marker:
            entries += [file_info(bucket, o, prefix) for o in contents if o.get("Key") != prefix]
        if entries or not key:
            self.dircache[path] = entries
            return entries
        info = await self._info(path)  # a file lists as itself; a missing path raises
        return [info] if info["type"] == "file" else []

    async def _pages(
        self, bucket: str, prefix: str, *, delimiter: str | None = None, most: int | None = None
    ) -> Any:
        engine = await self.engine()
        params = {"MaxKeys": most} if most is not None else None
        with translated(f"{bucket}/{prefix}"):
            async with contextlib.aclosing(
                engine.list_pages(bucket, prefix, delimiter=delimiter, params=params)
            ) as pages:
                async for page in pages:
                    yield page
                    if most is not None:
                        return

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = strip(path)
        bucket, key = split(path)
        if not bucket:
            return dir_info("")
        if not key:
            async for _ in self._pages(bucket, "", most=1):  # a missing bucket raises
                pass
            return dir_info(bucket)
        for entry in self._listed(parent(path)) or ():
            if entry["name"] == path:
                return entry
        engine = await self.engine()
        try:
            with translated(path):
                head = await engine.head(bucket, key)
        except FileNotFoundError as exc:
            if not isinstance(exc.__cause__, ObjectNotFoundError):
                raise
        else:
            if self.dircache.use_listings_cache:
                self._heads.note(path, head.size, head.etag)
            return {
                "name": path,
                "type": "file",
                "size": head.size,
                "ETag": head.etag,
                "LastModified": head.headers.get("last-modified"),
            }
        async for page in self._pages(bucket, f"{key}/", delimiter="/", most=1):
            if page.get("Contents") or page.get("CommonPrefixes"):
                return dir_info(path)
        raise FileNotFoundError(path)

    async def _find(
        self, path: str, maxdepth: int | None = None, withdirs: bool = False, **kwargs: Any
    ) -> Any:
        """Everything under ``path`` from one flat listing (not a walk of ``ls``); the
        listing fills the listings cache of every directory it covers."""
        detail = kwargs.pop("detail", False)
        path = strip(path)
        bucket, key = split(path)
        if maxdepth is not None or not bucket:
            return await super()._find(path, maxdepth, withdirs, detail=detail, **kwargs)
        prefix = f"{key}/" if key else ""
        found: dict[str, dict[str, Any]] = {}
        dirs: dict[str, dict[str, Any]] = {path: {}}
        async for page in self._pages(bucket, prefix):
            for listed in page.get("Contents", []):
                info = file_info(bucket, listed, prefix)
                if (name := info["name"].rstrip("/")) != info["name"]:
                    info = dir_info(name)
                self._place(info, dirs, path)
                if info["type"] == "file":
                    found[name] = info
        if withdirs:
            found.update((name, dir_info(name)) for name in dirs if name != path)
        if len(dirs) > 1 or any(dirs[path]):
            for name, entries in dirs.items():
                self.dircache[name] = list(entries.values())
            if withdirs and key:
                found[path] = dir_info(path)
        elif key:
            with contextlib.suppress(FileNotFoundError):
                info = await self._info(path)
                if info["type"] == "file":
                    found[path] = info
        names = sorted(found)
        return {name: found[name] for name in names} if detail else names

    @staticmethod
    def _place(info: dict[str, Any], dirs: dict[str, dict[str, Any]], top: str) -> None:
        """Put ``info`` in its directory's entries, and each directory between it and
        ``top`` in its own parent's."""
        name, entry = info["name"], info
        while name != top:
            up = parent(name)
            entries = dirs.setdefault(up, {})
            if name in entries:  # placed already, and so are the directories above it
                return
            entries[name] = entry
            name, entry = up, dir_info(up)

    # -- reads ----------------------------------------------------------------------------

    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = strip(path)
        bucket, key = split(path)
        if not key:
            raise IsADirectoryError(errno.EISDIR, "a bucket is not an object", path)
        engine = await self.engine()
        with translated(path, forget=self._forget(path)):
            if start is None and end is None:
                return await engine.read_bytes(bucket, key, max_size=_NO_LIMIT)
            begin = start or 0
            if begin >= 0 and (end is None or end >= 0):
                if end is not None and end <= begin:
                    return b""
                try:
                    return await self._stream(engine, bucket, key, begin, end)
                except InvalidRequestError:  # a start past the end, or a bad key
                    pass
            (data,) = await self._ranges(engine, path, [(start, end)])
            return data

    @staticmethod
    async def _stream(engine: Engine, bucket: str, key: str, start: int, end: int | None) -> bytes:
        async with contextlib.aclosing(engine.stream(bucket, key, start=start, end=end)) as s:
            return b"".join([piece async for piece in s])

    async def _ranges(
        self,
        engine: Engine,
        path: str,
        ranges: list[tuple[int | None, int | None]],
        max_gap: int | None = None,
    ) -> list[bytes]:
        """The ranges of one object (fsspec's: ``None`` ends, negative offsets from the
        end, cut to the object), from one version: the size and ETag come from the
        listings cache or one HEAD, so every GET is pinned."""
        info = await self._info(path)
        if info["type"] != "file":
            raise IsADirectoryError(path)
        size, etag = info["size"], info["ETag"]
        bucket, key = split(path)
        cut = [within(s, e, size) for s, e in ranges]
        with translated(path, forget=self._forget(path)):
            return await engine.read_ranges(bucket, key, cut, size=size, etag=etag, max_gap=max_gap)

    async def _cat_ranges(  # noqa: PLR0917 - fsspec's signature
        self,
        paths: list[str],
        starts: Any,
        ends: Any,
        max_gap: int | None = None,
        batch_size: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[Any]:
        """Each object's ranges together, as ``Engine.read_ranges`` joins them (ranges
        ``max_gap`` apart share a GET), all pinned to one version of the object."""
        if not isinstance(paths, list):
            raise TypeError(f"paths must be a list, got {paths!r}")
        count = len(paths)
        starts = starts if isinstance(starts, list | tuple) else [starts] * count
        ends = ends if isinstance(ends, list | tuple) else [ends] * count
        if len(starts) != count or len(ends) != count:
            raise ValueError("paths, starts and ends must be as long as each other")
        engine = await self.engine()
        by_path: dict[str, list[int]] = {}
        for i, p in enumerate(paths):
            by_path.setdefault(strip(p), []).append(i)
        out: list[Any] = [None] * count

        async def one(path: str, where: list[int]) -> None:
            try:
                with translated(path):
                    got = await self._ranges(
                        engine, path, [(starts[i], ends[i]) for i in where], max_gap
                    )
            except Exception as exc:
                if on_error != "return":
                    raise
                got = [exc] * len(where)  # type: ignore[list-item]
            for i, data in zip(where, got, strict=True):
                out[i] = data

        await asyncio.gather(*(one(p, w) for p, w in by_path.items()))
        return out

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: object = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncdlFile:
        if mode != "rb":
            raise read_only(path, f"open a file in mode {mode!r}")
        if self.asynchronous:
            raise NotImplementedError(
                "fs.open() blocks: with asynchronous=True read with await fs._cat_file() "
                "or fs._cat_ranges(), or open the file from a sync file system"
            )
        return AsyncdlFile(
            self,
            strip(path),
            block_size=block_size,
            cache_type=kwargs.pop("cache_type", None) or "readahead",
            cache_options=cache_options,
            first_block=kwargs.pop("first_block", None),
        )
