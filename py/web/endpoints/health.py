"""Liveness and readiness: /healthz (alias /livez) answers while the process serves;
/readyz also needs the database reachable and every migration this code expects applied."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from codity.db.migrate import migration_ids
from codity.web.access import Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.errors import ApiError

__all__ = ["ROUTES"]


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    database: str
    migrations_pending: list[str]


async def live(call: Call[None, None]) -> dict[str, Any]:
    return {"status": "ok"}


async def ready(call: Call[None, None]) -> dict[str, Any]:
    try:
        async with call.pool.connection(timeout=2.0) as conn:
            cur = await conn.execute(
                "SELECT to_regclass('public._yoyo_migration') IS NOT NULL AS has_table,"
                " pg_catalog.current_setting('transaction_read_only')::boolean AS read_only"
            )
            row = await cur.fetchone()
            if row and row["read_only"]:
                await conn.close()  # the pool replaces it: the next may reach the primary
                raise ApiError(503, "not_ready", "the database is read-only (a standby?)")
            applied: set[str] = set()
            if row and row["has_table"]:
                cur = await conn.execute("SELECT migration_id FROM public._yoyo_migration")
                applied = {r["migration_id"] for r in await cur.fetchall()}
    except ApiError:
        raise
    except Exception as exc:
        raise ApiError(503, "not_ready", "the database is not reachable") from exc
    pending = [m for m in migration_ids() if m not in applied]
    if pending:
        raise ApiError(503, "not_ready", "migrations are pending", {"migrations_pending": pending})
    return {"status": "ready", "database": "ok", "migrations_pending": []}


ROUTES = [
    Endpoint(
        "GET",
        "/healthz",
        Scope.PUBLIC,
        live,
        "Liveness",
        "health",
        response=Health,
        uses_db=False,
    ),
    Endpoint(
        "GET",
        "/livez",
        Scope.PUBLIC,
        live,
        "Liveness (alias of /healthz)",
        "health",
        response=Health,
        uses_db=False,
    ),
    Endpoint(
        "GET",
        "/readyz",
        Scope.PUBLIC,
        ready,
        "Readiness: database reachable and migrations current",
        "health",
        response=Readiness,
        errors=(503,),
        uses_db=False,
    ),
]
