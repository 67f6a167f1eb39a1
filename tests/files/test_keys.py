"""Where a key lands on disk: both platforms' rules, checked on any platform."""

from __future__ import annotations

from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

import asyncdl
from asyncdl._bulk.bulk import relative_path
from asyncdl._files import file_records, partial_paths
from asyncdl._files.writer import is_temp_file
from asyncdl.testing.tcp_proxy import TcpProxy

from ..bulk.test_bulk import files_under, put_many

# Fine file names on POSIX; on Windows each would leave the destination, name
# another file than the one asked for, or reach a device instead of a file.
WINDOWS_ONLY = [
    "x/D:evil",  # drive-relative: joins as D:evil, outside the destination
    "D:evil",
    "a:b",  # an NTFS alternate data stream of a
    "dir:stream/f",
    "CON",
    "con",
    "NUL.txt",
    "x/nul.tar.gz",
    "aux .txt",
    "COM1",
    "com0",
    "LPT9",
    "lpt\u00b9",  # LPT with superscript one: reserved as well
    "CONIN$",
    "conout$.log",
    "prn/inside",  # a directory by a device's name
    "name.",  # Windows drops the trailing dot: "name"
    "name ",
    "dir./f",
    "...",
    'a"b',
    "a|b",
    "a?b",
    "a*b",
    "a<b",
    "a>b",
    "a\x01b",
    "tab\tname",
]

BOTH_FINE = [
    "a/b.txt",
    "CONSOLE",
    "console.log",
    "nul-device",
    "com10",
    "lpt",
    "connect/x",
    "a b/c d",
    " lead",
    ".hidden",
    "..a/b..c",
    "caf\u00e9/\u65e5\u672c",
]


@pytest.mark.parametrize("key", WINDOWS_ONLY)
def test_windows_rules_refuse_what_windows_would_misread(key: str) -> None:
    with pytest.raises(ValueError, match="refusing"):
        relative_path(key, "", windows=True)
    assert str(relative_path(key, "", windows=False)) == key


@pytest.mark.parametrize("key", BOTH_FINE)
def test_both_rules_keep_ordinary_names(key: str) -> None:
    assert str(relative_path(key, "", windows=False)) == key
    parts = relative_path(key, "", windows=True).parts
    # Under Windows' own path rules, every segment stays itself and under the root.
    root = PureWindowsPath("C:/dest")
    assert root.joinpath(*parts).relative_to(root).parts == parts


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize("key", ["p/a\\b", "p/../x", "p//x", "p/./x", "p/a\x00b"])
def test_both_rules_refuse_escapes(key: str, windows: bool) -> None:
    with pytest.raises(ValueError, match="refusing"):
        relative_path(key, "p/", windows=windows)


async def test_download_prefix_follows_the_local_rules(
    engine: asyncdl.Engine, s3: Any, bucket: str, proxy: TcpProxy, tmp_path: Path
) -> None:
    # The tests run on POSIX, where these are ordinary names: refusing them would
    # lose objects for nothing.
    objects = {
        f"p/{name}": name.encode()
        for name in ("a:b", "x/D:evil", "NUL.txt", "CON", "e.", "caf\u00e9 1")
    }
    put_many(s3, bucket, objects)

    results = [r async for r in engine.download_prefix(bucket, "p/", tmp_path)]

    assert sorted(r.key for r in results) == sorted(objects)
    assert all(r.ok for r in results)
    assert files_under(tmp_path) == sorted(key[2:] for key in objects)
    assert (tmp_path / "x" / "D:evil").read_bytes() == b"x/D:evil"


# asyncdl's own files beside a target, and its own directories under a destination:
# a key by such a name would be taken for one (a partial adopted, a record forged).
OWN_NAMES = [
    ".big.bin.asyncdl-partial",
    ".big.bin.asyncdl-journal",
    ".big.bin.0123abcd.asyncdl-tmp",
    ".big.bin.run1-0123abcd.asyncdl-tmp",
    file_records.SIDECAR_DIR,
    file_records.RUN_JOURNAL_DIR,
]


@pytest.mark.parametrize("where", ["{}", "dir/{}", "{}/inside", "a/{}/b"])
@pytest.mark.parametrize("name", OWN_NAMES)
def test_keys_named_like_asyncdl_own_files_are_refused(name: str, where: str) -> None:
    key = "p/" + where.format(name)
    with pytest.raises(ValueError, match="asyncdl's own") as refused:
        relative_path(key, "p/")
    assert repr(key) in str(refused.value)


def test_the_names_refused_are_the_ones_asyncdl_writes(tmp_path: Path) -> None:
    partial, journal = partial_paths.paths_for(tmp_path / "big.bin")
    names = [partial.name, journal.name, ".big.bin.0123abcd.asyncdl-tmp"]
    assert names[:2] == OWN_NAMES[:2]
    assert is_temp_file(names[2])
    # Dask's run journals: the directory its sweep reads (asyncdl.dask needs dask).
    sweep = pytest.importorskip("asyncdl.dask._sweep")
    assert sweep.JOURNAL_DIR == file_records.RUN_JOURNAL_DIR


@pytest.mark.parametrize(
    "key", ["p/big.bin.asyncdl-partial", "p/.asyncdl-partial.txt", "p/x.asyncdl-tmp"]
)
def test_names_that_only_resemble_asyncdl_own_files_are_kept(key: str) -> None:
    assert str(relative_path(key, "p/")) == key[2:]


# On a file system that ignores case (macOS' APFS, Windows' NTFS) these are asyncdl's
# own names (NTFS upper-cases U+017F, long s, to S): refused on every platform.
CASE_VARIANTS = [
    ".big.bin.ASYNCDL-PARTIAL",
    ".big.bin.Asyncdl-Journal",
    ".x.12345678.ASYNCDL-TMP",
    ".ASYNCDL-ETAGS",
    ".Asyncdl-Runs",
    ".a\u017fyncdl-etags",
    ".big.bin.\u0041syncdl-partial",
]


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize("name", CASE_VARIANTS)
def test_own_names_are_refused_in_any_case(name: str, windows: bool) -> None:
    for key in (f"p/{name}", f"p/{name}/inside"):
        with pytest.raises(ValueError, match="asyncdl's own"):
            relative_path(key, "p/", windows=windows)
