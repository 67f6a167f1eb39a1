"""The API reference (docs/reference/*.md) documents every public name, once, under its
public path, and each one has the docstring the reference renders: a new export cannot
be left out of it, and an internal name cannot slip into it.

The reference is mkdocstrings ``:::`` directives; a module's directive either documents
the module with its members, or lists the members it shows (``members: [...]``), or
shows only the module's docstring (``members: false``). Public names are
``asyncdl.__all__`` (and ``__version__``), ``asyncdl.dask.__all__``, and what every
module of ``asyncdl.contrib`` and ``asyncdl.testing`` defines at its top level without
a leading underscore (what it imports is not its own).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import asyncdl
import asyncdl.contrib
import asyncdl.testing

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
#: A directive and its indented options block.
DIRECTIVE = re.compile(r"^::: (\S+)[ \t]*\n((?:(?:[ ]{4}.*)?\n)*)", re.MULTILINE)
#: Top-level names of public modules that are not API: how the module works.
NOT_API = {"asyncdl.contrib.fastapi.logger"}
#: A directive's ``members:`` option: ``false``, ``[a, b]``, or ``- a`` lines below it.
MEMBERS = re.compile(r"^ +members:(.*)\n((?: +- *\S+\n?)*)", re.MULTILINE)
#: A Sphinx-style attribute comment, which docs/griffe_roles.py renders as a docstring.
ATTRIBUTE_COMMENT = re.compile(r"^\s*#:")


def directives(text: str) -> list[tuple[str, list[str] | None]]:
    """Each directive of a page: the object's path, and the members it lists (``[]``
    for ``members: false``; ``None`` when it documents all of them)."""
    found: list[tuple[str, list[str] | None]] = []
    for match in DIRECTIVE.finditer(text):
        path, block = match.groups()
        members: list[str] | None = None
        if (listed := MEMBERS.search(block)) is not None:
            inline, items = listed.groups()
            if inline.strip() == "false":
                members = []
            elif inline.strip().startswith("["):
                members = [name.strip() for name in inline.strip()[1:-1].split(",") if name]
            else:
                members = re.findall(r"- *(\S+)", items)
        found.append((path, members))
    return found


def documented(pages: dict[str, str]) -> list[str]:
    """Every path the pages document, as often as they document it."""
    paths = []
    for text in pages.values():
        for path, members in directives(text):
            paths.append(path)
            paths += [f"{path}.{member}" for member in members or ()]
    return paths


def reference_pages() -> dict[str, str]:
    return {page.name: page.read_text() for page in sorted(REFERENCE.glob("*.md"))}


def _submodules(package: Any) -> list[str]:
    return [f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]


def public_modules() -> list[str]:
    return [
        "asyncdl",
        "asyncdl.contrib",
        *_submodules(asyncdl.contrib),
        "asyncdl.dask",
        "asyncdl.fsspec",
        "asyncdl.testing",
        *_submodules(asyncdl.testing),
    ]


def _own_top_level_names(module: str) -> list[str]:
    """What ``module`` defines at its top level, in order: its classes, functions and
    assignments (not its imports)."""
    names = []
    for node in _tree(_file(module)).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def public_names() -> list[str]:
    import asyncdl.dask  # noqa: PLC0415 - the dask extra, as the tests of it need
    import asyncdl.fsspec  # noqa: PLC0415 - the fsspec extra

    names = [f"asyncdl.{name}" for name in [*asyncdl.__all__, "__version__"]]
    names += [f"asyncdl.dask.{name}" for name in asyncdl.dask.__all__]
    names += [f"asyncdl.fsspec.{name}" for name in asyncdl.fsspec.__all__]
    for module in [*_submodules(asyncdl.contrib), *_submodules(asyncdl.testing)]:
        names += [
            f"{module}.{name}"
            for name in _own_top_level_names(module)
            if not name.startswith("_") and f"{module}.{name}" not in NOT_API
        ]
    return names


@cache
def _file(module: str) -> Path:
    path = importlib.import_module(module).__file__
    assert path is not None
    return Path(path)


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _commented(path: Path, node: ast.stmt) -> bool:
    """Whether a ``#:`` comment sits right above ``node``."""
    above = node.lineno - 2
    return above >= 0 and bool(ATTRIBUTE_COMMENT.match(_lines(path)[above]))


def _assigned(node: ast.AST, *, on_self: bool = False) -> list[str]:
    """The names ``node`` assigns (with ``on_self``, the attributes of ``self``)."""
    if isinstance(node, ast.Assign):
        targets: list[ast.expr] = list(node.targets)
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    names = []
    for target in targets:
        for item in target.elts if isinstance(target, ast.Tuple) else [target]:
            if isinstance(item, ast.Name) and not on_self:
                names.append(item.id)
            elif (
                isinstance(item, ast.Attribute)
                and isinstance(item.value, ast.Name)
                and item.value.id == "self"
            ):
                names.append(item.attr)
    return names


