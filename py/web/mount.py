"""Mounting the route list: the only way an API route comes to exist.

For each :class:`Endpoint` the mount builds one Starlette route whose pipeline is, in
order: authenticate (unless public) → parse query and body → charge auth rate limits →
:func:`codity.web.invoke.invoke` (the request's transaction as codity_app → **the guard**,
every project-scoped entry, no exceptions → role check → enqueue rate limits → the
handler → commit) → the envelope. Routes made this way carry their entry as
``__codity_endpoint__``, which is how the drift test proves that nothing was added to the
app behind the list's back.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from codity.db.errors import CodityError
from codity.web.access import Limit, Scope
from codity.web.call import Principal
from codity.web.database import transaction
from codity.web.endpoint import Endpoint, Reply
from codity.web.envelope import error_response, render_data, success_response
from codity.web.errors import ApiError, from_codity_error, from_database_error
from codity.web.guard import authenticate
from codity.web.inputs import parse_body, parse_query
from codity.web.invoke import Invocation, invoke
from codity.web.ratelimit import charge
from codity.web.settings import WebSettings

__all__ = ["ENDPOINT_ATTRIBUTE", "client_ip", "mount", "request_id_of"]

log = logging.getLogger(__name__)

ENDPOINT_ATTRIBUTE = "__codity_endpoint__"


def request_id_of(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", "-"))


def client_ip(request: Request, settings: WebSettings) -> str:
    """The socket peer, or, behind a trusted proxy, the nearest untrusted X-Forwarded-For hop."""
    peer = request.client.host if request.client else "unknown"
    if not settings.trusted_proxies:
        return peer
    hops = [peer]
    forwarded = request.headers.get("x-forwarded-for", "")
    hops[:0] = [h.strip() for h in forwarded.split(",") if h.strip()]
    for hop in reversed(hops):
        try:
            address = ipaddress.ip_address(hop)
        except ValueError:
            return hop
        if not any(address in net for net in settings.trusted_proxies):
            return hop
    return hops[0]


async def _auth_limits(call_ip: str, body: Any, settings: WebSettings, pool: Any) -> None:
    buckets = [f"auth:ip:{call_ip}"]
    email = getattr(body, "email", None)
    if isinstance(email, str):
        buckets.append(f"auth:account:{email.strip().lower()}")
    async with transaction(pool) as conn:
        for bucket in buckets:
            await charge(
                conn,
                bucket,
                limit=settings.auth_attempts_per_window,
                window_seconds=settings.auth_window_seconds,
            )


def _pipeline(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request) -> Response:
        settings: WebSettings = request.app.state.settings
        pool = request.app.state.pool
        request_id = request_id_of(request)
        try:
            principal: Principal | None = None
            if endpoint.scope is not Scope.PUBLIC:
                principal = await authenticate(request, settings, pool)
            query = parse_query(endpoint.query, request)
            body = await parse_body(
                endpoint.body,
                request,
                max_bytes=settings.max_body_bytes,
                max_depth=settings.max_json_depth,
            )
            ip = client_ip(request, settings)
            if endpoint.limit is Limit.AUTH:
                await _auth_limits(ip, body, settings, pool)
            how = Invocation(
                request=request,
                request_id=request_id,
                settings=settings,
                pool=pool,
                client_ip=ip,
                path=dict(request.path_params),
                body=body,
                query=query,
            )
            result = await invoke(endpoint, principal, how)
            if endpoint.raw:
                assert isinstance(result, Response)
                return result
            reply = result if isinstance(result, Reply) else Reply(result, status=endpoint.status)
            data = render_data(endpoint.response, reply.data, many=endpoint.many)
            return success_response(
                data, status=reply.status, meta=reply.meta, headers=reply.headers
            )
        except ApiError as exc:
            return error_response(exc, request_id)
        except CodityError as exc:
            return error_response(from_codity_error(exc), request_id)
        except psycopg.Error as exc:
            mapped = from_database_error(exc)
            if mapped is None:
                raise
            return error_response(mapped, request_id)

    setattr(run, ENDPOINT_ATTRIBUTE, endpoint)
    run.__name__ = f"{endpoint.method.lower()}_{endpoint.path}"
    return run


def mount(entries: Sequence[Endpoint]) -> list[Route]:
    seen: set[tuple[str, str]] = set()
    routes = []
    for entry in entries:
        key = (entry.method, entry.path)
        if key in seen:
            raise ValueError(f"route listed twice: {entry.name}")
        seen.add(key)
        if entry.scope is Scope.PROJECT and entry.min_role is None:
            raise ValueError(f"project-scoped route without a minimum role: {entry.name}")
        routes.append(Route(entry.path, _pipeline(entry), methods=[entry.method], name=entry.name))
    return routes
