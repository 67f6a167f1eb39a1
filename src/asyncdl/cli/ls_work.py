"""What ``asyncdl ls`` runs once its arguments are parsed: ListObjectsV2 through the
engine's listing (each page retried, one page ahead), printed page by page; or the
buckets (ListBuckets).

Every name, time and ETag comes from the server and is printed through ``printable``
(or ``json.dumps``): shown, never obeyed by the terminal.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._bulk.listing import shown_entry, translated
from ..errors import DownloadError
from .app import Settings
from .output import Output, ReaderGone, human_size, printable, silence_stdout
from .params import S3Url
from .work import _open_engine

#: Where aws s3 ls puts a folder's PRE: after a time and a size column.
_PRE = " " * 27 + "PRE "


@dataclass(slots=True)
class Listing:
    """How the lines look, and what has been listed so far (for ``--summarize``)."""

    human: bool
    json_lines: bool
    objects: int = 0
    size: int = 0
    _out: Any = field(default=None, repr=False)

    def write(self, lines: list[str]) -> None:
        """One page's lines on stdout, at once; ``ReaderGone`` if its reader left."""
        if not lines:
            return
        out = sys.stdout
        try:
            out.write("\n".join(lines) + "\n")
            out.flush()
        except BrokenPipeError:
            silence_stdout()
            raise ReaderGone from None

    def size_text(self, size: int) -> str:
        return human_size(size) if self.human else str(size)

    def summarize(self) -> None:
        if self.json_lines:
            line = {"type": "summary", "objects": self.objects, "size": self.size}
            self.write([json.dumps(line)])
            return
        self.write(
            ["", f"Total Objects: {self.objects}", f"   Total Size: {self.size_text(self.size)}"]
        )


def _when(text: object) -> str:
    """``2026-01-02T03:04:05.000Z`` (the client leaves S3's text as it is) as aws s3 ls
    shows it: ``2026-01-02 03:04:05``."""
    shown = str(text)
    if len(shown) >= 19 and shown[10] == "T":
        return f"{shown[:10]} {shown[11:19]}"
    return shown


def _page_lines(page: Mapping[str, Any], listing: Listing, cut: int, source: S3Url) -> list[str]:
    """The page's folders, then its objects; ``cut``: the characters of each key not
    shown (aws s3 ls shows a key from the prefix's last ``/`` on)."""
    lines = []
    for folder in page.get("CommonPrefixes", ()):
        name = folder["Prefix"]
        if listing.json_lines:
            lines.append(json.dumps({"key": name, "type": "directory"}))
        else:
            lines.append(printable(f"{_PRE}{name[cut:]}"))
    for entry in page.get("Contents", ()):
        key, size = shown_entry(entry, bucket=source.bucket, prefix=source.key)
        listing.objects += 1
        listing.size += size
        modified = entry.get("LastModified")
        if listing.json_lines:
            line = {"key": key, "type": "file", "size": size, "etag": entry.get("ETag")}
            line["last_modified"] = None if modified is None else str(modified)
            lines.append(json.dumps(line))
        else:
            shown = listing.size_text(size)
            lines.append(printable(f"{_when(modified)} {shown:>10} {key[cut:]}"))
    return lines


async def list_objects(
    settings: Settings, source: S3Url, recursive: bool, listing: Listing
) -> bool:
    """Print the listing of ``source``; False (its error printed) if it failed."""
    output = Output(objects=None, quiet=True, debug=settings.debug, bar=False)
    cut = 0 if recursive else source.key.rfind("/") + 1
    try:
        async with _open_engine(settings, output) as engine:
            pages = engine.list_pages(
                source.bucket, source.key, delimiter=None if recursive else "/"
            )
            # Only the listing's failures are translated: stdout's reader leaving
            # (ReaderGone) must reach ``run`` as it is, to end the command quietly.
            gone = False
            with translated(source.bucket, source.key):
                async with contextlib.aclosing(pages):
                    async for page in pages:
                        try:
                            listing.write(_page_lines(page, listing, cut, source))
                        except ReaderGone:
                            gone = True
                            break
            if gone:
                raise ReaderGone
    except DownloadError as error:
        output.error(error)
        return False
    finally:
        output.summary()  # --debug: the engine's stats
    return True


async def list_buckets(settings: Settings, listing: Listing) -> bool:
    """Print the buckets the credentials own; False (its error printed) if it failed."""
    output = Output(objects=None, quiet=True, debug=settings.debug, bar=False)
    try:
        async with _open_engine(settings, output) as engine:
            with translated("", "s3://"):
                answer = await engine.client.list_buckets()
            lines = []
            for bucket in answer.get("Buckets", ()):
                name, created = bucket["Name"], bucket.get("CreationDate")
                if listing.json_lines:
                    when = None if created is None else str(created)
                    lines.append(json.dumps({"bucket": name, "creation_date": when}))
                else:
                    lines.append(printable(f"{_when(created)} {name}"))
            listing.write(lines)
    except DownloadError as error:
        output.error(error)
        return False
    finally:
        output.summary()
    return True
