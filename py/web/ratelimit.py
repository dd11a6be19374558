"""Rate limits, counted by ``codity.rate_limit_hit`` so every web replica shares them.

Auth attempts are charged in their own committed transaction before the password is
checked (a failed attempt must count). Enqueues are charged inside the enqueue's own
transaction, one hit per job, so a rejected or rolled-back batch costs nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from psycopg import AsyncConnection

from codity.web.errors import ApiError

__all__ = ["charge"]


async def charge(
    conn: AsyncConnection[Any], bucket: str, *, limit: int, window_seconds: int, cost: int = 1
) -> None:
    """Count ``cost`` hits against ``bucket``; 429 with Retry-After when over the limit."""
    cur = await conn.execute(
        "SELECT allowed, retry_after_seconds FROM codity.rate_limit_hit(%s, %s, %s, %s)",
        [bucket, limit, dt.timedelta(seconds=window_seconds), cost],
    )
    row = await cur.fetchone()
    if row is None or not row["allowed"]:
        retry = 1 if row is None else int(row["retry_after_seconds"])
        raise ApiError(
            429,
            "rate_limited",
            f"rate limit reached: at most {limit} per {window_seconds} s",
            {"retry_after_seconds": retry},
            headers={"Retry-After": str(retry)},
        )
