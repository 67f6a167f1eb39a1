"""The ``asyncdl`` group: exit statuses, one-line usage errors, and the options every
downloading command shares."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from .._wire.client_settings import ClientSettings, check_profile, check_region
from ..config import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, TransferConfig
from .params import converter, parse_endpoint_url, parse_rate, parse_seconds, parse_size

#: Exit status after Ctrl-C, as shells report a process ended by SIGINT.
INTERRUPTED = 130

_Command = TypeVar("_Command", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Settings:
    config: TransferConfig
    #: What the options say of the S3 client (endpoint, region, profile, unsigned).
    client: ClientSettings
    quiet: bool
    debug: bool
    #: ``False`` under ``--no-progress``: no bar, whatever stderr is.
    progress: bool = True
    #: ``--timeout``: seconds for each object's whole download; ``None``, no limit.
    timeout: float | None = None

    @property
    def bar(self) -> bool | None:
        """``Output``'s ``bar``: ``False`` under ``--no-progress``, else its own choice."""
        return None if self.progress else False

    @property
    def endpoint_url(self) -> str | None:
        return self.client.endpoint_url


def _reopen_closed_std_streams() -> None:
    """Point a standard stream started closed (``2>&-``, ``>&-``) at /dev/null.

    Python leaves such a stream ``None``, which every ``isatty()`` and write would
    fail on; and the descriptor is free, so the next file opened (a download's temp
    file) would take it, and whatever writes to fd 2 would land in that file.
    """
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:  # closed: take the descriptor back
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        setattr(sys, name, open(fd, "w", encoding="utf-8", closefd=False))  # noqa: SIM115


class _Cli(click.Group):
    """click's group, with asyncdl's exit statuses and one-line usage errors."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        _reopen_closed_std_streams()
        # click's standalone mode prints usage errors as three lines with the usage
        # synopsis and turns Ctrl-C into status 1; run it non-standalone and decide here.
        try:
            status = super().main(
                args,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            status = exc.exit_code
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message()}{hint}", err=True)
            status = exc.exit_code
        except click.ClickException as exc:
            exc.show()
            status = exc.exit_code
        except click.Abort:  # Ctrl-C outside a download (while parsing, say)
            status = INTERRUPTED
        if not standalone_mode:
            return status
        sys.exit(status if isinstance(status, int) else 0)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    # click's version_option takes the version when the group is defined, that is on
    # every run; reading the package's metadata costs ~20 ms, so only --version does.
    if not value or ctx.resilient_parsing:
        return
    from .. import __version__  # noqa: PLC0415 - see above

    click.echo(f"asyncdl, version {__version__}")
    ctx.exit()


@click.group(cls=_Cli, name="asyncdl")
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """Download objects from S3 and S3-compatible stores.

    Credentials, region and endpoint come from the standard AWS environment and
    config files (AWS_ENDPOINT_URL_S3, AWS_PROFILE, AWS_REGION, ...); --endpoint-url,
    --profile and --region override them. A public bucket is read with
    --no-sign-request: no credentials needed.

    Exit status: 0 success, 1 some object failed, 2 usage error, 130 Ctrl-C,
    143 SIGTERM, 129 SIGHUP (the three cancel the downloads first; cp keeps their
    partial files for the next run to continue, see cp --no-resume and clean).
    """


def _chunk_size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    size = converter(parse_size)(ctx, param, value)
    assert size is not None  # the option has a default
    if not MIN_CHUNK_SIZE <= size <= MAX_CHUNK_SIZE:
        raise click.BadParameter(
            f"must be between 64KiB and 5GiB, got {size} bytes", ctx=ctx, param=param
        )
    return size


def _client_options() -> list[Callable[[_Command], _Command]]:
    """The options that set up the S3 client."""
    return [
        click.option(
            "--endpoint-url",
            metavar="URL",
            default=None,
            callback=converter(parse_endpoint_url),
            help="S3 endpoint (MinIO, moto, ...); default: the AWS environment's.",
        ),
        click.option(
            "--region",
            metavar="REGION",
            default=None,
            callback=converter(check_region),
            help="Region to sign for (auto for R2); default: AWS_REGION, AWS_DEFAULT_REGION "
            "or the profile's.",
        ),
        click.option(
            "--profile",
            metavar="NAME",
            default=None,
            callback=converter(check_profile),
            help="Profile of the AWS config files to use; default: AWS_PROFILE's, or default.",
        ),
        click.option(
            "--no-sign-request",
            is_flag=True,
            help="Send requests unsigned (a public bucket): no credentials are looked up or sent.",
        ),
        _seconds_option(
            "--read-timeout",
            "Seconds a request waits for bytes before it is tried again (2.5, 90s, 2m); "
            f"default: {TransferConfig().read_timeout:g}.",
        ),
        _seconds_option(
            "--connect-timeout",
            "Seconds to make a connection before it is tried again; default: "
            f"{TransferConfig().connect_timeout:g}.",
        ),
    ]


def _seconds_option(name: str, help_text: str) -> Callable[[_Command], _Command]:
    return click.option(
        name, metavar="SECONDS", default=None, callback=converter(parse_seconds), help=help_text
    )


def timeout_option(command: _Command) -> _Command:
    """``--timeout``: of each object's download, for the commands that write files."""
    return _seconds_option(
        "--timeout",
        "Seconds for each object's whole download, retries included (a server that "
        "sends a byte now and then is never silent for --read-timeout); an object not "
        "done by then fails. Listing requests have --read-timeout only. Default: no limit.",
    )(command)


