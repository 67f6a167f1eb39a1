"""A resumable download's journal, line by line: what it records and how it is read
back (the files and their lock are ``partial_file``'s).

Append-only JSON lines, each followed by a tab and the CRC32 of its JSON, so that a
torn or hand-edited line is detected:

- line 1, the header: format version, bucket, key, VersionId, ETag, size, the
  target's file name;
- then one line per write that reached the partial file: ``[start, end, crcs]``,
  bytes ``[start, end)`` (``start`` is where the part began: its later writes
  extend its line) and their CRCs by algorithm: ``{"CRC32": n}``, the three of
  ``checksums.every_crc`` while the algorithm was not known yet, or ``{}``.

An incomplete last line (a crash mid-append) is ignored; any other damage makes the
whole journal untrusted.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

from .checksums import CRC_ALGORITHMS, SPECULATED, crc_function, every_crc
from .file_writes import CrcOf

VERSION = 1
#: A journal larger than this is not one asyncdl wrote (a line per write).
MAX_SIZE = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Header:
    """What a journal's bytes are of."""

    bucket: str
    key: str
    version: str | None
    etag: str
    size: int
    target: str

    def line(self) -> bytes:
        return line_of(
            {
                "v": VERSION,
                "bucket": self.bucket,
                "key": self.key,
                "version": self.version,
                "etag": self.etag,
                "size": self.size,
                "target": self.target,
            }
        )


#: A recorded range: start, end, and its CRCs by algorithm (may be empty).
Recorded = tuple[int, int, dict[str, int]]


@dataclass(slots=True)
class Found:
    """A journal as read: its header and ranges, or why it cannot be trusted."""

    header: Header | None = None
    ranges: list[Recorded] = field(default_factory=list)
    #: Why the partial cannot be used; ``None`` when it can.
    damaged: str | None = None
    #: Bytes of whole lines: what follows is an append a crash cut short.
    length: int = 0


class Corrupt(ValueError):
    pass


def line_of(value: Any) -> bytes:
    text = json.dumps(value, separators=(",", ":")).encode()
    return b"%s\t%08x\n" % (text, zlib.crc32(text))


def _parse_line(line: bytes) -> Any:
    text, tab, check = line.rpartition(b"\t")
    if not tab or check != b"%08x" % zlib.crc32(text):
        raise Corrupt("a line of the journal fails its check")
    try:
        return json.loads(text)
    except ValueError:
        raise Corrupt("a line of the journal is not JSON") from None


def _header_of(value: Any) -> Header:
    if not isinstance(value, dict) or value.get("v") != VERSION:
        raise Corrupt("the journal's header is not one this version writes")
    try:
        header = Header(
            value["bucket"],
            value["key"],
            value["version"],
            value["etag"],
            value["size"],
            value["target"],
        )
    except KeyError as exc:
        raise Corrupt(f"the journal's header lacks {exc}") from None
    if not (
        all(isinstance(v, str) for v in (header.bucket, header.key, header.etag, header.target))
        and isinstance(header.version, str | None)
        and type(header.size) is int
        and header.size >= 0
    ):
        raise Corrupt("the journal's header holds values of the wrong type")
    return header


def _range_of(value: Any, size: int) -> Recorded:
    if not (isinstance(value, list) and len(value) == 3 and isinstance(value[2], dict)):
        raise Corrupt("a line of the journal is not a range")
    start, end, crcs = value
    if not (type(start) is int and type(end) is int and 0 <= start < end <= size):
        raise Corrupt(f"the journal records bytes [{start}, {end}) of a {size}-byte object")
    if not all(a in CRC_ALGORITHMS and type(c) is int and c >= 0 for a, c in crcs.items()):
        raise Corrupt("a line of the journal holds a CRC of the wrong form")
    return start, end, crcs


def parse(data: bytes) -> Found:
    """A journal's content: its header and the ranges on disk (per part, the longest
    recorded; parts that overlap another are dropped, their bytes fetched again)."""
    lines = data.split(b"\n")
    # Whatever follows the last newline is an append that a crash cut short.
    lines.pop()
    try:
        if not lines:
            raise Corrupt("the journal has no header")
        header = _header_of(_parse_line(lines[0]))
        longest: dict[int, Recorded] = {}
        for line in lines[1:]:
            start, end, crcs = _range_of(_parse_line(line), header.size)
            if start not in longest or longest[start][1] < end:
                longest[start] = (start, end, crcs)
    except Corrupt as exc:
        return Found(damaged=f"its journal is damaged ({exc})")
    ranges: list[Recorded] = []
    for recorded in sorted(longest.values()):
        if not ranges or recorded[0] >= ranges[-1][1]:
            ranges.append(recorded)
    return Found(header, ranges, length=data.rfind(b"\n") + 1)


_ALGORITHM_OF = {}
for _name in CRC_ALGORITHMS:
    with contextlib.suppress(KeyError):
        _ALGORITHM_OF[crc_function(_name)] = _name


def crcs_of(crc: CrcOf[Any] | None, value: Any) -> dict[str, int]:
    """A part's running CRC as the journal records it, by algorithm."""
    if crc is every_crc and isinstance(value, tuple):
        return dict(zip(SPECULATED, value, strict=True))
    name = _ALGORITHM_OF.get(crc) if crc is not None else None
    return {name: value} if name is not None and isinstance(value, int) else {}


def read(fd: int) -> Found:
    """The journal open at ``fd``, as :func:`parse` reads it."""
    size = os.fstat(fd).st_size
    if size > MAX_SIZE:
        return Found(damaged="its journal is larger than any asyncdl writes")
    return parse(os.pread(fd, size, 0))
