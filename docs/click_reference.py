"""An mkdocs hook: the command reference, rendered from the click commands themselves.

A page's ``::: asyncdl-commands`` line becomes, for ``asyncdl`` and each subcommand, a
heading, the command's help text, its usage, and a table of its options: the option
and its value, its default, and what it does, all as ``--help`` says them, so the
reference cannot drift from the command. (mkdocs-click's table shows click's unset
defaults as ``Sentinel.UNSET`` and every value as ``text``.)
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import click

MARKER = re.compile(r"^::: asyncdl-commands[ \t]*$", re.MULTILINE)
#: Characters Markdown would read as markup in click's plain text.
_MARKUP = re.compile(r"([\\`*_<>\[\]|])")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER.search(markdown) is None:
        return markdown
    from asyncdl.cli import cli  # noqa: PLC0415 - only the page that asks needs it

    return MARKER.sub(lambda _: "\n".join(_command(cli, "asyncdl", None)), markdown)


def _plain(text: str) -> str:
    return _MARKUP.sub(r"\\\1", text)


def _command(
    command: click.Command, name: str, parent: click.Context | None
) -> Iterator[str]:
    ctx = click.Context(command, info_name=name, parent=parent)
    path = ctx.command_path
    yield f"### `{path}` {{#{path.replace(' ', '-')} data-toc-label='{name}'}}"
    yield ""
    yield from _help(command.help or "")
    usage = " ".join(command.collect_usage_pieces(ctx))
    yield "```text"
    yield f"{path} {usage}"
    yield "```"
    yield ""
    yield from _options(command, ctx)
    if isinstance(command, click.Group):
        names = command.list_commands(ctx)
        yield "| command | what it does |"
        yield "|---|---|"
        for sub_name in names:
            sub = command.get_command(ctx, sub_name)
            assert sub is not None
            first = sub.get_short_help_str(limit=200)
            yield f"| [`{sub_name}`](#{path}-{sub_name}) | {_plain(first)} |"
        yield ""
        for sub_name in names:
            sub = command.get_command(ctx, sub_name)
            assert sub is not None
            yield from _command(sub, sub_name, ctx)


def _help(text: str) -> Iterator[str]:
    """click's help text: paragraphs; a paragraph after a ``\\b`` line as written."""
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":
            yield "```text"
            yield from inspect.cleandoc("\n".join(lines[1:])).splitlines()
            yield "```"
        else:
            yield _plain(" ".join(line.strip() for line in lines))
        yield ""


def _options(command: click.Command, ctx: click.Context) -> Iterator[str]:
    rows = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden:
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        extra = param.get_help_extra(ctx)
        meaning = _plain(param.help or "")
        if isinstance(param.type, click.Choice):
            choices = ", ".join(f"`{choice}`" for choice in param.type.choices)
            meaning += f" One of {choices}."
        if "range" in extra:
            meaning += f" From {_plain(extra['range'].replace('<=x<=', ' to '))}."
        if param.multiple:
            meaning += " Repeatable."
        default = extra.get("default", "")
        default = f"`{default}`{{.nowrap}}" if default else ""
        rows.append(f"| {_option(record[0], param)} | {default} | {meaning} |")
    if not rows:
        return
    yield "| option | default | meaning |"
    yield "|---|---|---|"
    yield from rows
    yield ""


def _option(shown: str, param: click.Option) -> str:
    """``--chunk-size SIZE`` as code spans: a name is never broken at its hyphens (the
    site's CSS keeps ``nowrap`` code on one line); a choice's values are in its
    meaning instead, the column stays narrow."""
    names = [*param.opts, *param.secondary_opts]
    metavar = "" if param.is_flag else shown.rsplit(" ", 1)[-1] if " " in shown else ""
    if isinstance(param.type, click.Choice) or metavar in names:
        metavar = ""
    if metavar and shown.endswith(" RANGE"):  # click's "INTEGER RANGE"
        metavar = "N"
    text = ", ".join(f"`{name}`{{.nowrap}}" for name in param.opts)
    if param.secondary_opts:
        off = ", ".join(f"`{name}`{{.nowrap}}" for name in param.secondary_opts)
        text += f" / {off}"
    return f"{text} `{metavar}`" if metavar else text
