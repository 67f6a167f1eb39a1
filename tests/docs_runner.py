"""Runs one documentation page's examples as written, in this process, in page order.

``python tests/docs_runner.py PAGE.md`` (started by ``tests/test_docs.py`` in a scratch
directory, with the endpoint and credentials of moto's server in the environment, as a
real deployment sets them):

- the page's ``python`` blocks run in one namespace, as if pasted one after another
  into ``python -m asyncio``: top-level ``await`` is allowed and runs on one event loop
  that lasts the whole page; a block may also call ``asyncio.run`` itself;
- its ``sh`` blocks run in ``bash -euo pipefail`` with ``asyncdl`` on the PATH;
  ``pip install`` lines are not run: the extras they name must exist in
  ``pyproject.toml``; nor are ``python3 -m nox`` lines (the suite cannot run itself):
  the sessions they name must exist in ``noxfile.py``;
- ``https://downloads.example.com/`` in an example stands for a plain web server and is
  served from the bucket;
- then ``tests/docs_checks/<page>.py``, when there is one, checks what the page did: its
  ``check(namespace)`` is awaited with the page's namespace;
- a task that fails where nobody awaits it fails the page.

The page is read as the site renders it: ``--8<--`` snippets included, HTML comments
left out. ``python tests/docs_runner.py MODULE.py`` runs the fenced blocks of a
module's docstrings (the API reference shows them) the same way, one namespace per
docstring.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Blocks in these languages run; the others are output, configuration or diagrams.
RUN = {"python", "sh"}
#: Every language a block may name: a block in another (``py``, ``bash``, ``pycon``)
#: would be neither run nor obviously output, so it is refused.
KNOWN = RUN | {"text", "toml", "yaml", "json", "mermaid", "http", "ini"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_PIP = re.compile(r"^\s*(?:python3? -m )?pip install (?P<args>.*)$")
_EXTRAS = re.compile(r"asyncdl\[(?P<extras>[^\]]*)\]")
_NOX = re.compile(
    r"^\s*(?:python3 -m pip install --upgrade nox && )?"  # the Quick start's form
    r"python3 -m nox -s (?P<sessions>[\w ]+?)(?:\s+--.*|\s*#.*)?$"
)
#: A command line that installs or runs nox in any other form than the two above: it
#: would really run (the suite inside itself, or an install into the test environment).
_INSTALLS_OR_NOX = re.compile(r"\bnox\b|\bpip[x3]?\b.*\binstall\b|\buv\b")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
#: pymdownx.snippets' include line, as mkdocs.yml configures it (paths from the root).
_SNIPPET = re.compile(r'^[ \t]*--8<--[ \t]+"(?P<path>[^"]+)"[ \t]*$', re.M)


#: The namespace's name for what each sh block printed (stdout, then stderr), in order.
SH_OUTPUT = "__sh_output__"


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # the fence's line number, 1-based


def source(page: Path) -> str:
    """The page as the site renders it: snippets included, HTML comments out (a block
    inside a comment is hidden from the reader, so it must not run either)."""
    text = _SNIPPET.sub(lambda m: (ROOT / m["path"]).read_text(), page.read_text())
    # Keep the line count, so that a block's line number still points into the page.
    return _COMMENT.sub(lambda m: "\n" * m[0].count("\n"), text)


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, dedented by their fence's indent (a block
    inside an admonition or a tab is indented). As CommonMark has it, a block ends at a
    fence of its own character at least as long as the one that opened it."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        lang = opening["info"].split(" ", 1)[0].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if (
                closing is not None
                and not closing["info"].strip()
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
            ):
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        found.append(Block(lang, "\n".join(body) + "\n", i + 1))
        i = j + 1
    return found


def docstring_blocks(path: Path) -> list[tuple[str, list[Block]]]:
    """Each docstring of a module that holds fenced blocks (the API reference shows
    them), by the name of what it documents."""
    found: list[tuple[str, list[Block]]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=True)
            name = prefix if isinstance(node, ast.Module) else f"{prefix}.{node.name}"
            if doc and (in_doc := blocks(doc)):
                found.append((name, in_doc))
            for child in node.body:
                visit(child, name)

    visit(ast.parse(path.read_text()), path.stem)
    return found


def page_check_module(page: Path) -> str:
    """``docs/guides/one-object.md`` -> ``tests.docs_checks.guides_one_object``."""
    relative = page.resolve().relative_to(ROOT)
    parts = relative.with_suffix("").parts
    if parts[0] == "docs":
        parts = parts[1:]
    name = "_".join(parts).replace("-", "_").lower()
    return f"tests.docs_checks.{name}"


def _web_server(code: str) -> str:
    base = os.environ.get("DOCS_WEB_BASE")
    return code.replace("https://downloads.example.com/", base) if base else code


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def _sessions() -> set[str]:
    return set(re.findall(r"^def (\w+)\(session", (ROOT / "noxfile.py").read_text(), re.M))


def _shell(code: str, where: str) -> str:
    """The script with its ``pip install`` and ``nox`` lines checked and taken out."""
    kept: list[str] = []
    for line in code.splitlines():
        nox = _NOX.match(line)
        if nox is None and _PIP.match(line) is None and _INSTALLS_OR_NOX.search(line):
            raise SystemExit(
                f"{where}: write installs as 'pip install ...' and nox as "
                f"'python3 -m nox -s ...' on a line of their own: {line}"
            )
        if nox is not None:
            unknown = set(nox["sessions"].split()) - _sessions()
            if unknown:
                raise SystemExit(f"{where}: no such nox session {sorted(unknown)}: {line}")
            kept.append(":")
            continue
        pip = _PIP.match(line)
        if pip is None:
            kept.append(line)
            continue
        for named in _EXTRAS.finditer(pip["args"]):
            unknown = {e.strip() for e in named["extras"].split(",")} - _extras()
            if unknown:
                raise SystemExit(f"{where}: no such extra {sorted(unknown)}: {line}")
        kept.append(":")
    return "\n".join(kept) + "\n"


def _run_blocks(
    found: list[Block], where: str, namespace: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> None:
    for block in found:
        here = f"{where}:{block.line}"
        if block.lang not in KNOWN:
            raise SystemExit(f"{here}: a block in {block.lang!r}: use one of {sorted(KNOWN)}")
        if block.lang == "python":
            code = compile(
                _web_server(block.code), here, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            result = eval(code, namespace)  # the page's own example
            if inspect.isawaitable(result):
                loop.run_until_complete(result)
        elif block.lang == "sh":
            script = _web_server(_shell(block.code, here))
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                capture_output=True,
                text=True,
                check=False,
            )
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            # What the page's check reads to see the commands did what the page says.
            namespace.setdefault(SH_OUTPUT, []).append(done.stdout + done.stderr)
            if done.returncode != 0:
                raise SystemExit(f"{here}: the sh block exited {done.returncode}")


def _failing_loop() -> tuple[asyncio.AbstractEventLoop, list[str]]:
    """A loop that keeps what its tasks raised where nobody awaited them: an example
    whose background task fails must fail, not print a line and pass."""
    loop = asyncio.new_event_loop()
    errors: list[str] = []

    def record(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        errors.append(f"{context.get('message')}: {context.get('exception')!r}")
        loop.default_exception_handler(context)

    loop.set_exception_handler(record)
    return loop, errors


def run_page(page: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    loop, errors = _failing_loop()
    try:
        _run_blocks(blocks(source(page)), str(page), namespace, loop)
        try:
            checks = importlib.import_module(page_check_module(page))
        except ModuleNotFoundError as missing:
            if missing.name != page_check_module(page):
                raise
        else:
            loop.run_until_complete(checks.check(namespace))
    finally:
        loop.close()
    if errors:
        raise SystemExit(f"{page}: errors nobody awaited: {errors}")
    return namespace


def run_docstrings(path: Path) -> None:
    """Each docstring's blocks in a namespace of their own, as a page's."""
    for name, found in docstring_blocks(path):
        loop, errors = _failing_loop()
        try:
            _run_blocks(found, f"{path}:{name}", {"__name__": "__main__"}, loop)
        finally:
            loop.close()
        if errors:
            raise SystemExit(f"{path}:{name}: errors nobody awaited: {errors}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    target = Path(sys.argv[1])
    if target.suffix == ".py":
        run_docstrings(target)
    else:
        run_page(target)
