"""HTTP/1.1 on the wire as the test proxy reads and writes it: heads parsed and
rewritten, S3-style error answers, and a body relayed as chunks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: The largest request or response head the proxy reads.
MAX_HEAD = 64 * 1024
#: The most the proxy reads from a socket at once.
CHUNK = 65536


async def relay_chunked(
    up_reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    remaining: int,
    sent_to_client: Callable[[int], None],
) -> bool:
    """Relay ``remaining`` body bytes as chunks (one per upstream read), then the last
    chunk; return whether the body went out whole."""
    while remaining > 0:
        chunk = await up_reader.read(min(CHUNK, remaining))
        if not chunk:
            writer.close()  # a chunked body without its last chunk: cut
            return False
        sent_to_client(len(chunk))
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
        remaining -= len(chunk)
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


async def error_reply(status: int, code: str, method: str, writer: asyncio.StreamWriter) -> None:
    """An S3-style error answer (no body for a HEAD, as S3 sends none)."""
    payload = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>injected by the test proxy</Message></Error>"
    ).encode()
    writer.write(
        f"HTTP/1.1 {status} Injected\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + (payload if method != "HEAD" else b"")
    )
    await writer.drain()


def parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """The start line of an HTTP head, and its headers (lower-case names)."""
    if len(head) > MAX_HEAD:
        raise ConnectionError("HTTP head too large")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def rewrite_head(head: bytes, keep_alive: bool) -> bytes:
    """``head`` with its ``Connection`` header set to keep-alive or close."""
    lines = head.decode("latin-1").split("\r\n")
    kept = [line for line in lines[1:] if line and not line.lower().startswith("connection:")]
    kept.append("Connection: keep-alive" if keep_alive else "Connection: close")
    return "\r\n".join([lines[0], *kept]).encode("latin-1") + b"\r\n\r\n"


def replace_headers(head: bytes, changes: dict[str, str | None]) -> bytes:
    """``head`` with the headers named in ``changes`` (lower-case) replaced by their
    value, or removed where it is ``None``."""
    lines = head.decode("latin-1").split("\r\n")
    kept = [
        line for line in lines[1:] if line and line.split(":", 1)[0].strip().lower() not in changes
    ]
    kept += [f"{name}: {value}" for name, value in changes.items() if value is not None]
    return "\r\n".join([lines[0], *kept]).encode("latin-1") + b"\r\n\r\n"
