"""The HTTP session a URL is fetched with when no S3 client lends one (a URL command
makes no client), against loopback servers: TLS trusted as botocore's default client
trusts it (``AWS_CA_BUNDLE``, a profile's ``ca_bundle``), proxies from the environment
chosen for each hop of a redirect as botocore chooses them, a proxy's login sent to it,
no ``~/.netrc`` login sent anywhere.

Each way in is checked: ``cp``, ``cat`` and ``cat --range`` of the command, and an
engine whose client lends no session.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import gc
import ipaddress
import os
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

import asyncdl
from asyncdl._wire import url_session
from asyncdl._wire.lean_send import _masked
from asyncdl.cli import cli

from ..conftest import CHUNK, payload
from ..transfer.test_url import _closed_port
from .test_url_raw_http import Answer, RawServer, Seen, ranges_served, reply

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

BODY = payload(3 * CHUNK + 5)
ETAG = '"v1"'
SECRET = "X-Amz-Signature=0123abcd"


@pytest.fixture(autouse=True)
def aws_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy, bundle, profile or ``.netrc`` but what a test sets (the machine's own
    may name any)."""
    for name in ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    # Credentials in the environment: where an S3 client is made, it finds them there
    # rather than asking the instance metadata service (through the proxy a test sets).
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def certificate(directory: Path, name: str) -> tuple[Path, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1 and 127.0.0.2: its file (a CA bundle that
    trusts it alone) and a server context that presents it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    hosts = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "127.0.0.2")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return cert_file, context


