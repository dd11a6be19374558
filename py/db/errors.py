"""Database errors, translated in exactly one place.

Every condition the SQL API raises has its own SQLSTATE in class ``CD`` (listed in
docs/SQL_API.md). Python branches on the code, never on message text::

    CodityError                  any error raised by a codity.* function
    ├── NotFound                 CD001 queue, CD002 project, CD003 job, CD004 worker,
    │                            CD006 schedule, CD007 dead letter,
    │                            CD008 workflow or batch
    ├── InvalidInput             CD010 argument, CD011 payload size, CD012 cron, CD013 time zone
    ├── WorkerNotActive          CD005 the worker is stopped or was declared dead
    ├── IllegalTransition        CD020 a lifecycle transition the state diagram forbids
    ├── Conflict                 CD021 the operation was already done (e.g. replayed)
    └── NotPermitted             CD022 only tests may move the clock (p_now),
                                 CD023 a worker claiming from a queue it did not register for
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

__all__ = [
    "SQLSTATES",
    "TRANSIENT",
    "CodityError",
    "Conflict",
    "IllegalTransition",
    "InvalidInput",
    "NotFound",
    "NotPermitted",
    "WorkerNotActive",
    "checked_after_loss",
    "closed_if_read_only",
    "translate",
]


# The database is unreachable (connection refused or lost, backend terminated, server
# restarting, no connection free in time) or cannot take writes (25006: a standby, or a
# primary being demoted, behind a single-host URL or a proxy): try again later. Anything
# else is an answer.
TRANSIENT: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.errors.ReadOnlySqlTransaction,
    PoolTimeout,
)


@contextlib.asynccontextmanager
async def closed_if_read_only(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """Closes a pooled session that answers 25006 (read-only): it is on a standby, or on a
    primary being demoted, reached through a proxy or a single-host URL. The pool drops a
    closed connection and opens another, which may reach the new primary (HA.md §6:
    River, streamling). The error goes on to the caller (TRANSIENT)."""
    try:
        yield
    except psycopg.errors.ReadOnlySqlTransaction:
        await conn.close()
        raise


_CHECKS: dict[int, asyncio.Task[None]] = {}  # by id(pool): the check running for it


@contextlib.asynccontextmanager
async def checked_after_loss(pool: AsyncConnectionPool[Any]) -> AsyncIterator[None]:
    """On a lost connection (57P01-03, a reset, a failover), has the pool test every idle
    session in the background (psycopg_pool's ``check``), once at a time per pool: the
    failover that killed this session killed the others too, and each would otherwise
    fail one request of its own before the pool learnt of it (from outside: the dashboard
    answered 500, then 503, after every fault). The error goes on to the caller."""
    try:
        yield
    except psycopg.OperationalError:
        running = _CHECKS.get(id(pool))
        if running is None or running.done():
            task = asyncio.get_running_loop().create_task(pool.check())
            task.add_done_callback(_retrieved)
            _CHECKS[id(pool)] = task
        raise


def _retrieved(task: asyncio.Task[None]) -> None:
    """A check that failed (the pool closed meanwhile) has nothing to report."""
    if not task.cancelled():
        task.exception()


class CodityError(Exception):
    """An error raised by a codity.* function, with its SQLSTATE and the server's words."""

    def __init__(self, sqlstate: str, message: str, detail: str | None, hint: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.detail = detail
        self.hint = hint


class NotFound(CodityError):
    pass


class InvalidInput(CodityError):
    pass


class WorkerNotActive(CodityError):
    pass


class IllegalTransition(CodityError):
    pass


class Conflict(CodityError):
    pass


class NotPermitted(CodityError):
    pass


SQLSTATES: dict[str, type[CodityError]] = {
    "CD001": NotFound,
    "CD002": NotFound,
    "CD003": NotFound,
    "CD004": NotFound,
    "CD005": WorkerNotActive,
    "CD006": NotFound,
    "CD007": NotFound,
    "CD008": NotFound,
    "CD010": InvalidInput,
    "CD011": InvalidInput,
    "CD012": InvalidInput,
    "CD013": InvalidInput,
    "CD020": IllegalTransition,
    "CD021": Conflict,
    "CD022": NotPermitted,
    "CD023": NotPermitted,
}


def translate(exc: psycopg.Error) -> CodityError | None:
    """The CodityError for a database error raised by our functions, else None."""
    cls = SQLSTATES.get(exc.sqlstate or "")
    if cls is None:
        return None
    diag = exc.diag
    return cls(
        exc.sqlstate or "", diag.message_primary or str(exc), diag.message_detail, diag.message_hint
    )
