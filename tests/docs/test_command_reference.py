"""The command reference of docs/cli.md (``docs/click_reference.py``, an mkdocs hook):
every command has its section, and every option its row, with the default and the
meaning ``--help`` gives it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import click

from asyncdl.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "click_reference", ROOT / "docs" / "click_reference.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_command_and_option_is_in_the_reference() -> None:
    page = _hook().on_page_markdown("# The command\n\n::: asyncdl-commands\n")
    assert "::: asyncdl-commands" not in page
    assert "Sentinel" not in page  # click's unset default, as mkdocs-click shows it
    rows = [line for line in page.splitlines() if line.startswith("| `-")]
    ctx = click.Context(cli, info_name="asyncdl")
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        assert f"### `asyncdl {name}` {{#asyncdl-{name} " in page
        for param in command.get_params(click.Context(command, parent=ctx)):
            if isinstance(param, click.Option) and param.help:
                # Its own row, with its help (Markdown's characters escaped).
                first = param.opts[0]
                assert any(row.startswith(f"| `{first}`") for row in rows), first
    # A default and a choice, as --help says them.
    assert "| `--chunk-size`{.nowrap} `SIZE` | `8MiB`{.nowrap} | Bytes per ranged GET" in page
    assert "One of `auto`, `get-first`, `head-first`." in page


def test_a_page_without_the_marker_is_left_alone() -> None:
    text = "# Title\n\n::: asyncdl.Engine\n"
    assert _hook().on_page_markdown(text) == text
