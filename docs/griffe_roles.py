"""A griffe extension for the API reference: asyncdl's docstrings name code with
Sphinx roles (``:meth:`stream```, ``:class:`~asyncdl.Engine```), which Markdown would
print as written; each becomes a code span."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:meth|class|func|attr|exc|data|mod|obj):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
