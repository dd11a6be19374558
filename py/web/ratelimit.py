"""Rate limits, counted by ``codity.rate_limit_hit`` so every web replica shares them.

Three kinds of charge, all fixed windows in PostgreSQL:

- **Failed sign-ins** (login, refresh): :func:`reserve_sign_in` counts one hit in each
  bucket (the client IP, 5 per 15 minutes; for a login also the account across every IP,
  50), all or none, in a transaction of its own committed *before* the password or token is
  checked. Concurrent failures therefore cannot overshoot a budget, and a refused attempt
  does no argon2 work. When the attempt succeeds, :meth:`Reservation.refund` gives the hits
  back (``codity.rate_limit_refund``, in the window they were counted in), so only failures
  stay counted. Buckets are always taken in the same order (IP, then account), reserved or
  refunded, so two attempts never wait on each other's rows in a cycle.
- **Registrations**: charged by the mount (``Limit.AUTH``) per IP and per email, every
  attempt counting, on buckets apart from sign-in's.
- **Enqueues**: charged inside the enqueue's own transaction, one hit per job, so a
  rejected or rolled-back batch costs nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from codity.web.database import transaction
from codity.web.errors import ApiError
from codity.web.settings import WebSettings

__all__ = ["Reservation", "charge", "reserve_sign_in"]

_HIT = (
    "SELECT allowed, retry_after_seconds, now() AS hit_at"
    " FROM codity.rate_limit_hit(%s, %s, %s, %s)"
)
_REFUND = "SELECT refunded FROM codity.rate_limit_refund(%s, %s, %s)"


async def _hit(
    conn: AsyncConnection[Any], bucket: str, *, limit: int, window_seconds: int, cost: int = 1
) -> dt.datetime:
    """Count ``cost`` hits; the database time they were counted at, or 429 when over."""
    cur = await conn.execute(_HIT, [bucket, limit, dt.timedelta(seconds=window_seconds), cost])
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
    hit_at: dt.datetime = row["hit_at"]
    return hit_at


async def charge(
    conn: AsyncConnection[Any], bucket: str, *, limit: int, window_seconds: int, cost: int = 1
) -> None:
    """Count ``cost`` hits against ``bucket``; 429 with Retry-After when over the limit."""
    await _hit(conn, bucket, limit=limit, window_seconds=window_seconds, cost=cost)


@dataclass(frozen=True, slots=True)
class Reservation:
    """One hit in each of ``buckets``, counted at ``hit_at`` (database time), until refunded."""

    buckets: tuple[str, ...]
    window_seconds: int
    hit_at: dt.datetime

    async def refund(self, conn: AsyncConnection[Any]) -> None:
        """Give the hits back: the attempt succeeded. In the caller's transaction, so the
        refund commits with what the success wrote, or not at all."""
        window = dt.timedelta(seconds=self.window_seconds)
        for bucket in self.buckets:
            await conn.execute(_REFUND, [bucket, window, self.hit_at])


async def reserve_sign_in(
    pool: AsyncConnectionPool[Any], settings: WebSettings, *, ip: str, account: str | None = None
) -> Reservation:
    """Reserve a sign-in attempt from ``ip`` (for ``account``, a lower-cased email, when
    given) before checking it; 429 with Retry-After, and nothing counted, when any budget
    is spent. Committed at once: an attempt that then fails stays counted."""
    limits = [(f"signin:ip:{ip}", settings.auth_attempts_per_window)]
    if account is not None:
        limits.append((f"signin:account:{account}", settings.auth_account_attempts_per_window))
    window = settings.auth_window_seconds
    async with transaction(pool) as conn:
        for bucket, limit in limits:
            hit_at = await _hit(conn, bucket, limit=limit, window_seconds=window)
    return Reservation(tuple(bucket for bucket, _ in limits), window, hit_at)
