"""The package's structure: no import circles, small modules that say what they hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "asyncdl"
#: About 400 lines, with room for a docstring more: not enough for two
#: concepts in one file.
MAX_LINES = 450


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from . import x`` included)."""
    files = sorted(package.rglob("*.py"))

    def name_of(path: Path) -> str:
        parts = path.relative_to(package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name_of(path) for path in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        name = name_of(path)
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    submodule = f"{target}.{alias.name}"
                    if submodule in modules:
                        found.add(submodule)
                    elif target in modules:
                        found.add(target)
        graph[name] = found - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle a depth-first walk meets, each as the path that closes it."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        path.append(node)
        for other in sorted(graph[node]):
            if state.get(other) == "open":
                found.append([*path[path.index(other) :], other])
            elif other not in state:
                visit(other, path)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def test_the_circle_finder_finds_a_circle(tmp_path: Path) -> None:
    # The premise: a circle through `from . import x`, `from .y import z` and `import`.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("from .c import thing\n")
    (package / "c.py").write_text("import pkg.a\n")
    (package / "d.py").write_text("from .a import other\n")
    graph = import_graph(package)
    assert graph["pkg.d"] == {"pkg.a"}
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_no_import_circles() -> None:
    assert circles(import_graph(PACKAGE)) == []


def test_nothing_below_the_engine_imports_it() -> None:
    graph = import_graph(PACKAGE)
    below = ["transfer", "parts", "bulk", "streaming", "context", "listing", "strategies"]
    assert [name for name in below if "asyncdl.engine" in graph[f"asyncdl.{name}"]] == []


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: str(path.relative_to(PACKAGE))
)
def test_modules_are_small_and_say_what_they_hold(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES
    if text.strip():
        assert ast.get_docstring(ast.parse(text)), f"{path.name} opens with no docstring"
