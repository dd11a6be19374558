"""Members of the current org: who they are and their role. Viewers read; admins add, change
and remove; anyone may leave (POST /api/v1/org/leave).

The role ladder is enforced here, against the roles as they are *now*: every change first
locks the org's owner memberships (``SELECT ... FOR UPDATE``, in user order so two changes
never deadlock) and re-reads the caller's own membership under that lock. So two owners
demoting each other at the same moment are serialized, and the second sees one owner left
and is refused: the org can never lose its last owner. Rules:

- no one grants a role above their own (an admin cannot make an owner);
- no one changes or removes someone whose role is above their own (an admin cannot touch
  an owner);
- the last owner can be neither demoted nor removed (409); ownership moves by promoting
  another member to owner first.

Users have no row-level security, so every query joins through the org's memberships: a
user of another org answers exactly like a missing one.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, StringConstraints

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.errors import ApiError
from codity.web.fields import CONTROL, Strict
from codity.web.lookups import one_or_404, path_id

__all__ = ["ROUTES"]

Email = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        to_lower=True,
        min_length=3,
        max_length=254,
        pattern=rf"^[^@\s{CONTROL}]+@[^@\s{CONTROL}]+$",
    ),
]
RoleName = Literal["owner", "admin", "member", "viewer"]


class MemberAdd(Strict):
    email: Email
    role: RoleName


class MemberUpdate(Strict):
    role: RoleName


class Member(BaseModel):
    user_id: int
    email: str
    display_name: str
    role: str
    joined_at: dt.datetime


_MEMBER = """
SELECT u.id AS user_id, u.email, u.display_name, m.role::text AS role, m.created_at AS joined_at
FROM codity.memberships m
JOIN codity.users u ON u.id = m.user_id
WHERE m.org_id = %s
"""


async def _member(call: Call[Any, Any], user_id: int) -> dict[str, Any]:
    return await one_or_404(call, _MEMBER + " AND m.user_id = %s", [call.org_id, user_id], "member")


_LOCK_OWNERS = """
SELECT user_id FROM codity.memberships
WHERE org_id = %s AND role = 'owner'
ORDER BY user_id
FOR UPDATE
"""

_ROLE_OF = "SELECT role::text AS role FROM codity.memberships WHERE org_id = %s AND user_id = %s"


async def _lock_owners(call: Call[Any, Any]) -> tuple[int, Role]:
    """Lock the org's owners; return how many there are and the caller's current role."""
    cur = await call.conn.execute(_LOCK_OWNERS, [call.org_id])
    owners = len(await cur.fetchall())
    cur = await call.conn.execute(_ROLE_OF, [call.org_id, call.user_id])
    row = await cur.fetchone()
    if row is None:
        raise ApiError(403, "forbidden", "you are no longer a member of this org")
    return owners, Role.parse(row["role"])


def _may_grant(caller: Role, role: Role) -> None:
    if role > caller:
        raise ApiError(
            403, "forbidden", f"you cannot grant {role.label}: it is above your own role"
        )


def _may_touch(caller: Role, target: Role) -> None:
    if target > caller:
        raise ApiError(
            403, "forbidden", f"you cannot change a {target.label}: the role is above your own"
        )


def _last_owner() -> ApiError:
    return ApiError(
        409,
        "last_owner",
        "the org's last owner cannot leave or be demoted; make another member owner first",
    )


async def list_members(call: Call[None, None]) -> list[dict[str, Any]]:
    cur = await call.conn.execute(_MEMBER + " ORDER BY u.email", [call.org_id])
    return [dict(r) for r in await cur.fetchall()]


async def add_member(call: Call[MemberAdd, None]) -> dict[str, Any]:
    _may_grant(call.role, Role.parse(call.body.role))
    user = await one_or_404(
        call, "SELECT id FROM codity.users WHERE email = %s", [call.body.email], "user"
    )
    cur = await call.conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role)"
        " VALUES (%s, %s, %s::codity.member_role)"
        " ON CONFLICT (org_id, user_id) DO NOTHING RETURNING user_id",
        [call.org_id, user["id"], call.body.role],
    )
    if await cur.fetchone() is None:
        raise ApiError(409, "conflict", "that user is already a member of this org")
    return await _member(call, user["id"])


async def update_member(call: Call[MemberUpdate, None]) -> dict[str, Any]:
    user_id = path_id(call, "user_id", "member")
    owners, caller = await _lock_owners(call)
    target = await _member(call, user_id)
    role = Role.parse(call.body.role)
    current = Role.parse(target["role"])
    _may_grant(caller, role)
    _may_touch(caller, current)
    if current is Role.OWNER and role is not Role.OWNER and owners <= 1:
        raise _last_owner()
    await call.conn.execute(
        "UPDATE codity.memberships SET role = %s::codity.member_role"
        " WHERE org_id = %s AND user_id = %s",
        [call.body.role, call.org_id, user_id],
    )
    return await _member(call, user_id)


async def _remove(call: Call[Any, Any], user_id: int) -> None:
    """Take ``user_id`` out of the org, with the owner rows locked first.

    The target is looked up before anything else is judged, so an id of another org (or
    none) answers 404 exactly as a missing one does. The removed user's refresh tokens for
    this org are revoked as well; their access tokens stop working at once anyway, since
    the guard re-reads the membership on every request."""
    owners, caller = await _lock_owners(call)
    target = await _member(call, user_id)
    current = Role.parse(target["role"])
    if user_id != call.user_id:
        _may_touch(caller, current)
    if current is Role.OWNER and owners <= 1:
        raise _last_owner()
    await call.conn.execute(
        "DELETE FROM codity.memberships WHERE org_id = %s AND user_id = %s",
        [call.org_id, user_id],
    )
    await call.conn.execute(
        "UPDATE codity.refresh_tokens SET revoked_at = now()"
        " WHERE user_id = %s AND org_id = %s AND revoked_at IS NULL",
        [user_id, call.org_id],
    )


async def remove_member(call: Call[None, None]) -> None:
    """An admin removes a member (themself included)."""
    await _remove(call, path_id(call, "user_id", "member"))


async def leave_org(call: Call[None, None]) -> None:
    """Any member leaves the org — unless they are its last owner."""
    await _remove(call, call.user_id)


_ONE = "/api/v1/members/{user_id:int}"

ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/members",
        Scope.PROJECT,
        list_members,
        "List the current org's members and their roles",
        "members",
        min_role=Role.VIEWER,
        response=Member,
        many=True,
        api_keys=False,
    ),
    Endpoint(
        "POST",
        "/api/v1/members",
        Scope.PROJECT,
        add_member,
        "Add an existing user to the org with a role",
        "members",
        min_role=Role.ADMIN,
        body=MemberAdd,
        response=Member,
        status=201,
        api_keys=False,
        errors=(404, 409),
        example={"email": "someone@example.com", "role": "member"},
    ),
    Endpoint(
        "PATCH",
        _ONE,
        Scope.PROJECT,
        update_member,
        "Change a member's role",
        "members",
        min_role=Role.ADMIN,
        body=MemberUpdate,
        response=Member,
        api_keys=False,
        errors=(404, 409),
        example={"role": "viewer"},
    ),
    Endpoint(
        "DELETE",
        _ONE,
        Scope.PROJECT,
        remove_member,
        "Remove a member from the org",
        "members",
        min_role=Role.ADMIN,
        status=204,
        api_keys=False,
        errors=(404, 409),
    ),
    Endpoint(
        "POST",
        "/api/v1/org/leave",
        Scope.PROJECT,
        leave_org,
        "Leave the current org (not as its last owner)",
        "members",
        min_role=Role.VIEWER,
        status=204,
        api_keys=False,
        errors=(409,),
    ),
]