def undocumented(path: str) -> list[str]:
    """The parts of the public name ``path`` that the reference would show without a
    docstring, or leave out for the want of one: the object itself, and for a class its
    public methods, properties and attributes (fields, and those set in ``__init__``)."""
    module_name, _, name = path.rpartition(".")
    if path in public_modules():
        return [] if ast.get_docstring(_tree(_file(path))) else [path]
    obj = getattr(importlib.import_module(module_name), name)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        # A module attribute: its #: comment, in the module that documents it.
        file = _file(module_name)
        nodes = [node for node in ast.walk(_tree(file)) if name in _assigned(node)]
        return [] if nodes and _commented(file, nodes[0]) else [path]  # type: ignore[arg-type]
    obj = inspect.unwrap(obj)  # a @contextmanager's function, say
    file = Path(inspect.getsourcefile(obj) or "")
    node = next(
        node
        for node in _tree(file).body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name == obj.__name__
    )
    missing = [] if ast.get_docstring(node) else [path]
    if isinstance(node, ast.ClassDef):
        for member in node.body:
            if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                if not member.name.startswith("_") and not ast.get_docstring(member):
                    missing.append(f"{path}.{member.name}")
                if member.name == "__init__":
                    for statement in ast.walk(member):
                        for attribute in _assigned(statement, on_self=True):
                            if not attribute.startswith("_") and not _commented(
                                file,
                                statement,  # type: ignore[arg-type]
                            ):
                                missing.append(f"{path}.{attribute}")
            for attribute in _assigned(member):
                if not attribute.startswith("_") and not _commented(file, member):
                    missing.append(f"{path}.{attribute}")
        # Methods it inherits from asyncdl's own bases (Engine's readers, say) are shown
        # on its page too, and only with a docstring.
        for base in obj.__mro__[1:]:
            if not base.__module__.startswith("asyncdl"):
                continue
            base_file = Path(inspect.getsourcefile(base) or "")
            (base_node,) = [
                n
                for n in _tree(base_file).body
                if isinstance(n, ast.ClassDef) and n.name == base.__name__
            ]
            missing += [
                f"{path}.{member.name}"
                for member in base_node.body
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
                and not member.name.startswith("_")
                and not ast.get_docstring(member)
            ]
    return missing


def test_every_public_name_is_in_the_reference() -> None:
    shown = set(documented(reference_pages()))
    missing = [name for name in public_names() if name not in shown]
    assert missing == [], f"add these to a `:::` directive of docs/reference/: {missing}"


def test_every_public_module_is_in_the_reference() -> None:
    shown = set(documented(reference_pages()))
    assert [module for module in public_modules() if module not in shown] == []


def test_the_reference_shows_public_names_only_and_each_once() -> None:
    shown = Counter(documented(reference_pages()))
    public = {*public_names(), *public_modules()}
    assert [path for path in shown if path not in public] == [], (
        "internal, or not under its public path (asyncdl.Engine, not asyncdl.engine.Engine)"
    )
    assert [path for path, count in shown.items() if count > 1] == []


@pytest.mark.parametrize("path", sorted({*public_names(), *public_modules()}))
def test_every_public_name_has_what_the_reference_renders(path: str) -> None:
    assert undocumented(path) == [], "add a docstring, or a #: comment above an attribute"


def test_the_check_finds_a_name_left_out() -> None:
    pages = reference_pages()
    without_engine = {
        page: text.replace("::: asyncdl.Engine\n", "") for page, text in pages.items()
    }
    assert "asyncdl.Engine" in documented(pages)
    assert "asyncdl.Engine" not in documented(without_engine)
    assert "asyncdl.contrib.fastapi.object_response" in documented(pages)
    # A member left out of a module directive's list.
    listed = {page: text.replace("        - object_response\n", "") for page, text in pages.items()}
    assert "asyncdl.contrib.fastapi.object_response" not in documented(listed)


def test_directives_are_read_with_their_options() -> None:
    text = (
        "::: a.b\n\n::: a.c\n    options:\n      members: false\n\n"
        "::: a.d\n    options:\n      heading_level: 2\n      members:\n        - x\n        - y\n"
    )
    text += "\n::: a.e\n    options:\n      members: [x, y]\n"
    assert directives(text) == [
        ("a.b", None),
        ("a.c", []),
        ("a.d", ["x", "y"]),
        ("a.e", ["x", "y"]),
    ]
