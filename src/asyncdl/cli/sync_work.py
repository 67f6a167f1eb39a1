"""What ``asyncdl sync`` runs once its arguments are parsed: ``cp -r``'s download of
the prefix, skipping what is already there (``skip_existing``), then with
``--delete`` the removal of stale files asyncdl wrote; or with ``--dry-run`` the
listing alone, and what the rest would do (``cp -r --dry-run`` too, skipping nothing).

Removals come after the listing has finished, and only then: a listing that fails
midway has not named every key, and a file whose key it did not reach yet is not
stale. A file is removed only if its record still vouches for it (asyncdl wrote it
and nobody changed it since); every other stale file is left alone, and reported.

A ``--delete`` run holds its directory's lock (``sync_lock``) from before its listing
until its removals are done: another such run waits for it, polling (a wait that
Ctrl-C ends at once), or with ``--no-wait`` fails at once. A file changed since the
listing began (a run without ``--delete`` wrote it meanwhile) is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .._bulk.filters import compile_filters
from .._files import sync_lock
from .._files.file_records import SYNC_LOCK, EtagStore
from .._files.skipping import Skips
from .._files.stale import Stale, remove_stale, stale_files
from ..errors import DownloadError, InvalidRequestError
from .app import Settings
from .output import Output, printable
from .work import _open_engine, copy_prefix


@dataclass(frozen=True, slots=True)
class SyncJob:
    bucket: str
    #: The folder: empty, or ending in ``/``.
    prefix: str
    root: Path
    #: ``skip_existing``: ``"etag"``, or ``"size"`` (``--size-only``); ``None`` (a
    #: ``cp -r --dry-run``): nothing is skipped.
    mode: str | None
    #: ``(kind, pattern)`` in command-line order.
    filters: tuple[tuple[str, str], ...]
    delete: bool
    dry_run: bool
    #: With ``delete``: wait for another ``--delete`` run into ``root`` to end (else
    #: fail at once, :class:`SyncBusyError`).
    wait: bool = True


class RemovalError(Exception):
    """A stale file that could not be removed."""


class SyncBusyError(DownloadError):
    """Another ``sync --delete`` into the directory runs, and ``--no-wait`` was given;
    or its lock cannot be taken at all."""


#: Seconds between two tries of a held lock.
LOCK_POLL = 0.1


async def sync_prefix(settings: Settings, job: SyncJob, output: Output) -> tuple[bool, int]:
    """Sync; whether the listing finished, and how many objects it named."""
    if job.dry_run:
        return await _plan(settings, job, output)
    held = await _locked(job, output) if job.delete else None
    try:
        keys: set[str] = set()  # the listing's: a key is lighter to hold than its path
        complete = await copy_prefix(
            settings,
            job.bucket,
            job.prefix,
            job.root,
            strategy="auto",
            output=output,
            keys=keys,
            skip_existing=job.mode,
            filters=job.filters,
        )
        if complete and held is not None:
            listed = {key[len(job.prefix) :] for key in keys}
            await _delete(job, listed, output, since_ns=held.since_ns)
    finally:
        if held is not None:
            await asyncio.to_thread(sync_lock.release, held)
    return complete, len(keys)


async def _locked(job: SyncJob, output: Output) -> sync_lock.Held:
    """The directory's lock, once another ``--delete`` run into it has let go (or at
    once, ``SyncBusyError``, with ``job.wait`` false)."""
    where = {"bucket": job.bucket, "key": job.prefix}
    waiting = False
    while True:
        try:
            held = await asyncio.to_thread(sync_lock.try_lock, job.root)
        except OSError as exc:
            name = printable(str(job.root / SYNC_LOCK))
            raise SyncBusyError(f"cannot lock {name}: {exc.strerror or exc}", **where) from None
        if isinstance(held, sync_lock.Held):
            return held
        # What the holder wrote of itself came from a file: shown, never obeyed.
        holder = f" ({printable(held)})" if held else ""
        if not job.wait:
            raise SyncBusyError(
                f"another sync --delete into {printable(str(job.root))}{holder} is running; "
                "not waiting for it (--no-wait)",
                **where,
            )
        if not waiting:
            output.note(f"waiting for another sync --delete into {job.root}{holder} to end")
            waiting = True
        await asyncio.sleep(LOCK_POLL)


async def _plan(settings: Settings, job: SyncJob, output: Output) -> tuple[bool, int]:
    """``--dry-run``: the listing, and what the run would download and remove."""
    from .._bulk.bulk import list_prefix  # noqa: PLC0415 - with the engine's imports

    skips = None if job.mode is None else Skips(job.root, job.mode)
    listed: set[str] = set()
    try:
        if skips is not None:
            await skips.load()
        async with _open_engine(settings, output) as engine:
            items = list_prefix(
                engine.list_pages(job.bucket, job.prefix),
                bucket=job.bucket,
                prefix=job.prefix,
                filters=compile_filters(job.filters),
            )
            async with contextlib.aclosing(items):
                async for item in items:
                    if item.relative is None:
                        # The run would refuse it, as cp -r does: an error, exit 1.
                        refusal = str(item.refusal)
                        output.count(InvalidRequestError(refusal, bucket=job.bucket, key=item.key))
                        continue
                    listed.add("/".join(item.relative))
                    target = job.root.joinpath(*item.relative)
                    if skips is not None and await skips.skips(target, item.size, item.etag):
                        output.skipped += 1
                    else:
                        output.would_download(item.size)
                        _say(
                            output,
                            "download",
                            target,
                            dry_run=True,
                            bucket=job.bucket,
                            key=item.key,
                        )
                    output.count(None)  # as the run counts it, skipped or not
    except DownloadError as error:  # the listing failed: nothing to say about removals
        output.error(error)
        return False, output.done
    finally:
        if skips is not None:
            skips.close()
    output.all_listed()
    if job.delete:
        await _delete(job, listed, output)
    return True, output.done


async def _delete(
    job: SyncJob, listed: set[str], output: Output, *, since_ns: int | None = None
) -> None:
    store = EtagStore(job.root)
    kept = compile_filters(job.filters)
    included = kept.includes if kept is not None else _everything

    def scan() -> list[Stale]:
        return list(
            stale_files(
                store,
                listed.__contains__,
                included,
                bucket=job.bucket,
                prefix=job.prefix,
                since_ns=since_ns,
            )
        )

    try:
        for stale in await asyncio.to_thread(scan):
            if stale.kept_because is not None:
                _left_alone(output, stale)
                continue
            if not job.dry_run:
                try:
                    await asyncio.to_thread(remove_stale, store, stale)
                except OSError as exc:
                    # Not an object that failed: counted apart (``could not delete``).
                    error = RemovalError(
                        f"cannot delete {printable(str(stale.path))}: {exc.strerror}"
                    )
                    output.not_deleted(error)
                    if output.json_lines:
                        _say(output, "delete", stale.path, dry_run=False, error=error)
                    continue
            _say(output, "delete", stale.path, dry_run=job.dry_run)
    finally:
        store.close()


def _everything(relative: str) -> bool:
    return True


def _say(
    output: Output,
    action: str,
    path: Path,
    *,
    dry_run: bool,
    bucket: str = "",
    key: str = "",
    error: RemovalError | None = None,
) -> None:
    """One line on stdout, as the AWS CLI's: ``[(dryrun) ]delete: PATH``,
    ``(dryrun) download: s3://BUCKET/KEY to PATH``; or its JSON, which a removal that
    failed has too, with its ``error`` (as an object's line has it); its text is on
    stderr."""
    if action == "delete" and error is None:
        output.deleted += 1
    if output.json_lines:
        line: dict[str, object] = {"action": action, "dry_run": dry_run, "path": str(path)}
        if key:
            line.update(bucket=bucket, key=key)
        if error is not None:
            line["error"] = {"type": type(error).__name__, "message": str(error)}
        output.print_line(json.dumps(line), sys.stdout)
    elif not output.quiet:
        what = f"s3://{bucket}/{key} to {path}" if key else str(path)
        text = f"{'(dryrun) ' if dry_run else ''}{action}: {what}"
        output.print_line(printable(text), sys.stdout)


def _left_alone(output: Output, stale: Stale) -> None:
    if output.json_lines:
        line = {"action": "left-alone", "path": str(stale.path), "reason": stale.kept_because}
        output.print_line(json.dumps(line), sys.stdout)
    else:
        # The path is a name someone chose; the reason may quote a record's bucket and
        # key, which came with the file (a tarball's xattrs): shown, never obeyed.
        output.note(printable(f"left alone: {stale.path} ({stale.kept_because})"))
