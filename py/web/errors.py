"""The API's one error type and how database errors become HTTP errors.

Every failure a client can cause leaves the app as an :class:`ApiError`, rendered by
``codity.web.envelope`` as ``{"error": {"code", "message", "details", "request_id"}}``.
Database errors arrive already translated by ``codity.db.errors`` (by SQLSTATE); this
module only maps those classes to statuses. Anything else is a bug and becomes a 500
whose body says nothing but the request id.
"""

from __future__ import annotations

from typing import Any

from codity.db.errors import (
    CodityError,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    WorkerNotActive,
)

__all__ = ["ApiError", "from_codity_error", "not_found"]


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers or {}


def not_found(what: str) -> ApiError:
    """The one answer for a resource that is missing *or belongs to another tenant*."""
    return ApiError(404, "not_found", f"{what} not found")


_STATUS: list[tuple[type[CodityError], int, str]] = [
    (NotFound, 404, "not_found"),
    (InvalidInput, 422, "invalid_input"),
    (IllegalTransition, 409, "illegal_transition"),
    (Conflict, 409, "conflict"),
    (WorkerNotActive, 409, "worker_not_active"),
]


def from_codity_error(exc: CodityError) -> ApiError:
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            details = {"sqlstate": exc.sqlstate}
            if exc.hint:
                details["hint"] = exc.hint
            return ApiError(status, code, exc.message, details)
    return ApiError(400, "bad_request", exc.message, {"sqlstate": exc.sqlstate})
