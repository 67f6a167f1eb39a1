"""The public surface is the import paths: ``asyncdl``, ``asyncdl.contrib.*``,
``asyncdl.dask`` and ``asyncdl.testing.*``. Every name a user needs is exported there,
nothing sends a user to a private path, and the versioning page
(docs/reference/index.md) names the public modules and the internal types a
signature shows as the tree has them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import asyncdl

from ..docs.test_reference import DIRECTIVE, ROOT, public_modules, public_names, reference_pages

PACKAGE = ROOT / "src" / "asyncdl"
VERSIONING = ROOT / "docs" / "reference" / "index.md"
#: Modules without a leading underscore that are not public: the command (documented
#: by its own page), the demo program, and the modules behind ``asyncdl``'s names
#: (their classes say ``asyncdl.engine`` in ``__module__``; the path is not promised).
NOT_PUBLIC_BY_NAME = {
    "asyncdl.api",
    "asyncdl.config",
    "asyncdl.demo",
    "asyncdl.engine",
    "asyncdl.errors",
    "asyncdl.object_info",
    "asyncdl.progress",
    "asyncdl.results",
    "asyncdl.stats",
}
#: A dotted path to a module of asyncdl that a user would have to name.
PRIVATE_PATH = re.compile(r"(?<![\w.])asyncdl(?:\.\w+)*?\._(?!_)\w+")


def modules() -> list[str]:
    """Every module of the package, by the path it imports as."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_a_module_is_public_only_at_a_public_path() -> None:
    # A module that is neither private by its path nor one of the known exceptions is a
    # new public module: it must be placed in a private package, or be made public on
    # purpose (the reference and the versioning page then name it).
    public = set(public_modules())
    unmarked = [
        name
        for name in modules()
        if not any(part.startswith("_") for part in name.split("."))
        and name not in public
        and name not in NOT_PUBLIC_BY_NAME
        and not (name == "asyncdl.cli" or name.startswith("asyncdl.cli."))
    ]
    assert unmarked == []


def versioning_table(heading: str) -> list[str]:
    """The first column of the table under ``## heading`` of the versioning page, each
    cell's code spans."""
    text = VERSIONING.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    return [span for row in rows for span in re.findall(r"`([^`]+)`", row.split(" | ")[0])]


def test_the_versioning_page_names_the_public_modules() -> None:
    listed = set()
    for name in versioning_table("Public modules"):
        if name.endswith(".*"):
            package = importlib.import_module(name[:-2])
            listed |= {
                module for module in public_modules() if module.startswith(package.__name__ + ".")
            }
        elif name.startswith("asyncdl"):
            listed.add(name)
    containers = {"asyncdl.contrib", "asyncdl.testing"}  # packages of modules, no names
    assert listed == set(public_modules()) - containers


def test_every_public_name_imports_from_its_public_module() -> None:
    for path in public_names():
        module, _, name = path.rpartition(".")
        assert name in dir(importlib.import_module(module)), path
    # asyncdl's names are imported when first used: each one's module is where it is.
    table: dict[str, str] = asyncdl._MODULES
    assert sorted(table) == sorted(asyncdl.__all__)
    for name, module in table.items():
        obj = getattr(importlib.import_module(f"asyncdl.{module}"), name)
        assert getattr(obj, "__module__", f"asyncdl.{module}") == f"asyncdl.{module}", name


def _annotations_namespace(module: Any) -> dict[str, Any]:
    """The names a module imports only for type checkers, so that its annotations can
    be read; a name from a module that exists only for them (``_typeshed``) is not
    asyncdl's, and stands as ``object``."""
    found: dict[str, Any] = {}
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = "." * node.level + (node.module or "")
        for alias in node.names:
            bound = alias.asname or alias.name
            if bound in vars(module):
                continue
            try:
                imported = importlib.import_module(source, module.__package__)
                found[bound] = getattr(imported, alias.name)
            except (ImportError, AttributeError):
                found[bound] = object
    return found


def _hints(obj: Any) -> dict[str, Any]:
    module = sys.modules[obj.__module__]
    return typing.get_type_hints(obj, localns=_annotations_namespace(module))


def _classes_in(hint: Any) -> Iterator[type]:
    if inspect.isclass(hint) and not typing.get_args(hint):
        yield hint
    for arg in typing.get_args(hint):
        yield from _classes_in(arg)
    origin = typing.get_origin(hint)
    if inspect.isclass(origin):
        yield origin


def _init_not_rendered() -> set[str]:
    """The classes whose reference leaves ``__init__`` out: the engine makes them."""
    found = set()
    for text in reference_pages().values():
        for match in DIRECTIVE.finditer(text):
            if "merge_init_into_class: false" in match.group(2):
                found.add(match.group(1))
    return found


