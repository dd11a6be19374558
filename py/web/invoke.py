"""Running one API endpoint for a principal: the steps every call of a handler goes through.

The API's routes (``codity.web.mount``) and the dashboard's pages (``codity.web.dashboard``)
both call handlers through :func:`invoke`, so a page reads and acts exactly as the API does:
the request's one transaction as ``codity_app``, **the guard** for every project-scoped
endpoint, the role check, the enqueue rate limit, then the handler (and, when it answers
with a :class:`~codity.web.endpoint.ReadBack`, its read in a second transaction once the
first has committed, for the same caller and tenant). There is no second
path to the tables. What differs is only how the principal was authenticated (a bearer
credential, or the dashboard's session cookie) and how the result is rendered (an
envelope, or a template).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel
from starlette.requests import Request

from codity.web.access import Limit, Scope
from codity.web.call import Call, Principal, Tenant
from codity.web.database import transaction
from codity.web.endpoint import Endpoint, ReadBack
from codity.web.guard import check_role, guard
from codity.web.ratelimit import charge
from codity.web.settings import WebSettings

__all__ = ["Invocation", "invoke"]


@runtime_checkable
class Costed(Protocol):
    def enqueue_cost(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Invocation:
    """What a call is made with, besides the endpoint and the principal."""

    request: Request
    request_id: str
    settings: WebSettings
    pool: AsyncConnectionPool[Any]
    client_ip: str
    path: dict[str, Any]
    body: BaseModel | None = None
    query: BaseModel | None = None


async def invoke(endpoint: Endpoint, principal: Principal | None, how: Invocation) -> Any:
    """Run ``endpoint``'s handler for ``principal``; returns what the handler returned.

    Raises ApiError (guard, role, limits), CodityError or psycopg errors, for the caller to
    render its own way.
    """

    def make_call(conn: AsyncConnection[Any] | None, tenant: Tenant | None) -> Call[Any, Any]:
        return Call(
            request=how.request,
            request_id=how.request_id,
            settings=how.settings,
            pool=how.pool,
            connection=conn,
            principal=principal,
            tenant=tenant,
            body=how.body,
            query=how.query,
            path=how.path,
            client_ip=how.client_ip,
        )

    if not endpoint.uses_db:
        return await endpoint.handler(make_call(None, None))
    user_id = principal.user_id if principal else None
    async with transaction(how.pool, user_id=user_id) as conn:
        tenant: Tenant | None = None
        if endpoint.scope is Scope.PROJECT:
            assert principal is not None
            tenant = await guard(conn, principal)
        if principal is not None:
            check_role(endpoint, principal, tenant)
        if principal is not None and principal.api_key_id is not None and endpoint.method == "GET":
            # Reads by API keys have a budget (a key can be scripted in a loop; a person at
            # the dashboard cannot ask that fast). In the read's transaction: a read that
            # fails is not counted.
            await charge(
                conn,
                f"read:key:{principal.api_key_id}",
                limit=how.settings.key_reads_per_minute,
                window_seconds=60,
            )
        if endpoint.limit is Limit.ENQUEUE and tenant is not None:
            cost = how.body.enqueue_cost() if isinstance(how.body, Costed) else 1
            await charge(
                conn,
                f"enqueue:project:{tenant.project_id}",
                limit=how.settings.enqueues_per_minute,
                window_seconds=60,
                cost=cost,
            )
        result = await endpoint.handler(make_call(conn, tenant))
    if isinstance(result, ReadBack):
        async with transaction(
            how.pool,
            user_id=user_id,
            org_id=tenant.org_id if tenant else None,
            project_id=tenant.project_id if tenant else None,
        ) as conn:
            result = await result.read(make_call(conn, tenant))
    return result
