"""The package's structure: no import circles, layers that import only downward, small
modules that say what they hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "asyncdl"
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


#: The layers, top to bottom: a module imports only from its own layer's package
#: and from layers below it. The face (the engine, ``download``, the package's
#: ``__init__``, the command, the integrations, the demo) is every module not named here.
LAYERS: list[tuple[str, ...]] = [
    ("asyncdl._bulk", "asyncdl._reads"),
    ("asyncdl._transfer",),
    ("asyncdl._files",),
    ("asyncdl._wire",),
    (
        "asyncdl.config",
        "asyncdl.errors",
        "asyncdl.object_info",
        "asyncdl.progress",
        "asyncdl.results",
        "asyncdl.stats",
        "asyncdl._interrupts",
        "asyncdl.testing",
    ),
]
#: The top-level modules and packages of the face.
FACE = {
    "asyncdl",
    "asyncdl.api",
    "asyncdl.cli",
    "asyncdl.contrib",
    "asyncdl.dask",
    "asyncdl.demo",
    "asyncdl.fsspec",
    "asyncdl.engine",
}


def layer_of(module: str) -> tuple[int, str]:
    """The layer a module is in (0 is the face) and the part of it that it belongs to:
    its subpackage, or for a top-level module the module itself."""
    for rank, parts in enumerate(LAYERS, start=1):
        for part in parts:
            if module == part or module.startswith(part + "."):
                return rank, part
    return 0, "face"


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import that runs up a layer, or across one to a sibling's package."""
    found = []
    for module, imported in sorted(graph.items()):
        rank, part = layer_of(module)
        for other in sorted(imported):
            other_rank, other_part = layer_of(other)
            if other_rank < rank or (
                other_rank == rank and rank in (1, 2, 3, 4) and other_part != part
            ):
                found.append((module, other))
    return found


def test_every_top_level_module_has_a_layer() -> None:
    # A new module goes into the layer it belongs to, not beside the face.
    top = {f"asyncdl.{path.stem}" for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    top |= {f"asyncdl.{path.parent.name}" for path in PACKAGE.glob("*/__init__.py")}
    placed = FACE | {part for parts in LAYERS for part in parts}
    assert sorted(top - placed) == []


def test_imports_run_down_the_layers_only() -> None:
    assert upward(import_graph(PACKAGE)) == []


def test_the_layer_check_finds_an_import_that_runs_up() -> None:
    # The premise: the graph as the package's layers would draw it, with one arrow up
    # (the wire reaching for a transfer's plan) and one across (a read into the bulk).
    graph = {
        "asyncdl.engine": {"asyncdl._bulk.bulk", "asyncdl._reads.streaming"},
        "asyncdl._bulk.bulk": {"asyncdl._transfer.transfer", "asyncdl.errors"},
        "asyncdl._reads.streaming": {"asyncdl._bulk.filters", "asyncdl._wire.retry"},
        "asyncdl._transfer.transfer": {"asyncdl._files.writer", "asyncdl._transfer.parts"},
        "asyncdl._files.writer": {"asyncdl._wire.checksums"},
        "asyncdl._wire.retry": {"asyncdl._transfer.parts", "asyncdl.errors"},
        "asyncdl.results": {"asyncdl.errors"},
    }
    assert upward(graph) == [
        ("asyncdl._reads.streaming", "asyncdl._bulk.filters"),
        ("asyncdl._wire.retry", "asyncdl._transfer.parts"),
    ]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: str(path.relative_to(PACKAGE))
)
def test_modules_are_small_and_say_what_they_hold(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES
    if text.strip():
        assert ast.get_docstring(ast.parse(text)), f"{path.name} opens with no docstring"
