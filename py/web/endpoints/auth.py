"""Sign-up, sign-in and sessions: register, login, refresh, logout, me, switch.

A session is an access token (15 minutes, stateless, checked against the membership on
every project-scoped request) plus a refresh token (7 days, rotated on each use, see
``codity.web.refresh``). Both name the org and project the session acts in, chosen here
from the user's own memberships, never taken on trust: a project the user cannot reach
answers exactly like one that does not exist. Wrong email and wrong password answer alike,
in about the same time (``codity.web.passwords``).

Rate limits (``codity.web.ratelimit``): login and refresh count *failures*. Each reserves
its attempt (per client IP; a login also per account across IPs) in a committed
transaction of its own before anything is checked, and gives it back when it ends in a
session, so signing in often costs nothing, a refused attempt does no argon2 work, and
failures stay exact under concurrency. Register is charged by the mount (``Limit.AUTH``),
every attempt counting.
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Annotated, Any, Literal

from psycopg import AsyncConnection
from pydantic import AfterValidator, BaseModel, Field

from codity.web.access import Limit, Scope
from codity.web.call import Call, Principal
from codity.web.database import set_tenant, transaction
from codity.web.endpoint import Endpoint, Reply
from codity.web.errors import ApiError, not_found
from codity.web.fields import CONTROL, MAX_ID, Strict
from codity.web.passwords import (
    MAX_PASSWORD_LENGTH,
    MIN_PASSWORD_LENGTH,
    hash_password_async,
    needs_rehash,
    verify_password_async,
)
from codity.web.ratelimit import reserve_sign_in
from codity.web.refresh import (
    act_as_user,
    issue_refresh,
    revoke_family_of,
    revoke_user,
    rotate,
)
from codity.web.settings import WebSettings
from codity.web.tokens import issue_access

__all__ = ["ROUTES"]

log = logging.getLogger(__name__)

# Deliberately simple (no email-validator dependency): printable ASCII without spaces, one @,
# a dot in the domain. ASCII keeps Python's lower() and PostgreSQL's lower() in agreement.
_EMAIL = r"^[!-?A-~]{1,64}@[!-?A-~]+\.[!-?A-~]+$"
_PRINTABLE = rf"^[^{CONTROL}]*$"

Email = Annotated[str, Field(max_length=254, pattern=_EMAIL), AfterValidator(lambda v: v.lower())]
NewPassword = Annotated[str, Field(min_length=MIN_PASSWORD_LENGTH, max_length=MAX_PASSWORD_LENGTH)]
AnyPassword = Annotated[str, Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)]
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=_PRINTABLE)]
RefreshToken = Annotated[str, Field(min_length=16, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
ProjectId = Annotated[int, Field(ge=1, le=MAX_ID)]


class RegisterBody(Strict):
    email: Email
    password: NewPassword
    display_name: Annotated[str, Field(max_length=200, pattern=_PRINTABLE)] = ""
    org_name: Name


class LoginBody(Strict):
    email: Email
    password: AnyPassword
    project_id: ProjectId | None = None


class RefreshBody(Strict):
    refresh_token: RefreshToken


class LogoutBody(Strict):
    refresh_token: RefreshToken | None = None
    everywhere: bool = False
    """Revoke every refresh token of the user, not only this session's."""


class SwitchBody(Strict):
    project_id: ProjectId


class Session(BaseModel):
    access_token: str
    token_type: Literal["Bearer"] = "Bearer"
    expires_in: int
    refresh_token: str
    refresh_expires_in: int
    user_id: int
    org_id: int | None
    project_id: int | None


class UserInfo(BaseModel):
    id: int
    email: str
    display_name: str


class MembershipInfo(BaseModel):
    org_id: int
    slug: str
    name: str
    role: str


class ProjectChoice(BaseModel):
    id: int
    slug: str
    name: str
    org_id: int
    org_name: str


class Me(BaseModel):
    user: UserInfo
    org_id: int | None
    project_id: int | None
    memberships: list[MembershipInfo]
    projects: list[ProjectChoice]
    """Every project of every org the user belongs to: where ``/auth/switch`` may go."""


