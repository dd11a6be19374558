"""A dashboard page as data, what its handler receives, and how pages become routes.

A page handler never touches the database itself: ``PageContext.api`` runs an endpoint of
the API's route list through :func:`codity.web.invoke.invoke` — the same guard, role check,
limits and handler as an API request — with the session's user as the principal, and gives
back the data the API would have put in its envelope. Screens are therefore exactly as
tenant-safe as the API (a foreign id answers like a missing one) and cannot show anything
the API does not serve.

``mount_pages`` is the only place a page becomes a route. Before a handler runs: the session
cookie is looked up (none: to the sign-in page); a POST must name this site in its
``Origin`` and carry the session's CSRF token. Errors become pages: the API's 404 is the
one not-found page, whatever was asked for.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import psycopg
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from codity.db.errors import CodityError
from codity.web.access import Role
from codity.web.endpoint import Endpoint, Reply
from codity.web.envelope import render_data
from codity.web.errors import ApiError, from_codity_error, from_database_error
from codity.web.invoke import Invocation, invoke
from codity.web.mount import client_ip, request_id_of
from codity.web.settings import WebSettings

from .render import render
from .session import Session, csrf_token, load_session, origin_allowed, tokens_match

__all__ = ["PAGE_ATTRIBUTE", "Page", "PageContext", "mount_pages"]

log = logging.getLogger(__name__)

PAGE_ATTRIBUTE = "__codity_page__"
_MAX_FORM_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Page:
    method: str
    path: str
    handler: Callable[[PageContext], Awaitable[Response]]
    title: str
    signed_in: bool = True
    """False: reachable without a session (sign-in)."""

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class PageContext:
    request: Request
    settings: WebSettings
    session: Session | None
    request_id: str
    form: dict[str, str] = field(default_factory=dict)
    role: Role | None = None
    me: dict[str, Any] | None = None

    @property
    def csrf(self) -> str:
        return csrf_token(self.settings, self.session.token) if self.session else ""

    @property
    def path_params(self) -> Mapping[str, Any]:
        return self.request.path_params

    async def api(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run the API endpoint ``method path`` (its template, e.g. ``/api/v1/jobs/{job_id:int}``)
        for the session's user; returns its data as the API would render it."""
        endpoint = _endpoints(self.request)[(method, path)]
        try:
            parsed_query = (
                endpoint.query.model_validate(dict(query or {})) if endpoint.query else None
            )
            parsed_body = endpoint.body.model_validate(dict(body or {})) if endpoint.body else None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ApiError(422, "invalid_input", f"{where}: {first.get('msg')}") from None
        how = Invocation(
            request=self.request,
            request_id=self.request_id,
            settings=self.settings,
            pool=self.request.app.state.pool,
            client_ip=client_ip(self.request, self.settings),
            path=dict(params or {}),
            body=parsed_body,
            query=parsed_query,
        )
        principal = self.session.principal if self.session else None
        result = await invoke(endpoint, principal, how)
        reply = result if isinstance(result, Reply) else Reply(result)
        data = render_data(endpoint.response, reply.data, many=endpoint.many)
        return {"data": data, "meta": reply.meta} if reply.meta else data

    def render(self, template: str, *, status: int = 200, **values: Any) -> HTMLResponse:
        page_values = {
            "session": self.session,
            "me": self.me,
            "role": self.role,
            "can": _Can(self.role),
            "csrf": self.csrf,
            "request": self.request,
            "request_id": self.request_id,
        }
        html = render(template, {**page_values, **values})
        return HTMLResponse(html, status_code=status)

    async def screen(self, template: str, *, status: int = 200, **values: Any) -> HTMLResponse:
        """A whole page: ``render`` plus what the frame needs (the project switcher)."""
        projects = []
        if self.role is not None:
            me = await self.api("GET", "/api/v1/auth/me")
            projects = me["projects"]
        return self.render(template, status=status, projects=projects, **values)

    def redirect(self, url: str) -> Response:
        """303 to ``url``; for htmx, an HX-Redirect the client follows."""
        if self.request.headers.get("hx-request"):
            return Response(status_code=204, headers={"HX-Redirect": url})
        return RedirectResponse(url, status_code=303)


