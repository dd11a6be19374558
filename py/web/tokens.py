"""Access tokens: short-lived JWTs, one algorithm pinned, every time and audience claim required.

An access token names the user (``sub``), the org (``org``) and the project (``prj``) it
acts in; the guard re-checks the membership behind it on every request, so removing a
member or demoting one takes effect at once, not when the token expires. ``org`` and
``prj`` are null for a user who belongs to no project yet: such a token reaches the
signed-in routes (me, switch, creating an org) and no project-scoped one.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import jwt

from codity.web.errors import ApiError
from codity.web.settings import WebSettings

__all__ = ["ALGORITHM", "AccessClaims", "decode_access", "issue_access"]

ALGORITHM = "HS256"
_REQUIRED = ["exp", "iat", "nbf", "iss", "aud", "sub", "jti"]


@dataclass(frozen=True, slots=True)
class AccessClaims:
    user_id: int
    org_id: int | None
    project_id: int | None
    expires_at: int


def issue_access(
    settings: WebSettings,
    *,
    user_id: int,
    org_id: int | None,
    project_id: int | None,
    now: float | None = None,
) -> tuple[str, int]:
    """A signed access token and its lifetime in seconds."""
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "sub": str(user_id),
        "org": org_id,
        "prj": project_id,
        "iat": issued,
        "nbf": issued,
        "exp": issued + settings.access_ttl_seconds,
        "jti": secrets.token_urlsafe(12),
    }
    return jwt.encode(claims, settings.jwt_secret, algorithm=ALGORITHM), settings.access_ttl_seconds


def _unauthorized(message: str) -> ApiError:
    return ApiError(
        401,
        "unauthorized",
        message,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


def _id_or_none(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def decode_access(settings: WebSettings, token: str) -> AccessClaims:
    """The claims of a valid access token; 401 for anything else, not saying which check failed."""
    try:
        claims = jwt.decode(
            token,
            settings.jwt_secret,
            algorithms=[ALGORITHM],
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            options={"require": _REQUIRED, "verify_signature": True},
        )
        user_id = int(claims["sub"])
        org_id = claims["org"]
        project_id = claims["prj"]
        if not (_id_or_none(org_id) and _id_or_none(project_id)):
            raise ValueError("org and prj must be integers or null")
        if project_id is not None and org_id is None:
            raise ValueError("a project needs its org")
    except (jwt.PyJWTError, KeyError, TypeError, ValueError) as exc:
        raise _unauthorized("invalid or expired access token") from exc
    return AccessClaims(user_id, org_id, project_id, int(claims["exp"]))