def _invalid_credentials() -> ApiError:
    return ApiError(401, "invalid_credentials", "the email or password is wrong")


async def _session(
    conn: AsyncConnection[Any],
    settings: WebSettings,
    *,
    user_id: int,
    org_id: int | None,
    project_id: int | None,
) -> dict[str, Any]:
    """A new sign-in: an access token and the first refresh token of a new family."""
    refresh = await issue_refresh(
        conn, settings, user_id=user_id, org_id=org_id, project_id=project_id
    )
    access, ttl = issue_access(settings, user_id=user_id, org_id=org_id, project_id=project_id)
    return {
        "access_token": access,
        "expires_in": ttl,
        "refresh_token": refresh,
        "refresh_expires_in": settings.refresh_ttl_seconds,
        "user_id": user_id,
        "org_id": org_id,
        "project_id": project_id,
    }


async def _user_orgs(conn: AsyncConnection[Any], user_id: int) -> list[int]:
    cur = await conn.execute(
        "SELECT org_id FROM codity.memberships WHERE user_id = %s ORDER BY created_at, org_id",
        [user_id],
    )
    return [row["org_id"] for row in await cur.fetchall()]


async def _first_project(conn: AsyncConnection[Any], user_id: int) -> tuple[int | None, int | None]:
    """The user's oldest membership's org and that org's oldest project (either may be None)."""
    orgs = await _user_orgs(conn, user_id)
    if not orgs:
        return None, None
    await set_tenant(conn, org_id=orgs[0], project_id=None)
    cur = await conn.execute(
        "SELECT id FROM codity.projects WHERE org_id = %s ORDER BY created_at, id LIMIT 1",
        [orgs[0]],
    )
    row = await cur.fetchone()
    await set_tenant(conn, org_id=None, project_id=None)
    return orgs[0], None if row is None else row["id"]


async def _member_project(conn: AsyncConnection[Any], user_id: int, project_id: int) -> int:
    """The org of ``project_id`` when the user belongs to it; 404 otherwise, the same answer
    for another tenant's project as for one that does not exist. Each org is looked at under
    its own row-level security setting, so no query ever sees a foreign org's projects."""
    for org_id in await _user_orgs(conn, user_id):
        await set_tenant(conn, org_id=org_id, project_id=None)
        cur = await conn.execute(
            "SELECT 1 FROM codity.projects WHERE org_id = %s AND id = %s", [org_id, project_id]
        )
        found = await cur.fetchone() is not None
        await set_tenant(conn, org_id=None, project_id=None)
        if found:
            return org_id
    raise not_found("project")


def _slug(name: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:48].strip("-")
    return base or "org"


async def _create_org(conn: AsyncConnection[Any], name: str) -> int:
    """A new org named ``name`` with a slug derived from it; a random suffix when taken."""
    base = _slug(name)
    slug = base
    for _ in range(8):
        cur = await conn.execute(
            "INSERT INTO codity.orgs (slug, name) VALUES (%s, %s)"
            " ON CONFLICT (slug) DO NOTHING RETURNING id",
            [slug, name],
        )
        row = await cur.fetchone()
        if row is not None:
            return int(row["id"])
        slug = f"{base}-{secrets.token_hex(3)}"
    raise ApiError(409, "conflict", "could not find a free slug for that org name")


async def register(call: Call[RegisterBody, None]) -> Reply:
    body = call.body
    password_hash = await hash_password_async(body.password)
    cur = await call.conn.execute(
        "INSERT INTO codity.users (email, display_name, password_hash) VALUES (%s, %s, %s)"
        " ON CONFLICT (email) DO NOTHING RETURNING id",
        [body.email, body.display_name, password_hash],
    )
    row = await cur.fetchone()
    if row is None:
        raise ApiError(409, "conflict", "an account with this email already exists")
    user_id = int(row["id"])
    await act_as_user(call.conn, user_id)
    org_id = await _create_org(call.conn, body.org_name)
    await set_tenant(call.conn, org_id=org_id, project_id=None)
    cur = await call.conn.execute(
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'default', 'Default')"
        " RETURNING id",
        [org_id],
    )
    project = await cur.fetchone()
    assert project is not None
    await call.conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role) VALUES (%s, %s, 'owner')",
        [org_id, user_id],
    )
    await set_tenant(call.conn, org_id=None, project_id=None)
    log.info("user registered", extra={"user_id": user_id, "org_id": org_id})
    session = await _session(
        call.conn, call.settings, user_id=user_id, org_id=org_id, project_id=project["id"]
    )
    return Reply(session, status=201)


