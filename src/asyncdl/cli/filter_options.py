"""The options ``cp --recursive`` and ``sync`` share to choose their objects:
``--exclude`` and ``--include``, in the order given, and ``--dry-run`` (``--dryrun``, the
AWS CLI's spelling, is the same option).

click hands each repeatable option its own tuple and loses the order between them; its
parser keeps it (one entry per occurrence), so :class:`FilteredCommand` reads it back
from there into ``ctx.meta[FILTERS]``: ``(kind, pattern)`` pairs, as ``filters`` takes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._bulk.filters import KINDS

_Command = TypeVar("_Command", bound=Callable[..., Any])

#: Where the parse leaves the filters, in command-line order, for the command.
FILTERS = "asyncdl._bulk.filters"


class FilteredCommand(click.Command):
    """A command whose ``--exclude``/``--include`` keep their command-line order."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # A parse of our own, for the order only: click's, below, checks and converts.
        _, _, order = self.make_parser(ctx).parse_args(args=list(args))
        rest = super().parse_args(ctx, args)
        if ctx.resilient_parsing:  # shell completion: values may be missing
            return rest
        given = {kind: iter(ctx.params.get(kind) or ()) for kind in KINDS}
        ctx.meta[FILTERS] = [
            (param.name, next(given[param.name])) for param in order if param.name in KINDS
        ]
        return rest


def filters(ctx: click.Context) -> tuple[tuple[str, str], ...]:
    """The command's ``(kind, pattern)`` filters, in command-line order."""
    return tuple(ctx.meta.get(FILTERS, ()))


_FILTER_HELP = (
    "keys (paths under DIR) that match PATTERN (* matches any characters, / "
    "included); repeatable, and order matters: the last --exclude/--include that "
    "matches a key wins, as in the AWS CLI."
)


def filter_options(command: _Command) -> _Command:
    """``--dry-run`` (``--dryrun``), ``--exclude`` and ``--include``."""
    options = [
        click.option(
            "--dry-run",
            "--dryrun",
            "dry_run",
            is_flag=True,
            help="Print what would be done; do nothing (--dryrun: the same).",
        ),
        click.option(
            "--exclude", metavar="PATTERN", multiple=True, help=f"Leave out {_FILTER_HELP}"
        ),
        click.option(
            "--include", metavar="PATTERN", multiple=True, help=f"Take back {_FILTER_HELP}"
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command
