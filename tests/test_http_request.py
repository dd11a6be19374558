"""The http_request handler's SSRF guard, against real sockets on this machine."""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from codity.worker.context import JobContext
from codity.worker.http_request import HttpStatusError, http_request
from codity.worker.registry import NonRetryable
from codity.worker.ssrf import Allowlist, BlockedDestination, check_address, resolve_checked

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
        port = self.server.server_address[1]
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


@pytest.fixture
def server() -> Iterator[str]:
    httpd = _QuietServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _ctx() -> JobContext:
    return JobContext(job_id=1, attempt=1, fence=1, queue="q", task="http_request", max_attempts=3)


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
    with pytest.raises(TimeoutError):
        _call({"url": f"{server}/slow", "timeout_s": 0.3})


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"url": "ftp://example.com/file"},
        {"url": "http://user:secret@example.com/"},
        {"url": "http://example.com/", "method": "TRACE"},
        {"url": "http://example.com/", "headers": {"X": 1}},
    ],
)
def test_malformed_payloads_are_not_retried(payload: dict[str, Any]) -> None:
    with pytest.raises(NonRetryable):
        _call(payload)
