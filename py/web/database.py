"""The web app's connection pool and its one kind of transaction.

Every transaction the app runs is ``SET LOCAL ROLE codity_app`` (no BYPASSRLS, owns no
table) plus transaction-local settings naming the user, org and project it acts for; the
row-level security policies of migration 0003 key on them. The login role of DATABASE_URL
must be a member of codity_app (the embedded server's superuser is).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

__all__ = ["open_pool", "set_tenant", "transaction"]

_BEGIN = """
SELECT set_config('role', 'codity_app', true),
       set_config('codity.user_id', %(user_id)s, true),
       set_config('codity.org_id', %(org_id)s, true),
       set_config('codity.project_id', %(project_id)s, true)
"""


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


async def open_pool(url: str, *, min_size: int = 2, max_size: int = 10) -> AsyncConnectionPool[Any]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=10.0,
        kwargs={"autocommit": True, "row_factory": dict_row, "application_name": "codity-web"},
    )
    await pool.open(wait=True, timeout=30.0)
    return pool


@asynccontextmanager
async def transaction(
    pool: AsyncConnectionPool[Any], *, user_id: int | None = None
) -> AsyncIterator[AsyncConnection[Any]]:
    """One transaction as codity_app, acting for ``user_id`` (or no one) and no tenant yet."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            _BEGIN,
            {"user_id": _text(user_id), "org_id": "", "project_id": ""},
        )
        yield conn


async def set_tenant(
    conn: AsyncConnection[Any], *, org_id: int | None, project_id: int | None
) -> None:
    """Point this transaction's row-level security at an org and project."""
    await conn.execute(
        "SELECT set_config('codity.org_id', %s, true), set_config('codity.project_id', %s, true)",
        [_text(org_id), _text(project_id)],
    )
