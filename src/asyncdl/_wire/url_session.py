"""The engine's own HTTP session for URL downloads (a client that lends none, or no
client at all: a URL command makes none), set up as botocore sets up the default S3
client's, without loading botocore's client stack (most of a URL command's start-up):

- TLS trusts one CA bundle, botocore's choice: ``AWS_CA_BUNDLE``, else the profile's
  ``ca_bundle`` in the AWS config files, else ``REQUESTS_CA_BUNDLE``, else certifi's
  bundle (botocore's own ``cacert.pem`` without certifi); not the system's store.
- The proxy is chosen for each hop of a redirect, as botocore chooses one for a URL:
  ``HTTP_PROXY``/``HTTPS_PROXY`` by the hop's scheme unless ``NO_PROXY`` names its
  host (upper or lower case), ``http://`` put before a proxy given without a scheme;
  a login in the proxy's URL goes to the proxy as ``Proxy-Authorization``; an
  ``https://`` proxy is spoken to over TLS, trusting the same bundle.
- No ``~/.netrc``: aiohttp's ``trust_env`` would send its logins to the URL's host
  and to the proxy. (A login in the URL itself is sent, as a client's session does.)
- Closing ends every socket the session opened that is still open (one ending its
  TLS with a slow peer, one being opened): the command's loop closes right after,
  and one it finds open is leaked.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse
from urllib.request import getproxies, proxy_bypass

import aiohttp
import botocore
from aiohttp.client_middlewares import ClientHandlerType
from botocore import configloader
from botocore.exceptions import (
    ConfigNotFound,
    InvalidConfigError,
    InvalidProxiesConfigError,
    ProfileNotFound,
)
from yarl import URL

from .lean_send import PROXY_TRIED

if TYPE_CHECKING:
    from aiohappyeyeballs import AddrInfoType  # aiohttp's own dependency


def ca_bundle() -> str:
    """The CA bundle botocore's default client trusts (reads the AWS config files: not
    on the loop). Fails as creating that client does: ``ProfileNotFound`` for a
    profile named but in neither file, ``ConfigParseError``, ``InvalidConfigError``
    for an empty setting."""
    env = os.environ
    verify: Any = env.get("AWS_CA_BUNDLE")
    profile = _profile()  # read whatever the bundle: a missing profile fails a client
    if verify is None:
        verify = profile.get("ca_bundle")
    if verify is None:
        verify = env.get("REQUESTS_CA_BUNDLE", True)
    if isinstance(verify, str) and not verify.strip():
        raise InvalidConfigError(
            error_msg=(
                "Invalid CA bundle: the configured value (ca_bundle, AWS_CA_BUNDLE, "
                "REQUESTS_CA_BUNDLE, or verify) resolved to an empty or whitespace-only "
                "string. Provide a valid path to a CA bundle file."
            )
        )
    if verify is not True:
        return str(verify)
    try:
        import certifi  # noqa: PLC0415 - as botocore.httpsession looks for it
    except ImportError:
        return os.path.join(os.path.dirname(botocore.__file__), "cacert.pem")
    return str(certifi.where())


def _profile() -> Mapping[str, Any]:
    """The profile's settings, as botocore's session finds them: the config file's
    profiles with the credentials file's merged in."""
    env = os.environ
    try:
        config = configloader.load_config(env.get("AWS_CONFIG_FILE", "~/.aws/config"))
    except ConfigNotFound:
        config = {"profiles": {}}
    profiles: dict[str, dict[str, Any]] = config["profiles"]
    credentials = env.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
    try:
        for name, values in configloader.raw_config_parse(credentials).items():
            profiles.setdefault(name, {}).update(values)
    except ConfigNotFound:
        pass
    name = env.get("AWS_DEFAULT_PROFILE", env.get("AWS_PROFILE"))
    if name is None:
        return profiles.get("default", {})
    if name not in profiles:
        raise ProfileNotFound(profile=name)
    return profiles[name]


