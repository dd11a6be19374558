"""The one response shape (docs/API_CONTRACT.md).

Success: ``{"data": ..., "meta": {...}}`` (``meta`` only when there is some, e.g. the next
page's cursor). Failure: ``{"error": {"code", "message", "details", "request_id"}}``.
No stack trace, SQL text or secret ever goes into either.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.responses import JSONResponse, Response

from codity.web.errors import ApiError

__all__ = ["error_response", "render_data", "success_response"]


def render_data(model: type[BaseModel] | None, data: Any, *, many: bool) -> Any:
    """Data shaped by the route's response model, so every answer matches its schema."""
    if model is None:
        return data
    if many:
        return [model.model_validate(item).model_dump(mode="json") for item in data]
    return model.model_validate(data).model_dump(mode="json")


def success_response(
    data: Any,
    *,
    status: int = 200,
    meta: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    if status == 204:
        return Response(status_code=204, headers=headers)
    body: dict[str, Any] = {"data": data}
    if meta:
        body["meta"] = meta
    return JSONResponse(body, status_code=status, headers=headers)


def error_response(exc: ApiError, request_id: str) -> Response:
    error: dict[str, Any] = {"code": exc.code, "message": exc.message, "request_id": request_id}
    if exc.details is not None:
        error["details"] = exc.details
    return JSONResponse({"error": error}, status_code=exc.status, headers=exc.headers)
