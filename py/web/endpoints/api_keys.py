"""API keys of the current project: list, create (the key is shown once), revoke. Admins only,
and only signed-in users: a key never manages keys.

A key is 32 bytes from the CSPRNG (``codity.web.keys``); the database keeps its SHA-256 and
a display prefix, never the key, and no response but the creating one ever carries it.
A key's role is admin, member or viewer (never owner: the table refuses it too) and never
above its creator's. Revoking stamps ``revoked_at``; ``codity.api_key_identity`` ignores
revoked keys, so the very next request with it is refused. api_keys is under row-level
security keyed on the project, and every query also filters by the project explicitly.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, StringConstraints

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.errors import ApiError
from codity.web.fields import PrintableName, Strict
from codity.web.keys import display_prefix, hash_key, new_key
from codity.web.lookups import one_or_404, path_id

__all__ = ["ROUTES"]

KeyName = Annotated[PrintableName, StringConstraints(max_length=100)]


class ApiKeyCreate(Strict):
    name: KeyName
    role: Literal["admin", "member", "viewer"]


class ApiKey(BaseModel):
    id: int
    name: str
    prefix: str
    role: str
    created_by: int | None
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


class NewApiKey(ApiKey):
    key: str
    """The whole key: shown in this response only, never again."""


_COLUMNS = "id, name, prefix, role::text AS role, created_by, created_at, last_used_at, revoked_at"
# The same, as an INSERT returns them: the role as the enum itself (psycopg reads an enum it
# has no adapter for as its text), since Citus allows no cast that is not IMMUTABLE in a
# RETURNING clause of a reference table's insert.
_RETURNED = "id, name, prefix, role, created_by, created_at, last_used_at, revoked_at"


async def list_keys(call: Call[None, None]) -> list[dict[str, Any]]:
    cur = await call.conn.execute(
        f"SELECT {_COLUMNS} FROM codity.api_keys WHERE project_id = %s ORDER BY id",
        [call.project_id],
    )
    return [dict(r) for r in await cur.fetchall()]


async def create_key(call: Call[ApiKeyCreate, None]) -> dict[str, Any]:
    role = Role.parse(call.body.role)
    if role > call.role:
        raise ApiError(
            403, "forbidden", f"a key cannot have the {role.label} role: it is above your own"
        )
    key = new_key()
    cur = await call.conn.execute(
        "INSERT INTO codity.api_keys (project_id, name, prefix, key_hash, role, created_by)"
        " VALUES (%s, %s, %s, %s, %s::codity.member_role, %s)"
        f" RETURNING {_RETURNED}",
        [
            call.project_id,
            call.body.name,
            display_prefix(key),
            hash_key(key),
            call.body.role,
            call.user_id,
        ],
    )
    row = await cur.fetchone()
    assert row is not None
    return {**row, "key": key}


async def revoke_key(call: Call[None, None]) -> None:
    """Idempotent: revoking a revoked key keeps its first revocation time. The update
    leaves a revoked key out rather than keep its time with ``coalesce(revoked_at, now())``
    (Citus allows no ``now()`` inside COALESCE in an update of a reference table); a key
    it did not change must then exist, revoked, or the answer is 404."""
    key = [call.project_id, path_id(call, "key_id", "API key")]
    cur = await call.conn.execute(
        "UPDATE codity.api_keys SET revoked_at = now()"
        " WHERE project_id = %s AND id = %s AND revoked_at IS NULL RETURNING id",
        key,
    )
    if await cur.fetchone() is None:
        await one_or_404(
            call, "SELECT 1 FROM codity.api_keys WHERE project_id = %s AND id = %s", key, "API key"
        )


ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/api-keys",
        Scope.PROJECT,
        list_keys,
        "List the current project's API keys (never the keys themselves)",
        "api-keys",
        min_role=Role.ADMIN,
        response=ApiKey,
        many=True,
        api_keys=False,
    ),
    Endpoint(
        "POST",
        "/api/v1/api-keys",
        Scope.PROJECT,
        create_key,
        "Create an API key for the current project; the key is shown only in this response",
        "api-keys",
        min_role=Role.ADMIN,
        body=ApiKeyCreate,
        response=NewApiKey,
        status=201,
        api_keys=False,
        example={"name": "billing-worker", "role": "member"},
    ),
    Endpoint(
        "DELETE",
        "/api/v1/api-keys/{key_id:int}",
        Scope.PROJECT,
        revoke_key,
        "Revoke an API key; it stops working on the next request",
        "api-keys",
        min_role=Role.ADMIN,
        status=204,
        api_keys=False,
        errors=(404,),
    ),
]