async def login(call: Call[LoginBody, None]) -> dict[str, Any]:
    """Runs without the request transaction (``uses_db=False``): the attempt is reserved
    first, in a transaction that commits before the password is checked (a failure must
    count, and a refused attempt must not reach argon2); the check and the session run in a
    second one, which gives the reservation back as its last step, so only an attempt that
    ends in a session is not counted."""
    body = call.body
    reservation = await reserve_sign_in(
        call.pool, call.settings, ip=call.client_ip, account=body.email
    )
    async with transaction(call.pool) as conn:
        cur = await conn.execute(
            "SELECT id, password_hash FROM codity.users WHERE email = %s", [body.email]
        )
        user = await cur.fetchone()
        stored = None if user is None else str(user["password_hash"])
        matched = await verify_password_async(stored, body.password)
        if not matched or user is None or stored is None:
            log.info("login refused", extra={"client_ip": call.client_ip})
            raise _invalid_credentials()
        user_id = int(user["id"])
        if needs_rehash(stored):
            await conn.execute(
                "UPDATE codity.users SET password_hash = %s WHERE id = %s AND password_hash = %s",
                [await hash_password_async(body.password), user_id, stored],
            )
            log.info("password rehashed with current parameters", extra={"user_id": user_id})
        await act_as_user(conn, user_id)
        project_id: int | None = body.project_id
        if project_id is None:
            org_id, project_id = await _first_project(conn, user_id)
        else:
            org_id = await _member_project(conn, user_id, project_id)
        session = await _session(
            conn, call.settings, user_id=user_id, org_id=org_id, project_id=project_id
        )
        await reservation.refund(conn)
    log.info("login", extra={"user_id": user_id, "org_id": org_id, "project_id": project_id})
    return session


async def refresh(call: Call[RefreshBody, None]) -> dict[str, Any]:
    """Runs without the request transaction (``uses_db=False``): the attempt is reserved
    against the client IP's failed sign-ins first; ``rotate`` opens its own transaction,
    which commits a detected reuse's revocation even though the answer is a 401; only a
    rotation that succeeded gives the reservation back."""
    reservation = await reserve_sign_in(call.pool, call.settings, ip=call.client_ip)
    rotated = await rotate(call.pool, call.settings, call.body.refresh_token)
    async with transaction(call.pool) as conn:
        await reservation.refund(conn)
    access, ttl = issue_access(
        call.settings,
        user_id=rotated.user_id,
        org_id=rotated.org_id,
        project_id=rotated.project_id,
    )
    return {
        "access_token": access,
        "expires_in": ttl,
        "refresh_token": rotated.refresh_token,
        "refresh_expires_in": call.settings.refresh_ttl_seconds,
        "user_id": rotated.user_id,
        "org_id": rotated.org_id,
        "project_id": rotated.project_id,
    }


async def logout(call: Call[LogoutBody, None]) -> None:
    if call.body.everywhere:
        await revoke_user(call.conn, user_id=call.user_id)
    elif call.body.refresh_token is not None:
        await revoke_family_of(call.conn, call.body.refresh_token, user_id=call.user_id)


_MEMBERSHIPS = """
SELECT m.org_id, o.slug, o.name, m.role::text AS role
FROM codity.memberships m
JOIN codity.orgs o ON o.id = m.org_id
WHERE m.user_id = %s
ORDER BY m.created_at, m.org_id
"""


