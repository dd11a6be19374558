"""The built-in ``http_request`` task: call a URL, guarded against SSRF (see ssrf.py).

Payload::

    {"url": "https://api.example.com/hook", "method": "POST",
     "headers": {"X-Token": "..."}, "json": {...} | "body": "...", "timeout_s": 10}

The host is resolved once and every address checked; the connection goes to a checked
address (TLS still verifies the certificate against the host name); every redirect is
checked the same way. Time, redirects and response bytes are capped. 2xx completes the
job with the status and the first bytes of the body; 408, 429 and 5xx raise a retryable
error; any other status, a refused destination or a malformed payload is not retryable.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

from codity.worker.context import JobContext
from codity.worker.registry import NonRetryable, Registry
from codity.worker.ssrf import Allowlist, BlockedDestination, IPAddress, resolve_checked

__all__ = ["HttpStatusError", "register_http_request"]

MAX_REDIRECTS = 5
MAX_RESPONSE_BYTES = 1 << 20
MAX_TIMEOUT_S = 60.0
KEPT_BODY_CHARS = 4096
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
_RETRYABLE_STATUS = {408, 425, 429}


class HttpStatusError(Exception):
    """The server answered with a status that means "try again later"."""


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: IPAddress, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((str(self._address), self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: IPAddress, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        raw = socket.create_connection((str(self._address), self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]


def _bad(message: str) -> NonRetryable:
    return NonRetryable(f"http_request: {message}")


def _request_once(
    url: str,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    deadline: float,
    allowlist: Allowlist,
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(f"only http and https URLs with a host are allowed, got {url!r}")
    if parts.username or parts.password:
        raise _bad("credentials in the URL are not allowed; use a header")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = resolve_checked(parts.hostname, port, allowlist)
    except BlockedDestination as exc:
        raise _bad(str(exc)) from exc
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("http_request: time limit reached")
    cls = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    conn = cls(parts.hostname, port, addresses[0], timeout=remaining)
    try:
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(MAX_RESPONSE_BYTES + 1)
        if len(data) > MAX_RESPONSE_BYTES:
            raise _bad(f"response larger than {MAX_RESPONSE_BYTES} bytes")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def http_request(payload: Any, ctx: JobContext) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(payload.get("url"), str):
        raise _bad('payload must be an object with a "url" string')
    method = str(payload.get("method", "GET")).upper()
    if method not in _METHODS:
        raise _bad(f"method must be one of {sorted(_METHODS)}, got {method!r}")
    headers = payload.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise _bad("headers must be an object of strings")
    body: bytes | None = None
    if "json" in payload:
        body = json.dumps(payload["json"]).encode()
        headers = {"Content-Type": "application/json", **headers}
    elif isinstance(payload.get("body"), str):
        body = payload["body"].encode()
    timeout = min(float(payload.get("timeout_s", 10)), MAX_TIMEOUT_S)
    deadline = time.monotonic() + timeout
    allowlist = Allowlist.parse(os.environ.get("HTTP_HANDLER_ALLOWLIST"))

    url = payload["url"]
    for _hop in range(MAX_REDIRECTS + 1):
        if ctx.is_cancelled:
            raise _bad("cancelled")
        status, response_headers, data = _request_once(
            url, method, headers, body, deadline, allowlist
        )
        if status in (301, 302, 303, 307, 308) and "location" in response_headers:
            url = urljoin(url, response_headers["location"])
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", None
            ctx.logger.info("redirected (%d)", status)
            continue
        break
    else:
        raise _bad(f"more than {MAX_REDIRECTS} redirects")

    if status in _RETRYABLE_STATUS or status >= 500:
        raise HttpStatusError(f"HTTP {status}")
    if not 200 <= status < 300:
        raise _bad(f"HTTP {status}")
    ctx.logger.info("HTTP %d, %d bytes", status, len(data))
    return {
        "status": status,
        "bytes": len(data),
        "body": data[:KEPT_BODY_CHARS].decode("utf-8", "replace"),
    }


def register_http_request(registry: Registry) -> None:
    """Add the ``http_request`` task to a registry."""
    registry.task("http_request")(http_request)
