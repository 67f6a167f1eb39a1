"""Which event loop the ``asyncdl`` command runs on: uvloop when it is installed
(``pip install 'asyncdl[uvloop]'``), asyncio's own otherwise.

``ASYNCDL_LOOP`` chooses: ``auto`` (the default), ``uvloop`` (an error when it is not
installed) or ``asyncio``. The library itself runs on whatever loop its caller runs,
uvloop included; this choice is the command's alone.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import click

#: The environment variable that chooses, and what it may say.
VARIABLE = "ASYNCDL_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


@dataclass(frozen=True, slots=True)
class Loop:
    """A loop to run the command on: ``factory`` for ``asyncio.Runner`` (``None``: asyncio's
    default) and the name ``--debug`` prints."""

    factory: Callable[[], asyncio.AbstractEventLoop] | None
    name: str


def choose(environ: Mapping[str, str] = os.environ) -> Loop:
    """The loop ``ASYNCDL_LOOP`` asks for; uvloop, if importable, when it asks nothing."""
    wanted = environ.get(VARIABLE, "").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise click.UsageError(
            f"{VARIABLE} must be one of {', '.join(CHOICES)}, got {environ[VARIABLE]!r}"
        )
    if wanted == "asyncio":
        return Loop(None, "asyncio")
    try:
        import uvloop  # noqa: PLC0415 - only the command pays for it, and only here
    except ImportError:
        if wanted == "uvloop":
            raise click.UsageError(
                f"{VARIABLE}=uvloop, but uvloop is not installed: pip install 'asyncdl[uvloop]'"
            ) from None
        return Loop(None, "asyncio")
    # Not in uvloop's stubs, but set by the package (importlib.metadata would cost
    # every run ~20 ms for --debug's line alone).
    return Loop(uvloop.new_event_loop, f"uvloop {getattr(uvloop, '__version__', '?')}")
