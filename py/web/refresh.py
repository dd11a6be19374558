"""Refresh tokens: opaque, stored hashed, rotated on every use, a reused one ends the session.

A refresh token is 32 random bytes (``secrets.token_urlsafe``); the database keeps only its
SHA-256 (like API keys: 256 bits of entropy leave nothing to brute-force, and the lookup is
by hash). Each one belongs to a *family*, one sign-in's chain of rotations, and remembers
the org and project that session acts in, so refreshing never takes the tenant from the
client; the membership behind it is checked again at every rotation.

Everything that changes a family (rotation, logout) first takes a transaction advisory
lock on it, so the family's rows are stable for the rest of that transaction: of two
concurrent uses of one token exactly one rotates and the other sees a rotated token, and a
revocation cannot miss a successor that a concurrent rotation was inserting.

Presenting a token that was already rotated means two parties hold the chain (a thief and
the owner): the whole family is revoked, and that revocation is committed before the 401
goes out, which is why :func:`rotate` runs its own transaction rather than the request's
(the mount rolls that back when a handler raises). Each new token lives
``refresh_ttl_seconds`` (7 days) from its issue.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from codity.web.database import set_tenant, set_user, transaction
from codity.web.errors import ApiError
from codity.web.settings import WebSettings

__all__ = [
    "Rotated",
    "act_as_user",
    "hash_refresh",
    "invalid_refresh",
    "issue_refresh",
    "revoke_family_of",
    "revoke_user",
    "rotate",
    "still_member",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rotated:
    """The session a refresh token continued, and the token that replaces it."""

    user_id: int
    org_id: int | None
    project_id: int | None
    refresh_token: str


def hash_refresh(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def invalid_refresh() -> ApiError:
    """One answer for every refused refresh token: unknown, expired, revoked or reused."""
    return ApiError(401, "unauthorized", "invalid or expired refresh token")


async def act_as_user(conn: AsyncConnection[Any], user_id: int) -> None:
    """Let this transaction see the user's own memberships (row-level security keys on it)."""
    await set_user(conn, user_id)


_INSERT = """
INSERT INTO codity.refresh_tokens (user_id, family_id, token_hash, expires_at, org_id, project_id)
VALUES (%(user_id)s, %(family_id)s, %(token_hash)s,
        now() + make_interval(secs => %(ttl)s), %(org_id)s, %(project_id)s)
"""


async def issue_refresh(
    conn: AsyncConnection[Any],
    settings: WebSettings,
    *,
    user_id: int,
    org_id: int | None,
    project_id: int | None,
    family_id: uuid.UUID | None = None,
) -> str:
    """A new refresh token, in ``family_id`` or (a new sign-in) a new family."""
    token = secrets.token_urlsafe(32)
    await conn.execute(
        _INSERT,
        {
            "user_id": user_id,
            "family_id": family_id or uuid.uuid4(),
            "token_hash": hash_refresh(token),
            "ttl": settings.refresh_ttl_seconds,
            "org_id": org_id,
            "project_id": project_id,
        },
    )
    return token


_MEMBERSHIP = """
SELECT 1
FROM codity.memberships m
JOIN codity.projects p ON p.org_id = m.org_id
WHERE m.user_id = %(user_id)s AND m.org_id = %(org_id)s AND p.id = %(project_id)s
"""

_MEMBERSHIP_ORG_ONLY = """
SELECT 1 FROM codity.memberships m WHERE m.user_id = %(user_id)s AND m.org_id = %(org_id)s
"""


async def still_member(
    conn: AsyncConnection[Any], *, user_id: int, org_id: int | None, project_id: int | None
) -> bool:
    """Whether the user still belongs to the session's org (and its project still exists).
    A session with no org (a user of no project yet) is always still valid."""
    if org_id is None:
        return True
    await act_as_user(conn, user_id)
    await set_tenant(conn, org_id=org_id, project_id=None)
    params = {"user_id": user_id, "org_id": org_id, "project_id": project_id}
    query = _MEMBERSHIP_ORG_ONLY if project_id is None else _MEMBERSHIP
    cur = await conn.execute(query, params)
    found = await cur.fetchone() is not None
    await set_tenant(conn, org_id=None, project_id=None)
    return found


