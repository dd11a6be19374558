"""The built-in ``http_request`` task: call a URL, guarded against SSRF (see ssrf.py).

Payload (only ``url`` is required; any other field is refused)::

    {"url": "https://api.example.com/hook", "method": "POST",
     "headers": {"X-Token": "..."}, "json": {...} | "body": "...", "timeout_s": 10}

The host is resolved once and every address checked; the connection goes to a checked
address (TLS still verifies the certificate against the host name); every redirect is
checked the same way. ``timeout_s`` (default 10, at most 60) is one deadline for the whole
call: every name lookup, connect, TLS handshake, send and read of every hop, so a server
that drips bytes is cut off at the deadline. Redirects and response bytes are capped too.

A payload may not set ``Host`` (the connection is pinned to the checked address of the
URL's host: another Host would reach a virtual host nobody checked) nor the framing and
hop-by-hop headers. Once a redirect leaves the job's origin (scheme, host or port), only
``_CROSS_ORIGIN_HEADERS`` go on: credentials of any name stay behind for the rest of the call.

2xx completes the job with the status and the first bytes of the body; 408, 425, 429, 5xx
(``HttpStatusError``), the deadline (``HttpTimeoutError``) and network errors are retried;
any other status, a refused destination or a malformed payload raise ``NonRetryable``.
Messages and logs name fields, never their values.

This module holds the handler, its redirects and its limits; the payload's checks are in
_http_payload.py, the deadline and the pinned connection in _http_deadline.py.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, NamedTuple
from urllib.parse import urljoin

from codity.worker._http_deadline import Deadline, PinnedConnection, resolve_within
from codity.worker._http_payload import Request, non_retryable, parse_payload, parse_url
from codity.worker.context import JobContext
from codity.worker.registry import Registry
from codity.worker.ssrf import Allowlist, BlockedDestination

__all__ = ["HttpStatusError", "HttpTimeoutError", "register_http_request"]

MAX_REDIRECTS = 5
MAX_RESPONSE_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 60.0
KEPT_BODY_CHARS = 4096
_RETRYABLE_STATUS = {408, 425, 429}
_REDIRECT_STATUS = {301, 302, 303, 307, 308}
# What follows a redirect to another origin: headers that describe the request, none that
# vouch for the sender. Stricter than requests, curl and httpx (which drop Authorization
# and Cookie) because a job's credential is as often a custom header such as X-Api-Key.
_CROSS_ORIGIN_HEADERS = frozenset(
    {"accept", "accept-language", "cache-control", "user-agent"}
    | {"content-type", "content-encoding", "content-language"}
)


class HttpStatusError(Exception):
    """The server answered with a status that means "try again later"."""


class HttpTimeoutError(Exception):
    """The call did not finish within its deadline; retried, like a network error.

    Not a ``TimeoutError``: the worker reports those as its own job timeout.
    """


class _Answer(NamedTuple):
    status: int
    location: str | None
    data: bytes


# -- the call --------------------------------------------------------------------------------


def _request_once(hop: Request, deadline: Deadline, allowlist: Allowlist) -> _Answer:
    try:
        address = resolve_within(hop.target, allowlist, deadline)
    except BlockedDestination as exc:
        raise non_retryable(str(exc)) from exc
    with PinnedConnection(hop.target, address, deadline) as conn:
        conn.request(hop.method, hop.target.path, body=hop.body, headers=hop.headers)
        response = conn.getresponse()
        data = response.read(MAX_RESPONSE_BYTES + 1)
        if len(data) > MAX_RESPONSE_BYTES:
            raise non_retryable(f"response larger than {MAX_RESPONSE_BYTES} bytes")
        return _Answer(response.status, response.getheader("location"), data)


def _next_hop(hop: Request, status: int, location: str, origin: tuple[str, str, int]) -> Request:
    """The request a redirect asks for, with only the headers it may still carry."""
    target = parse_url(urljoin(hop.target.url, location), "redirect Location")
    method, body, headers = hop.method, hop.body, hop.headers
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, body = "GET", None
        headers = {k: v for k, v in headers.items() if not k.lower().startswith("content-")}
    if target.origin != origin:  # for good: a later hop back to the origin gets them no more
        headers = {k: v for k, v in headers.items() if k.lower() in _CROSS_ORIGIN_HEADERS}
    return replace(hop, target=target, method=method, body=body, headers=headers)


def _follow(request: Request, deadline: Deadline, allowlist: Allowlist, ctx: JobContext) -> _Answer:
    hop = request
    for _ in range(MAX_REDIRECTS + 1):
        if ctx.is_cancelled:
            raise non_retryable("cancelled")
        answer = _request_once(hop, deadline, allowlist)
        if answer.status not in _REDIRECT_STATUS or answer.location is None:
            return answer
        sent = len(hop.headers)
        hop = _next_hop(hop, answer.status, answer.location, request.target.origin)
        ctx.logger.info(
            "redirected (%d), %d header(s) dropped", answer.status, sent - len(hop.headers)
        )
    raise non_retryable(f"more than {MAX_REDIRECTS} redirects")


def http_request(payload: Any, ctx: JobContext) -> dict[str, Any]:
    request = parse_payload(
        payload, default_timeout_s=DEFAULT_TIMEOUT_S, max_timeout_s=MAX_TIMEOUT_S
    )
    deadline = Deadline(request.timeout_s)
    allowlist = Allowlist.parse(os.environ.get("HTTP_HANDLER_ALLOWLIST"))
    try:
        status, _location, data = _follow(request, deadline, allowlist, ctx)
    except TimeoutError as exc:
        raise HttpTimeoutError(
            f"http_request: no complete answer within {request.timeout_s:g} s"
        ) from exc
    if status in _RETRYABLE_STATUS or status >= 500:
        raise HttpStatusError(f"HTTP {status}")
    if not 200 <= status < 300:
        raise non_retryable(f"HTTP {status}")
    ctx.logger.info("HTTP %d, %d bytes", status, len(data))
    return {
        "status": status,
        "bytes": len(data),
        "body": data[:KEPT_BODY_CHARS].decode("utf-8", "replace"),
    }


def register_http_request(registry: Registry) -> None:
    """Add the ``http_request`` task to a registry.

    The registry has no per-task time limit, so the handler keeps its own: no payload holds
    a worker slot longer than MAX_TIMEOUT_S (plus the last blocking call's return).
    """
    registry.task("http_request")(http_request)
