"""A deadline on one database call that holds even when the network does not answer.

A connection whose peer stopped answering while the socket stays open — a partition behind
a proxy or a load balancer that still accepts, a frozen server — makes a call wait forever:
TCP keepalives and ``tcp_user_timeout`` notice only a peer that stops acknowledging, and a
proxy acknowledges. Cancelling the waiting task does not help either: psycopg then asks
the server to cancel the query, over a new connection through the same dead path, and waits
up to ten seconds for that (psycopg's ``AsyncConnection.wait``).

So the deadline shuts the connection's socket down instead: the waiting call reads end of
file at once and fails with an ``OperationalError``, which every loop already treats as a
lost connection (TRANSIENT), and the session is closed so that a pool drops it. Whether a
call cut this way committed is unknown, as with any lost connection: every call that
writes is settled by its idempotent outcome when sent again (docs/DESIGN_DECISIONS.md 46).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

__all__ = ["CallTimedOut", "already_waited", "answered_within", "shut_down"]


class CallTimedOut(psycopg.OperationalError):
    """The database did not answer a call in time; its session was shut down."""


def shut_down(conn: psycopg.AsyncConnection[Any]) -> None:
    """Shut the connection's socket down (reads see end of file), without closing its fd,
    which libpq still owns."""
    with (
        contextlib.suppress(OSError),
        socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock,
    ):
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.asynccontextmanager
async def answered_within(
    conn: psycopg.AsyncConnection[Any], seconds: float
) -> AsyncIterator[None]:
    """Run the block's calls on ``conn``; if they have not all been answered ``seconds``
    from now, shut the session down and raise :class:`CallTimedOut`."""
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        shut_down(conn)

    timer = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        yield
    except psycopg.OperationalError as exc:
        if fired:
            raise CallTimedOut(f"no answer from the database within {seconds:g}s") from exc
        raise
    finally:
        timer.cancel()
        if fired:
            await conn.close()


def already_waited(exc: BaseException) -> bool:
    """Whether a call failed only after waiting out its deadline (a call unanswered, or no
    pooled connection free in time): a retry loop tries again at once, without a backoff
    of its own. Then the retry is in flight when the network heals, and answered at once."""
    return isinstance(exc, (CallTimedOut, PoolTimeout))