async def _user_projects(
    conn: AsyncConnection[Any], memberships: list[dict[str, Any]], principal: Principal
) -> list[dict[str, Any]]:
    """The projects of each of the user's orgs, each org read under its own row-level
    security setting (as ``_member_project`` does), then the request's tenant put back."""
    projects: list[dict[str, Any]] = []
    try:
        for membership in memberships:
            await set_tenant(conn, org_id=membership["org_id"], project_id=None)
            cur = await conn.execute(
                "SELECT id, slug, name, org_id FROM codity.projects WHERE org_id = %s"
                " ORDER BY created_at, id LIMIT 100",
                [membership["org_id"]],
            )
            projects += [{**row, "org_name": membership["name"]} for row in await cur.fetchall()]
    finally:
        await set_tenant(conn, org_id=principal.org_id, project_id=principal.project_id)
    return projects


async def me(call: Call[None, None]) -> dict[str, Any]:
    user_id = call.user_id
    cur = await call.conn.execute(
        "SELECT id, email, display_name FROM codity.users WHERE id = %s", [user_id]
    )
    user = await cur.fetchone()
    if user is None:
        raise ApiError(401, "unauthorized", "this account no longer exists")
    cur = await call.conn.execute(_MEMBERSHIPS, [user_id])
    memberships = [dict(row) for row in await cur.fetchall()]
    principal = call.principal
    assert principal is not None
    return {
        "user": dict(user),
        "org_id": principal.org_id,
        "project_id": principal.project_id,
        "memberships": memberships,
        "projects": await _user_projects(call.conn, memberships, principal),
    }


async def switch(call: Call[SwitchBody, None]) -> dict[str, Any]:
    """Act in another project: a new session (new refresh family) for it; the old session
    keeps its own project until it expires or is logged out."""
    user_id = call.user_id
    org_id = await _member_project(call.conn, user_id, call.body.project_id)
    return await _session(
        call.conn, call.settings, user_id=user_id, org_id=org_id, project_id=call.body.project_id
    )


_AUTH = "/api/v1/auth"

ROUTES = [
    Endpoint(
        "POST",
        _AUTH + "/register",
        Scope.PUBLIC,
        register,
        "Create an account, its org and a default project; signs in",
        "auth",
        body=RegisterBody,
        response=Session,
        status=201,
        limit=Limit.AUTH,
        errors=(409,),
        example={
            "email": "ada@example.com",
            "password": "correct-horse-battery-staple",
            "display_name": "Ada",
            "org_name": "Analytical Engines",
        },
    ),
    Endpoint(
        "POST",
        _AUTH + "/login",
        Scope.PUBLIC,
        login,
        "Sign in with email and password, optionally into one project",
        "auth",
        body=LoginBody,
        response=Session,
        errors=(401, 404, 429, 503),
        example={"email": "operator@codity.test", "password": "correct-horse-battery-staple"},
        limit=Limit.SIGN_IN,
        uses_db=False,
    ),
    Endpoint(
        "POST",
        _AUTH + "/refresh",
        Scope.PUBLIC,
        refresh,
        "Exchange a refresh token for new tokens (the old one stops working)",
        "auth",
        body=RefreshBody,
        response=Session,
        errors=(401, 429, 503),
        example={"refresh_token": "copy-the-refresh_token-from-login-here"},
        limit=Limit.SIGN_IN,
        uses_db=False,
    ),
    Endpoint(
        "POST",
        _AUTH + "/logout",
        Scope.AUTHENTICATED,
        logout,
        "Sign out: revoke this session's refresh token family (or all of them)",
        "auth",
        body=LogoutBody,
        status=204,
        example={"refresh_token": "copy-the-refresh_token-from-login-here"},
    ),
    Endpoint(
        "GET",
        _AUTH + "/me",
        Scope.AUTHENTICATED,
        me,
        "The signed-in user, the session's org and project, the user's memberships and"
        " every project they may switch to",
        "auth",
        response=Me,
    ),
    Endpoint(
        "POST",
        _AUTH + "/switch",
        Scope.AUTHENTICATED,
        switch,
        "Act in another project of one of your orgs: new tokens for it",
        "auth",
        body=SwitchBody,
        response=Session,
        errors=(404,),
        example={"project_id": 1},
    ),
]
