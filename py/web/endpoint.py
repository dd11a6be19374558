"""One route of the API, as data.

Every route the app serves is an :class:`Endpoint` in ``codity.web.routes.ALL_ROUTES``.
``codity.web.mount`` turns that list into Starlette routes (attaching authentication, the
tenant guard and the role check by ``scope``), ``codity.web.openapi`` turns the same list
into the OpenAPI document, and the isolation tests walk it. Nothing else creates a route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from codity.web.access import Limit, Role, Scope
from codity.web.call import Call

__all__ = ["Endpoint", "Handler", "ReadBack", "Reply"]


@dataclass(frozen=True, slots=True)
class Reply:
    """What a handler returns when it needs more than the default status and plain data."""

    data: Any
    status: int = 200
    meta: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadBack:
    """What a handler returns when its answer must be read after its write commits: ``read``
    runs in a transaction of its own, for the same caller and tenant, and what it returns
    is the answer (as a handler's would be).

    For handlers that write through a SECURITY DEFINER function and answer with rows of the
    job tables (the job as it is now). On a Citus cluster the function writes the shards over
    connections as its owner, and Citus refuses to read them as codity_app later in the same
    transaction (SQLSTATE 25001, "placements that were modified in this transaction by a
    different user"): the read must come after the commit. On one server the answer is the
    same; the read is a second, short transaction.
    """

    read: Callable[[Call[Any, Any]], Awaitable[Any]]


Handler = Callable[[Call[Any, Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    """Full path with Starlette converters, e.g. ``/api/v1/jobs/{job_id:int}``."""
    scope: Scope
    handler: Handler
    summary: str
    tag: str
    min_role: Role | None = None
    """Project scope only: the lowest membership role that may call it."""
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    """Schema of ``data`` in the success envelope (a list of it when ``many``)."""
    many: bool = False
    status: int = 200
    api_keys: bool = True
    """Project scope only: whether an API key may call it (keys never manage keys or members)."""
    limit: Limit | None = None
    errors: tuple[int, ...] = ()
    """Error statuses the route itself can answer, for the OpenAPI document."""
    example: dict[str, Any] | None = None
    """A valid request body, for the documentation and the isolation tests."""
    in_schema: bool = True
    raw: bool = False
    """The handler returns a Starlette Response itself (docs pages, openapi.json)."""
    media_type: str | None = None
    """A raw route's success body, for the OpenAPI document (text, not the JSON envelope)."""
    uses_db: bool = True
    """False: no transaction is opened (liveness, docs), so the route answers without a database."""

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"
