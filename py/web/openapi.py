"""The OpenAPI 3.1 document, generated from the route list and nothing else.

Schemas come from the routes' pydantic models (JSON Schema 2020-12, which OpenAPI 3.1
uses as is); every success body is the envelope around the route's model, and every
error is the one Error envelope. Security is declared per route from its scope.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from codity.web.access import Scope
from codity.web.endpoint import Endpoint
from codity.web.fields import MAX_ID

__all__ = ["openapi_document", "openapi_path"]

_CONVERTER = re.compile(r"\{(\w+)(?::(\w+))?\}")
_REF = "#/components/schemas/{model}"

_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "request_id"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "request_id": {"type": "string"},
                "details": {},
            },
        }
    },
}

_STATUS_TEXT = {
    400: "Malformed request (invalid JSON, nesting too deep, unexpected body or query)",
    401: "Missing, invalid or expired credential",
    403: "The credential does not grant this route",
    404: "Not found (or owned by another tenant: the answer is the same)",
    409: "Conflict with the resource's current state",
    413: "Request body too large",
    415: "Body is not application/json",
    422: "Validation failed",
    429: "Rate limit reached; see Retry-After",
    503: "Unavailable",
}


def openapi_path(path: str) -> str:
    return _CONVERTER.sub(lambda m: "{" + m.group(1) + "}", path)


def _path_parameters(path: str) -> list[dict[str, Any]]:
    params = []
    for name, converter in _CONVERTER.findall(path):
        schema: dict[str, Any]
        if converter == "int":
            schema = {"type": "integer", "minimum": 0, "maximum": MAX_ID, "format": "int64"}
        else:
            schema = {"type": "string", "minLength": 1, "maxLength": 200}
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    return params


def _query_parameters(model: type[BaseModel], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=_REF)
    for name, definition in schema.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    required = set(schema.get("required", []))
    return [
        {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": {k: v for k, v in prop.items() if k not in {"title"}},
            **({"description": prop["description"]} if "description" in prop else {}),
        }
        for name, prop in schema.get("properties", {}).items()
    ]


def _envelope(ref: dict[str, Any] | None, many: bool) -> dict[str, Any]:
    data: dict[str, Any] = {} if ref is None else ref
    if many:
        data = {"type": "array", "items": data}
    return {
        "type": "object",
        "required": ["data"],
        "properties": {"data": data, "meta": {"type": "object"}},
    }


def openapi_document(entries: Sequence[Endpoint], *, version: str) -> dict[str, Any]:
    models: set[type[BaseModel]] = set()
    for entry in entries:
        if entry.in_schema:
            models.update(m for m in (entry.body, entry.response) if m is not None)
    ordered = sorted(models, key=lambda m: m.__name__)
    _, top = models_json_schema([(m, "validation") for m in ordered], ref_template=_REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas["Error"] = _ERROR_SCHEMA

    paths: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if not entry.in_schema:
            continue
        operation: dict[str, Any] = {
            "operationId": re.sub(r"\W+", "_", f"{entry.method} {openapi_path(entry.path)}")
            .strip("_")
            .lower(),
            "summary": entry.summary,
            "tags": [entry.tag],
        }
        if entry.scope is Scope.PROJECT:
            role = entry.min_role.label if entry.min_role else "?"
            keys = "API keys allowed" if entry.api_keys else "users only, not API keys"
            operation["description"] = f"Project-scoped. Minimum role: {role}; {keys}."
        parameters = _path_parameters(entry.path)
        if entry.query is not None:
            parameters += _query_parameters(entry.query, schemas)
        if parameters:
            operation["parameters"] = parameters
        if entry.body is not None:
            content: dict[str, Any] = {"schema": {"$ref": _REF.format(model=entry.body.__name__)}}
            if entry.example is not None:
                content["example"] = entry.example
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": content},
            }
        responses: dict[str, Any] = {}
        ref = {"$ref": _REF.format(model=entry.response.__name__)} if entry.response else None
        if entry.status == 204:
            responses["204"] = {"description": "Done; no body"}
        elif entry.media_type is not None:
            responses[str(entry.status)] = {
                "description": "Success",
                "content": {entry.media_type: {"schema": {"type": "string"}}},
            }
        else:
            responses[str(entry.status)] = {
                "description": "Success",
                "content": {"application/json": {"schema": _envelope(ref, entry.many)}},
            }
        errors = set(entry.errors)
        if entry.scope is not Scope.PUBLIC:
            errors |= {401, 403}
        if entry.body is not None:
            errors |= {400, 413, 415, 422}
        if entry.query is not None:
            errors |= {400, 422}
        if entry.limit is not None:
            errors.add(429)
        if entry.uses_db:
            errors.add(503)
        for status in sorted(errors):
            if 200 <= status < 300:
                responses[str(status)] = {
                    "description": "Success (an alternative outcome, e.g. an idempotent repeat)",
                    "content": {"application/json": {"schema": _envelope(ref, entry.many)}},
                }
                continue
            responses[str(status)] = {
                "description": _STATUS_TEXT.get(status, "Error"),
                "content": {"application/json": {"schema": {"$ref": _REF.format(model="Error")}}},
            }
        if entry.scope is not Scope.PUBLIC:
            operation["security"] = [{"bearer": []}]
        operation["responses"] = responses
        paths.setdefault(openapi_path(entry.path), {})[entry.method.lower()] = operation

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Codity API",
            "version": version,
            "description": "Jobs, queues, schedules and dead letters of one project per "
            "credential. Envelopes and errors: docs/API_CONTRACT.md.",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An access token from /api/v1/auth/login, or an API key "
                    "(cdy_...).",
                }
            },
        },
    }