# Advisory-lock namespace of refresh families (two-int4 form: apart from every bigint key).
_FAMILY_LOCK_SPACE = 0x72667266

_LOCK_FAMILY = """
SELECT pg_catalog.pg_advisory_xact_lock(%s::integer, pg_catalog.hashtext(t.family_id::text))
FROM codity.refresh_tokens t
WHERE t.token_hash = %s
"""

_LOCK = """
SELECT id, user_id, family_id, org_id, project_id,
       revoked_at IS NOT NULL AS is_revoked,
       rotated_at IS NOT NULL AS is_rotated,
       expires_at <= now() AS is_expired
FROM codity.refresh_tokens
WHERE token_hash = %s
FOR UPDATE
"""

_REVOKE_FAMILY = """
UPDATE codity.refresh_tokens SET revoked_at = now()
WHERE family_id = %s AND revoked_at IS NULL
"""


async def _rotate_in(
    conn: AsyncConnection[Any], settings: WebSettings, token: str
) -> Rotated | None:
    token_hash = hash_refresh(token)
    await conn.execute(_LOCK_FAMILY, [_FAMILY_LOCK_SPACE, token_hash])
    cur = await conn.execute(_LOCK, [token_hash])
    row = await cur.fetchone()
    if row is None or row["is_revoked"]:
        return None
    if row["is_rotated"]:
        await conn.execute(_REVOKE_FAMILY, [row["family_id"]])
        log.warning(
            "refresh token reused: family revoked",
            extra={"user_id": row["user_id"], "family_id": str(row["family_id"])},
        )
        return None
    if row["is_expired"]:
        return None
    user_id, org_id, project_id = row["user_id"], row["org_id"], row["project_id"]
    if not await still_member(conn, user_id=user_id, org_id=org_id, project_id=project_id):
        await conn.execute(_REVOKE_FAMILY, [row["family_id"]])
        return None
    await conn.execute(
        "UPDATE codity.refresh_tokens SET rotated_at = now() WHERE id = %s", [row["id"]]
    )
    new_token = await issue_refresh(
        conn,
        settings,
        user_id=user_id,
        org_id=org_id,
        project_id=project_id,
        family_id=row["family_id"],
    )
    return Rotated(user_id, org_id, project_id, new_token)


async def rotate(pool: AsyncConnectionPool[Any], settings: WebSettings, token: str) -> Rotated:
    """Exchange ``token`` for its successor, in a transaction of its own that commits even
    when the answer is a refusal (so a detected reuse stays revoked); 401 when refused."""
    async with transaction(pool) as conn:
        rotated = await _rotate_in(conn, settings, token)
    if rotated is None:
        raise invalid_refresh()
    return rotated


async def revoke_family_of(conn: AsyncConnection[Any], token: str, *, user_id: int) -> None:
    """Revoke the family of ``token`` if it is the user's; someone else's token is ignored."""
    token_hash = hash_refresh(token)
    await conn.execute(_LOCK_FAMILY, [_FAMILY_LOCK_SPACE, token_hash])
    await conn.execute(
        """
        UPDATE codity.refresh_tokens SET revoked_at = now()
        WHERE revoked_at IS NULL
          AND family_id = (SELECT t.family_id FROM codity.refresh_tokens t
                           WHERE t.token_hash = %s AND t.user_id = %s)
        """,
        [token_hash, user_id],
    )


async def revoke_user(conn: AsyncConnection[Any], *, user_id: int) -> None:
    """Revoke every refresh token of the user: signed out everywhere."""
    await conn.execute(
        """
        SELECT pg_catalog.pg_advisory_xact_lock(%s::integer, pg_catalog.hashtext(f.family_id::text))
        FROM (SELECT DISTINCT t.family_id FROM codity.refresh_tokens t
              WHERE t.user_id = %s AND t.revoked_at IS NULL
              ORDER BY t.family_id) f
        """,
        [_FAMILY_LOCK_SPACE, user_id],
    )
    await conn.execute(
        "UPDATE codity.refresh_tokens SET revoked_at = now()"
        " WHERE user_id = %s AND revoked_at IS NULL",
        [user_id],
    )
