"""Where a key lands on disk: the path under a destination, or why it may not land.

A key is a name in S3's flat namespace; on disk its segments are directories and a
file, under the rules of the platform. A key that would leave the destination, or
blur into another name, is refused here, before anything is sent or written.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath


def folder(prefix: str) -> str:
    """The folder a prefix names: ``"logs"`` is ``logs/``, as ``cp -r logs`` has it."""
    # As a bare string prefix "logs" would also take logsa (landing on a/, beside
    # logs/a) and logs2/a (on 2/a).
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


# Windows refuses these in a name. A colon is worse than refused: "D:x" is a path
# relative to drive D (outside the destination), "a:b" the NTFS stream b of file a.
_WINDOWS_FORBIDDEN = re.compile(r'[<>:"|?*\x00-\x1f]')
# Device names, in any case and with any extension ("nul.txt" is NUL too).
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789\u00b9\u00b2\u00b3"}
)


def relative_path(key: str, prefix: str = "", *, windows: bool | None = None) -> PurePosixPath:
    """Where ``key`` lands under the destination, or ``ValueError`` if it would escape it.

    The rules ``Engine.download_prefix`` applies to each key it lists, for a caller
    that names the targets itself (``Engine.download_many``, a web service's batch):
    ``dest_dir.joinpath(*relative_path(key, prefix).parts)`` is inside ``dest_dir``.

    A ``prefix`` that does not end in ``/`` (and is not empty) is the folder
    ``prefix/``: ``logs/a`` is ``a`` under ``logs``, and ``logsa`` is not in it. Each
    segment after the prefix must name itself, one file or directory, under the rules
    of the platform (Windows' with ``windows``, by default where ``os.name`` is
    ``"nt"``): nowhere an empty, ``.`` or ``..`` segment, a NUL or a backslash; on
    Windows also no drive or stream colon nor other character it refuses, no trailing
    dot or space (it drops them), no device name (``CON``, ``nul.txt``, ``COM1``);
    and nowhere one of asyncdl's own names (a partial, journal or temp file, the record
    sidecar's or Dask's run journal directory), in any case or Unicode form: on a file
    system that ignores case, ``.X.ASYNCDL-PARTIAL`` is ``.x.asyncdl-partial``.
    """
    return PurePosixPath(*relative_parts(key, prefix, windows=windows))


def relative_parts(key: str, prefix: str = "", *, windows: bool | None = None) -> tuple[str, ...]:
    """:func:`relative_path`'s segments, as a tuple: what a listing keeps of each key
    (a tuple of the key's own strings, where a path would parse them again)."""
    base = folder(prefix)
    if not key.startswith(base):
        raise ValueError(f"key {key!r} is not in the folder {base!r}")
    rest = key[len(base) :]
    if not rest:
        raise ValueError(f"key {key!r} names no file under the prefix {prefix!r}")
    if rest.startswith("/"):
        raise ValueError(f"refusing key {key!r}: an absolute path")
    if windows is None:
        windows = os.name == "nt"
    segments = rest.split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ValueError(
                f"refusing key {key!r}: segment {segment!r} would leave or blur the destination"
            )
        if "\x00" in segment or "\\" in segment:
            raise ValueError(f"refusing key {key!r}: a NUL or backslash in a path segment")
        why = _windows_refusal(segment) if windows else None
        if why is not None:
            raise ValueError(f"refusing key {key!r}: segment {segment!r} {why}")
        if is_own_name(segment):
            raise ValueError(
                f"refusing key {key!r}: segment {segment!r} is named like one of asyncdl's "
                "own files (a partial file, journal, temp file or record): it would be "
                "taken for one"
            )
    return tuple(segments)


def is_own_name(segment: str) -> bool:
    """Whether ``segment`` is one of asyncdl's own names (``file_records.is_own_name``),
    in any segment: as a file it would be taken for ours (a partial adopted by its
    target, a temp file swept), as a directory it would hold what we read as ours
    (forged records in a sidecar directory, a Dask run's journals)."""
    if not segment.startswith("."):
        return False  # every one of them does: no import on the usual path
    # Imported here: file_records brings the writer's stack, and the CLI imports this
    # module to parse its arguments (--help imports no S3 stack).
    from . import file_records  # noqa: PLC0415

    return file_records.is_own_name(segment)


def _windows_refusal(segment: str) -> str | None:
    """Why Windows would not store ``segment`` as one name of its own, else ``None``."""
    forbidden = _WINDOWS_FORBIDDEN.search(segment)
    if forbidden is not None:
        if forbidden.group() == ":":
            return "holds ':', a drive or stream separator on Windows"
        return f"holds {forbidden.group()!r}, which Windows does not allow in a name"
    if segment.endswith((".", " ")):
        return "ends in a dot or space, which Windows drops"
    if segment.partition(".")[0].rstrip(" ").upper() in _WINDOWS_DEVICES:
        return "is a device name on Windows"
    return None