_DEBUG_HELP = "Tracebacks for errors; log retries."


def transfer_options(command: _Command) -> _Command:
    """The options every downloading command takes."""
    defaults = TransferConfig()
    options = [
        click.option(
            "--concurrency",
            type=click.IntRange(1, 10_000),
            default=defaults.max_concurrency,
            show_default=True,
            help="S3 requests in flight at most, all objects together.",
        ),
        click.option(
            "--chunk-size",
            metavar="SIZE",
            default="8MiB",
            show_default=True,
            callback=_chunk_size,
            help="Bytes per ranged GET: a number, or with a unit (64KiB, 8MiB, 1GB).",
        ),
        click.option(
            "--max-bandwidth",
            metavar="SIZE",
            default=None,
            callback=converter(parse_rate),
            help="Bytes per second at most, all objects together (8MiB: 8 MiB/s); default: no cap.",
        ),
        *_client_options(),
        click.option(
            "-q",
            "--quiet",
            is_flag=True,
            help="No progress bar, no 'download:' lines, no summary line.",
        ),
        click.option(
            "--no-progress",
            is_flag=True,
            help="No progress bar (it is drawn only on a terminal anyway); the lines stay.",
        ),
        click.option("--debug", is_flag=True, help=_DEBUG_HELP),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def client_options(command: _Command) -> _Command:
    """The options of a command that sends requests but downloads nothing (``ls``):
    the client's, and ``--debug``."""
    options = [*_client_options(), click.option("--debug", is_flag=True, help=_DEBUG_HELP)]
    for option in reversed(options):
        command = option(command)
    return command


def main(argv: Sequence[str] | None = None) -> None:
    """The console script ``asyncdl``; ``argv`` defaults to ``sys.argv[1:]``."""
    cli.main(args=argv, prog_name="asyncdl")


def make_settings(
    *,
    concurrency: int,
    chunk_size: int,
    max_bandwidth: int | None,
    validate: str,
    endpoint_url: str | None,
    quiet: bool,
    debug: bool,
    resume: bool = False,
    region: str | None = None,
    profile: str | None = None,
    no_sign_request: bool = False,
    no_progress: bool = False,
    read_timeout: float | None = None,
    connect_timeout: float | None = None,
    timeout: float | None = None,
) -> Settings:
    defaults = TransferConfig()
    try:
        config = TransferConfig(
            chunk_size=chunk_size,
            max_concurrency=concurrency,
            max_bandwidth=max_bandwidth,
            validate=validate,
            resume=resume,
            read_timeout=defaults.read_timeout if read_timeout is None else read_timeout,
            connect_timeout=(
                defaults.connect_timeout if connect_timeout is None else connect_timeout
            ),
        )
        client = ClientSettings.checked(
            endpoint_url=endpoint_url, region=region, profile=profile, unsigned=no_sign_request
        )
    except ValueError as exc:  # the options' own checks should have caught it
        raise click.UsageError(str(exc)) from None
    return Settings(config, client, quiet, debug, progress=not no_progress, timeout=timeout)
