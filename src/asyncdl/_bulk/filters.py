"""``--exclude`` / ``--include`` filters, with the AWS CLI's meaning.

A filter is ``("exclude", pattern)`` or ``("include", pattern)``. Patterns match a
key relative to the prefix (a local file's path relative to the destination, with
``/``), as :mod:`fnmatch` does and case-sensitively, as keys are: ``*`` matches any
run of characters, ``/`` included, ``?`` one character, ``[seq]`` and ``[!seq]`` a
set. Every key is included until a filter says otherwise, and when several match,
the last one given wins: ``[("exclude", "*"), ("include", "*.txt")]`` keeps only
``.txt`` files, the reverse order keeps nothing.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

KINDS = ("exclude", "include")


class Filters:
    """Compiled filters; :meth:`includes` says whether a relative path is kept."""

    def __init__(self, rules: Iterable[tuple[str, str]]) -> None:
        compiled: list[tuple[bool, re.Pattern[str]]] = []
        for rule in rules:
            if (
                not isinstance(rule, tuple)
                or len(rule) != 2
                or rule[0] not in KINDS
                or not isinstance(rule[1], str)
            ):
                raise ValueError(
                    f"filters must be ('exclude' or 'include', pattern) pairs, got {rule!r}"
                )
            compiled.append((rule[0] == "include", re.compile(fnmatch.translate(rule[1]))))
        #: Last given first: the first that matches decides.
        self._rules = compiled[::-1]

    def __bool__(self) -> bool:
        return bool(self._rules)

    def includes(self, relative: str) -> bool:
        for include, pattern in self._rules:
            if pattern.match(relative):
                return include
        return True


def compile_filters(filters: object) -> Filters | None:
    """``filters`` checked and compiled (``None`` or none given: ``None``, nothing to
    check per key); ``ValueError`` if their shape is wrong."""
    if filters is None:
        return None
    if isinstance(filters, (str, bytes)) or not isinstance(filters, Iterable):
        raise ValueError(f"filters must be a list of (kind, pattern) pairs, got {filters!r}")
    compiled = Filters(filters)
    return compiled or None