class Origin(RawServer):
    """A :class:`RawServer` on ``host``, over TLS with ``tls``."""

    def __init__(
        self, answer: Answer, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(answer)
        self.host, self.tls = host, tls

    def url(self, path: str) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}{path}"

    async def __aenter__(self) -> Origin:
        self._server = await asyncio.start_server(self._handle, self.host, 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self


class Proxy:
    """An HTTP proxy on loopback (an ``https://`` one with ``tls``): a request with an
    absolute URI is relayed (one per connection: the origins close after each answer),
    a CONNECT tunnelled. Records what it was sent; ``login``: a request without it is
    answered 407; ``stall``: after each piece it relays to the client through a tunnel,
    its loop stops that long, as a loaded machine's proxy would answer late."""

    def __init__(
        self, tls: ssl.SSLContext | None = None, login: str | None = None, stall: float = 0.0
    ) -> None:
        self.tls, self.login, self.stall = tls, login, stall
        self.seen: list[Seen] = []
        self.port = 0

    def url(self, userinfo: str = "") -> str:
        return f"{'https' if self.tls else 'http'}://{userinfo}127.0.0.1:{self.port}"

    def hosts(self) -> set[str]:
        """The hosts (host:port) it was asked to reach."""
        return {urlsplit(s.path).netloc if "://" in s.path else s.path for s in self.seen}

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Proxy]:
        handlers: set[asyncio.Task[None]] = set()

        def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.add(task := asyncio.ensure_future(self._handle(reader, writer)))
            task.add_done_callback(handlers.discard)

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()
            for task in list(handlers):  # a tunnel the client kept open
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_writer: asyncio.StreamWriter | None = None
        try:
            lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            fields = [line.split(":", 1) for line in lines[1:] if ":" in line]
            headers = {name.strip().lower(): value.strip() for name, value in fields}
            self.seen.append(Seen(method, target, headers))
            if self.login is not None and headers.get("proxy-authorization") != self.login:
                writer.write(reply(407, {"Content-Length": "0"}))
                await writer.drain()
                return
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await asyncio.gather(
                    _copy(reader, up_writer), _copy(up_reader, writer, stall=self.stall)
                )
                return
            parts = urlsplit(target)
            up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port)
            kept = [f"{n}:{v}" for n, v in fields if not n.lower().startswith("proxy-")]
            origin_form = parts.path + (f"?{parts.query}" if parts.query else "")
            up_writer.write(f"{method} {origin_form} HTTP/1.1\r\n".encode("latin-1"))
            up_writer.write("".join(f"{line}\r\n" for line in kept).encode("latin-1") + b"\r\n")
            await _copy(up_reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            for each in (writer, up_writer):
                if each is not None:
                    each.close()


async def _copy(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, stall: float = 0.0
) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while data := await source.read(65536):
            sink.write(data)
            if stall:
                time.sleep(stall)  # noqa: ASYNC251 - the whole loop, as on a busy machine
            await sink.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        sink.close()


WAYS = ["cp", "cat", "cat --range", "engine"]


async def fetched(way: str, url: str, tmp_path: Path) -> tuple[bytes, str]:
    """What ``way`` got of ``url`` (the bytes, from the first ten with ``cat --range``),
    and what it said on stderr (an engine: its error's message)."""
    if way == "engine":
        config = asyncdl.TransferConfig(chunk_size=CHUNK)
        async with asyncdl.Engine(SimpleNamespace(), config=config) as engine:
            try:
                await engine.download_url(url, tmp_path / "engine")
            except asyncdl.DownloadError as exc:
                return b"", str(exc)
        return (tmp_path / "engine").read_bytes(), ""
    argv = {
        "cp": ["cp", url, str(tmp_path / "cp"), "--chunk-size", "64KiB"],
        "cat": ["cat", url],
        "cat --range": ["cat", "--range", "0-9", url],
    }[way]
    done = await asyncio.to_thread(CliRunner().invoke, cli, argv)
    if way == "cp" and done.exit_code == 0:
        return (tmp_path / "cp").read_bytes(), done.stderr
    return done.stdout_bytes, done.stderr


def expected(way: str) -> bytes:
    return BODY[:10] if way == "cat --range" else BODY


# -- TLS -----------------------------------------------------------------------------------


@pytest.mark.parametrize("way", WAYS)
async def test_tls_trusts_aws_ca_bundle(
    way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, tls = certificate(tmp_path, "origin")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    async with Origin(ranges_served(BODY, etag=ETAG, chunked=False), tls=tls) as origin:
        got, said = await fetched(way, origin.url(f"/obj?{SECRET}"), tmp_path)
    assert got == expected(way), said
    assert origin.requests


@pytest.mark.parametrize("way", WAYS)
async def test_tls_trusts_the_profiles_ca_bundle(
    way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, tls = certificate(tmp_path, "origin")
    (tmp_path / "aws-config").write_text(f"[profile lab]\nca_bundle = {bundle}\n")
    (tmp_path / "aws-credentials").write_text("[lab]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_PROFILE", "lab")
    async with Origin(ranges_served(BODY, etag=ETAG, chunked=False), tls=tls) as origin:
        got, said = await fetched(way, origin.url(f"/obj?{SECRET}"), tmp_path)
    assert got == expected(way), said


@pytest.mark.parametrize("trusted", ["certifi", "another bundle", "the system's store"])
@pytest.mark.parametrize("way", WAYS)
async def test_a_certificate_the_bundle_does_not_hold_fails_clearly(
    way: str, trusted: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither certifi's bundle (the default) nor another bundle holds the server's
    certificate: a TLS failure that says so, tried once, the query never shown. The
    system's store is not trusted (botocore's client trusts one bundle)."""
    bundle, tls = certificate(tmp_path, "origin")
    if trusted == "another bundle":
        monkeypatch.setenv("AWS_CA_BUNDLE", str(certificate(tmp_path, "other")[0]))
    if trusted == "the system's store":
        monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    async with Origin(ranges_served(BODY, etag=ETAG, chunked=False), tls=tls) as origin:
        got, said = await fetched(way, origin.url(f"/obj?{SECRET}"), tmp_path)
    assert got == b""
    assert f"SSL validation failed for {origin.url('/obj')}" in said
    assert "certificate verify failed" in said
    assert "attempts" not in said  # not retried
    assert "X-Amz" not in said


async def test_a_missing_profile_fails_the_command_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As creating an S3 client failed it (the command's engine made one)."""
    monkeypatch.setenv("AWS_PROFILE", "nowhere")
    async with Origin(ranges_served(BODY, etag=ETAG, chunked=False)) as origin:
        done = await asyncio.to_thread(CliRunner().invoke, cli, ["cat", origin.url("/obj")])
    assert done.exit_code == 1
    assert "ProfileNotFound: The config profile (nowhere) could not be found" in done.stderr
    assert not origin.requests


# -- proxies -------------------------------------------------------------------------------


def basic(login: str) -> str:
    return "Basic " + base64.b64encode(login.encode()).decode()


@pytest.mark.parametrize("way", WAYS)
async def test_each_hop_of_a_redirect_takes_its_own_proxy(
    way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """127.0.0.1 through the proxy (named without a scheme, its login in it), 127.0.0.2
    (in NO_PROXY) straight, and back through the proxy: botocore's choice per URL."""
    (tmp_path / "netrc").write_text("machine 127.0.0.1 login bob password netrc-secret\n")
    (tmp_path / "netrc").chmod(0o600)
    served = ranges_served(BODY, etag=ETAG, chunked=False)
    proxy = Proxy(login=basic("alice:pa ss"))

    def there(request: Seen) -> bytes:
        if request.path.startswith("/obj"):
            return served(request)
        return reply(302, {"Location": away.url(f"/bounce?{SECRET}")})

    def back(request: Seen) -> bytes:
        return reply(302, {"Location": first.url(f"/obj?{SECRET}")})

    async with proxy.running(), Origin(there) as first, Origin(back, "127.0.0.2") as away:
        monkeypatch.setenv("HTTP_PROXY", f"alice:pa%20ss@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("no_proxy", "127.0.0.2")
        got, said = await fetched(way, first.url(f"/start?{SECRET}"), tmp_path)
    assert got == expected(way), said
    assert proxy.hosts() == {f"127.0.0.1:{first.port}"}
    assert {urlsplit(s.path).path for s in proxy.seen} == {"/start", "/obj"}
    assert away.requests
    assert all(r.path.startswith("/bounce") for r in away.requests)
    everyone = [*proxy.seen, *first.requests, *away.requests]
    assert all(s.headers.get("proxy-authorization") == basic("alice:pa ss") for s in proxy.seen)
    assert not any("authorization" in s.headers for s in everyone)  # no .netrc login
    assert not any("proxy-authorization" in r.headers for r in [*first.requests, *away.requests])


@pytest.mark.parametrize("proxy_tls", [False, True], ids=["http proxy", "https proxy"])
@pytest.mark.parametrize("way", WAYS)
async def test_https_goes_through_a_tunnel(
    way: str, proxy_tls: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An https:// URL is tunnelled (CONNECT) through HTTPS_PROXY; an https:// proxy is
    spoken to over TLS, trusting the same bundle (never bypassed)."""
    bundle, tls = certificate(tmp_path, "lab")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    (tmp_path / "netrc").write_text("machine 127.0.0.1 login bob password netrc-secret\n")
    (tmp_path / "netrc").chmod(0o600)
    proxy = Proxy(tls=tls if proxy_tls else None)
    closed = _closed_port()
    async with (
        proxy.running(),
        Origin(ranges_served(BODY, etag=ETAG, chunked=False), tls=tls) as origin,
    ):
        monkeypatch.setenv("https_proxy", proxy.url())
        monkeypatch.setenv("HTTP_PROXY", f"127.0.0.1:{closed}")  # not for https
        got, said = await fetched(way, origin.url(f"/obj?{SECRET}"), tmp_path)
    closed.close()
    assert got == expected(way), said
    assert proxy.seen
    assert {s.method for s in proxy.seen} == {"CONNECT"}
    assert proxy.hosts() == {f"127.0.0.1:{origin.port}"}
    assert not any("proxy-authorization" in s.headers for s in proxy.seen)  # no .netrc login


@pytest.mark.parametrize("way", [way for way in WAYS if way != "engine"])
async def test_a_command_through_an_https_proxy_leaves_no_connection_open(
    way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The origin closes TLS after its answer, and the https:// proxy relays that close
    late: the command's loop ends first. Its connection to the proxy is still closing
    then, so the session aborts it when it closes (on uvloop the loop's close found it
    open: "unclosed resource TCPTransport"). A leak shows as an unraisable warning,
    which fails the test; asyncio on Python 3.11 loses its own handle on that connection
    when the peer closes first, so there this test can only catch it on uvloop."""
    bundle, tls = certificate(tmp_path, "lab")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    proxy = Proxy(tls=tls, stall=url_session.CLOSING_GRACE + 0.5)  # slower than it waits
    async with (
        proxy.running(),
        Origin(ranges_served(BODY, etag=ETAG, chunked=False), tls=tls) as origin,
    ):
        monkeypatch.setenv("https_proxy", proxy.url())
        got, said = await fetched(way, origin.url(f"/obj?{SECRET}"), tmp_path)
        gc.collect()  # asyncio: a leaked transport warns when it is collected
    assert got == expected(way), said
    assert {s.method for s in proxy.seen} == {"CONNECT"}


@pytest.mark.parametrize("way", WAYS)
async def test_a_proxy_that_cannot_be_reached_is_named_without_its_login(
    way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _closed_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://alice:s3cret@127.0.0.1:{port}")
    async with Origin(ranges_served(BODY, etag=ETAG, chunked=False)) as origin:
        got, said = await fetched(way, origin.url(f"/obj?{SECRET}"), tmp_path)
    port.close()
    assert got == b""
    assert f'Failed to connect to proxy URL: "http://127.0.0.1:{port}"' in said
    assert "s3cret" not in said
    assert "alice" not in said
    assert "X-Amz" not in said
    assert not origin.requests


@pytest.mark.parametrize(
    "proxy",
    [
        "http://[::1",
        "http://127.0.0.1:99999",
        "http://:8080",
        " http://127.0.0.1:8080",
        "http://127.0.0.1:8080 ",
        "http://",
    ],
)
@pytest.mark.parametrize("way", WAYS)
async def test_a_malformed_proxy_fails_at_once_as_a_configuration_error(
    way: str, proxy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As botocore refuses it where it builds its session: not retried as a network
    failure, not blamed on the URL, and nothing sent."""
    monkeypatch.setenv("HTTP_PROXY", proxy)
    async with Origin(ranges_served(BODY, etag=ETAG, chunked=False)) as origin:
        got, said = await fetched(way, origin.url(f"/obj?{SECRET}"), tmp_path)
    assert got == b""
    assert "proxies_config" in said, said
    assert "attempts" not in said, said
    assert "X-Amz" not in said
    assert not origin.requests


@pytest.mark.parametrize(
    ("proxy", "shown"),
    [
        ("http://h:p@127.0.0.1:1", "http://***:***@127.0.0.1:1"),  # "h" is in "http" too
        ("http://127.0.0.1:1", "http://127.0.0.1:1"),
        ("https://user@proxy:8443/x", "https://***:***@proxy:8443/x"),
    ],
)
def test_a_proxys_login_is_masked_where_it_is(proxy: str, shown: str) -> None:
    assert _masked(proxy) == shown
