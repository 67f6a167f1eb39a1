"""Runs one documentation page's examples as written, in this process, in page order.

``python tests/docs/docs_runner.py PAGE.md`` (started by ``tests/docs/test_docs.py`` in a scratch
directory, with the endpoint and credentials of moto's server in the environment, as a
real deployment sets them):

- the page's ``python`` blocks run in one namespace, as if pasted one after another
  into ``python -m asyncio``: top-level ``await`` is allowed and runs on one event loop
  that lasts the whole page; a block may also call ``asyncio.run`` itself;
- its ``sh`` blocks run in ``bash -euo pipefail`` with ``asyncdl`` on the PATH;
  ``pip install`` lines are not run: the extras they name (``asyncdl[cli]``, a
  checkout's ``.[cli]``, a wheel's ``...whl[cli]``) must exist in ``pyproject.toml``;
  nor are ``python3 -m nox`` lines (the suite cannot run itself): the sessions they
  name must exist in ``noxfile.py``; nor are the lines that make and enter a virtual
  environment (``python3 -m venv DIR``, ``. DIR/bin/activate``): the suite runs in one;
- ``https://downloads.example.com/`` in an example stands for a plain web server and is
  served from the bucket; ``http://localhost:9000`` (MinIO's own address) stands for the
  S3-compatible store, the test server;
- a ``text`` block that directly follows a block that ran (nothing but blank lines
  between them) is that block's output, and must be what it printed: a python block's
  stdout, an sh block's stdout and stderr as one terminal shows them. In it, a line of
  ``...`` stands for any lines and ``...`` inside a line for any text of that line;
  ```` ```text {.unordered}```` (an HTML class: the reader sees nothing) takes the
  lines in any order, for work that prints as it finishes. ``_check_output`` says
  the rest. A ``text`` block after prose (a formula, a sample file) is not compared,
  nor is a ``console`` block (a shell session shown, not run);
- then ``tests/docs/docs_checks/<page>.py``, when there is one, checks what the page did: its
  ``check(namespace)`` is awaited with the page's namespace;
- a task that fails where nobody awaits it fails the page.

The page is read as the site renders it: ``--8<--`` snippets included, HTML comments
left out. ``python tests/docs/docs_runner.py MODULE.py`` runs the fenced blocks of a
module's docstrings (the API reference shows them) the same way, one namespace per
docstring.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib
import inspect
import io
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[2]
#: Blocks in these languages run; the others are output, configuration or diagrams.
RUN = {"python", "sh"}
#: Every language a block may name: a block in another (``py``, ``bash``, ``pycon``)
#: would be neither run nor obviously output, so it is refused.
KNOWN = RUN | {"text", "console", "toml", "yaml", "json", "mermaid", "http", "ini"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_PIP = re.compile(r"^\s*(?:python3? -m )?pip install (?P<args>.*)$")
#: The extras of what a pip line installs: ``asyncdl[...]``, a checkout's ``.[...]`` or a
#: wheel's ``....whl[...]``.
_EXTRAS = re.compile(r"(?:\basyncdl|(?<![\w.])\.|\.whl)\[(?P<extras>[^\]]*)\]")
#: A line that makes or enters a virtual environment.
_VENV = re.compile(r"^\s*(?:python3? -m venv \S+|(?:\.|source) \S+/bin/activate)\s*(?:#.*)?$")
_NOX = re.compile(
    r"^\s*(?:python3 -m pip install --upgrade 'nox\[uv\]' && )?"  # the Quick start's form
    r"python3 -m nox -s (?P<sessions>[\w ]+?)(?:\s+--.*|\s*#.*)?$"
)
#: A command line that installs or runs nox in any other form than the two above: it
#: would really run (the suite inside itself, or an install into the test environment).
_INSTALLS_OR_NOX = re.compile(r"\bnox\b|\bpip[x3]?\b.*\binstall\b|\buv\b")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
#: The classes of a fence's attribute list, ``{.unordered}`` in ```` ```text {.unordered}````
#: (superfences renders them as the block's HTML classes: the reader sees nothing).
_CLASSES = re.compile(r"\{(?P<attrs>[^}]*)\}\s*$")
#: A shown line that is only this stands for any lines; inside a line, for any text.
ANY = "..."
#: pymdownx.snippets' include line, as mkdocs.yml configures it (paths from the root).
_SNIPPET = re.compile(r'^[ \t]*--8<--[ \t]+"(?P<path>[^"]+)"[ \t]*$', re.M)


#: An S3-compatible store's endpoint in an example (MinIO's default): the test server's.
LOCAL_STORE = "http://localhost:9000"

#: The namespace's name for what each sh block printed (stdout and stderr as written), in
#: order.
SH_OUTPUT = "__sh_output__"


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # the fence's line number, 1-based
    #: Nothing but blank lines between this block and the one before it.
    follows: bool = False
    #: The classes of the fence's attribute list: ``("unordered",)``.
    classes: tuple[str, ...] = ()


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
    previous_end: int | None = None  # the line index of the last block's closing fence
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        lang = opening["info"].split(" ", 1)[0].strip()
        attrs = _CLASSES.search(opening["info"])
        classes = () if attrs is None else _classes(attrs["attrs"])
        follows = previous_end is not None and all(
            not line.strip() for line in lines[previous_end + 1 : i]
        )
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
        found.append(Block(lang, "\n".join(body) + "\n", i + 1, follows, classes))
        previous_end = j
        i = j + 1
    return found


def _classes(attrs: str) -> tuple[str, ...]:
    return tuple(word[1:] for word in attrs.split() if word.startswith(".") and len(word) > 1)


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
    """``docs/guides/one-object.md`` -> ``tests.docs.docs_checks.guides_one_object``."""
    relative = page.resolve().relative_to(ROOT)
    parts = relative.with_suffix("").parts
    if parts[0] == "docs":
        parts = parts[1:]
    name = "_".join(parts).replace("-", "_").lower()
    return f"tests.docs.docs_checks.{name}"


def _web_server(code: str) -> str:
    base = os.environ.get("DOCS_WEB_BASE")
    code = code.replace("https://downloads.example.com/", base) if base else code
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3")
    return code.replace(LOCAL_STORE, endpoint.rstrip("/")) if endpoint else code


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
        if _VENV.match(line):
            kept.append(":")
            continue
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
    printed: str | None = None  # what the block before printed, if it ran
    for block in found:
        here = f"{where}:{block.line}"
        if block.lang not in KNOWN:
            raise SystemExit(f"{here}: a block in {block.lang!r}: use one of {sorted(KNOWN)}")
        if block.lang == "text" and block.follows and printed is not None:
            _check_output(printed, block.code, here, unordered="unordered" in block.classes)
        printed = None
        if block.lang == "python":
            code = compile(
                _web_server(block.code), here, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            out = io.StringIO()
            with contextlib.redirect_stdout(_Tee(out, sys.stdout)):
                result = eval(code, namespace)  # the page's own example
                if inspect.isawaitable(result):
                    loop.run_until_complete(result)
            printed = out.getvalue()
        elif block.lang == "sh":
            script = _web_server(_shell(block.code, here))
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                # One stream, in the order it was written, as a terminal shows it; and
                # Python's stdout written as it goes, as on a terminal, not at exit.
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # The command on asyncio's loop, as a plain install runs it (the page
                # shows that), also where the suite runs with uvloop installed.
                env={**os.environ, "PYTHONUNBUFFERED": "1", "ASYNCDL_LOOP": "asyncio"},
                text=True,
                check=False,
            )
            sys.stdout.write(done.stdout)
            printed = done.stdout
            # What the page's check reads to see the commands did what the page says.
            namespace.setdefault(SH_OUTPUT, []).append(done.stdout)
            if done.returncode != 0:
                raise SystemExit(f"{here}: the sh block exited {done.returncode}")


class _Tee(io.TextIOBase):
    """Writes to both: the output a page shows is compared, and still seen."""

    def __init__(self, *streams: TextIO) -> None:
        self._streams = streams

    def write(self, text: str) -> int:
        for stream in self._streams:
            stream.write(text)
        return len(text)


def _check_output(printed: str, shown: str, where: str, *, unordered: bool = False) -> None:
    """``shown`` (a page's ``text`` block) is what was ``printed``, line for line, as a
    reader on AWS would see it (see ``on_screen``). A line of ``...`` stands for any
    lines, none included; ``...`` inside a line for any text in that line (a timing, an
    age). ``unordered`` (the fence ```` ```text {.unordered}````, for concurrent work
    that prints as it finishes): the same lines, each as many times, in any order; no
    line of ``...``, but ``...`` inside a line (a summary's time)."""
    got = on_screen(printed)
    want = [line.rstrip() for line in shown.rstrip("\n").split("\n")]
    if unordered:
        if ANY in want:
            raise SystemExit(f"{where}: an unordered block cannot hold a line of {ANY!r}")
        same = _matches_unordered(got, want)
    else:
        same = _matches(got, want)
    if not same:
        raise SystemExit(
            f"{where}: the page shows\n" + "\n".join(want) + "\nbut it printed\n" + "\n".join(got)
        )


def on_screen(printed: str) -> list[str]:
    """The lines a terminal shows for ``printed``: a carriage return starts its line
    over (a progress counter shows its last value), trailing blanks are not seen, and
    the test endpoint's URLs are shown as on AWS (``http://127.0.0.1:PORT/BUCKET/KEY``
    is ``https://BUCKET.s3.amazonaws.com/KEY``, the form boto3 presigns on AWS)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3", "").rstrip("/")
    if endpoint:
        printed = re.sub(
            re.escape(endpoint) + r"/(?P<bucket>[a-z0-9][a-z0-9.-]+)/",
            r"https://\g<bucket>.s3.amazonaws.com/",
            printed,
        )
    lines = []
    for line in printed.rstrip("\n").split("\n"):
        screen = ""
        for overwrite in line.split("\r"):
            screen = overwrite + screen[len(overwrite) :]
        lines.append(screen.rstrip())
    return lines


def _matches_unordered(got: list[str], want: list[str]) -> bool:
    """Whether ``got`` are the lines ``want`` in some order: the exact ones first, then
    each line with ``...`` inside stands for one of the rest that it matches."""
    rest = sorted(got)
    for line in (line for line in want if ANY not in line):
        if line not in rest:
            return False
        rest.remove(line)
    for line in (line for line in want if ANY in line):
        pattern = re.compile(".*?".join(re.escape(part) for part in line.split(ANY)))
        matched = next((n for n, text in enumerate(rest) if pattern.fullmatch(text)), None)
        if matched is None:
            return False
        del rest[matched]
    return not rest


def _matches(got: list[str], want: list[str]) -> bool:
    """Whether the lines ``got`` are the lines ``want``, with their ``...``."""
    reached = {0}  # how many of ``got`` the lines of ``want`` so far can stand for
    for line in want:
        if line == ANY:
            reached = set(range(min(reached), len(got) + 1)) if reached else set()
            continue
        pattern = re.compile(".*?".join(re.escape(part) for part in line.split(ANY)))
        reached = {n + 1 for n in reached if n < len(got) and pattern.fullmatch(got[n])}
    return len(got) in reached


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
    # Every block ran and was checked: the process ends here, without the
    # interpreter's finalization. pyarrow's C++ runtime (random-access.md reads a
    # Parquet footer with it) once aborted there ("terminate called without an active
    # exception", SIGABRT) after the page had passed, failing a CI run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
