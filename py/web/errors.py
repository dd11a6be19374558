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
    NotPermitted,
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
    (InvalidInput, 422, "invalid_input"),
    (IllegalTransition, 409, "illegal_transition"),
    (Conflict, 409, "conflict"),
    (WorkerNotActive, 409, "worker_not_active"),
    (NotPermitted, 403, "forbidden"),
]


# A missing resource answers by kind only: the SQL message names what the caller asked
# for, and a foreign resource must read exactly like a missing one.
_NOT_FOUND = {
    "CD001": "queue",
    "CD002": "project",
    "CD003": "job",
    "CD004": "worker",
    "CD006": "schedule",
    "CD007": "dead letter",
}


def from_codity_error(exc: CodityError) -> ApiError:
    if isinstance(exc, NotFound):
        return not_found(_NOT_FOUND.get(exc.sqlstate, "resource"))
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            # The SQLSTATE, not the hint: hints speak to psql users in SQL.
            return ApiError(status, code, exc.message, {"sqlstate": exc.sqlstate})
    return ApiError(400, "bad_request", exc.message, {"sqlstate": exc.sqlstate})
