"""Sessions: tests, lint (ruff + mypy), demo. Each installs what it needs."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite against moto's server on loopback."""
    session.install("-e", ".[tests]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format check) and mypy --strict."""
    session.install("-e", ".[dev]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: embedded moto, 1000 x 1 KiB + 64 MiB, both strategies, one table."""
    session.install("-e", ".[demo]")
    session.run("python", "-m", "asyncdl.demo", *session.posargs)
