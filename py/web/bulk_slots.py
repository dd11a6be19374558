"""How many bulk runs (jobs bulk, dead-letter replay-all) one web process runs at once.

A bulk run works in batches, each a short transaction on a pool connection of its own,
while the request still holds the connection it was guarded on: two connections per run.
Unbounded, as many concurrent runs as the pool has connections would each hold one and wait
for a second until the pool's timeout — every one of them failing after 10 s. So a process
runs at most :data:`MAX_RUNS` at once and refuses one more straight away with 429 and
``Retry-After``; dry runs count on the request's own connection and are never limited.
The event loop is single-threaded, so a plain counter is exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from codity.web.errors import ApiError

__all__ = ["MAX_RUNS", "bulk_slot"]

MAX_RUNS = 2
"""With the default pool of 10 connections: 4 held by bulk runs, 6 for everything else."""

_running = 0


@contextmanager
def bulk_slot() -> Iterator[None]:
    """Hold one of the process's bulk-run slots, or raise 429 when none is free."""
    global _running
    if _running >= MAX_RUNS:
        raise ApiError(
            429,
            "bulk_busy",
            f"{MAX_RUNS} bulk actions are already running on this server; try again shortly",
            headers={"Retry-After": "5"},
        )
    _running += 1
    try:
        yield
    finally:
        _running -= 1
