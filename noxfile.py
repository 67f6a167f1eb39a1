"""Sessions: tests, lint (ruff + mypy), demo. Each installs what it needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
# uv (the README's command installs it with nox: ``nox[uv]``) makes the tests' environment
# in ~20 s where pip takes ~100 s; with plain ``pip install nox`` the sessions use venv
# and pip.
nox.options.default_venv_backend = "uv|venv"
# uv would download a CPython the machine lacks: ``tests_compat`` skips it instead.
nox.options.download_python = "never"
# pip compiles what it installs and uv does not: where PYTHONDONTWRITEBYTECODE is set,
# every process the tests start (the command, the docs' examples, Dask's workers) would
# compile botocore, aiohttp and the rest from source again (0.5 s more per start).
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
nox.options.reuse_existing_virtualenvs = True
# A CPython the machine lacks skips its session with a line that says so (nox's default
# turns that into a failure when CI is set).
nox.options.error_on_missing_interpreters = False

#: The CPythons beside the one that runs nox, for ``tests_compat``.
OTHER_PYTHONS = ["3.12", "3.13"]


def _let_pyenv_find_every_version() -> None:
    """pyenv's shims run only the versions that ``PYENV_VERSION`` names (its shim sets it
    to the current version for the process it starts): a ``python3.12`` shim beside a
    global 3.11 answers "command not found". Name every installed version after the
    ones already named, so ``python3`` stays what it was."""
    if shutil.which("pyenv") is None:
        return
    named = os.environ.get("PYENV_VERSION", "").split(":")
    if not named[0]:
        named = subprocess.run(
            ["pyenv", "version-name"], capture_output=True, text=True, check=False
        ).stdout.split()
    installed = subprocess.run(
        ["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False
    ).stdout.split()
    if named and installed:
        os.environ["PYENV_VERSION"] = ":".join([*named, *(v for v in installed if v not in named)])


_let_pyenv_find_every_version()

#: pytest-xdist: one worker per core, each its own pytest session and so its own moto
#: server (the session-scoped fixtures); ``--dist loadgroup`` keeps together only the
#: tests marked ``xdist_group``. Before the posargs: ``-- -n 0`` runs in one process.
XDIST = ["-n", "auto", "--dist", "loadgroup"]


def run_suite(
    session: nox.Session, *args: str, marks: str = "", env: dict[str, str] | None = None
) -> None:
    """pytest on both cores (one worker per core, each with its own servers), then the
    tests marked ``alone`` in one process with nothing beside them: they measure the
    event loop's latency, which another worker on the machine adds to. ``marks``: a
    marker expression both runs also take. A selection with no ``alone`` test in it
    runs nothing the second time (pytest's exit status 5)."""
    both = f"({marks}) and " if marks else ""
    # The checkout's own modules, which an editable install leaves uncompiled: where
    # PYTHONDONTWRITEBYTECODE is set, each process the tests start compiled them again.
    session.run("python", "-m", "compileall", "-q", "src", silent=True)
    session.run("pytest", *XDIST, "-m", f"{both}not alone", *args, env=env)
    session.run("pytest", "-m", f"{both}alone", *args, env=env, success_codes=[0, 5])


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite against moto's server on loopback."""
    session.install("-e", ".[tests]")
    run_suite(session, *session.posargs)


#: What ``tests_compat`` runs on the other CPythons: the data path (one object, many,
#: streams, URLs, resume), the command, serving and the pure parts, in a few minutes;
#: the whole suite runs on the interpreter that runs nox (``tests``).
COMPAT_TESTS = [
    "tests/transfer/test_download.py",
    "tests/bulk/test_bulk.py",
    "tests/reads/test_stream.py",
    "tests/wire/test_url_raw_http.py",
    "tests/transfer/test_resume.py",
    "tests/cli/test_cli.py",
    "tests/contrib/test_object_response.py",
    "tests/wire/test_ranges.py",
    "tests/wire/test_running_checksum.py",
    "tests/face/test_packaging.py",
]


@nox.session(python=OTHER_PYTHONS)
def tests_compat(session: nox.Session) -> None:
    """A subset of the suite (``COMPAT_TESTS``) on each other CPython the machine has;
    one it lacks is skipped, and nox says so."""
    session.install("-e", ".[tests]")
    run_suite(session, *(session.posargs or COMPAT_TESTS))


@nox.session
def tests_uvloop(session: nox.Session) -> None:
    """The test suite with every test's event loop a uvloop one (uvicorn runs uvloop
    whenever it is installed, so most services that embed asyncdl do), less the tests
    of asyncio's own internals (marked ``asyncio_internals``); the command's runs in
    it take uvloop too, as installed."""
    session.install("-e", ".[tests,uvloop]")
    run_suite(
        session,
        *session.posargs,
        marks="not asyncio_internals",
        env={"ASYNCDL_TEST_LOOP": "uvloop"},
    )


#: What ``tests_aiohttp_gets`` runs: the groups whose S3 GETs go through the lean path.
AIOHTTP_GETS_TESTS = ["tests/wire", "tests/transfer", "tests/reads"]


@nox.session
def tests_aiohttp_gets(session: nox.Session) -> None:
    """The wire, transfer and reads tests with the lean path's GETs on aiohttp instead
    of the engine's own HTTP client (``ASYNCDL_OWN_HTTP=0``, the escape hatch the README
    names); ``ASYNCDL_TEST_LOOP=uvloop`` in the environment runs them on uvloop."""
    session.install("-e", ".[tests,uvloop]")
    env = {"ASYNCDL_OWN_HTTP": "0"}
    # On uvloop, as tests_uvloop: less the tests of asyncio's own internals.
    uvloop = os.environ.get("ASYNCDL_TEST_LOOP") == "uvloop"
    marks = "not asyncio_internals" if uvloop else ""
    run_suite(session, *(session.posargs or AIOHTTP_GETS_TESTS), marks=marks, env=env)


#: What ``tests_pure_parser`` runs: the tests of URLs and of hostile servers, whose
#: answers aiohttp's two parsers read differently (a broken framing, an echoed request).
PURE_PARSER_TESTS = [
    "tests/transfer/test_url.py",
    "tests/wire/test_url*.py",
    "tests/wire/test_http_*.py",
    "tests/contrib/test_http_ranges.py",
    "tests/reads/test_random_access_hostile.py",
    "tests/cli/test_sync_hostile.py",
]


@nox.session
def tests_pure_parser(session: nox.Session) -> None:
    """The URL and hostile-server tests (``PURE_PARSER_TESTS``) under aiohttp's
    pure-Python parser (``AIOHTTP_NO_EXTENSIONS=1``), which a platform without its C
    extension runs. The variable is read when aiohttp is first imported, so it is set
    for the whole pytest process."""
    session.install("-e", ".[tests]")
    env = {"AIOHTTP_NO_EXTENSIONS": "1"}
    # Fails when aiohttp ignored the variable: the run would try the C parser again.
    session.run(
        "python",
        "-c",
        "import aiohttp.client_proto as p; assert p.HttpResponseParser.__module__ == "
        "'aiohttp.http_parser', p.HttpResponseParser",
        env=env,
    )
    root = Path(__file__).parent
    found = {path.relative_to(root) for pattern in PURE_PARSER_TESTS for path in root.glob(pattern)}
    session.run("pytest", *(session.posargs or sorted(map(str, found))), env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format check) and mypy --strict."""
    session.install("-e", ".[dev]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built with ``--strict``: a broken link, a reference that
    does not resolve or a docstring the renderer cannot read fails it. ``-- serve``
    serves it on http://127.0.0.1:8000 instead."""
    session.install("-e", ".[docs]")
    # Material's banner about its successor is noise in every build's log.
    env = {"NO_MKDOCS_2_WARNING": "1"}
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", "--strict", *session.posargs[1:], env=env)
        return
    site = Path(session.create_tmp()) / "site"
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site), *session.posargs, env=env)
    session.log(f"site built in {site}")