@dataclass(frozen=True, slots=True)
class _Can:
    """What the signed-in member may do, for templates (the server checks again)."""

    role: Role | None

    def __call__(self, needed: str) -> bool:
        return self.role is not None and self.role >= Role.parse(needed)


def _endpoints(request: Request) -> dict[tuple[str, str], Endpoint]:
    found: dict[tuple[str, str], Endpoint] | None = getattr(
        request.app.state, "endpoint_index", None
    )
    if found is None:
        found = {(e.method, e.path): e for e in request.app.state.entries}
        request.app.state.endpoint_index = found
    return found


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > _MAX_FORM_BYTES:
        raise ApiError(413, "too_large", "the form is too large")
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/json":
        parsed = json.loads(body or b"{}")
        return {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}
    values = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in values.items()}


def _error_page(ctx: PageContext, error: ApiError) -> Response:
    if error.status == 401:
        return ctx.redirect("/signin")
    titles = {403: "Not allowed", 404: "Not found", 422: "Not accepted", 429: "Slow down",
              503: "Try again shortly"}  # fmt: skip
    response = ctx.render(
        "error.html",
        status=error.status,
        title=titles.get(error.status, "Something went wrong"),
        message=error.message,
    )
    response.headers.update(error.headers)  # Retry-After on a 503
    return response


def _return_to(request: Request) -> str:
    """Where to come back after signing in: the page asked for, or, for a fragment that
    htmx fetched (the session ended meanwhile), the page that holds it — never the bare
    fragment. Only a path of this site is kept; ``/signin`` checks ``next`` again."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    shown = request.headers.get("hx-current-url") if request.headers.get("hx-request") else None
    if shown:
        parts = urlsplit(shown)
        if (parts.netloc in ("", request.url.netloc)) and parts.path.startswith("/"):
            return parts.path + (f"?{parts.query}" if parts.query else "")
    return "/" if here.startswith("/fragments/") else here


def _pipeline(page: Page) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request) -> Response:
        settings: WebSettings = request.app.state.settings
        try:
            session = await load_session(request, request.app.state.pool)
        except psycopg.Error as exc:  # e.g. a session killed by a failover: 503, not 500
            mapped = from_database_error(exc)
            if mapped is None:
                raise
            ctx = PageContext(request, settings, None, request_id_of(request))
            response = _error_page(ctx, mapped)
            response.headers.setdefault("cache-control", "no-store")
            return response
        ctx = PageContext(request, settings, session, request_id_of(request))
        if page.signed_in and session is None:
            return ctx.redirect(f"/signin?next={quote(_return_to(request), safe='')}")
        try:
            if request.method == "POST":
                if not origin_allowed(request, settings):
                    raise ApiError(403, "forbidden", "this form was not sent from this site")
                ctx.form = await _form(request)
                if session is not None:
                    given = ctx.form.get("csrf") or request.headers.get("x-csrf-token")
                    if not tokens_match(ctx.csrf, given):
                        raise ApiError(
                            403, "forbidden", "the form's CSRF token is missing or wrong"
                        )
            if session is not None:
                ctx.me = await ctx.api("GET", "/api/v1/auth/me")
                ctx.role = _role(ctx.me, session)
            response = await page.handler(ctx)
        except ApiError as exc:
            response = _error_page(ctx, exc)
        except CodityError as exc:
            response = _error_page(ctx, from_codity_error(exc))
        except psycopg.Error as exc:
            mapped = from_database_error(exc)
            if mapped is None:
                raise
            response = _error_page(ctx, mapped)
        response.headers.setdefault("cache-control", "no-store")
        return response

    setattr(run, PAGE_ATTRIBUTE, page)
    run.__name__ = f"page_{page.method.lower()}_{page.path}"
    return run


def _role(me: dict[str, Any], session: Session) -> Role | None:
    for membership in me.get("memberships", ()):
        if membership.get("org_id") == session.org_id:
            return Role.parse(str(membership["role"]))
    return None


def mount_pages(pages: Sequence[Page]) -> list[Route]:
    seen: set[tuple[str, str]] = set()
    routes = []
    for page in pages:
        key = (page.method, page.path)
        if key in seen:
            raise ValueError(f"page listed twice: {page.name}")
        seen.add(key)
        routes.append(Route(page.path, _pipeline(page), methods=[page.method], name=page.name))
    return routes