def signatures() -> Iterator[tuple[str, Any]]:
    """Each public function, class, and public method of a public class (inherited
    ones of asyncdl's bases too; ``__init__`` where the reference shows it), with the
    object whose annotations it shows."""
    hidden_init = _init_not_rendered()
    for path in public_names():
        module, _, name = path.rpartition(".")
        obj = getattr(importlib.import_module(module), name)
        if inspect.isfunction(obj):
            yield path, obj
        elif inspect.isclass(obj):
            yield path, obj
            for member, value in inspect.getmembers(obj):
                function = getattr(value, "fget", value)  # a property's getter
                shown = not member.startswith("_") or (
                    member == "__init__" and path not in hidden_init
                )
                if shown and inspect.isfunction(function):
                    yield f"{path}.{member}", function


def _is_asyncdl(cls: type) -> bool:
    return cls.__module__ == "asyncdl" or cls.__module__.startswith("asyncdl.")


def test_every_type_a_public_signature_shows_is_public_or_named_internal() -> None:
    # A type a user meets in a signature is either importable from a public path, or
    # one of the few internal ones the versioning page names (what to pass instead).
    public_objects = set()
    for path in public_names():
        module, _, name = path.rpartition(".")
        value = getattr(importlib.import_module(module), name)
        if inspect.isclass(value):
            public_objects.add(value)
    named_internal = set(versioning_table("Everything else is internal"))
    shown: dict[str, set[str]] = {}
    for path, obj in signatures():
        for attribute, hint in _hints(obj).items():
            if inspect.isclass(obj) and attribute.startswith("_"):
                continue  # a class's private attribute is not shown
            for cls in _classes_in(hint):
                if _is_asyncdl(cls) and cls not in public_objects:
                    shown.setdefault(cls.__name__, set()).add(path)
    assert {name: paths for name, paths in shown.items() if name not in named_internal} == {}
    # And the page names no internal type that no signature shows: an alias
    # (``ExtraArgs``) is found by its name in the annotations as written.
    written = " ".join(
        str(annotation)
        for _, obj in signatures()
        for annotation in getattr(obj, "__annotations__", {}).values()
    )
    assert [
        name
        for name in named_internal
        if name not in shown and not re.search(rf"\b{name}\b", written)
    ] == []


def rendered_docstrings() -> Iterator[tuple[str, str]]:
    """What the reference renders: each public module's docstring, each public name's,
    and its public members'."""
    for path in public_modules():
        yield path, importlib.import_module(path).__doc__ or ""
    for path, obj in signatures():
        yield path, inspect.getdoc(obj) or ""


def test_no_public_docstring_names_a_private_path() -> None:
    found = [
        (path, hit) for path, text in rendered_docstrings() for hit in PRIVATE_PATH.findall(text)
    ]
    assert found == []


def user_pages() -> list[Path]:
    """What users read and copy from: the docs (but the page on how asyncdl works
    inside, and the changelog's history), the README, the examples."""
    pages = [ROOT / "README.md", *sorted((ROOT / "examples").glob("*.py"))]
    pages += [
        page
        for page in sorted((ROOT / "docs").rglob("*.md"))
        if page.name not in {"internals.md", "changelog.md"}
    ]
    return pages


#: An autorefs anchor of a page: ``[](){#id}``.
ANCHOR = re.compile(r"\[\]\(\)\{#[^}]*\}")
#: An import in code or prose: ``from asyncdl.x import`` or ``import asyncdl.x``.
IMPORT = re.compile(r"\b(?:from|import)\s+(asyncdl(?:\.\w+)*)")


@pytest.mark.parametrize("page", user_pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_user_pages_import_from_public_paths_only(page: Path) -> None:
    public = set(public_modules()) | {"asyncdl.cli"}  # `python -m asyncdl.cli`
    # An anchor's id (``[](){#asyncdl._wire.request_args.ExtraArgs}``) is where the link of
    # an internal alias in a signature lands: read by the renderer, not by a user.
    text = ANCHOR.sub("", page.read_text())
    named = [name for name in IMPORT.findall(text) if name not in public]
    named += [
        name
        for name in PRIVATE_PATH.findall(text)
        if not any(other == name or other.startswith(name + ".") for other in named)
    ]
    assert named == []


def test_the_checks_find_a_private_path() -> None:
    assert PRIVATE_PATH.findall("see :class:`~asyncdl._transfer.context.Context`") == [
        "asyncdl._transfer"
    ]
    assert PRIVATE_PATH.findall("asyncdl.dask._partition, asyncdl.__version__") == [
        "asyncdl.dask._partition"
    ]
    assert PRIVATE_PATH.findall("the xattr user.asyncdl.etag, asyncdl.Engine") == []
    assert IMPORT.findall("from asyncdl.engine import Engine\nimport asyncdl.dask") == [
        "asyncdl.engine",
        "asyncdl.dask",
    ]
