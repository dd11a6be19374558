"""The ``http_request`` payload, checked: what a job may ask for and the refusals it gets.

Every field is checked before anything touches the network, and everything refused is a
``NonRetryable`` (a retry cannot fix a payload). The header rules live here: names must be
tokens, values printable ASCII, and ``_REFUSED_HEADERS`` (``Host``, framing, hop-by-hop)
belong to the client, never to a payload. URLs are parsed here too, for the payload and for
every redirect ``Location``, so both meet the same rules.

Kept apart from http_request.py so the handler reads as the call and its redirects. The
deadline default and cap are the handler's policy and arrive as arguments. Messages name
fields, never their values: a payload may carry a credential.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from codity.worker.registry import NonRetryable

__all__ = ["Request", "Target", "non_retryable", "parse_payload", "parse_url"]

_FIELDS = frozenset({"url", "method", "headers", "json", "body", "timeout_s"})
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
# Host belongs to the URL; framing and hop-by-hop headers (RFC 9110 7.6.1, RFC 9112 6)
# belong to the client. A payload that sets one is refused.
_REFUSED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
    | {"proxy-connection", "te", "trailer", "upgrade", "expect"}
)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 5.6.2)
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")  # printable ASCII, space and tab
_NETLOC = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?")


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str
    port: int
    path: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


@dataclass(frozen=True)
class Request:
    """The payload, checked; each redirect hop is a copy with what the redirect changed."""

    target: Target
    method: str
    headers: dict[str, str]
    body: bytes | None
    timeout_s: float


def non_retryable(message: str) -> NonRetryable:
    """The handler's one way to give up for good, named so the job's error says who did."""
    return NonRetryable(f"http_request: {message}")


def parse_url(url: str, what: str) -> Target:
    """An http(s) URL with a plain host[:port] and no credentials; ``what`` names it."""
    if not url.isascii() or any(ch <= " " or ch == "\x7f" for ch in url):
        raise non_retryable(
            f"{what} must be ASCII with no spaces or control characters; percent-encode"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unbalanced [ or ]
        raise non_retryable(f"{what} has a malformed host") from exc
    if parts.scheme not in ("http", "https"):
        raise non_retryable(f"{what} must use http or https")
    if "@" in parts.netloc:
        raise non_retryable(f"credentials in the {what} are not allowed; use a header")
    if not parts.netloc:
        raise non_retryable(f"{what} has no host")
    try:
        if not _NETLOC.fullmatch(parts.netloc):
            raise ValueError("not a host[:port]")
        port = parts.port
        host = parts.hostname or ""
        if parts.netloc.startswith("["):
            host = str(ipaddress.IPv6Address(host))
    except ValueError as exc:
        raise non_retryable(f"{what} has a malformed host or port") from exc
    if port == 0:
        raise non_retryable(f"{what} port must be 1-65535")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default = 443 if parts.scheme == "https" else 80
    return Target(url, parts.scheme, host, port or default, path)


def _parse_timeout(value: Any, max_timeout_s: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise non_retryable("timeout_s must be a number of seconds")
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise non_retryable("timeout_s must be a finite number of seconds above 0")
    return float(min(value, max_timeout_s))


def _parse_headers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise non_retryable("headers must be an object of strings")
    seen: set[str] = set()
    for name, text in value.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise non_retryable("a header name is not a token (letters, digits, - and no spaces)")
        if name.lower() in _REFUSED_HEADERS:
            raise non_retryable(f"header {name!r} is set by the client, never by a payload")
        if name.lower() in seen:
            raise non_retryable(f"header {name!r} is given twice")
        seen.add(name.lower())
        if not isinstance(text, str) or not _FIELD_VALUE.fullmatch(text):
            raise non_retryable(
                f"header {name!r} needs a string of printable ASCII, no line breaks"
            )
    return dict(value)


def _parse_body(payload: dict[str, Any], headers: dict[str, str]) -> bytes | None:
    if "json" in payload and "body" in payload:
        raise non_retryable("give json or body, not both")
    if "body" in payload:
        text = payload["body"]
        if not isinstance(text, str):
            raise non_retryable("body must be a string")
        return text.encode()
    if "json" not in payload:
        return None
    try:
        encoded = json.dumps(payload["json"], allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise non_retryable("json is not a JSON value") from exc
    if "content-type" not in {k.lower() for k in headers}:
        headers["Content-Type"] = "application/json"
    return encoded


def parse_payload(payload: Any, *, default_timeout_s: float, max_timeout_s: float) -> Request:
    """The job's payload as a ``Request``; ``timeout_s`` defaults and is capped as given."""
    if not isinstance(payload, dict):
        raise non_retryable("payload must be an object")
    unknown = sorted(repr(str(k)[:40]) for k in payload if k not in _FIELDS)
    if unknown:
        known = ", ".join(sorted(_FIELDS))
        raise non_retryable(f"unknown field {', '.join(unknown)}; known: {known}")
    if not isinstance(payload.get("url"), str):
        raise non_retryable("url must be a string")
    method = payload.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in _METHODS:
        raise non_retryable(f"method must be one of {', '.join(sorted(_METHODS))}")
    headers = _parse_headers(payload.get("headers", {}))
    return Request(
        target=parse_url(payload["url"], "url"),
        method=method.upper(),
        headers=headers,
        body=_parse_body(payload, headers),
        timeout_s=_parse_timeout(payload.get("timeout_s", default_timeout_s), max_timeout_s),
    )
