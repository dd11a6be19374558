"""The web app's connection pool and its one kind of transaction.

Every transaction the app runs is ``codity_app`` (no BYPASSRLS, owns no table) plus
transaction-local settings naming the user, org and project it acts for; the row-level
security policies of migration 0003 key on them. The login role of DATABASE_URL must be a
member of codity_app (the embedded server's superuser is).

How they are set matters on a Citus cluster, where row-level security runs on the nodes
that hold the shards:

- The tenant settings are ``SET LOCAL`` statements. Citus repeats a transaction's
  ``SET LOCAL`` on every node it reaches (``citus.propagate_set_commands = 'local'``, set
  by ``codity migrate --citus``); ``set_config(..., true)`` stays on the coordinator, and
  the shards' policies would then see no tenant and answer no rows, with no error.
- The role is ``set_config('role', ...)``, never ``SET LOCAL ROLE``: Citus would repeat that
  too, on the connections a SECURITY DEFINER function opens as its owner, which may not
  become codity_app. Citus needs no help here: it connects to the nodes as the current role.
- Each statement is sent on its own, in one pipeline (one round trip): Citus repeats the
  *whole text* a ``SET LOCAL`` came in, so a ``SET LOCAL`` sharing a string with the
  role's ``set_config`` would carry the role along after all. ``SET`` takes no bind
  parameters, so values are literals composed here (``psycopg.sql.Literal``), and each is
  sent unprepared (a prepared statement per tenant would pile up on pooled connections).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from codity.db.conninfo import POOL_RECONNECT_S, conninfo
from codity.db.errors import checked_after_loss, closed_if_read_only

__all__ = ["open_pool", "set_tenant", "set_user", "transaction"]

_ROLE = "SELECT pg_catalog.set_config('role', 'codity_app', true)"

_SETTING = {
    name: sql.SQL("SET LOCAL {} = ").format(sql.SQL(name))
    for name in ("codity.user_id", "codity.org_id", "codity.project_id")
}


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


async def _apply(conn: AsyncConnection[Any], *statements: sql.Composed | str) -> None:
    """Send ``statements`` in one round trip, each a query of its own (see the docstring)."""
    async with conn.pipeline():
        for statement in statements:
            await conn.execute(statement, prepare=False)


def _settings(**values: int | None) -> list[sql.Composed]:
    return [_SETTING[f"codity.{name}"] + sql.Literal(_text(v)) for name, v in values.items()]


async def open_pool(url: str, *, min_size: int = 2, max_size: int = 10) -> AsyncConnectionPool[Any]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        conninfo(url),
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=10.0,
        reconnect_timeout=POOL_RECONNECT_S,
        kwargs={"autocommit": True, "row_factory": dict_row, "application_name": "codity-web"},
    )
    await pool.open(wait=True, timeout=30.0)
    return pool


@asynccontextmanager
async def transaction(
    pool: AsyncConnectionPool[Any],
    *,
    user_id: int | None = None,
    org_id: int | None = None,
    project_id: int | None = None,
) -> AsyncIterator[AsyncConnection[Any]]:
    """One transaction as codity_app, acting for ``user_id`` (or no one) and no tenant yet,
    or the tenant given: only a request the guard has already let in names one."""
    async with (
        pool.connection() as conn,
        checked_after_loss(pool),
        closed_if_read_only(conn),
        conn.transaction(),
    ):
        tenant = _settings(user_id=user_id, org_id=org_id, project_id=project_id)
        await _apply(conn, _ROLE, *tenant)
        yield conn


async def set_tenant(
    conn: AsyncConnection[Any], *, org_id: int | None, project_id: int | None
) -> None:
    """Point this transaction's row-level security at an org and project."""
    await _apply(conn, *_settings(org_id=org_id, project_id=project_id))


async def set_user(conn: AsyncConnection[Any], user_id: int) -> None:
    """Act for ``user_id`` from here on in this transaction (a sign-in found its user)."""
    await _apply(conn, *_settings(user_id=user_id))
