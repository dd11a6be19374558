"""The Starlette application: the mounted route list, its middleware and its lifespan.

``create_app`` is the only place an application is assembled. Its API routes are
``mount(ALL_ROUTES)``, its dashboard pages ``mount_pages(DASHBOARD_PAGES)``, plus the static
assets of the docs page and of the dashboard; the lifespan owns the database pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from codity.web.dashboard.live import LiveBroker
from codity.web.dashboard.page import Page, mount_pages
from codity.web.dashboard.routes import DASHBOARD_PAGES, static_dir
from codity.web.database import open_pool
from codity.web.endpoint import Endpoint
from codity.web.envelope import error_response
from codity.web.errors import ApiError
from codity.web.middleware import RequestContext
from codity.web.mount import mount, request_id_of
from codity.web.routes import ALL_ROUTES, swagger_assets_dir
from codity.web.scrape_cache import ScrapeCache
from codity.web.settings import WebSettings

__all__ = ["DASHBOARD_ASSETS_PATH", "DOCS_ASSETS_PATH", "create_app"]

DOCS_ASSETS_PATH = "/api/v1/docs/assets"
DASHBOARD_ASSETS_PATH = "/static"

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = "no such route" if exc.status_code == 404 else str(exc.detail)
    return error_response(
        ApiError(exc.status_code, code, message, headers=dict(exc.headers or {})),
        request_id_of(request),
    )


def create_app(
    database_url: str,
    settings: WebSettings,
    *,
    entries: Sequence[Endpoint] = ALL_ROUTES,
    pages: Sequence[Page] = DASHBOARD_PAGES,
) -> Starlette:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.pool = await open_pool(database_url)
        app.state.live = LiveBroker(database_url)
        try:
            yield
        finally:
            await app.state.live.close()
            await app.state.pool.close()

    routes: list[BaseRoute] = [
        *mount(entries),
        *mount_pages(pages),
        Mount(
            DOCS_ASSETS_PATH, app=StaticFiles(directory=swagger_assets_dir()), name="docs-assets"
        ),
        Mount(DASHBOARD_ASSETS_PATH, app=StaticFiles(directory=static_dir()), name="static"),
    ]
    middleware = [Middleware(RequestContext)]
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                allow_headers=["authorization", "content-type", "x-request-id"],
                expose_headers=["x-request-id", "retry-after"],
            )
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.scrapes = ScrapeCache(settings.metrics_cache_seconds)
    app.state.entries = tuple(entries)
    app.state.pages = tuple(pages)
    return app
