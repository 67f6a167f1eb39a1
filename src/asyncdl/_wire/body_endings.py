"""What ends a GET's body that only its connection's end delimits (no Content-Length,
not chunked), on aiohttp: a clean close ends it (RFC 9112 §6.3); a reset, a TLS that
ends without the server's close_notify (RFC 9112 §9.8) and the engine's own close of
the connection cut it. aiohttp ends such a body at any of them, so how the connection
ended is taken as the answer comes (:func:`note_ending`, :func:`note_body_ending`),
while the connection is there, and judged by the body's reader at its end
(:class:`Ending`, ``body_reader.BodyReader``)."""

from __future__ import annotations

import ssl
import sys
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..errors import describe
from .own_connection import TRUNCATED, tls_ended_cleanly


def response_under(body: Any) -> aiohttp.ClientResponse | None:
    """The aiohttp answer under any aiobotocore body, one that does work on its reads
    (botocore's checksum check) included: to ask how its connection ended, never to
    read past that work. ``None`` for any other body."""
    if isinstance(body, aiohttp.ClientResponse):
        return body
    loaded = sys.modules.get("aiobotocore.response")
    if loaded is None or not isinstance(body, loaded.AioStreamingBody):
        return None
    raw = getattr(body, "_raw_stream", None)
    return raw if isinstance(raw, aiohttp.ClientResponse) else None


@dataclass(slots=True, frozen=True)
class Ending:
    """What ends a body that only its connection's end delimits (no Content-Length, not
    chunked), on aiohttp: a clean close ends it (RFC 9112 §6.3), a reset cuts it, and so
    does a TLS that ends without the server's close_notify (RFC 9112 §9.8). aiohttp
    ends the body at any of them (its protocol feeds the parser its end whatever ended
    the connection), so the reader asks at the body's end: aiohttp keeps how the
    connection ended as its protocol's exception, a ``ServerDisconnectedError`` for a
    close, the socket's error for a cut; and the TLS, how it ended (see
    :func:`~asyncdl._wire.own_connection.tls_ended_cleanly`). A close is the server's
    only while the answer's session is open: aiohttp says the same of a connection
    that closing its session (the engine's close) closed. The answer keeps its protocol
    once its connection is released (at the body's end); its TLS object and session
    are taken while the connection is there."""

    protocol: Any
    tls: ssl.SSLObject | None
    session: Any
    #: A TLS connection that had ended, and gone, before anyone took how: whether the
    #: server's close_notify ended it is not known, so the body is not taken as whole.
    unseen: bool = False

    def cut(self) -> str | None:
        """What cut the body, ``None`` if a clean close ended it."""
        ended = self.protocol.exception()
        if isinstance(ended, BaseException) and not isinstance(
            ended, aiohttp.ServerDisconnectedError
        ):
            return f"its connection was cut before its end: {describe(ended)}"
        if getattr(self.session, "closed", False) is True:
            return "its connection was closed, its session with it, before its end"
        if self.tls is not None and not tls_ended_cleanly(self.tls):
            return TRUNCATED
        if self.unseen:
            return UNSEEN
        return None


#: Why a body whose TLS connection ended before anyone looked is not taken as whole.
UNSEEN = (
    "its TLS connection had ended before its end was looked at: whether the server's "
    "close_notify ended it (RFC 9112 §9.8) was not seen"
)

#: Where :func:`note_ending` keeps an answer's :class:`Ending`.
_ENDING = "_asyncdl_ending"


def note_ending(raw: aiohttp.ClientResponse) -> None:
    """Take how an answer's body will end (:class:`Ending`) as soon as the answer came,
    while its connection is there: a body that comes whole in the answer's first reads
    has its connection ended, and gone, before any reader looks, and its TLS and its
    session with it. Kept on the answer for its :class:`BodyReader`."""
    ending = close_delimited_ending(raw)
    if ending is not None:
        setattr(raw, _ENDING, ending)


def note_body_ending(body: Any) -> None:
    """:func:`note_ending` for a GET's body as botocore hands it over (``get_object``):
    the aiohttp answer under an aiobotocore body (botocore's checksum check's too);
    nothing for any other body."""
    raw = response_under(body)
    if raw is not None:
        note_ending(raw)


def close_delimited_ending(raw: aiohttp.ClientResponse) -> Ending | None:
    """The :class:`Ending` of an answer whose body only the connection's end delimits,
    ``None`` for any other: the one :func:`note_ending` took, else taken now. Taken
    now, from an answer over TLS whose connection is gone already, it is ``unseen``:
    only a handler of the caller's own that gave the loop a turn before ours (on a
    client handed to the engine) lets that happen, and then a truncation cannot be
    told from a clean close."""
    noted = getattr(raw, _ENDING, None)
    if isinstance(noted, Ending):
        return noted
    headers = raw.headers
    if (
        "Content-Length" in headers
        or "chunked" in headers.get("Transfer-Encoding", "").lower()
        or raw.status in (204, 304)
        or raw.method == "HEAD"
    ):
        return None
    protocol = getattr(raw, "_protocol", None)
    if not callable(getattr(protocol, "exception", None)):
        return None
    connection = raw.connection
    transport = connection.transport if connection is not None else None
    tls = transport.get_extra_info("ssl_object") if transport is not None else None
    session = getattr(raw, "_session", None)  # the answer drops it at the body's end
    unseen = connection is None and raw.url.scheme == "https"
    return Ending(protocol, tls if isinstance(tls, ssl.SSLObject) else None, session, unseen)
