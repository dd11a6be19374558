"""The dashboard's sign-in session: a cookie backed by the API's refresh-token family.

Signing in goes through the API's own login handler (its sign-in rate limits included)
and keeps the refresh token it issues in a cookie: HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), Secure when served over HTTPS, and no
longer lived than the token. Every request looks the token up: a revoked, rotated or
expired token — signing out revokes its family, exactly like the API's logout — is no
session. The token is never rotated by the dashboard (several fragments load at once; a
rotation race would read as token reuse and end the session).

Every state-changing request must carry the session's CSRF token (a keyed hash of the
session token, in a form field or the ``X-CSRF-Token`` header) and an ``Origin`` (or, when
a browser sends none, a ``Referer``) naming this site. The sign-in form, which has no
session yet, uses a token bound to a short-lived pre-session cookie instead.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request
from starlette.responses import Response

from codity.web.call import Principal
from codity.web.database import transaction
from codity.web.refresh import hash_refresh
from codity.web.settings import WebSettings

__all__ = [
    "PRE_SESSION_COOKIE",
    "SESSION_COOKIE",
    "Session",
    "clear_session",
    "csrf_token",
    "load_session",
    "origin_allowed",
    "pre_session_token",
    "public_scheme",
    "remember_pre_session",
    "set_session",
    "signin_token",
    "tokens_match",
]

SESSION_COOKIE = "codity_session"
PRE_SESSION_COOKIE = "codity_signin"

_LIVE = """
SELECT t.user_id, t.org_id, t.project_id, u.email
FROM codity.refresh_tokens t
JOIN codity.users u ON u.id = t.user_id
WHERE t.token_hash = %s AND t.revoked_at IS NULL AND t.rotated_at IS NULL
  AND t.expires_at > now()
"""


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    user_id: int
    email: str
    org_id: int | None
    project_id: int | None

    @property
    def principal(self) -> Principal:
        return Principal(
            kind="user",
            user_id=self.user_id,
            api_key_id=None,
            org_id=self.org_id,
            project_id=self.project_id,
        )


async def load_session(request: Request, pool: AsyncConnectionPool[Any]) -> Session | None:
    """The live session the request's cookie names, or None."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token or len(token) > 200:
        return None
    async with transaction(pool) as conn:
        cur = await conn.execute(_LIVE, [hash_refresh(token)])
        row = await cur.fetchone()
    if row is None:
        return None
    return Session(token, row["user_id"], row["email"], row["org_id"], row["project_id"])


def public_scheme(request: Request, settings: WebSettings) -> str:
    """The scheme the browser used: the socket's, or, when the peer is one of
    ``CODITY_TRUSTED_PROXIES`` (a proxy terminating TLS), its ``X-Forwarded-Proto``."""
    scheme = request.url.scheme
    if not settings.trusted_proxies or request.client is None:
        return scheme
    try:
        peer = ipaddress.ip_address(request.client.host)
    except ValueError:
        return scheme
    if not any(peer in net for net in settings.trusted_proxies):
        return scheme
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return forwarded if forwarded in ("http", "https") else scheme


def _secure(request: Request, settings: WebSettings) -> bool:
    return public_scheme(request, settings) == "https"


def set_session(response: Response, request: Request, token: str, settings: WebSettings) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=settings.refresh_ttl_seconds,
        path="/",
        httponly=True,
        samesite="strict",
        secure=_secure(request, settings),
    )
    response.delete_cookie(PRE_SESSION_COOKIE, path="/")


def clear_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")


def _keyed(settings: WebSettings, purpose: str, value: str) -> str:
    message = f"{purpose}|{value}".encode()
    return hmac.new(settings.jwt_secret, message, hashlib.sha256).hexdigest()


def csrf_token(settings: WebSettings, session_token: str) -> str:
    """The session's CSRF token: derived, so nothing is stored, and useless without it."""
    return _keyed(settings, "csrf", hashlib.sha256(session_token.encode()).hexdigest())


def signin_token(settings: WebSettings, pre_session: str) -> str:
    """The sign-in form's CSRF token, bound to its pre-session cookie."""
    return _keyed(settings, "signin", pre_session)


def pre_session_token(request: Request) -> tuple[str, bool]:
    """The sign-in form's own random value from its cookie, or a new one (True: set it)."""
    value = request.cookies.get(PRE_SESSION_COOKIE)
    if value and len(value) <= 100:
        return value, False
    return secrets.token_urlsafe(24), True


def remember_pre_session(
    response: Response, request: Request, value: str, settings: WebSettings
) -> None:
    response.set_cookie(
        PRE_SESSION_COOKIE,
        value,
        max_age=3600,
        path="/",
        httponly=True,
        samesite="strict",
        secure=_secure(request, settings),
    )


def origin_allowed(request: Request, settings: WebSettings) -> bool:
    """Whether the request says it comes from a page of this very site (the scheme the
    browser used, the ``Host`` it sent)."""
    here = (public_scheme(request, settings), request.url.netloc)
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return False
    parts = urlsplit(claimed)
    return (parts.scheme, parts.netloc) == here


def tokens_match(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected, given)
