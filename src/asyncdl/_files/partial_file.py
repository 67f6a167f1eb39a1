"""A resumable download's files (``resume=True``): the partial file it writes into,
kept on failure, and its journal (see ``journal``), locked while the download runs.

Next to the target ``NAME``: ``.NAME.asyncdl-partial`` (the bytes at their offsets,
preallocated to the object's size; one whose preallocation fails goes at once with its
journal, as a temp file does) and ``.NAME.asyncdl-journal``. A write's line is
appended after its ``pwritev`` calls returned, in the same call (with ``fsync=True``
after the partial was ``fdatasync``-ed): a killed process loses nothing it recorded;
a power loss, only with ``fsync=True``. So a partial is adopted as it is only when its
journal says every line was written so (its header's ``fsync``); otherwise each
recorded range is read back and checked against its CRCs first, and one that does
not match is fetched again (a power loss leaves preallocated extents reading back as
zeros while the journal, written later, survived).

Compacting the journal (see ``journal``) writes the new one under a name of its own
(``partial_paths.compaction_path``: what a kill left there removed, then ``O_EXCL``),
takes its lock, syncs it with ``fsync=True``, and renames it over the
old one; only then is the old descriptor (and its lock) let go. The lock lives on
the file, not the name: whoever opened the old file and then got its lock finds the
name no longer names it (the check in ``partial_paths.open_locked``) and tries again,
finding the new file locked. There is no moment the name names an unlocked journal.
A fresh journal (no partial adopted) is made the same way: a file at the journal's
name is never emptied and written in place (a hard link planted there since it was
opened would be written through).

Both files are made ``0o600`` (``partial_paths``: only a file of this user alone is
trusted, and under a umask such as ``002`` a partial made ``0o666`` would be the
group's to write too). A published partial gets the mode any new file gets there
(``0o666`` less the umask), or the replaced target's, as a temp file does.

Their names, safe opening, the lock, and looking at them from outside a download
are in :mod:`asyncdl._files.partial_paths`."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aiofiles.os import wrap

from .._wire.checksums import CRC_ALGORITHMS, crc_function
from . import journal, own_files
from .file_calls import fsync_directory as _fsync_directory
from .file_calls import mode_of as _mode_of
from .file_calls import preallocate
from .file_writes import CrcOf, crc_of, write_all
from .held_dirs import HeldDir, at
from .journal import Header, Recorded
from .partial_paths import (
    JOURNAL_FLAGS,
    PARTIAL_FLAGS,
    Busy,
    NotRegular,
    Unusable,
    compaction_path,
    open_locked,
    open_regular,
    paths_for,
    remove_name,
)
from .writer import TempFile, _Discarded, hold

_READ_SIZE = 1024 * 1024
#: Seconds a failed download waits for a write still running to release its lock.
_RELEASE_WAIT = 10.0


class PartialFile(TempFile):
    """A :class:`~asyncdl._files.writer.TempFile` that, once opened, is the target's partial
    file: kept (its lock released) when the download fails, each write recorded in the
    journal, the journal removed once the file is published. ``adopt``: take over an
    earlier attempt's bytes when the journal is of the same object (:attr:`adopted`).
    A small file published in one write never opens: it stays a plain temp file."""

    def __init__(
        self,
        target: Path,
        header: Header,
        busy: Busy,
        *,
        fsync: bool,
        adopt: bool,
        where: HeldDir | None = None,
    ) -> None:
        super().__init__(target, header.size, fsync=fsync, where=where)
        self.header = header
        self._busy = busy
        self._adopt = adopt
        self._journal_fd = -1
        #: Ranges taken over from an earlier attempt when opened.
        self.adopted: list[Recorded] = []
        #: Bytes the journal recorded that did not read back as recorded (fetched again).
        self.unmatched = 0
        #: Why the journal, read in full when opened, was not used (damaged).
        self.refused: str | None = None
        #: Remove the partial and journal too when discarded (they are of no use).
        self.drop = False
        #: What a write at this offset continues: where its journal line begins,
        #: whether that is where the part began (the verifier's running CRC is then
        #: of the line's bytes), and the line's CRC32 so far.
        self._starts: dict[int, tuple[int, bool, int]] = {}
        self._starts_lock = threading.Lock()
        #: Held to append to the journal or to replace it.
        self._journal_lock = threading.Lock()
        self._journal_size = 0
        self._compact_at = journal.COMPACT_AT
        #: Set once the lock is released (see :meth:`released`); made when opened.
        self._unlocked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @functools.cached_property
    def files(self) -> tuple[Path, Path]:
        """The partial file and the journal (worked out only when needed: a small file
        published in one write never needs them); in a held directory, named by ``at``."""
        return paths_for(self.target)

    async def open(self) -> None:
        """Lock the journal, and open the partial file: an earlier attempt's (with
        ``adopt``, when the journal is of the same object), else a fresh one."""
        self._loop, self._unlocked = asyncio.get_running_loop(), asyncio.Event()
        await _open(self)

    def _open_sync(self) -> None:
        self._enter()
        try:
            locked = open_locked(self.files[1], self._busy, create=True, dir_fd=self._dir_fd)
            assert locked is not None  # created if missing
            self._journal_fd = locked
            try:
                fd = self._adopted() if self._adopt else None
                self._fd = fd if fd is not None else self._fresh()
            except BaseException:
                self._release()
                raise
            self.path = self.files[0]
        finally:
            self._leave()

    def _adopted(self) -> int | None:
        found = journal.read(self._journal_fd)
        self.refused = found.damaged
        if found.damaged or found.header != self.header or not found.ranges:
            return None
        try:
            fd = open_regular(self.files[0], PARTIAL_FLAGS, dir_fd=self._dir_fd)
        except (FileNotFoundError, NotRegular):
            return None  # a link planted since the lookup: _fresh removes it
        try:
            if os.fstat(fd).st_size != self.size:
                os.close(fd)
                return None
            ranges = found.ranges
            if not found.durable:
                # The journal may have outlived the bytes (fsync=False, then a power
                # loss): trusted only as far as the bytes read back match it.
                ranges = self._checked(fd, ranges)
                self.unmatched = sum(e - s for s, e, _ in found.ranges) - sum(
                    e - s for s, e, _ in ranges
                )
                if ranges and self._fsync:
                    _datasync(fd)  # so that the new header may say they are durable
            if not ranges:
                os.close(fd)
                return None
            # Written again, merged: a range that did not match is gone (else the line
            # of the part that fetches it again, if cut short, would lose to it), so is
            # a line a crash cut short, and the header says how this run writes.
            ranges = journal.merge(ranges, open_starts=(), size=self.size)
            self._replace_journal(journal.content(self.header, ranges, fsync=self._fsync))
        except BaseException:
            os.close(fd)
            raise
        self.adopted = ranges
        return fd

    def _checked(self, fd: int, ranges: list[Recorded]) -> list[Recorded]:
        """The ranges whose bytes, read back from the partial, match every CRC the
        journal records of them (each of them may feed the end-to-end check)."""
        # Short ranges are read a block at a time, not a read each (a journal may
        # hold a million ranges of a few bytes).
        cached, at = b"", 0
        kept: list[Recorded] = []
        blocks: Iterable[bytes]
        for start, end, crcs in ranges:
            if not crcs or not all(name in CRC_ALGORITHMS for name in crcs):
                continue
            if end - start <= _READ_SIZE:
                if not (at <= start and end <= at + len(cached)):
                    if self._closed:
                        raise _Discarded
                    cached, at = os.pread(fd, _READ_SIZE, start), start
                blocks = [cached[start - at : end - at]]
                if len(blocks[0]) != end - start:
                    continue  # past the file's end
            else:
                blocks = self._blocks_of_file(fd, start, end)
            with contextlib.suppress(_Short):
                if _crcs_of(blocks, sorted(crcs)) == crcs:
                    kept.append((start, end, crcs))
        return kept

    def _blocks_of_file(self, fd: int, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of the file, a block at a time (fewer at its end)."""
        offset = start
        while offset < end:
            if self._closed:
                raise _Discarded  # a cancelled download stops reading a large partial
            block = os.pread(fd, min(_READ_SIZE, end - offset), offset)
            if not block:
                raise _Short
            yield block
            offset += len(block)

    def _fresh(self) -> int:
        try:
            # A journal of the header alone first: bytes left in the partial then mean
            # nothing. A new file renamed over the name, never the file there emptied.
            self._replace_journal(self.header.line(fsync=self._fsync))
            # Whatever is at the partial's name goes (an old partial, or a link planted
            # there: the link, not what it points to): the partial is always made anew.
            held = self._dir_fd
            for _ in range(8):
                remove_name(self.files[0], held)
                try:
                    flags = PARTIAL_FLAGS | os.O_CREAT | os.O_EXCL
                    fd = os.open(at(self.files[0], held), flags, 0o600, dir_fd=held)
                    break
                except FileExistsError:
                    continue
            else:
                path = str(self.files[0])
                raise FileExistsError(errno.EEXIST, "the partial keeps being made", path)
        except Unusable:
            # Nothing left behind: the journal (ours, locked) is of no partial.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(at(self.files[1], self._dir_fd), dir_fd=self._dir_fd)
            raise
        try:
            preallocate(fd, self.size)
        except BaseException:
            # A full disk (ENOSPC), a size limit (EFBIG): the partial holds no byte yet
            # and its journal only the header, but ext4 keeps the blocks a failed
            # preallocation got. Both go, as a temp file does, so that the objects
            # after this one find the space; the journal while still locked. From the
            # directory they were made in: the path may name another by now.
            os.close(fd)
            for made in self.files:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(at(made, held), dir_fd=held)
            raise
        return fd

    def _plain(self) -> bool:
        return False  # each write appends its journal line

    def _writes_on_loop(self) -> bool:
        """With ``fsync=True`` each write syncs the file to the disk before its journal
        line: never on the event loop."""
        return not self._fsync

    def _write_sync(
        self, offset: int, chunks: Sequence[bytes], crc: CrcOf[Any] | None, previous: Any
    ) -> Any:
        """Write (on the loop, or in an executor hop: see ``file_writes``), then append
        the journal's line for the part the bytes belong to."""
        end = offset + sum(map(len, chunks))
        # A part's CRC so far is 0 where it starts: then the bytes start a range of their
        # own (a CRC run from 0 is the same whatever came before). Otherwise they
        # continue the part whose last write ended here; if none did, they start a
        # line of their own, without the verifier's CRC (it runs from the part's start).
        fresh = previous in (0, None) or previous == (0, 0, 0)
        with self._starts_lock:
            known = None if fresh else self._starts.get(offset)
        start, theirs, own = (offset, fresh, 0) if known is None else known
        self._enter()
        try:
            write_all(self._fd, chunks, offset)
            value = crc_of(chunks, crc, previous)
            if self._fsync:
                _datasync(self._fd)
            crcs = journal.crcs_of(crc, value) if theirs else {}
            if "CRC32" not in crcs:
                # The journal's own, so that every range can be checked when read back.
                update = crc_function("CRC32")
                for chunk in chunks:
                    own = update(chunk, own)
                crcs["CRC32"] = own
            with self._starts_lock:
                # Before the line: a compaction meanwhile must not merge this range
                # into the one before it, which the part's next line would overlap.
                self._starts.pop(offset, None)
                self._starts[end] = (start, theirs, crcs["CRC32"])
            line = journal.line_of([start, end, crcs])
            with self._journal_lock:
                os.write(self._journal_fd, line)
                self._journal_size += len(line)
                if self._journal_size > self._compact_at:
                    self._compact()
        finally:
            self._leave()
        return value

    def _compact(self) -> None:
        """Merge the journal's contiguous ranges (under ``_journal_lock``). A failure
        leaves the journal as it was, and is tried again once it has doubled."""
        try:
            found = journal.read(self._journal_fd)
            if found.damaged is None:
                with self._starts_lock:
                    open_starts = {start for start, _, _ in self._starts.values()}
                ranges = journal.merge(found.ranges, open_starts=open_starts, size=self.size)
                self._replace_journal(journal.content(self.header, ranges, fsync=found.durable))
                return
        except OSError:
            pass
        self._compact_at = 2 * self._journal_size

    def _replace_journal(self, content: bytes) -> None:
        """:meth:`_rewrite`, or where a file open elsewhere cannot be renamed over
        (Windows), the journal emptied and written again in place: a crash in between
        leaves it with fewer lines or none (then the partial is discarded), never with
        a range it did not have."""
        try:
            self._rewrite(content)
        except PermissionError:
            if os.name != "nt":
                raise
            os.ftruncate(self._journal_fd, 0)
            view = memoryview(content)
            while view:
                view = view[os.write(self._journal_fd, view) :]
            if self._fsync:
                os.fsync(self._journal_fd)
            self._journal_size = len(content)
            self._compact_at = max(journal.COMPACT_AT, 2 * len(content))

    def _rewrite(self, content: bytes) -> None:
        """Replace the journal with ``content``, atomically, its lock held throughout:
        see the module's note."""
        path = self.files[1]
        temp = compaction_path(path)
        held = self._dir_fd
        for _ in range(8):
            # Only the holder of the journal's lock writes there: what is there is a
            # killed compaction's (or planted), removed.
            remove_name(temp, held)
            try:
                flags = JOURNAL_FLAGS | os.O_CREAT | os.O_EXCL
                fd = os.open(at(temp, held), flags, 0o600, dir_fd=held)
            except FileExistsError:
                continue
            if hold(fd):
                break
            os.close(fd)  # a dead-temp sweep took it first (and removes it): again
        else:
            raise FileExistsError(
                errno.EEXIST, "the journal's new file keeps being made", str(temp)
            )
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            if self._fsync:
                os.fsync(fd)
            os.replace(at(temp, held), at(path, held), src_dir_fd=held, dst_dir_fd=held)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(at(temp, held), dir_fd=held)
            raise
        old, self._journal_fd = self._journal_fd, fd
        os.close(old)
        if self._fsync:
            _fsync_directory(path.parent, held)
        self._journal_size = len(content)
        self._compact_at = max(journal.COMPACT_AT, 2 * len(content))

    def _replace(self) -> None:
        if self._journal_fd >= 0 and self._fd >= 0 and _mode_of(self._at, self._dir_fd) is None:
            # Made 0o600; published, it gets the mode a new file gets (an existing
            # target's is kept by TempFile).
            os.fchmod(self._fd, 0o666 & ~own_files.process_umask())
        super()._replace()
        if self._journal_fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(at(self.files[1], self._dir_fd), dir_fd=self._dir_fd)
            self._release()

    def _remove(self) -> None:
        try:
            super()._remove()
        finally:
            if self.drop and self._journal_fd >= 0:
                for path in self.files:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(at(path, self._dir_fd), dir_fd=self._dir_fd)
            self._release()

    def _release(self) -> None:
        fd, self._journal_fd = self._journal_fd, -1
        if fd >= 0:
            os.close(fd)
            if self._loop is not None and self._unlocked is not None:  # maybe in a thread
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                    self._loop.call_soon_threadsafe(self._unlocked.set)

    async def released(self) -> None:
        """Wait until the lock is released: after :meth:`discard`, a write still running
        in a worker thread finishes first (milliseconds), then the file is closed. A
        failed download returns only then, so that trying again at once does not find
        its own lock."""
        if self._journal_fd >= 0 and self._unlocked is not None:
            # Bounded: a write stuck on a hung file system must not hang the failure.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_RELEASE_WAIT):
                    await self._unlocked.wait()


class _Short(Exception):
    """The file ended before the range did (cut meanwhile): the range is not kept."""


def _crcs_of(blocks: Iterable[bytes], algorithms: list[str]) -> dict[str, int]:
    """The CRCs of ``blocks``' bytes, by algorithm, in one pass."""
    updates = [crc_function(name) for name in algorithms]
    values = [0] * len(updates)
    for block in blocks:
        values = [update(block, value) for update, value in zip(updates, values, strict=True)]
    return dict(zip(algorithms, values, strict=True))


def _datasync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


_open = wrap(PartialFile._open_sync)
