"""``asyncdl clean DIR``: list and remove the partial files interrupted copies left
(see ``asyncdl._files.partials``), never one a running download holds."""

from __future__ import annotations

import re
from pathlib import Path

import click

from .app import cli
from .output import mib
from .params import DURATION_UNITS, converter

_DURATION = re.compile(r"(\d+)([smhdw])")


def parse_duration(text: str) -> float:
    """``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` -> seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration: a whole number and s, m, h, d or w (7d)")
    return int(match[1]) * DURATION_UNITS[match[2]]


@cli.command()
@click.argument(
    "directory", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option(
    "--older-than",
    metavar="DURATION",
    default=None,
    callback=converter(parse_duration),
    help="Only those unchanged for this long: 90s, 30m, 12h, 7d, 2w.",
)
@click.option("--no-recursive", is_flag=True, help="Only DIR itself, not its subdirectories.")
def clean(directory: Path, dry_run: bool, older_than: float | None, no_recursive: bool) -> int:
    """Remove the partial files interrupted copies left under DIR.

    A copy that failed, was interrupted or killed leaves .NAME.asyncdl-partial and
    .NAME.asyncdl-journal beside its target, for the next copy to continue; a copy
    without resume (or an old version) a .NAME.XXXXXXXX.asyncdl-tmp file. This lists
    them (with the object each is of) and removes them; one that a running copy is
    writing is left alone, whatever its age (a running copy holds a lock on it; a temp
    file also counts as running while it changed in the last minute). Nothing else is
    touched. One that cannot be removed (an immutable file,
    another user's) is reported with the reason; the rest are still removed, and the
    exit status is 1.
    """
    from .._files.partials import find_partials, remove_partial  # noqa: PLC0415 - only when run
    from ..errors import source_name  # noqa: PLC0415 - only when run

    total = 0
    unseen: list[OSError] = []
    found = find_partials(directory, recursive=not no_recursive, errors=unseen)
    for exc in unseen:
        click.echo(f"error: cannot look at {exc.filename}: {exc.strerror or exc}", err=True)
    stuck = len(unseen)
    for leftover in found:
        if older_than is not None and leftover.age < older_than:
            continue
        what = f"{leftover.paths[0]}"
        if leftover.bucket is not None and leftover.key is not None:
            what += f" ({source_name(leftover.bucket, leftover.key)}, {leftover.etag})"
        what += f", {mib(leftover.bytes_on_disk)}, {_age(leftover.age)} old"
        if leftover.busy:
            click.echo(f"busy (left alone): {what}")
        elif dry_run:
            click.echo(f"would remove: {what}")
            total += leftover.bytes_on_disk
        else:
            try:
                removed = remove_partial(leftover)
            except OSError as exc:
                stuck += 1
                where = exc.filename if exc.filename is not None else leftover.paths[0]
                click.echo(f"error: cannot remove {where}: {exc.strerror or exc}", err=True)
                continue
            if removed:
                click.echo(f"removed: {what}")
                total += leftover.bytes_on_disk
            else:
                click.echo(f"busy (left alone): {what}")
    verb = "would free" if dry_run else "freed"
    if stuck:
        leftovers = "leftover" if stuck == 1 else "leftovers"
        click.echo(f"could not remove {stuck} {leftovers}; {verb} {mib(total)}", err=True)
        return 1
    click.echo(f"{verb} {mib(total)}", err=True)
    return 0


def _age(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{seconds:.0f}s"
