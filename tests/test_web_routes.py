"""Routes as data: the app serves exactly ALL_ROUTES and DASHBOARD_PAGES, the API described
by a valid OpenAPI 3.1 document, with Swagger UI from local files and the same headers and
envelopes everywhere."""

from __future__ import annotations

import psycopg
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from codity.web.access import Role, Scope
from codity.web.app import DASHBOARD_ASSETS_PATH, DOCS_ASSETS_PATH, create_app
from codity.web.dashboard.page import PAGE_ATTRIBUTE
from codity.web.dashboard.routes import DASHBOARD_PAGES
from codity.web.mount import ENDPOINT_ATTRIBUTE
from codity.web.openapi import openapi_path
from codity.web.routes import ALL_ROUTES
from tests.webapp import SETTINGS, add_user, make_tenant, web_client


def routes_outside_the_list(app: Starlette) -> list[str]:
    """Every route the app would serve that did not come from mount(ALL_ROUTES) or
    mount_pages(DASHBOARD_PAGES), static assets aside."""
    listed = {(e.method, e.path) for e in ALL_ROUTES} | {
        (p.method, p.path) for p in DASHBOARD_PAGES
    }
    strays = []
    for route in app.routes:
        if isinstance(route, Mount) and route.path in (DOCS_ASSETS_PATH, DASHBOARD_ASSETS_PATH):
            continue
        handler = getattr(route, "endpoint", None)
        entry = getattr(handler, ENDPOINT_ATTRIBUTE, None) or getattr(handler, PAGE_ATTRIBUTE, None)
        if entry is None or (entry.method, entry.path) not in listed:
            strays.append(getattr(route, "path", repr(route)))
    return strays


def test_every_served_route_comes_from_the_route_list(db_url: str) -> None:
    app = create_app(db_url, SETTINGS)
    assert routes_outside_the_list(app) == []
    served = {
        (e.method, e.path)
        for r in app.routes
        if (e := getattr(getattr(r, "endpoint", None), ENDPOINT_ATTRIBUTE, None))
    }
    assert served == {(e.method, e.path) for e in ALL_ROUTES}


def test_a_route_added_behind_the_lists_back_is_caught(db_url: str) -> None:
    """Break it first: a backdoor route mounted directly on the router is reported."""

    async def backdoor(request: object) -> PlainTextResponse:
        return PlainTextResponse("all the jobs")

    app = create_app(db_url, SETTINGS)
    app.router.routes.append(Route("/api/v1/backdoor", backdoor))
    assert routes_outside_the_list(app) == ["/api/v1/backdoor"]


def test_every_project_route_names_a_role_and_every_path_is_versioned() -> None:
    for entry in ALL_ROUTES:
        if entry.scope is Scope.PROJECT:
            assert entry.min_role is not None, entry.name
        if entry.tag not in {"health"}:
            assert entry.path.startswith("/api/v1/"), entry.name


def test_openapi_document_is_valid_and_lists_every_documented_route(db_url: str) -> None:
    with web_client(db_url) as client:
        response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)
    assert document["openapi"] == "3.1.0"
    documented = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
    }
    assert documented == {(e.method, openapi_path(e.path)) for e in ALL_ROUTES if e.in_schema}
    for entry in ALL_ROUTES:
        if entry.in_schema and entry.scope is not Scope.PUBLIC:
            operation = document["paths"][openapi_path(entry.path)][entry.method.lower()]
            assert operation["security"] == [{"bearer": []}], entry.name
            assert {"401", "403"} <= set(operation["responses"]), entry.name


def test_swagger_ui_is_served_from_local_assets(db_url: str) -> None:
    with web_client(db_url) as client:
        page = client.get("/api/v1/docs")
        assert page.status_code == 200
        assert "http" not in page.text.replace("http-equiv", ""), "no external URL in the page"
        for asset in ("swagger-ui.css", "swagger-ui-bundle.js"):
            served = client.get(f"{DOCS_ASSETS_PATH}/{asset}")
            assert served.status_code == 200, asset
            assert len(served.content) > 10_000, asset
        init = client.get("/api/v1/docs/init.js")
        assert "/api/v1/openapi.json" in init.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-eval" not in csp


def test_security_headers_and_request_id_on_every_kind_of_response(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        responses = [
            client.get("/healthz"),
            client.get("/api/v1/queues", headers=viewer.headers),
            client.get("/api/v1/queues"),
            client.get("/api/v1/no-such-route"),
            client.put("/healthz"),
            client.post("/api/v1/queues", headers=viewer.headers, json={"name": "q"}),
        ]
    assert [r.status_code for r in responses] == [200, 200, 401, 404, 405, 403]
    for response in responses:
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        api = response.request.url.path.startswith("/api/")
        # Pages send their origin to this site only: the dashboard's forms are checked for it.
        assert response.headers["referrer-policy"] == ("no-referrer" if api else "same-origin")
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert len(response.headers["x-request-id"]) >= 8
    for response in responses[2:]:
        error = response.json()["error"]
        assert set(error) >= {"code", "message", "request_id"}
        assert error["request_id"] == response.headers["x-request-id"]


def test_a_callers_request_id_is_kept_only_when_it_is_safe(db_url: str) -> None:
    with web_client(db_url) as client:
        kept = client.get("/healthz", headers={"X-Request-Id": "trace-0123456789"})
        replaced = client.get("/healthz", headers={"X-Request-Id": "bad id\nwith newline"})
    assert kept.headers["x-request-id"] == "trace-0123456789"
    assert replaced.headers["x-request-id"] != "bad id\nwith newline"
    assert len(replaced.headers["x-request-id"]) == 32
