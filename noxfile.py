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
    session.install("-e", ".[demo,cli]")
    session.run("asyncdl", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The batch benchmark against the peers; `-- startup ...` the start-up one, `--
    instructions ...` instructions per object under callgrind, `-- serve ...` FastAPI's
    object_response under load, `-- resume ...` a killed copy run again, `-- sync ...`
    asyncdl sync beside s5cmd and aws s3 sync, `-- bandwidth ...` capped downloads,
    `-- throttle ...` adaptive concurrency against 503 SlowDown. Not run by default
    (see benchmarks/README.md); --server s3rver also needs node and npm."""
    # crc32c: the CRC32C checksums moto computes itself (a multipart upload's, an upload
    # part's) are silently CRC32s without it, values S3 would never send.
    session.install("-e", ".[bench]", "crc32c>=2.4")
    # An editable install leaves asyncdl's modules uncompiled, and where
    # PYTHONDONTWRITEBYTECODE is set every run of the command compiled its ~50
    # modules from source again (0.1 s of each start-up on a slow day), which no
    # wheel install does: compile them once, as pip does for the peers' packages.
    session.run("python", "-m", "compileall", "-q", "src", silent=True)
    args = list(session.posargs)
    script = "benchmarks/batch.py"
    if args[:1] == ["serve"]:
        session.install("-e", ".[fastapi]", "uvicorn")
    if args[:1] in (
        ["startup"],
        ["instructions"],
        ["serve"],
        ["resume"],
        ["sync"],
        ["bandwidth"],
        ["throttle"],
    ):
        script, args = f"benchmarks/{args[0]}.py", args[1:]
    session.run("python", script, *args)


@nox.session
def bench_dask(session: nox.Session) -> None:
    """asyncdl.dask on a LocalCluster of 1, then 2 workers (see benchmarks/README.md)."""
    session.install("-e", ".[dask,demo]")
    session.run("python", "benchmarks/dask_scale.py", *session.posargs)


@nox.session
def stress(session: nox.Session) -> None:
    """The fault-injection module 20 times in a row (retries, stalls, cancellation)."""
    session.install("-e", ".[tests]")
    runs = int(session.posargs[0]) if session.posargs else 20
    for run in range(1, runs + 1):
        session.log(f"fault run {run} of {runs}")
        session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/test_faults.py")
