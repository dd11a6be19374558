"""The API's one error type and how database errors become HTTP errors.

Every failure a client can cause leaves the app as an :class:`ApiError`, rendered by
``codity.web.envelope`` as ``{"error": {"code", "message", "details", "request_id"}}``.
Database errors are translated by ``codity.db.errors`` (by SQLSTATE) into its classes;
this module is the one place that maps them, and the standard SQLSTATEs (data, integrity,
serialisation, connection), to HTTP statuses. Anything else is a bug and becomes a 500
whose body says nothing but the request id.
"""

from __future__ import annotations

from typing import Any

import psycopg

from codity.db.errors import (
    CodityError,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    NotPermitted,
    WorkerNotActive,
    translate,
)

__all__ = ["ApiError", "from_codity_error", "from_database_error", "not_found"]


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
    "CD008": "workflow",
}


# Errors about one field of the request: the answer names it, with the server's detail (for
# cron, the field and the bad token) and a hint for an API client (not psql's).
_FIELD = {
    "CD012": ("cron", None),
    "CD013": ("time_zone", "Use an IANA time zone name such as 'Europe/London'."),
}


def from_codity_error(exc: CodityError) -> ApiError:
    if isinstance(exc, NotFound):
        return not_found(_NOT_FOUND.get(exc.sqlstate, "resource"))
    if exc.sqlstate in _FIELD:
        field, hint = _FIELD[exc.sqlstate]
        details: dict[str, Any] = {"sqlstate": exc.sqlstate, "field": field}
        if exc.detail:
            details["detail"] = exc.detail
        if hint or exc.hint:
            details["hint"] = hint or exc.hint
        return ApiError(422, "invalid_input", exc.message, details)
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            # The SQLSTATE, not the hint: hints speak to psql users in SQL.
            return ApiError(status, code, exc.message, {"sqlstate": exc.sqlstate})
    return ApiError(400, "bad_request", exc.message, {"sqlstate": exc.sqlstate})


def from_database_error(exc: psycopg.Error) -> ApiError | None:
    """The API's answer to any database error, or None for a bug (a bare 500)."""
    translated = translate(exc)
    if translated is not None:
        return from_codity_error(translated)
    state = exc.sqlstate or ""
    if state.startswith("22") or (not state and isinstance(exc, psycopg.DataError)):
        # No SQLSTATE: the driver refused a value before sending it (a NUL in text).
        return ApiError(422, "invalid_input", "a value is out of range or malformed")
    if state == "23505":
        return ApiError(409, "conflict", "that already exists")
    if state.startswith("23"):
        return ApiError(409, "conflict", "that conflicts with existing data")
    if state == "25006":
        return ApiError(
            503,
            "unavailable",
            "the database is read-only (a standby, or a failover under way)",
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, psycopg.OperationalError):
        return ApiError(
            503, "unavailable", "the database is unavailable", headers={"Retry-After": "5"}
        )
    if state == "40001" or state == "40P01":
        return ApiError(
            503,
            "retry",
            "the request conflicted with another; retry it",
            headers={"Retry-After": "1"},
        )
    return None