def verified_context() -> ssl.SSLContext:
    """TLS as botocore's HTTP session sets it up (its ``create_urllib3_context``,
    verification on): only the bundle is trusted, the host name checked. File reads:
    not on the loop."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_TICKET
    context.post_handshake_auth = True
    context.load_verify_locations(ca_bundle())
    keylog = os.environ.get("SSLKEYLOGFILE")
    if keylog:  # as botocore's context honours it, for a user debugging with Wireshark
        context.keylog_filename = keylog
    return context


def proxy_for(url: str) -> str | None:
    """The proxy botocore would send a request to ``url`` through (its
    ``get_environ_proxies`` and ``ProxyConfiguration.proxy_url_for``)."""
    parts = urlparse(url)
    try:
        if proxy_bypass(parts.netloc):
            return None
    except (TypeError, socket.gaierror):
        pass
    proxy: str | None = getproxies().get(parts.scheme)
    if not proxy or proxy.startswith(("http:", "https:")):
        return proxy or None
    return ("http:" if proxy.startswith("//") else "http://") + proxy


#: How long closing waits for the sockets it ended to close (a few turns of the loop
#: at most: each has its end of stream at once).
CLOSING_GRACE = 1.0
_CLOSING_POLL = 0.01


@dataclass
class OwnSession:
    """The engine's own session, and the sockets it has opened."""

    http: aiohttp.ClientSession
    _sockets: weakref.WeakSet[socket.socket]

    async def close(self) -> None:
        """Close the session, then end every socket it opened that is still open, and
        wait (up to :data:`CLOSING_GRACE`) for them to close.

        What is still open then is no longer aiohttp's: a connection it let go after
        the server closed its TLS, still ending its own (through an https:// proxy,
        both layers, a round trip each to a peer that may be slow), or one a download
        is still opening. asyncio on Python 3.11 keeps no handle on the first kind to
        abort it by, and a loop closed first finds it open. Shutting each socket down
        hands its transport the end of the stream at once, so it closes on the next
        turns of the loop, whatever the peer does."""
        await self.http.close()
        await asyncio.sleep(0)  # a plain close ends on the loop's next turn
        ending = []
        for opened in list(self._sockets):
            if opened.fileno() == -1:
                continue
            try:
                opened.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue  # not connected yet: its connect fails on its own
            ending.append(opened)
        for _ in range(round(CLOSING_GRACE / _CLOSING_POLL)):
            if all(s.fileno() == -1 for s in ending):
                return
            await asyncio.sleep(_CLOSING_POLL)


async def open_session(pool: int, connect_timeout: float, read_timeout: float) -> OwnSession:
    """A new session (``pool`` connections; the timeouts per connect and per read)."""
    context = await asyncio.to_thread(verified_context)
    sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
    http = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=pool,
            ssl=context,
            socket_factory=functools.partial(_socket_for, sockets),
        ),
        timeout=aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=read_timeout),
        auto_decompress=False,
        middlewares=(_proxy_per_hop,),
    )
    return OwnSession(http, sockets)


def _socket_for(known: weakref.WeakSet[socket.socket], address: AddrInfoType) -> socket.socket:
    """A socket for ``address`` (the connector's factory), added to ``known``."""
    family, kind, proto, _, _ = address
    opened = socket.socket(family=family, type=kind, proto=proto)
    known.add(opened)
    return opened


async def _proxy_per_hop(
    request: aiohttp.ClientRequest, send: ClientHandlerType
) -> aiohttp.ClientResponse:
    """Each hop through the proxy :func:`proxy_for` picks for it (aiohttp calls a
    middleware once per hop of a redirect). A proxy's failure notes which proxy it was,
    for the error that names it (``lean_send``)."""
    proxy = proxy_for(str(request.url))
    request.update_proxy(None if proxy is None else _parsed(proxy), None, None)
    try:
        return await send(request)
    except (aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError) as exc:
        setattr(exc, PROXY_TRIED, proxy)
        raise


def _parsed(proxy: str) -> URL:
    """The proxy's URL; a malformed one (no host, a bad port, spaces: a setting to fix,
    not a network failure to retry) raises ``InvalidProxiesConfigError``, as botocore
    raises it where it sets up its session."""
    try:
        parsed = URL(proxy)
        if not parsed.host or any(character.isspace() for character in proxy):
            raise ValueError("no host, or spaces in it")
        _ = parsed.port  # yarl checks the port's range only here
    except ValueError:
        # Not the ValueError's text: it may quote the proxy's URL, login and all.
        raise InvalidProxiesConfigError(error="malformed proxy URL") from None
    return parsed
