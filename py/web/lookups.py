"""Finding the one thing a request names, or the one 404 when there is none.

A resource of another tenant must read exactly like a missing one, whoever notices: an id
beyond bigint in the path, a select that finds no row under row-level security, or a
``codity.*`` function raising one of its not-found SQLSTATEs. Each becomes
``not_found(what)``, naming the kind of thing only.
"""

from __future__ import annotations

from typing import Any

from codity.web.call import Call
from codity.web.errors import not_found
from codity.web.fields import MAX_ID

__all__ = ["fetch_all", "one_or_404", "path_id"]

Params = dict[str, Any] | list[Any]


def path_id(call: Call[Any, Any], name: str, what: str) -> int:
    """An id from the path. One beyond bigint can never exist: answer as for any missing id
    (rather than let the database reject the type)."""
    value = call.path[name]
    if not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise not_found(what)
    return value


async def one_or_404(call: Call[Any, Any], query: str, params: Params, what: str) -> dict[str, Any]:
    """The one row ``query`` returns; none (missing, or hidden by row-level security) is 404."""
    cur = await call.conn.execute(query, params)
    row = await cur.fetchone()
    if row is None:
        raise not_found(what)
    return dict(row)


async def fetch_all(call: Call[Any, Any], query: str, params: Params) -> list[dict[str, Any]]:
    """Every row of ``query`` (typically a codity.* function call). Its errors are left to
    the mount, which answers a not-found SQLSTATE by kind only (``codity.web.errors``), so a
    foreign id already reads exactly like a missing one."""
    cur = await call.conn.execute(query, params)
    return [dict(r) for r in await cur.fetchall()]
