"""Sending a lean request: straight to the aiohttp session that the client's own
aiobotocore HTTP session uses (same pool, proxy, TLS and timeouts), with its failures
raised as aiobotocore would raise them.

``AIOHTTPSession.send`` works out the proxy from the URL, copies the headers into a
new multidict, parses the URL, and wraps the answer in a botocore response whose
header dict is filled one ``__setitem__`` at a time: per request, for what is the
same for every request of a template. Here the proxy is looked up once per template
and the answer's headers are aiohttp's own (case-insensitive) mapping.

An S3 GET with no proxy goes through the engine's own HTTP client instead
(:mod:`asyncdl._wire.own_http`), unless ``ASYNCDL_OWN_HTTP=0`` turned it off.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    InvalidProxiesConfigError,
    ProxyConnectionError,
    ReadTimeoutError,
    SSLError,
)
from yarl import URL

from . import own_http
from .body_endings import note_ending

#: aiobotocore adds a Host header per request when this is set: its own path does that.
_PROXY_HOST_HEADER = "BOTO_EXPERIMENTAL__ADD_PROXY_HOST_HEADER"
#: Where a session that picks its proxy per hop (the engine's own: ``url_session``)
#: notes on a proxy's failure which proxy it was.
PROXY_TRIED = "asyncdl_proxy"


@dataclass(frozen=True, slots=True)
class Route:
    """Where the requests of one template go: the aiohttp session for its proxy."""

    session: aiohttp.ClientSession
    proxy: str | None
    proxy_headers: dict[str, str]
    #: aiobotocore's HTTP session the aiohttp session belongs to: what the engine's own
    #: HTTP client (:mod:`asyncdl._wire.own_http`) keeps its pool on and closes with.
    http_session: object = None


async def route_for(http_session: object, url: str) -> Route | None:
    """The route aiobotocore would take for ``url``; ``None`` where only its own
    ``send`` does what the client is configured to do, or the session is not one of
    aiobotocore's."""
    # Here, not at the top: only a client's session comes here, and aiobotocore is
    # loaded with it (a URL command makes no client and never loads it).
    from aiobotocore.httpsession import AIOHTTPSession  # noqa: PLC0415

    if not isinstance(http_session, AIOHTTPSession):
        return None
    if os.environ.get(_PROXY_HOST_HEADER, "").lower() == "true":
        return None
    try:
        proxy_config: Any = http_session._proxy_config
        get_session: Any = http_session._get_session
    except AttributeError:  # another aiobotocore than the one this was written against
        return None
    proxy = proxy_config.proxy_url_for(url)
    proxy_headers = proxy_config.proxy_headers_for(url)
    session = await get_session(proxy)
    if not isinstance(session, aiohttp.ClientSession):
        return None
    return Route(session, proxy, proxy_headers, http_session)


async def send(
    route: Route,
    method: str,
    url: str,
    headers: dict[str, str],
    *,
    shown: str | None = None,
    own: bool = False,
) -> Any:
    """Send one request; the open ``aiohttp.ClientResponse``. Failures to connect or
    to get an answer are botocore's exceptions, mapped as aiobotocore maps them, and
    name the URL as ``shown`` (the URL itself when not given).

    ``own``: an S3 GET, which follows no redirect, may go through the engine's own
    client (:mod:`asyncdl._wire.own_http`, unless switched off), which answers an
    :class:`~asyncdl._wire.own_http.OwnResponse`; a URL's GET follows redirects as
    aiohttp does, and stays on aiohttp."""
    url_shown = url if shown is None else shown
    if (
        own
        and method == "GET"
        and route.http_session is not None
        and own_http.served(route.proxy, url)
    ):
        pool = own_http.pool_for(route.http_session, route.session)
        if pool is not None:
            return await _send_own(pool, url, headers, url_shown)
    try:
        response = await route.session.request(
            method,
            URL(url, encoded=True),
            headers=headers,
            proxy=route.proxy,
            proxy_headers=route.proxy_headers,
        )
    except aiohttp.ClientSSLError as exc:
        raise SSLError(endpoint_url=url_shown, error=exc) from exc
    except (aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError) as exc:
        proxy = getattr(exc, PROXY_TRIED, route.proxy)
        raise ProxyConnectionError(proxy_url=_masked(proxy), error=exc) from exc
    except (
        aiohttp.ServerDisconnectedError,
        aiohttp.ClientPayloadError,
        aiohttp.http_exceptions.BadStatusLine,
    ) as exc:
        raise ConnectionClosedError(error=exc, request=None, endpoint_url=url_shown) from exc
    except aiohttp.ServerTimeoutError as exc:
        if str(exc).lower().startswith("connect"):
            raise ConnectTimeoutError(endpoint_url=url_shown, error=exc) from exc
        raise ReadTimeoutError(endpoint_url=url_shown, error=exc) from exc
    except (aiohttp.ClientConnectorError, aiohttp.ClientConnectionError, socket.gaierror) as exc:
        raise EndpointConnectionError(endpoint_url=url_shown, error=exc) from exc
    except TimeoutError as exc:
        raise ReadTimeoutError(endpoint_url=url_shown, error=exc) from exc
    except InvalidProxiesConfigError:
        raise  # a setting to fix (the engine's own session checks its proxy per hop)
    except Exception as exc:
        raise HTTPClientError(error=exc) from exc
    # Before the caller's next await: a body that came whole may end its connection then.
    note_ending(response)
    return response


async def _send_own(
    pool: own_http.OwnPool, url: str, headers: dict[str, str], url_shown: str
) -> own_http.OwnResponse:
    """A GET on the engine's own HTTP client, its failures mapped as :func:`send` maps
    aiohttp's."""
    try:
        return await pool.get(url, headers)
    except own_http.ConnectTimeout as exc:
        raise ConnectTimeoutError(endpoint_url=url_shown, error=exc) from exc
    except own_http.HeadersTimeout as exc:
        raise ReadTimeoutError(endpoint_url=url_shown, error=exc) from exc
    except own_http.OwnHTTPError as exc:
        raise ConnectionClosedError(error=exc, request=None, endpoint_url=url_shown) from exc
    except ssl.SSLError as exc:
        raise SSLError(endpoint_url=url_shown, error=exc) from exc
    except TimeoutError as exc:  # before OSError, of which it is one
        raise ReadTimeoutError(endpoint_url=url_shown, error=exc) from exc
    except OSError as exc:  # refused, reset, no such host, the pool closed
        raise EndpointConnectionError(endpoint_url=url_shown, error=exc) from exc
    except Exception as exc:
        raise HTTPClientError(error=exc) from exc


def _masked(proxy_url: str | None) -> str | None:
    """The proxy's URL with its login masked (botocore's ``mask_proxy_url`` replaces the
    login's first occurrence anywhere: a user "h" masked the scheme's "h")."""
    if proxy_url is None:
        return None
    parts = urlsplit(proxy_url)
    if parts.username is None and parts.password is None:
        return proxy_url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"***:***@{host}"))
