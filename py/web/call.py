"""What a handler receives: the request, who is calling, for which tenant, and a connection.

The connection is inside the request's one transaction, already running as ``codity_app``
with the tenant's settings applied (so row-level security is in force); the mount commits
it when the handler returns and rolls it back when the handler raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel
from starlette.requests import Request

from codity.web.access import Role
from codity.web.errors import ApiError
from codity.web.settings import WebSettings

__all__ = ["Call", "Principal", "Tenant"]

B = TypeVar("B", bound=BaseModel | None)
Q = TypeVar("Q", bound=BaseModel | None)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who presented the credential. ``org_id``/``project_id`` are what the credential names."""

    kind: str
    """"user" (access token) or "api_key"."""
    user_id: int | None
    api_key_id: int | None
    org_id: int | None
    project_id: int | None
    key_role: Role | None = None
    """For an API key, the role it was issued with."""


@dataclass(frozen=True, slots=True)
class Tenant:
    """What the guard established: the org and project of this request, and the caller's role."""

    org_id: int
    project_id: int
    role: Role


@dataclass(slots=True)
class Call(Generic[B, Q]):
    """``Call[Body, Query]``: a handler names its body and query models and gets them typed
    (``None`` where the route takes none), so it never has to check what it was given."""

    request: Request
    request_id: str
    settings: WebSettings
    pool: AsyncConnectionPool[Any]
    connection: AsyncConnection[Any] | None
    principal: Principal | None
    tenant: Tenant | None
    body: B
    query: Q
    path: dict[str, Any]
    client_ip: str

    @property
    def conn(self) -> AsyncConnection[Any]:
        """The request's transaction (routes with ``uses_db=False`` have none)."""
        if self.connection is None:
            raise RuntimeError("this route opens no transaction")
        return self.connection

    def _guarded(self) -> Tenant:
        if self.tenant is None:
            raise RuntimeError("no tenant: this route is not project-scoped")
        return self.tenant

    @property
    def project_id(self) -> int:
        """The guarded project. Only project-scoped routes have one."""
        return self._guarded().project_id

    @property
    def org_id(self) -> int:
        """The guarded project's org: no route takes an org id from the request."""
        return self._guarded().org_id

    @property
    def role(self) -> Role:
        """The caller's role in the guarded org, as the guard read it for this request."""
        return self._guarded().role

    @property
    def user_id(self) -> int:
        if self.principal is None or self.principal.user_id is None:
            raise ApiError(403, "forbidden", "this action needs a signed-in user, not an API key")
        return self.principal.user_id
