"""Who is calling, and the one guard that decides which tenant a request acts for.

``authenticate`` turns the Authorization header into a :class:`Principal`. ``guard`` is
the only function that establishes a tenant: the org and project come from the credential
(an access token's ``org``/``prj``, or the project an API key was issued for), never from
a path, query or body parameter, and for a user the membership behind the token is read
again now. ``codity.web.mount`` calls it for every project-scoped route; no handler does.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request

from codity.web.access import Role, Scope
from codity.web.call import Principal, Tenant
from codity.web.database import set_tenant, transaction
from codity.web.endpoint import Endpoint
from codity.web.errors import ApiError
from codity.web.keys import KEY_PREFIX, hash_key
from codity.web.settings import WebSettings
from codity.web.tokens import decode_access

__all__ = ["authenticate", "check_role", "guard"]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="codity"'}


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise ApiError(401, "unauthorized", "missing bearer credential", headers=_CHALLENGE)
    return value.strip()


async def authenticate(
    request: Request, settings: WebSettings, pool: AsyncConnectionPool[Any]
) -> Principal:
    credential = _bearer(request)
    if credential.startswith(KEY_PREFIX):
        async with transaction(pool) as conn:
            cur = await conn.execute(
                "SELECT api_key_id, project_id, org_id, role::text AS role"
                " FROM codity.api_key_identity(%s)",
                [hash_key(credential)],
            )
            row = await cur.fetchone()
        if row is None:
            raise ApiError(
                401,
                "unauthorized",
                "invalid or revoked API key",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return Principal(
            kind="api_key",
            user_id=None,
            api_key_id=row["api_key_id"],
            org_id=row["org_id"],
            project_id=row["project_id"],
            key_role=Role.parse(row["role"]),
        )
    claims = decode_access(settings, credential)
    return Principal(
        kind="user",
        user_id=claims.user_id,
        api_key_id=None,
        org_id=claims.org_id,
        project_id=claims.project_id,
    )


_MEMBERSHIP = """
SELECT m.role::text AS role
FROM codity.memberships m
JOIN codity.projects p ON p.org_id = m.org_id
WHERE m.user_id = %(user_id)s AND m.org_id = %(org_id)s AND p.id = %(project_id)s
"""


async def guard(conn: AsyncConnection[Any], principal: Principal) -> Tenant:
    """The tenant this request acts for, set on the transaction; 403 when the credential no
    longer grants it. The only place a tenant comes from."""
    if principal.org_id is None or principal.project_id is None:
        raise ApiError(403, "forbidden", "this credential is not for a project")
    # The settings go in first: the membership read below is under org-keyed RLS. When the
    # credential turns out not to grant the tenant, the request fails and the transaction
    # (settings included) rolls back.
    await set_tenant(conn, org_id=principal.org_id, project_id=principal.project_id)
    if principal.kind == "api_key":
        if principal.key_role is None:
            raise ApiError(403, "forbidden", "this API key has no role")
        role = principal.key_role
    else:
        cur = await conn.execute(
            _MEMBERSHIP,
            {
                "user_id": principal.user_id,
                "org_id": principal.org_id,
                "project_id": principal.project_id,
            },
        )
        row = await cur.fetchone()
        if row is None:
            raise ApiError(403, "forbidden", "you are no longer a member of this project's org")
        role = Role.parse(row["role"])
    return Tenant(org_id=principal.org_id, project_id=principal.project_id, role=role)


def check_role(endpoint: Endpoint, principal: Principal, tenant: Tenant | None) -> None:
    """403 unless the caller may use this route: the role is high enough, and an API key
    only where keys are allowed."""
    if endpoint.scope is Scope.AUTHENTICATED and principal.kind != "user":
        raise ApiError(403, "forbidden", "this route needs a signed-in user, not an API key")
    if endpoint.scope is not Scope.PROJECT:
        return
    if principal.kind == "api_key" and not endpoint.api_keys:
        raise ApiError(403, "forbidden", "API keys cannot use this route")
    if tenant is None or endpoint.min_role is None:
        raise ApiError(403, "forbidden", "no role grants this route")
    if tenant.role < endpoint.min_role:
        raise ApiError(
            403,
            "forbidden",
            f"this needs the {endpoint.min_role.label} role; you have {tenant.role.label}",
        )
