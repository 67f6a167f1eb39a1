"""A resumable download's journal, line by line: what it records and how it is read
back (the files and their lock are ``partial_file``'s).

Append-only JSON lines, each followed by a tab and the CRC32 of its JSON, so that a
torn or hand-edited line is detected:

- line 1, the header: format version, bucket, key, VersionId, ETag, size, the
  target's file name, and ``fsync``: whether every line was appended only after its
  bytes were ``fdatasync``-ed (absent: no);
- then one line per write that reached the partial file: ``[start, end, crcs]``,
  bytes ``[start, end)`` (``start`` is where the part began: its later writes
  extend its line) and their CRCs by algorithm: the verifier's (``{"CRC32C": n}``,
  the three of ``checksums.every_crc`` while the algorithm was not known yet), plus
  a CRC32 of the journal's own when the verifier ran none: every range can be read
  back and checked (``{}`` only in journals of older versions).

An incomplete last line (a crash mid-append) is ignored; any other damage makes the
whole journal untrusted.

The journal is compacted (:func:`merge`: contiguous ranges become one, their CRCs
combined) when it grows past :data:`COMPACT_AT`, so its size follows the partial's
holes, not its writes; ``partial_file`` rewrites it atomically. It is read a block at
a time, and what it may hold is bounded by lines and ranges, not bytes: a journal of
an older version (a line per write) of a very large object is still read.
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .._wire.checksums import CRC_ALGORITHMS, SPECULATED, combine_function, crc_function, every_crc
from .file_writes import CrcOf

VERSION = 1
#: A line longer than this is not one asyncdl wrote (a header with the longest key
#: and target name, every character escaped, is under 8 KiB).
MAX_LINE = 64 * 1024
#: Distinct ranges (part starts) a journal may hold: a line per part of an older
#: version's journal of a 5 TiB object in 8 MiB parts is 655,360. Memory follows this,
#: not the journal's bytes.
MAX_RANGES = 1 << 20
#: Lines a journal may hold. Compacted, it holds a line per range, and grows to twice
#: that (or :data:`COMPACT_AT`) before it is compacted again: with lines of at least
#: 27 bytes, under six lines per range; an older version's (a line per write, under
#: 64 MiB) under 2.5 million. More is not a journal asyncdl wrote.
MAX_LINES = 6 * MAX_RANGES
#: A journal this large is compacted (the threshold then follows what compacting
#: left, doubled, so that a journal of many holes is not rewritten at every write).
#: Internal: tests lower it.
COMPACT_AT = 1024 * 1024
_READ_SIZE = 1024 * 1024
#: Bits of a CRC, by algorithm: a wider value is no CRC (and awscrt's combine refuses it).
_WIDTH = {"CRC64NVME": 64}


@dataclass(frozen=True, slots=True)
class Header:
    """What a journal's bytes are of."""

    bucket: str
    key: str
    version: str | None
    etag: str
    size: int
    target: str

    def line(self, *, fsync: bool = False) -> bytes:
        """The header's line; ``fsync``: every line that follows is appended only
        after its bytes were made durable."""
        return line_of(
            {
                "v": VERSION,
                "bucket": self.bucket,
                "key": self.key,
                "version": self.version,
                "etag": self.etag,
                "size": self.size,
                "target": self.target,
                "fsync": fsync,
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
    #: Every line was appended after its bytes were made durable (``fsync=True``).
    durable: bool = False


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
    except (ValueError, RecursionError):
        # A CRC is no signature: anyone may write a line that passes it, nested too
        # deep for the parser too.
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
    if not all(
        a in CRC_ALGORITHMS and type(c) is int and 0 <= c < 1 << _WIDTH.get(a, 32)
        for a, c in crcs.items()
    ):
        raise Corrupt("a line of the journal holds a CRC of the wrong form")
    return start, end, crcs


def parse(data: bytes) -> Found:
    """A journal's content: its header and the ranges on disk (per part, the longest
    recorded; parts that overlap another are dropped, their bytes fetched again)."""
    return _parse_blocks([data])


def _parse_blocks(blocks: Iterable[bytes], *, header_only: bool = False) -> Found:
    """:func:`parse` of a journal read a block at a time (``header_only``: its header
    line alone, no range read)."""
    lines = _lines_of(blocks)
    try:
        first = next(lines, None)
        if first is None:
            raise Corrupt("the journal has no header")
        value = _parse_line(first)
        header = _header_of(value)
        length = len(first) + 1
        longest: dict[int, Recorded] = {}
        previous = first
        for count, line in enumerate(() if header_only else lines, 2):
            if count > MAX_LINES:
                raise Corrupt(f"the journal has more than {MAX_LINES} lines")
            length += len(line) + 1
            if line == previous:
                continue  # the same line again says nothing new (and costs no parse)
            previous = line
            start, end, crcs = _range_of(_parse_line(line), header.size)
            if start not in longest:
                if len(longest) == MAX_RANGES:
                    raise Corrupt(f"the journal records more than {MAX_RANGES} ranges")
                longest[start] = (start, end, crcs)
            elif longest[start][1] < end:
                longest[start] = (start, end, crcs)
    except Corrupt as exc:
        return Found(damaged=f"its journal is damaged ({exc})")
    ranges: list[Recorded] = []
    for recorded in sorted(longest.values()):
        if not ranges or recorded[0] >= ranges[-1][1]:
            ranges.append(recorded)
    return Found(header, ranges, length=length, durable=value.get("fsync") is True)


def _lines_of(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The whole lines of ``blocks`` (without their newline). Whatever follows the last
    newline is an append that a crash cut short."""
    rest = b""
    for block in blocks:
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if len(line) > MAX_LINE:
                raise Corrupt("a line of the journal is longer than any asyncdl writes")
            yield line
        if len(rest) > MAX_LINE:
            raise Corrupt("a line of the journal is longer than any asyncdl writes")


def merge(ranges: list[Recorded], *, open_starts: Container[int], size: int) -> list[Recorded]:
    """``ranges`` (sorted, apart), contiguous ones merged into one: its CRCs combined,
    for each algorithm every merged range has. A range still being written (its
    start in ``open_starts``, its end followed by no range and short of ``size``) stays
    apart: its part's next line extends it from that start."""
    merged: list[Recorded] = []
    for index, (start, end, crcs) in enumerate(ranges):
        last = merged[-1] if merged else None
        followed = end == size or (index + 1 < len(ranges) and ranges[index + 1][0] == end)
        if last is None or last[1] != start or (start in open_starts and not followed):
            merged.append((start, end, dict(crcs)))
            continue
        length = end - start
        combined = {
            name: combine_function(name)(crc, crcs[name], length)
            for name, crc in last[2].items()
            if name in crcs
        }
        merged[-1] = (last[0], end, combined)
    return merged


def content(header: Header, ranges: Iterable[Recorded], *, fsync: bool) -> bytes:
    """A whole journal: ``header`` and one line per range."""
    lines = [header.line(fsync=fsync)]
    lines.extend(line_of([start, end, crcs]) for start, end, crcs in ranges)
    return b"".join(lines)


@functools.cache
def _algorithm_of() -> dict[CrcOf[Any], str]:
    # Built when first asked, as the CRC functions are loaded (see checksums._crcs).
    return {crc_function(name): name for name in CRC_ALGORITHMS}


def crcs_of(crc: CrcOf[Any] | None, value: Any) -> dict[str, int]:
    """A part's running CRC as the journal records it, by algorithm."""
    if crc is every_crc and isinstance(value, tuple):
        return dict(zip(SPECULATED, value, strict=True))
    name = _algorithm_of().get(crc) if crc is not None else None
    return {name: value} if name is not None and isinstance(value, int) else {}


def read(fd: int, *, header_only: bool = False) -> Found:
    """The journal open at ``fd``, as :func:`parse` reads it, a block at a time; with
    ``header_only``, its header alone (``length`` then is the header's)."""

    def blocks() -> Iterator[bytes]:
        offset = 0
        while block := os.pread(fd, _READ_SIZE, offset):
            yield block
            offset += len(block)

    return _parse_blocks(blocks(), header_only=header_only)
