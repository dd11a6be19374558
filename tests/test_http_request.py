"""The http_request handler against real sockets on this machine: the SSRF guard, one
deadline for the whole request, credentials kept to the job's origin, malformed payloads."""

from __future__ import annotations

import http.server
import ipaddress
import logging
import math
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from codity.worker import http_request as module
from codity.worker.context import JobContext
from codity.worker.http_request import (
    HttpStatusError,
    HttpTimeoutError,
    http_request,
    register_http_request,
)
from codity.worker.registry import NonRetryable, Registry
from codity.worker.ssrf import Allowlist, BlockedDestination, check_address, resolve_checked
from tests.drip_server import DripServer, Route, answer, drip, redirect, repeat, script, send

REFUSED = [
    "10.0.0.1", "172.16.5.4", "192.168.1.1", "127.0.0.1", "127.255.0.9", "0.0.0.0",
    "169.254.169.254", "169.254.1.1", "100.64.0.1", "100.100.100.200", "224.0.0.1",
    "240.0.0.1", "255.255.255.255", "192.0.2.10", "198.18.0.1",
    "::", "::1", "fe80::1", "fc00::1", "fd00:ec2::254", "ff02::1", "2001:db8::1",
    "::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
    "64:ff9b::a00:1", "64:ff9b::7f00:1", "2002:7f00:1::1", "2002:a00:1::1", "::127.0.0.1",
]  # fmt: skip
ALLOWED = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED)
def test_non_public_addresses_and_their_ipv6_forms_are_refused(address: str) -> None:
    assert check_address(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert check_address(ipaddress.ip_address(address)) is None


def test_allowlist_restricts_hosts_and_can_open_a_network_but_never_metadata() -> None:
    allow = Allowlist.parse("api.example.com, *.hooks.example, 127.0.0.0/8, 169.254.0.0/16")
    assert allow.allows_host("api.example.com")
    assert allow.allows_host("a.hooks.example")
    assert not allow.allows_host("hooks.example")
    assert not allow.allows_host("evil.example")
    assert resolve_checked("127.0.0.1", 80, allow) == [ipaddress.ip_address("127.0.0.1")]
    with pytest.raises(BlockedDestination, match="metadata"):
        resolve_checked("169.254.169.254", 80, allow)
    with pytest.raises(BlockedDestination, match="loopback"):
        resolve_checked("localhost", 80, Allowlist.parse(""))


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        port = int(self.server.server_address[1])  # type: ignore[index]
        routes: dict[str, tuple[int, dict[str, str], bytes]] = {
            "/ok": (200, {}, b"hello"),
            "/busy": (503, {}, b""),
            "/missing": (404, {}, b""),
            "/big": (200, {}, b"x" * (2 << 20)),
            "/to-ok": (302, {"Location": "/ok"}, b""),
            "/to-metadata": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b""),
            "/to-localhost": (302, {"Location": f"http://localhost:{port}/ok"}, b""),
            "/loop": (302, {"Location": "/loop"}, b""),
        }
        if self.path == "/slow":
            time.sleep(2)
        status, headers, body = routes.get(self.path, (200, {}, b"late"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """The handler under test hangs up early on purpose (size and time caps)."""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One server for the module: it keeps no state between requests, and stopping one per
    test cost a poll interval each (and the 2 s of a /slow answer still being written)."""
    httpd = _QuietServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _ctx() -> JobContext:
    return JobContext(
        job_id=1, attempt=1, fence=1, queue="q", queue_id=1, task="http_request", max_attempts=3
    )


def _call(payload: dict[str, Any]) -> dict[str, Any]:
    return http_request(payload, _ctx())


def test_loopback_is_refused_unless_the_operator_opens_it(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HTTP_HANDLER_ALLOWLIST", raising=False)
    with pytest.raises(NonRetryable, match="loopback"):
        _call({"url": f"{server}/ok"})
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "127.0.0.1/32")
    assert _call({"url": f"{server}/ok"}) == {"status": 200, "bytes": 5, "body": "hello"}


def test_every_redirect_is_checked_again(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "127.0.0.1/32, 169.254.0.0/16")
    assert _call({"url": f"{server}/to-ok"})["status"] == 200
    with pytest.raises(NonRetryable, match="metadata"):
        _call({"url": f"{server}/to-metadata"})
    with pytest.raises(NonRetryable, match="not in HTTP_HANDLER_ALLOWLIST"):
        _call({"url": f"{server}/to-localhost"})
    with pytest.raises(NonRetryable, match="redirects"):
        _call({"url": f"{server}/loop"})


def test_the_connection_goes_to_the_address_that_was_checked(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "localhost, 127.0.0.0/8")
    names: list[str] = []
    real = socket.getaddrinfo

    def recording(host: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            names.append(str(host))  # a real lookup of a name, not a numeric address
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    url = server.replace("127.0.0.1", "localhost")
    assert _call({"url": f"{url}/to-ok"})["status"] == 200
    # One lookup per hop (the request and its redirect); the connections reuse the checked
    # address instead of resolving the name again.
    assert names == ["localhost", "localhost"]


def test_status_codes_time_and_size_are_capped(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "127.0.0.1/32")
    with pytest.raises(HttpStatusError, match="503"):
        _call({"url": f"{server}/busy"})
    with pytest.raises(NonRetryable, match="404"):
        _call({"url": f"{server}/missing"})
    with pytest.raises(NonRetryable, match="larger than"):
        _call({"url": f"{server}/big"})
    with pytest.raises(HttpTimeoutError):
        _call({"url": f"{server}/slow", "timeout_s": 0.3})


# -- malformed payloads: refused before any connection, never retried ----------------------

# "{server}" becomes the test server's address, so that a payload the handler wrongly lets
# through reaches a real server (and the test fails on the answer, not on a lookup).
MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("timeout text", {"timeout_s": "abc"}, "timeout_s"),
    ("timeout numeric text", {"timeout_s": "10"}, "timeout_s"),
    ("timeout NaN", {"timeout_s": math.nan}, "timeout_s"),
    ("timeout Infinity", {"timeout_s": math.inf}, "timeout_s"),
    ("timeout -Infinity", {"timeout_s": -math.inf}, "timeout_s"),
    ("timeout negative", {"timeout_s": -1}, "timeout_s"),
    ("timeout zero", {"timeout_s": 0}, "timeout_s"),
    ("timeout true", {"timeout_s": True}, "timeout_s"),
    ("timeout false", {"timeout_s": False}, "timeout_s"),
    ("timeout null", {"timeout_s": None}, "timeout_s"),
    ("url missing", {"url": None}, "url"),
    ("url not a string", {"url": 123}, "url"),
    ("url empty", {"url": ""}, "url"),
    ("url ftp", {"url": "ftp://example.com/file"}, "http or https"),
    ("url credentials", {"url": "http://user:secret@example.com/"}, "credentials"),
    ("url no host", {"url": "http:///path"}, "host"),
    ("bad IPv6 literal", {"url": "http://[::1/"}, "url"),
    ("junk after IPv6 literal", {"url": "http://[::1]x/"}, "url"),
    ("IPv6 zone", {"url": "http://[fe80::1%25eth0]/"}, "url"),
    ("port too large", {"url": "http://127.0.0.1:99999/"}, "port"),
    ("port zero", {"url": "http://127.0.0.1:0/"}, "port"),
    ("port not a number", {"url": "http://127.0.0.1:8a/"}, "url"),
    ("percent-encoded host", {"url": "http://127.0.0.%31/"}, "url"),
    ("space in path", {"url": "{server}/o k"}, "url"),
    ("tab in path", {"url": "{server}/o\tk"}, "url"),
    ("NUL in path", {"url": "{server}/o\x00k"}, "url"),
    ("CRLF in path", {"url": "{server}/ok\r\nX-Injected: 1"}, "url"),
    ("leading space", {"url": " {server}/ok"}, "url"),
    ("non-ASCII path", {"url": "{server}/caf\u00e9"}, "url"),
    ("headers a list", {"headers": [["X", "1"]]}, "headers"),
    ("headers a string", {"headers": "X: 1"}, "headers"),
    ("headers null", {"headers": None}, "headers"),
    ("header value a number", {"headers": {"X": 1}}, "header"),
    ("header value null", {"headers": {"X": None}}, "header"),
    ("header name not a string", {"headers": {1: "a"}}, "header"),
    ("CRLF in header value", {"headers": {"Authorization": "Bearer s3cret\r\nX: 1"}}, "header"),
    ("LF in header value", {"headers": {"X": "a\nb"}}, "header"),
    ("NUL in header value", {"headers": {"X": "a\x00"}}, "header"),
    ("non-ASCII header value", {"headers": {"X": "caf\u00e9"}}, "header"),
    ("CRLF in header name", {"headers": {"X\r\nY": "a"}}, "header"),
    ("empty header name", {"headers": {"": "a"}}, "header"),
    ("space in header name", {"headers": {"Bad Name": "a"}}, "header"),
    ("colon in header name", {"headers": {"X:Y": "a"}}, "header"),
    ("same header twice", {"headers": {"X-A": "1", "x-a": "2"}}, "header"),
    ("Host", {"headers": {"Host": "internal.example"}}, "Host"),
    ("Content-Length", {"headers": {"Content-Length": "5"}}, "Content-Length"),
    ("Transfer-Encoding", {"headers": {"transfer-encoding": "chunked"}}, "transfer-encoding"),
    ("Connection", {"headers": {"Connection": "close"}}, "Connection"),
    ("Keep-Alive", {"headers": {"Keep-Alive": "5"}}, "Keep-Alive"),
    ("TE", {"headers": {"TE": "trailers"}}, "TE"),
    ("Upgrade", {"headers": {"Upgrade": "h2c"}}, "Upgrade"),
    ("Expect", {"headers": {"Expect": "100-continue"}}, "Expect"),
    ("method not a string", {"method": 1}, "method"),
    ("method null", {"method": None}, "method"),
    ("method unknown", {"method": "TRACE"}, "method"),
    ("method CONNECT", {"method": "CONNECT"}, "method"),
    ("method with CRLF", {"method": "GET\r\n"}, "method"),
    ("json and body", {"json": {"a": 1}, "body": "b"}, "json"),
    ("body a number", {"body": 123}, "body"),
    ("body null", {"body": None}, "body"),
    ("body an object", {"body": {"a": 1}}, "body"),
    ("json NaN", {"json": math.nan}, "json"),
    ("json not JSON", {"json": {1, 2}}, "json"),
    ("unknown field", {"header": {"X": "1"}}, "unknown field 'header'"),
]


@pytest.mark.parametrize(("case", "fields", "match"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_payloads_are_refused_and_never_retried(
    case: str, fields: dict[str, Any], match: str, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "127.0.0.1/32")
    payload: dict[str, Any] = {"url": f"{server}/ok", **fields}
    if isinstance(payload["url"], str):
        payload["url"] = payload["url"].replace("{server}", server)
    with pytest.raises(NonRetryable, match=match) as raised:
        _call(payload)
    assert "s3cret" not in str(raised.value)  # names the field, never echoes its value


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (None, "object"),
        ([], "object"),
        ("http://example.com/", "object"),
        (1, "object"),
        ({}, "url"),
    ],
)
def test_a_payload_that_is_not_an_object_with_a_url_is_refused(payload: Any, match: str) -> None:
    with pytest.raises(NonRetryable, match=match):
        http_request(payload, _ctx())


# -- one deadline for the whole request -------------------------------------------------------

MARGIN_S = 0.5  # a correctness bound: the deadline plus scheduling noise, not a speed target
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\nConnection: close\r\n\r\n"
DRIPS = {
    "/drip-status": drip(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", every=0.05),
    "/drip-headers": script(
        send(b"HTTP/1.1 200 OK\r\n"), drip(b"X-Pad: " + b"a" * 60 + b"\r\n\r\n", every=0.05)
    ),
    "/drip-body": script(send(_HEAD), drip(b"x" * 40, every=0.1)),
    "/drip-chunks": script(
        send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
        repeat(b"1\r\nx\r\n", every=0.1),
    ),
    "/continue-flood": repeat(b"HTTP/1.1 100 Continue\r\n\r\n", every=0.05),
}


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "127.0.0.1/32")


def _failure(payload: dict[str, Any]) -> tuple[float, BaseException]:
    """How long the call took to fail, and what it raised."""
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        _call(payload)
    return time.monotonic() - started, raised.value


def _retried(exc: BaseException) -> bool:
    registry = Registry()
    register_http_request(registry)
    task = registry.get("http_request")
    assert task is not None
    return not isinstance(exc, task.non_retryable)


@pytest.mark.parametrize("path", sorted(DRIPS))
def test_a_dripping_server_is_cut_off_at_the_one_deadline(path: str, loopback: None) -> None:
    with DripServer(DRIPS, limit_s=3) as peer:
        elapsed, exc = _failure({"url": f"{peer.url}{path}", "timeout_s": 0.8})
    assert isinstance(exc, HttpTimeoutError), repr(exc)
    assert _retried(exc)
    assert elapsed <= 0.8 + MARGIN_S


def test_redirect_hops_share_the_deadline(loopback: None) -> None:
    def hop(n: int) -> Route:
        head = f"HTTP/1.1 302 X\r\nLocation: /hop{n + 1}\r\nContent-Length: 0\r\n".encode()
        return script(send(head), drip(b"X-Pad: 1\r\n\r\n", every=0.075))  # ~0.9 s a hop

    with DripServer({f"/hop{n}": hop(n) for n in range(5)}, limit_s=3) as peer:
        elapsed, exc = _failure({"url": f"{peer.url}/hop0", "timeout_s": 1.0})
    assert isinstance(exc, HttpTimeoutError), repr(exc)
    assert elapsed <= 1.0 + MARGIN_S


def test_a_stalled_tls_handshake_counts_against_the_deadline(loopback: None) -> None:
    # A TLS record header announcing 16 KiB, then its bytes one by one: the handshake never ends.
    record = b"\x16\x03\x03\x40\x00" + b"\x02" * 200
    with DripServer(on_connect=drip(record, every=0.05), limit_s=3) as peer:
        url = peer.url.replace("http://", "https://")
        elapsed, exc = _failure({"url": f"{url}/", "timeout_s": 0.8})
    assert isinstance(exc, HttpTimeoutError), repr(exc)
    assert elapsed <= 0.8 + MARGIN_S


def test_a_slow_name_lookup_counts_against_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "slow.invalid, 127.0.0.1/32")
    release = threading.Event()
    real = socket.getaddrinfo

    def slow(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "slow.invalid":  # a resolver that answers after 3 s
            release.wait(3)
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    try:
        elapsed, exc = _failure({"url": "http://slow.invalid:9/", "timeout_s": 0.5})
    finally:
        release.set()
    assert isinstance(exc, HttpTimeoutError), repr(exc)
    assert elapsed <= 0.5 + MARGIN_S


def test_the_deadline_defaults_and_is_capped_so_no_job_holds_a_worker_longer(
    loopback: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real values are 10 s and 60 s; scaled down so the proof takes a second.
    monkeypatch.setattr(module, "DEFAULT_TIMEOUT_S", 0.4)
    monkeypatch.setattr(module, "MAX_TIMEOUT_S", 0.6)
    with DripServer(DRIPS, limit_s=3) as peer:
        elapsed, exc = _failure({"url": f"{peer.url}/drip-body"})
        assert isinstance(exc, HttpTimeoutError), repr(exc)
        assert elapsed <= 0.4 + MARGIN_S
        elapsed, exc = _failure({"url": f"{peer.url}/drip-body", "timeout_s": 3600})
        assert isinstance(exc, HttpTimeoutError), repr(exc)
        assert elapsed <= 0.6 + MARGIN_S


# -- credentials stay with the job's origin ----------------------------------------------------

SENT = {
    "Authorization": "Bearer s3cret-a",
    "Cookie": "session=s3cret-c",
    "Proxy-Authorization": "Basic s3cret-p",
    "X-Api-Key": "s3cret-k",
    "Accept": "application/json",
    "User-Agent": "codity-test",
}
CREDENTIALS = ["authorization", "cookie", "proxy-authorization", "x-api-key"]


_ok = send(answer(200, b"ok"))


@pytest.mark.parametrize("differs", ["port", "host"])
def test_credentials_are_not_sent_to_another_origin(
    differs: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "localhost, 127.0.0.1/32")
    caplog.set_level(logging.DEBUG)
    with DripServer() as first, DripServer({"/landed": _ok}) as second:
        target = second if differs == "port" else first
        landing = second.url if differs == "port" else f"http://localhost:{first.port}"
        first.routes.update({"/go": redirect(f"{landing}/landed"), "/landed": _ok})
        assert _call({"url": f"{first.url}/go", "headers": SENT})["status"] == 200
    sent, landed = first.headers("/go")[0], target.headers("/landed")[0]
    assert [h for h in CREDENTIALS if h in sent] == CREDENTIALS
    assert [h for h in CREDENTIALS if h in landed] == []
    assert (landed["accept"], landed["user-agent"]) == ("application/json", "codity-test")
    assert "s3cret" not in caplog.text


def test_credentials_follow_a_redirect_within_the_origin_only_until_it_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_HANDLER_ALLOWLIST", "127.0.0.1/32")
    with DripServer({"/landed": _ok}) as home, DripServer() as away:
        home.routes.update({"/same": redirect("/landed"), "/leave": redirect(f"{away.url}/b")})
        away.routes["/b"] = redirect(f"{home.url}/back")
        home.routes["/back"] = _ok
        _call({"url": f"{home.url}/same", "headers": SENT})
        _call({"url": f"{home.url}/leave", "headers": SENT})
    assert [h for h in CREDENTIALS if h in home.headers("/landed")[0]] == CREDENTIALS
    # Away and back again: once a hop has left the origin, the credentials are gone for good.
    assert [h for h in CREDENTIALS if h in home.headers("/back")[0]] == []


def test_a_redirect_that_drops_the_body_drops_its_content_headers(
    loopback: None,
) -> None:
    with DripServer({"/landed": _ok}) as peer:
        peer.routes["/post"] = redirect("/landed", status=303)
        _call({"url": f"{peer.url}/post", "method": "POST", "json": {"a": 1}})
    (_, posted, body), (_, landed, landed_body) = peer.requests
    assert (posted["content-type"], body) == ("application/json", b'{"a": 1}')
    assert ("content-type" in landed, landed_body) == (False, b"")