@nox.session
def build(session: nox.Session) -> None:
    """The sdist and the wheel (the wheel built from the sdist), ``twine check``, and the
    wheel installed into a fresh virtual environment, where the command and the package
    must start."""
    session.install("build", "twine")
    tmp = Path(session.create_tmp())
    dist = tmp / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    # ``python -m build`` makes the sdist first and the wheel from the unpacked sdist:
    # a file the sdist forgets fails here.
    session.run("python", "-m", "build", "--outdir", str(dist))
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    session.run("twine", "check", "--strict", str(wheel), str(sdist))
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
    extra = {top for top in tops if top != "asyncdl" and not top.endswith(".dist-info")}
    if extra:
        session.error(f"the wheel holds more than the package: {sorted(extra)}")
    venv = tmp / "wheel-venv"
    shutil.rmtree(venv, ignore_errors=True)
    session.run("python", "-m", "venv", str(venv))
    python, command = str(venv / "bin" / "python"), str(venv / "bin" / "asyncdl")
    session.run(python, "-m", "pip", "install", "-q", f"{wheel}[cli]", external=True)
    session.run(command, "--version", external=True)
    session.run(python, "-c", "import asyncdl; asyncdl.Engine", external=True)
    session.run(command, "demo", "--help", external=True)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: embedded moto, 1000 x 1 KiB + 64 MiB, both strategies, one table."""
    # The install is silent and, the first time, long: say so before it starts.
    fresh = not (Path(session.virtualenv.location) / "bin" / "asyncdl").exists()
    session.log(
        "The demo downloads 1000 objects of 1 KiB and one of 64 MiB (by default; "
        "'-- --help' lists its options) from an S3 server (moto) on this machine, "
        "GET-first then HEAD-first, and prints one table."
    )
    if fresh:
        session.log(
            "First run: installing asyncdl with its 'demo' and 'cli' extras (moto, "
            "aiobotocore, click, rich...) into .nox/demo; this takes under a minute with "
            "uv (installed with nox by the README's command), 2-3 minutes with pip, and "
            "prints nothing until it is done. Later runs reuse it and start at once. "
            "(A 'uv binary not found' line above is nox's own: harmless, the demo then "
            "uses venv and pip.)"
        )
    else:
        session.log("Reusing the environment in .nox/demo (asyncdl installed in editable mode).")
    session.install("-e", ".[demo,cli]")
    session.log("Installed; running: asyncdl demo %s", " ".join(session.posargs))
    session.run("asyncdl", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The batch benchmark against the peers; `-- startup ...` the start-up one, `--
    instructions ...` instructions per object under callgrind, `-- serve ...` FastAPI's
    object_response under load, `-- resume ...` a killed copy run again, `-- sync ...`
    asyncdl sync beside s5cmd and aws s3 sync, `-- bandwidth ...` capped downloads,
    `-- throttle ...` adaptive concurrency against 503 SlowDown, `-- ranges ...`
    random access beside obstore and s3fs, `-- listing ...` a million listed objects,
    `-- targets ...` the performance targets in one run, `-- fsspec ...` Zarr, pandas and
    cat_ranges through asyncdl's fsspec file system beside s3fs and obstore. Not run by default
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
        ["ranges"],
        ["listing"],
        ["targets"],
    ):
        script, args = f"benchmarks/{args[0]}.py", args[1:]
    if args[:1] == ["fsspec"]:  # not fsspec.py: that name would hide the package
        script, args = "benchmarks/fsspec_reads.py", args[1:]
    session.run("python", script, *args)


@nox.session
def bench_dask(session: nox.Session) -> None:
    """asyncdl.dask on a LocalCluster of 1, then 2 workers (see benchmarks/README.md)."""
    session.install("-e", ".[dask,demo]")
    session.run("python", "benchmarks/dask_scale.py", *session.posargs)


@nox.session
def stress(session: nox.Session) -> None:
    """The fault-injection module 20 times in a row (retries, stalls, cancellation),
    then the crash-consistency module with 200 kills per test (`-- RUNS KILLS`)."""
    session.install("-e", ".[tests]")
    runs = int(session.posargs[0]) if session.posargs else 20
    kills = int(session.posargs[1]) if len(session.posargs) > 1 else 200
    for run in range(1, runs + 1):
        session.log(f"fault run {run} of {runs}")
        session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/transfer/test_faults.py")
    session.log(f"crash consistency: {kills} kills per command, plain and with power loss")
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/cli/test_crash_consistency.py",
        env={"ASYNCDL_CRASH_KILLS": str(kills)},
    )
