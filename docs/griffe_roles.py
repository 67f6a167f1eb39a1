"""A griffe extension for the API reference, so the docstrings read as the source does.

- asyncdl documents an attribute with a ``#:`` comment right above it (the Sphinx
  convention, which griffe does not read): that comment becomes its docstring, so
  ``TransferConfig``'s fields, the results' fields and the errors' attributes are
  shown with what they mean.
- A field that is an instance attribute is labelled so, not also a class attribute;
  one set in ``__init__`` is shown without the expression that sets it.
- asyncdl's docstrings name code with Sphinx roles (``:meth:`stream```,
  ``:class:`~asyncdl.Engine```), which Markdown would print as written; each becomes
  a code span.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:meth|class|func|attr|exc|data|mod|obj):`~?([^`]+)`")
_COMMENT = re.compile(r"^\s*#:(?: |$)(.*)$")


def _comment_above(lines: list[str], lineno: int) -> tuple[str, int] | None:
    """The ``#:`` lines right above line ``lineno`` (1-based), as one text, and the
    line it starts on."""
    found: list[str] = []
    index = lineno - 2
    while index >= 0 and (match := _COMMENT.match(lines[index])):
        found.append(match.group(1).rstrip())
        index -= 1
    if not found:
        return None
    return "\n".join(reversed(found)), index + 2


class SphinxRoles(griffe.Extension):
    def on_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        obj: griffe.Object,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        code = getattr(agent, "code", None)
        if obj.is_attribute and obj.docstring is None and code and obj.lineno:
            comment = _comment_above(code.splitlines(), obj.lineno)
            if comment is not None:
                text, lineno = comment
                obj.docstring = griffe.Docstring(
                    text, lineno=lineno, endlineno=obj.lineno - 1, parent=obj
                )
        if isinstance(obj, griffe.Attribute) and "instance-attribute" in obj.labels:
            if "class-attribute" in obj.labels:
                # A dataclass field, say: its default is in the signature;
                # "class-attribute" beside "instance-attribute" only puzzles a reader.
                obj.labels.discard("class-attribute")
            else:
                # Set in __init__: the expression that sets it is the code's business.
                obj.value = None
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
