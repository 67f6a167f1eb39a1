"""Command-line values the benchmark scripts share: sizes (``1KiB``, ``512MiB``) and
comma lists of names checked against those a script knows."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence

MiB = 1024 * 1024
GiB = 1024 * MiB
_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": MiB, "gib": GiB}


def parse_size(text: str) -> int:
    """``1KiB``, ``64KiB``, ``512MiB``, ``1GiB`` or plain bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]ib|b)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 1KiB, 512MiB, 1024)")
    return int(match[1]) * _UNITS[(match[2] or "").lower()]


def names_from(known: Sequence[str]) -> Callable[[str], list[str]]:
    """A parser of ``a,b`` into names, each one of ``known``."""

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        if not names or set(names) - set(known):
            raise argparse.ArgumentTypeError(f"choose from {', '.join(known)}")
        return names

    return parse
