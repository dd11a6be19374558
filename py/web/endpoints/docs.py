"""The OpenAPI document and Swagger UI, served from local files (no CDN).

Swagger UI's assets come from the ``swagger-ui-py`` wheel's static folder, mounted by
``codity.web.app`` under /api/v1/docs/assets; the page and its initializer are ours.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import swagger_ui
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response

from codity.web.access import Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, Handler
from codity.web.openapi import openapi_document

__all__ = ["ROUTES", "swagger_assets_dir"]

_STATIC = Path(__file__).resolve().parents[1] / "static"

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Codity API</title>
  <link rel="icon" href="/api/v1/docs/assets/favicon-32x32.png">
  <link rel="stylesheet" href="/api/v1/docs/assets/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/api/v1/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/api/v1/docs/init.js"></script>
</body>
</html>
"""


def swagger_assets_dir() -> Path:
    return Path(swagger_ui.__file__).resolve().parent / "static"


async def openapi_json(call: Call[None, None]) -> Response:
    document = openapi_document(call.request.app.state.entries, version=version("codity"))
    return JSONResponse(document)


async def docs_page(call: Call[None, None]) -> Response:
    return HTMLResponse(_PAGE)


async def docs_init(call: Call[None, None]) -> Response:
    return FileResponse(_STATIC / "docs-init.js", media_type="text/javascript")


def _doc(path: str, handler: Handler, summary: str) -> Endpoint:
    return Endpoint(
        "GET",
        path,
        Scope.PUBLIC,
        handler,
        summary,
        "docs",
        in_schema=False,
        raw=True,
        uses_db=False,
    )


ROUTES = [
    _doc("/api/v1/openapi.json", openapi_json, "The OpenAPI 3.1 document"),
    _doc("/api/v1/docs", docs_page, "Swagger UI"),
    _doc("/api/v1/docs/init.js", docs_init, "Swagger UI initializer"),
]
