"""The ASGI layer around every response: request id, security headers, server timing, access
log, last resort.

Pure ASGI (no BaseHTTPMiddleware), so streaming bodies and the body cap stay intact.
An exception that escapes a route is logged with its trace under the request id and
answered with a bare 500 envelope: the client gets the id to quote, never the trace.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codity.web.logs import current_request_id

__all__ = ["RequestContext", "security_headers"]

log = logging.getLogger("codity.web.access")

_INCOMING_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")

_COMMON = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
    (b"strict-transport-security", b"max-age=63072000; includeSubDomains"),
]
_API_CSP = b"default-src 'none'; frame-ancestors 'none'"
_PAGE_CSP = (
    b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    b"script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    b"form-action 'self'"
)


# The dashboard: its own scripts and styles only, no inline script or style at all.
_DASHBOARD_CSP = (
    b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def security_headers(path: str) -> list[tuple[bytes, bytes]]:
    """Headers every response carries; pages (docs, dashboard) may load their own assets."""
    # The dashboard's forms are checked for this site's Origin; under "no-referrer" a
    # browser sends "Origin: null" with a form POST (Fetch, "serializing a request origin"),
    # so its pages say "same-origin": the full origin to this site, nothing to any other.
    referrer = b"no-referrer"
    if path.startswith("/api/v1/docs"):
        csp = _PAGE_CSP  # Swagger UI sets styles inline
    elif path.startswith("/api/"):
        csp = _API_CSP
    else:
        csp = _DASHBOARD_CSP
        referrer = b"same-origin"
    headers = [*_COMMON, (b"referrer-policy", referrer), (b"content-security-policy", csp)]
    if path.startswith("/api/") and not path.startswith("/api/v1/docs"):
        headers.append((b"cache-control", b"no-store"))
    return headers


class RequestContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if _INCOMING_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        token = current_request_id.set(request_id)
        path: str = scope.get("path", "")
        started = time.perf_counter()
        status = 500
        response_started = logged = False

        def log_request() -> None:
            # Once, before the response's last byte leaves: a client (a test) that has the
            # whole answer finds the line written, never racing it.
            nonlocal logged
            if logged:
                return
            logged = True
            extra: dict[str, Any] = {
                "request_id": request_id,
                "method": scope.get("method"),
                "path": path,
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
            }
            log.info("request", extra=extra)

        async def send_with_headers(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                log_request()
            if message["type"] == "http.response.start":
                response_started = True
                status = message["status"]
                own = {name.lower() for name, _ in security_headers(path)}
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in own]
                headers += security_headers(path)
                headers.append((b"x-request-id", request_id.encode()))
                # Time to the first byte: a rendered page's whole server time (benchmarks and
                # browsers' network panels read it).
                elapsed_ms = (time.perf_counter() - started) * 1000
                headers.append((b"server-timing", f"app;dur={elapsed_ms:.1f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            log.exception("unhandled error", extra={"request_id": request_id, "path": path})
            if response_started:
                raise
            status = 500
            body = json.dumps(
                {
                    "error": {
                        "code": "internal_error",
                        "message": "the server failed to handle this request",
                        "request_id": request_id,
                    }
                }
            ).encode()
            await send_with_headers(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            log_request()
            await send({"type": "http.response.body", "body": body})
        finally:
            log_request()  # a stream cut short, a client gone: said once all the same
            current_request_id.reset(token)
