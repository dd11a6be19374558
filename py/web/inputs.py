"""Reading what a client sent: query string and JSON body, strictly.

The body is read up to the cap and no further (413 past it, whatever Content-Length
claimed); it must be JSON (415), parse (400), nest no deeper than the limit (400), and
match the route's model, which forbids unknown fields (422). Validation errors name the
field and the rule, never echo the value: the value may be a password or a token.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from codity.web.errors import ApiError

__all__ = ["json_depth", "parse_body", "parse_query", "validation_error"]

M = TypeVar("M", bound=BaseModel)


def validation_error(exc: ValidationError, where: str) -> ApiError:
    problems = [
        {
            "location": [where, *(str(p) for p in err["loc"])],
            "message": err["msg"],
            "type": err["type"],
        }
        for err in exc.errors(include_input=False, include_url=False)
    ]
    return ApiError(422, "validation_failed", f"the request {where} is not valid", problems)


def json_depth(value: Any) -> int:
    """How deeply containers nest in a parsed JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            deepest = max(deepest, depth + 1)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
            deepest = max(deepest, depth + 1)
    return deepest


async def _read_capped(request: Request, cap: int) -> bytes:
    declared = request.headers.get("content-length")
    too_large = ApiError(413, "payload_too_large", f"the request body exceeds {cap} bytes")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def parse_body(
    model: type[M] | None, request: Request, *, max_bytes: int, max_depth: int
) -> M | None:
    raw = await _read_capped(request, max_bytes)
    if model is None:
        if raw.strip():
            raise ApiError(400, "unexpected_body", "this route takes no request body")
        return None
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as application/json")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", "the request body is not valid JSON") from exc
    if json_depth(value) > max_depth:
        raise ApiError(400, "json_too_deep", f"the request body nests deeper than {max_depth}")
    try:
        return model.model_validate(value, strict=False)
    except ValidationError as exc:
        raise validation_error(exc, "body") from exc


def parse_query(model: type[M] | None, request: Request) -> M | None:
    params = request.query_params
    if model is None:
        if params:
            raise ApiError(400, "unexpected_query", "this route takes no query parameters")
        return None
    repeated = sorted({k for k in params if len(params.getlist(k)) > 1})
    if repeated:
        raise ApiError(
            422,
            "validation_failed",
            "a query parameter is repeated",
            [{"location": ["query", k], "message": "give it once"} for k in repeated],
        )
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise validation_error(exc, "query") from exc
